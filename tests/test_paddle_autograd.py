"""Paddle autograd through interop ops: float64 gradients against finite differences and closed
forms (scalar, vec3, mat33 kernels, a Python-function op), ``stop_gradient`` semantics,
``paddle.no_grad``, multiple outputs used partly, in-out arguments, scalars passed as 0-d
tensors, second derivatives (hand-written backward, Warp's adjoint of the tangent kernel, a Python-function
op's tangent tape)."""

import numpy as np
import pytest
import warp as wp

paddle = pytest.importorskip("paddle", reason="paddlepaddle is not installed")

from catalogue import (  # noqa: E402
    cube64,
    cube64_backward,
    function64_fn,
    inout64_kernel,
    mat33d_kernel,
    multi64_kernel,
    vec3d_kernel,
)

import interop  # noqa: E402
from interop._frameworks import data_ptr  # noqa: E402

N = 6


# ---- float64 kernels -------------------------------------------------------------------------
@wp.kernel
def scalar64(
    x: wp.array(dtype=wp.float64), y: wp.array(dtype=wp.float64), s: wp.float64, out: wp.array(dtype=wp.float64)
):
    i = wp.tid()
    out[i] = wp.sin(x[i]) * s + y[i] * y[i] * x[i]


SCALAR = interop.op(scalar64)
VEC3 = interop.op(vec3d_kernel)
MAT33 = interop.op(mat33d_kernel)
FUNCTION = interop.op(function64_fn)
TWO = interop.op(multi64_kernel, outputs=2)
ACC = interop.op(inout64_kernel, outputs=2, in_out=["acc"])
CUBE_HW = interop.op(cube64, backward=cube64_backward, name="test_paddle::cube_hw")
CUBE = interop.op(cube64)


def _rand(shape, seed):
    return np.random.default_rng(seed).uniform(-1.0, 1.0, size=shape)


def _leaf(a, stop_gradient=False):
    t = paddle.to_tensor(np.asarray(a, np.float64), place=paddle.CPUPlace())
    t.stop_gradient = stop_gradient
    return t


def _fd(f, args, k, weights, eps=1e-6):
    """d/d args[k] of sum(weights * f(*args)) by central differences (float64 NumPy)."""
    args = [np.array(a, np.float64) for a in args]
    g = np.zeros_like(args[k])
    flat, gf = args[k].reshape(-1), g.reshape(-1)
    for j in range(flat.size):
        old = flat[j]
        flat[j] = old + eps
        lp = np.sum(weights * f(*args))
        flat[j] = old - eps
        lm = np.sum(weights * f(*args))
        flat[j] = old
        gf[j] = (lp - lm) / (2 * eps)
    return g


REFERENCES = {
    "vec3": (VEC3, lambda a, b: np.cross(a, b) + a * np.sum(a * b, axis=-1, keepdims=True), [(N, 3), (N, 3)]),
    "mat33": (
        MAT33,
        lambda m, v: np.einsum("nij,nj->ni", m, v) + np.einsum("nji,nj->ni", m, np.einsum("nij,nj->ni", m, v)),
        [(N, 3, 3), (N, 3)],
    ),
    "function": (FUNCTION, lambda a, b: 3.0 * a * a + np.exp(b), [(N,), (N,)]),
}


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_float64_gradients_match_finite_differences(name):
    op, ref, shapes = REFERENCES[name]
    args = [_rand(s, seed) for seed, s in enumerate(shapes)]
    leaves = [_leaf(a) for a in args]
    out = op(*leaves)
    assert out.dtype == paddle.float64
    np.testing.assert_allclose(out.numpy(), ref(*args), rtol=1e-12, atol=1e-12)
    w = _rand(out.shape, 9) + 2.0
    (out * _leaf(w, True)).sum().backward()
    for k, leaf in enumerate(leaves):
        np.testing.assert_allclose(leaf.grad.numpy(), _fd(ref, args, k, w), rtol=1e-7, atol=1e-8)


