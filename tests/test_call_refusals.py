"""Calls refused when they are made, before any launch, naming the op and the parameter (issue 33,
rows c and d): a Python-function op's scalar given as a 0-d tensor that requires grad (wp.Tape
records no scalar adjoint), and an in-out that is a leaf tensor requiring grad (torch and Paddle
cannot update it in place). The property generators carry both as dimensions (tests/property_calls.py:
the ``function_scale`` op with the ``0d_grad`` scalar kind, ``Call.leaf_in_out``); the cases below
run them once each, by hand."""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp
from catalogue import PROPERTY_OPS, scale_kernel
from property_calls import CONTIGUOUS, Call, run_call

import interop


def _counting_function_op():
    """A Python-function op with a scalar that counts its runs (a refused call must not run it)."""
    runs = []

    def scaled(a: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
        runs.append(1)
        wp.launch(scale_kernel, dim=a.shape, inputs=[a, s], outputs=[out], device=a.device)

    return interop.op(scaled), runs


@wp.kernel
def _accumulate(x: wp.array(dtype=float), acc: wp.array(dtype=float)):
    i = wp.tid()
    acc[i] = acc[i] + x[i]


ACCUMULATE = interop.op(_accumulate, in_out=["acc"], outputs=1)

# ---- row c: a Python-function op's scalar that requires grad ------------------------------------


def test_paddle_function_op_scalar_requiring_grad_is_refused_at_the_call():
    paddle = pytest.importorskip("paddle")
    op, runs = _counting_function_op()
    a = paddle.to_tensor(np.arange(4, dtype=np.float32), stop_gradient=False, place=paddle.CPUPlace())
    s = paddle.to_tensor(2.0, stop_gradient=False, place=paddle.CPUPlace())
    with pytest.raises(
        interop.UnsupportedError, match=r"op 'scaled': no gradient for scalar 's' of a Python-function op"
    ):
        op(a, s)  # before: ran, then paddle.grad(out, [a]) failed in the backward as OSError
    with pytest.raises(interop.UnsupportedError, match=r"no gradient for scalar 's'"):
        b = paddle.to_tensor(np.arange(4, dtype=np.float32), place=paddle.CPUPlace())
        op(b, s)  # only the scalar requires grad
    assert runs == []
    # after a remembered signature with a scalar that does not require grad: still refused
    for _ in range(3):
        out = op(a, paddle.to_tensor(2.0, place=paddle.CPUPlace()))
    (ga,) = paddle.grad(out.sum(), [a])
    np.testing.assert_array_equal(ga.numpy(), np.full(4, 2.0, np.float32))
    with pytest.raises(interop.UnsupportedError, match=r"no gradient for scalar 's'"):
        op(a, s)
    # a Python number, or the 0-d tensor under no_grad: fine
    np.testing.assert_array_equal(op(a, 2.0).numpy(), 2 * np.arange(4, dtype=np.float32))
    with paddle.no_grad():
        np.testing.assert_array_equal(op(a, s).numpy(), 2 * np.arange(4, dtype=np.float32))


def test_torch_function_op_scalar_requiring_grad_is_refused_at_the_call():
    torch = pytest.importorskip("torch")
    op, runs = _counting_function_op()
    s = torch.tensor(2.0, requires_grad=True, device="cpu")
    with pytest.raises(
        interop.UnsupportedError, match=r"op 'scaled': no gradient for scalar 's' of a Python-function op"
    ):
        op(torch.arange(4.0, requires_grad=True, device="cpu"), s)
    assert runs == []


def test_paddle_hand_written_backward_scalar_requiring_grad_is_refused_as_unsupported():
    paddle = pytest.importorskip("paddle")

    @wp.kernel
    def scale_backward(
        a: wp.array(dtype=float), s: float, adj_out: wp.array(dtype=float), grad_a: wp.array(dtype=float)
    ):
        grad_a[wp.tid()] = s * adj_out[wp.tid()]

    op = interop.op(scale_kernel, backward=scale_backward)
    a = paddle.to_tensor(np.arange(4, dtype=np.float32), stop_gradient=False, place=paddle.CPUPlace())
    with pytest.raises(interop.UnsupportedError, match=r"op 'scale_kernel': no gradient for scalar 's'"):
        op(a, paddle.to_tensor(2.0, stop_gradient=False, place=paddle.CPUPlace()))


# ---- row d: an in-out leaf that requires grad ------------------------------------------------------


def test_torch_in_out_leaf_requiring_grad_is_refused_before_the_launch():
    torch = pytest.importorskip("torch")
    x = torch.ones(4, device="cpu")
    acc = torch.zeros(8, requires_grad=True, device="cpu")
    for arg, what in ((acc[:4], "a view of a leaf"), (torch.zeros(4, requires_grad=True, device="cpu"), "a leaf")):
        with pytest.raises(
            interop.ArgumentError,
            match=rf"op '_accumulate', parameter 'acc': the in-out tensor is {what} that requires grad.*x\.clone\(\)",
        ):
            ACCUMULATE(x, arg)
    assert not acc.detach().any()  # nothing launched
    # a copy is updated and differentiable; under no_grad the leaf is updated in place
    c = acc[:4].clone()
    ACCUMULATE(x, c).sum().backward()
    torch.testing.assert_close(c.detach(), torch.ones(4, device="cpu"))
    torch.testing.assert_close(acc.grad, torch.tensor([1.0] * 4 + [0.0] * 4, device="cpu"))
    with torch.no_grad():
        ACCUMULATE(x, acc[:4])
    torch.testing.assert_close(acc.detach()[:4], torch.ones(4, device="cpu"))


def test_paddle_in_out_leaf_requiring_grad_is_refused_before_the_launch():
    paddle = pytest.importorskip("paddle")
    acc = paddle.to_tensor(np.zeros(4, np.float32), stop_gradient=False, place=paddle.CPUPlace())
    with pytest.raises(
        interop.ArgumentError,
        match=r"op '_accumulate', parameter 'acc': the in-out tensor is a leaf with stop_gradient=False",
    ):
        ACCUMULATE(paddle.ones([4]), acc)
    assert not acc.numpy().any()


# ---- the generators' dimensions, once each -----------------------------------------------------------

_POPS = {p.id: p for p in PROPERTY_OPS}


@pytest.mark.parametrize("fw, path", [("torch", "eager"), ("paddle", "eager"), ("jax", "grad"), ("jax", "jit_grad")])
def test_generated_function_op_with_a_scalar_requiring_grad(fw, path):
    pytest.importorskip(fw)
    c = Call(_POPS["function_scale"], 4, 1, np.float32, (CONTIGUOUS,), (True,), "0d_grad", 1.5, path)
    want = "traced scalar" if fw == "jax" else "no gradient for scalar"
    assert run_call(fw, c) == f"refused ({want})"
    # the same call with the scalar as a Python number: values and gradients equal Warp's
    assert run_call(
        fw, Call(_POPS["function_scale"], 4, 1, np.float32, (CONTIGUOUS,), (True,), "py_float", 1.5, path)
    ) == ("values and gradients")


@pytest.mark.parametrize("op_id", ["in_out", "in_out_first", "rowsum"])
def test_generated_torch_in_out_leaf(op_id):
    pytest.importorskip("torch")
    pop = _POPS[op_id]
    lays = tuple(CONTIGUOUS for _ in pop.array_ndims)
    grads = tuple(True for _ in pop.array_ndims)
    c = Call(pop, 3, 2, np.float32, lays, grads, path="eager", leaf_in_out=True)
    assert run_call("torch", c) == "refused (leaf that requires grad)"
