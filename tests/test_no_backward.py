"""Kernels compiled with ``enable_backward=False``: the forward works everywhere, and a gradient
flowing into the op raises an error naming the op and the reason, in every framework (never the
silent zero gradient of issue 8, item 5). A hand-written ``backward=`` still gives gradients."""

import importlib.util

import numpy as np
import pytest
import warp as wp
from _devices import jax_device

import interop


@wp.kernel(enable_backward=False)
def cube_nb(x: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = x[i] * x[i] * x[i] * s


@wp.kernel(enable_backward=False)
def cube_nb_bwd(x: wp.array(dtype=float), s: float, adj_out: wp.array(dtype=float), adj_x: wp.array(dtype=float)):
    i = wp.tid()
    adj_x[i] = 3.0 * x[i] * x[i] * s * adj_out[i]


@wp.kernel(enable_backward=False)
def accumulate_nb(x: wp.array(dtype=float), acc: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(acc, 0, x[i])
    y[i] = 2.0 * x[i]


NB = interop.op(cube_nb)
MSG = r"op 'cube_nb': no gradient: the kernel was compiled with enable_backward=False"
X = np.array([0.5, -1.0, 2.0, 1.5], np.float32)
S = 2.0
REF = X**3 * S
DREF = 3 * X**2 * S  # d/dx sum(op(x)); the loss below adds sum(x), so its gradient is DREF + 1


def _frameworks():
    out = []
    for fw in ("torch", "torch-compile", "torch-func", "jax", "jax-jit", "paddle", "warp"):
        mod = fw.split("-")[0]
        marks = [] if mod == "warp" or importlib.util.find_spec(mod) else [pytest.mark.skip(reason=f"{mod} missing")]
        out.append(pytest.param(fw, marks=marks, id=fw))
    return out


def _run(fw: str, op, grad: bool):
    """(forward value, gradient of sum(op(x, S)) + sum(x) w.r.t. x, or None if not asked) through ``fw``."""
    if fw.startswith("torch"):
        import torch

        x = torch.from_numpy(X.copy()).requires_grad_(grad)
        if fw == "torch-func":
            x = x.detach()
            value = op(x, S).numpy()
            if not grad:
                return value, None
            return value, torch.func.grad(lambda x: op(x, S).sum() + x.sum())(x).numpy()

        def loss_fn(x):
            out = op(x, S)
            return out, out.sum() + x.sum()

        if fw == "torch-compile":
            torch._dynamo.reset()
            loss_fn = torch.compile(loss_fn, fullgraph=True)
        out, loss = loss_fn(x)
        value = out.detach().numpy()
        if not grad:
            assert not out.requires_grad
            return value, None
        assert out.requires_grad  # the op is a node of the graph: its backward is reached, and raises
        loss.backward()
        return value, x.grad.numpy()
    if fw.startswith("jax"):
        import jax
        import jax.numpy as jnp

        f = lambda x: jnp.sum(op(x, S)) + jnp.sum(x)  # noqa: E731
        g = jax.grad(f)
        fwd = lambda x: op(x, S)  # noqa: E731
        if fw == "jax-jit":
            f, g, fwd = jax.jit(f), jax.jit(g), jax.jit(fwd)
        value = np.asarray(fwd(jnp.asarray(X, device=jax_device("cpu"))))
        return value, (np.asarray(g(jnp.asarray(X, device=jax_device("cpu")))) if grad else None)
    if fw == "paddle":
        import paddle

        x = paddle.to_tensor(X.copy(), place=paddle.CPUPlace())
        x.stop_gradient = not grad
        out = op(x, S)
        value = out.numpy()
        if not grad:
            assert out.stop_gradient
            return value, None
        (out.sum() + x.sum()).backward()
        return value, x.grad.numpy()
    if fw == "warp":
        x = wp.array(X.copy(), dtype=float, requires_grad=grad, device="cpu")
        if not grad:
            return op(x, S).numpy(), None
        tape = wp.Tape()
        with tape:
            out = op(x, S)
        out.grad = wp.ones_like(out)
        tape.backward()
        return out.numpy(), x.grad.numpy() + 1.0
    raise AssertionError(fw)


@pytest.mark.parametrize("fw", _frameworks())
def test_forward_works_when_no_gradient_is_asked(fw):
    value, _ = _run(fw, NB, grad=False)
    np.testing.assert_allclose(value, REF, rtol=1e-6)


@pytest.mark.parametrize("fw", _frameworks())
def test_gradient_into_the_op_raises_naming_op_and_reason(fw):
    # Paddle wraps any error raised in a backward in its own OSError (the message is kept)
    with pytest.raises(OSError if fw == "paddle" else interop.UnsupportedError, match=MSG) as info:
        _run(fw, NB, grad=True)
    assert "backward=" in str(info.value)  # says what to do instead


@pytest.mark.parametrize("fw", [f for f in _frameworks() if f.id != "warp"])
def test_hand_written_backward_makes_it_differentiable(fw):
    value, grad = _run(fw, interop.op(cube_nb, backward=cube_nb_bwd), grad=True)
    np.testing.assert_allclose(value, REF, rtol=1e-6)
    np.testing.assert_allclose(grad, DREF + 1.0, rtol=1e-5)


def test_in_out_gradient_passes_through_without_the_adjoint():
    """Only the in-out value is differentiated: its gradient passes through (no adjoint needed)."""
    torch = pytest.importorskip("torch")
    op = interop.op(accumulate_nb, outputs=2, in_out=["acc"])
    x = torch.ones(3, device="cpu")
    acc0 = torch.zeros(1, requires_grad=True, device="cpu")
    acc, y = op(x, acc0 * 1.0)
    np.testing.assert_allclose(acc.detach().numpy(), [3.0])
    (g,) = torch.autograd.grad(acc.sum() * 5.0, acc0)
    np.testing.assert_allclose(g.numpy(), [5.0])
    with pytest.raises(NotImplementedError, match=r"op 'accumulate_nb': no gradient: .*enable_backward=False"):
        xg = torch.ones(3, requires_grad=True, device="cpu")
        acc, y = op(xg, torch.zeros(1, device="cpu"))
        y.sum().backward()


def test_description_keeps_float_parameters_differentiable():
    d = NB.description
    assert d.enable_backward is False
    assert [p.name for p in d.diff_array_inputs] == ["x"]