def test_scalar_kernel_closed_form_including_0d_scalar_tensor():
    x, y = _rand(N, 0), _rand(N, 1)
    px, py, s = _leaf(x), _leaf(y), _leaf(1.5)
    assert s.shape == []
    out = SCALAR(px, py, s)
    np.testing.assert_allclose(out.numpy(), np.sin(x) * 1.5 + y * y * x, rtol=1e-12)
    w = _rand(N, 2) + 2.0
    (out * _leaf(w, True)).sum().backward()
    np.testing.assert_allclose(px.grad.numpy(), w * (np.cos(x) * 1.5 + y * y), rtol=1e-12)
    np.testing.assert_allclose(py.grad.numpy(), w * 2 * y * x, rtol=1e-12)
    assert s.grad.shape == []
    np.testing.assert_allclose(float(s.grad), np.sum(w * np.sin(x)), rtol=1e-12)


def test_python_number_scalar_gets_no_gradient_and_others_still_do():
    px, py = _leaf(_rand(N, 0)), _leaf(_rand(N, 1))
    SCALAR(px, py, 2.0).sum().backward()
    assert px.grad is not None and py.grad is not None


def test_stop_gradient_semantics():
    x, y = _rand(N, 0), _rand(N, 1)
    px, py = _leaf(x), _leaf(y, stop_gradient=True)
    s = _leaf(1.5, stop_gradient=True)
    out = SCALAR(px, py, s)
    assert not out.stop_gradient
    assert px.grad is None  # the forward never writes x.grad
    out.sum().backward()
    np.testing.assert_allclose(px.grad.numpy(), np.cos(x) * 1.5 + y * y, rtol=1e-12)
    assert py.grad is None and s.grad is None
    # nothing differentiable in: nothing differentiable out
    out2 = SCALAR(_leaf(x, True), _leaf(y, True), 1.5)
    assert out2.stop_gradient


def test_no_grad():
    px, py = _leaf(_rand(N, 0)), _leaf(_rand(N, 1))
    with paddle.no_grad():
        out = SCALAR(px, py, 1.5)
    assert out.stop_gradient
    assert px.grad is None
    out.sum().backward()  # no graph was recorded: nothing reaches x
    assert px.grad is None


def test_gradients_accumulate_over_two_calls():
    x = _rand(N, 3)
    px = _leaf(x)
    (CUBE(px).sum() + CUBE(px).sum()).backward()
    np.testing.assert_allclose(px.grad.numpy(), 6 * x * x, rtol=1e-12)


@pytest.mark.parametrize("used", ["c", "d", "both"])
def test_multiple_outputs_partly_used(used):
    a = _rand(N, 4)
    pa = _leaf(a)
    c, d = TWO(pa)
    loss = {"c": lambda: c.sum(), "d": lambda: d.sum(), "both": lambda: c.sum() + 2.0 * d.sum()}[used]()
    loss.backward()
    expected = {"c": np.cos(a), "d": 3 * a * a, "both": np.cos(a) + 6 * a * a}[used]
    np.testing.assert_allclose(pa.grad.numpy(), expected, rtol=1e-12)


def test_in_out_updated_in_place_with_gradients():
    x, acc = _rand((3, 4), 5), _rand(3, 6)
    px, acc0 = _leaf(x), _leaf(acc)
    pacc = acc0 * 1.0  # not a leaf: Paddle allows in-place updates
    ptr = data_ptr(pacc)
    ret_acc, sq = ACC(px, pacc)
    assert ret_acc is pacc and data_ptr(ret_acc) == ptr
    np.testing.assert_allclose(pacc.numpy(), acc + np.sum(x * x, axis=1), rtol=1e-12)
    np.testing.assert_allclose(sq.numpy(), 2 * x, rtol=1e-12)
    wa, ws = _rand(3, 7) + 2.0, _rand((3, 4), 8) + 2.0
    ((ret_acc * _leaf(wa, True)).sum() + (sq * _leaf(ws, True)).sum()).backward()
    np.testing.assert_allclose(acc0.grad.numpy(), wa, rtol=1e-12)  # the in-out gradient passes through
    np.testing.assert_allclose(px.grad.numpy(), 2 * x * wa[:, None] + 2 * ws, rtol=1e-12)


