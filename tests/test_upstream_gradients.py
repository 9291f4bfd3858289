"""A kernel that reads its own output: Warp's adjoint then accumulates into that output's
upstream gradient. The framework's gradient tensor must not change, and the gradient must be
right (checked against the closed form), in every framework with autograd."""

import importlib.util

import numpy as np
import pytest
import warp as wp
from _devices import jax_device

import interop


@wp.kernel
def reads_output(x: wp.array(dtype=float), out: wp.array(dtype=float), twice: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = x[i] * x[i]
    twice[i] = out[i] * 2.0  # reads `out`


@wp.kernel
def accumulates(x: wp.array(dtype=float), total: wp.array(dtype=float), plus: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(total, 0, x[i])  # write-only: an atomic add
    plus[i] = x[i]
    plus[i] += 1.0  # reads `plus` back


def test_description_knows_which_returned_arrays_are_read():
    from interop import _warp_compat

    desc = interop.op(reads_output, outputs=2).description
    assert desc.reads_returned == ("out",)
    # the outputs whose memory Warp's adjoint never touches (on a Warp whose adjoint was checked)
    checked = _warp_compat.ADJOINT_SKIPS_WRITE_ONLY_OUTPUTS
    assert desc.adjoint_unread == (("twice",) if checked else ())
    desc = interop.op(accumulates, outputs=2, output_dims={"total": 1}).description
    assert desc.reads_returned == ("plus",)
    assert desc.adjoint_unread == (("total",) if checked else ())
    # a hand-written backward is called with the inputs and upstream gradients: it reads no output
    from catalogue import reads_output_hand_written

    desc = reads_output_hand_written.description
    assert desc.reads_returned == ("sq",) and desc.adjoint_unread == ("sq", "twice")


FRAMEWORKS = [f for f in ("torch", "jax", "paddle") if importlib.util.find_spec(f)]


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_upstream_gradient_is_not_written_and_gradient_is_right(fw):
    op = interop.op(reads_output, outputs=2)
    xn = np.linspace(0.5, 1.5, 6).astype(np.float32)
    g_out = np.full(6, 1.0, np.float32)
    g_twice = np.full(6, 3.0, np.float32)
    # d/dx [g_out * x^2 + g_twice * 2 x^2] = (2 g_out + 4 g_twice) x
    expected = (2 * g_out + 4 * g_twice) * xn
    if fw == "torch":
        import torch

        x = torch.tensor(xn, requires_grad=True, device="cpu")
        out, twice = op(x)
        go, gt = torch.tensor(g_out, device="cpu"), torch.tensor(g_twice, device="cpu")
        (gx,) = torch.autograd.grad((out, twice), (x,), (go, gt))
        np.testing.assert_array_equal(go.numpy(), g_out)
        np.testing.assert_allclose(gx.numpy(), expected, rtol=1e-5)
    elif fw == "jax":
        import jax
        import jax.numpy as jnp

        go, gt = jnp.asarray(g_out, device=jax_device("cpu")), jnp.asarray(g_twice, device=jax_device("cpu"))
        _, vjp = jax.vjp(lambda x: op(x), jnp.asarray(xn, device=jax_device("cpu")))
        (gx,) = vjp((go, gt))
        np.testing.assert_array_equal(np.asarray(go), g_out)
        np.testing.assert_allclose(np.asarray(gx), expected, rtol=1e-5)
    else:
        import paddle

        x = paddle.to_tensor(xn, stop_gradient=False, place=paddle.CPUPlace())
        out, twice = op(x)
        go, gt = paddle.to_tensor(g_out, place=paddle.CPUPlace()), paddle.to_tensor(g_twice, place=paddle.CPUPlace())
        (gx,) = paddle.grad([out, twice], [x], [go, gt])
        np.testing.assert_array_equal(go.numpy(), g_out)
        np.testing.assert_allclose(gx.numpy(), expected, rtol=1e-5)