def test_in_out_plain_tensor_with_differentiable_input():
    x = _rand((3, 4), 5)
    px, pacc = _leaf(x), paddle.zeros([3], dtype="float64")
    acc, _ = ACC(px, pacc)
    assert acc is pacc and not acc.stop_gradient  # now part of the graph, as after a Paddle add_
    acc.sum().backward()
    np.testing.assert_allclose(px.grad.numpy(), 2 * x, rtol=1e-12)


def test_in_out_strided_view_updates_the_base_tensor():
    base = paddle.zeros([6], dtype="float64")
    view = base[::2]  # strided: proves the kernel wrote through the caller's memory
    x = _rand((3, 4), 5)
    with paddle.no_grad():
        ACC(_leaf(x, True), view)
    expected = np.zeros(6)
    expected[::2] = np.sum(x * x, axis=1)
    np.testing.assert_allclose(base.numpy(), expected, rtol=1e-12)


def test_in_out_leaf_that_needs_gradient_is_refused():
    with pytest.raises(
        ValueError, match=r"op 'inout64_kernel', parameter 'acc': the in-out tensor is a leaf with stop_gradient=False"
    ):
        ACC(_leaf(_rand((3, 4), 5)), _leaf(np.zeros(3)))


def test_handwritten_backward_gives_first_and_second_derivatives():
    x = _rand(N, 11)
    px = _leaf(x)
    (g,) = paddle.grad([CUBE_HW(px).sum()], [px], create_graph=True)
    np.testing.assert_allclose(g.numpy(), 3 * x * x, rtol=1e-12)
    assert not g.stop_gradient
    g.sum().backward()
    np.testing.assert_allclose(px.grad.numpy(), 6 * x, rtol=1e-12)


def test_second_derivative_through_warp_adjoint_uses_the_tangent_kernel():
    x = _rand(N, 12)
    px = _leaf(x)
    (g,) = paddle.grad([CUBE(px).sum()], [px], create_graph=True)
    np.testing.assert_allclose(g.numpy(), 3 * x * x, rtol=1e-12)  # first derivative: Warp's adjoint
    g.sum().backward()  # second: Warp's adjoint of the generated tangent kernel
    np.testing.assert_allclose(px.grad.numpy(), 6 * x, rtol=1e-12)


def test_second_derivative_of_a_python_function_op_through_its_tangent_tape():
    a, b = _rand(N, 13), _rand(N, 14)
    pa, pb = _leaf(a), _leaf(b)
    ga, _ = paddle.grad([FUNCTION(pa, pb).sum()], [pa, pb], create_graph=True)
    ga.sum().backward()
    np.testing.assert_allclose(pa.grad.numpy(), np.full(N, 6.0), rtol=1e-12)  # d/da sum(6 a)


def test_function_op_scalar_tensor_gradient_is_refused():
    @wp.kernel
    def _scale(a: wp.array(dtype=wp.float64), s: wp.float64, out: wp.array(dtype=wp.float64)):
        i = wp.tid()
        out[i] = a[i] * s

    def scaled(a: wp.array(dtype=wp.float64), s: wp.float64, out: wp.array(dtype=wp.float64)):
        wp.launch(_scale, dim=a.shape, inputs=[a, s], outputs=[out], device=a.device)

    op = interop.op(scaled)
    a = _rand(N, 1)
    # refused at the call, as in PyTorch (before: the forward ran and the backward failed, as OSError)
    with pytest.raises(
        interop.UnsupportedError, match=r"op 'scaled': no gradient for scalar 's' of a Python-function op"
    ):
        op(_leaf(a), _leaf(2.0))
    np.testing.assert_allclose(op(_leaf(a), 2.0).numpy(), 2 * a, rtol=1e-12)
