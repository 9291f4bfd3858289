"""PyTorch adapter: autograd through the registered backward operator, torch.func and vmap."""

from __future__ import annotations

import pytest
import warp as wp

torch = pytest.importorskip("torch")

from catalogue import (  # noqa: E402
    cube64,
    cube64_backward,
    function64_fn,
    inout_kernel,
    mat33d_kernel,
    multi_kernel,
    vec3d_kernel,
    vscale_kernel,
)

import interop  # noqa: E402
from interop._errors import UnsupportedError  # noqa: E402

f64 = wp.float64


@wp.kernel
def scalar64(x: wp.array(dtype=f64), y: wp.array(dtype=f64), s: f64, out: wp.array(dtype=f64)):
    i = wp.tid()
    out[i] = wp.sin(x[i]) * s + y[i] * y[i] * s * s


@wp.kernel
def gather(x: wp.array(dtype=float), idx: wp.array(dtype=wp.int32), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = x[idx[i]] * 2.0


SCALAR = interop.op(scalar64, name="tt_ag::scalar64")
VEC3 = interop.op(vec3d_kernel, name="tt_ag::vec3d")
MAT33 = interop.op(mat33d_kernel, name="tt_ag::mat33d")
FUNC = interop.op(function64_fn, name="tt_ag::two_launches")
MULTI = interop.op(multi_kernel, outputs=2, name="tt_ag::multi")
CUBE = interop.op(cube64, backward=cube64_backward, name="tt_ag::cube")
GATHER = interop.op(gather, name="tt_ag::gather")
ROWSQ = interop.op(inout_kernel, outputs=2, in_out=["acc"], name="tt_ag::rowsq")
VSCALE = interop.op(vscale_kernel, name="tt_ag::vscale")


def _r(*shape, dtype=torch.float64, grad=True, seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape))
    return (torch.rand(*shape, generator=g, dtype=dtype, device="cpu") * 2 - 1).requires_grad_(grad)


# ---- gradcheck (float64) --------------------------------------------------------------
def test_gradcheck_scalar_kernel():
    assert torch.autograd.gradcheck(lambda x, y: SCALAR(x, y, 1.3), (_r(6), _r(6, seed=1)))


def test_gradcheck_vec3_kernel():
    assert torch.autograd.gradcheck(VEC3, (_r(5, 3), _r(5, 3, seed=1)))


def test_gradcheck_mat33_kernel():
    assert torch.autograd.gradcheck(MAT33, (_r(4, 3, 3), _r(4, 3, seed=1)))


def test_gradcheck_python_function_op():
    assert torch.autograd.gradcheck(FUNC, (_r(6), _r(6, seed=1)))


def test_gradcheck_scalar_passed_as_0d_tensor():
    s = torch.tensor(0.7, dtype=torch.float64, requires_grad=True, device="cpu")
    assert torch.autograd.gradcheck(SCALAR, (_r(6), _r(6, seed=1), s))


def test_scalar_gradient_against_finite_differences():
    # asymmetric inputs: a zero or a sign-symmetric gradient would not hide here
    x = torch.tensor([0.1, 0.5, -0.3, 1.2], dtype=torch.float64, device="cpu")
    y = torch.tensor([0.2, -0.7, 0.9, 0.4], dtype=torch.float64, device="cpu")
    w = torch.tensor([1.0, 2.0, 0.5, -1.5], dtype=torch.float64, device="cpu")
    s = torch.tensor(0.8, dtype=torch.float64, requires_grad=True, device="cpu")
    (w * SCALAR(x, y, s)).sum().backward()
    eps = 1e-6

    def loss(sv):
        return float((w * (torch.sin(x) * sv + y * y * sv * sv)).sum())

    fd = (loss(0.8 + eps) - loss(0.8 - eps)) / (2 * eps)
    assert s.grad is not None and s.grad.shape == ()
    assert abs(float(s.grad) - fd) < 1e-6 and abs(fd) > 0.1


# ---- which gradients are computed --------------------------------------------------------
def test_only_inputs_that_require_grad_get_one():
    x, y = _r(5), _r(5, seed=1, grad=False)
    SCALAR(x, y, 2.0).sum().backward()
    assert x.grad is not None and y.grad is None
    torch.testing.assert_close(x.grad, torch.cos(x.detach()) * 2.0)


def test_integer_arrays_get_no_gradient():
    x = torch.rand(6, requires_grad=True, device="cpu")
    idx = torch.tensor([5, 0, 0, 3], dtype=torch.int32, device="cpu")
    out = GATHER(x, idx, launch_dims=4)
    out.sum().backward()
    expected = torch.zeros(6, device="cpu")
    expected[5] += 2
    expected[0] += 4
    expected[3] += 2
    torch.testing.assert_close(x.grad, expected)


def test_multiple_outputs_only_some_used():
    a = torch.rand(6, requires_grad=True, device="cpu")
    c, d = MULTI(a)
    d.sum().backward()  # c unused: its upstream gradient is zero
    torch.testing.assert_close(a.grad, 3 * a.detach() ** 2)
    a.grad = None
    c, d = MULTI(a)
    (2 * c).sum().backward()
    torch.testing.assert_close(a.grad, 2 * torch.cos(a.detach()))


def test_retain_graph_with_a_different_upstream_gradient():
    x, y = _r(5), _r(5, seed=1, grad=False)
    out = SCALAR(x, y, 1.5)
    g1 = torch.ones(5, dtype=torch.float64, device="cpu")
    g2 = torch.arange(5, dtype=torch.float64, device="cpu") - 2.0
    (gx1,) = torch.autograd.grad(out, x, g1, retain_graph=True)
    (gx2,) = torch.autograd.grad(out, x, g2)
    torch.testing.assert_close(gx1, 1.5 * torch.cos(x.detach()))
    torch.testing.assert_close(gx2, 1.5 * torch.cos(x.detach()) * g2)


def test_expanded_upstream_gradient_of_a_vec_output():
    v = torch.rand(4, 3, requires_grad=True, device="cpu")
    out = VSCALE(v, 3.0)
    out.sum().backward()  # upstream gradient is an expanded (stride 0) tensor
    torch.testing.assert_close(v.grad, torch.full((4, 3), 3.0, device="cpu"))
    v.grad = None
    out = VSCALE(v, 3.0)
    out[:, 1].sum().backward()
    expected = torch.zeros(4, 3, device="cpu")
    expected[:, 1] = 3.0
    torch.testing.assert_close(v.grad, expected)


def test_in_out_gradients():
    x = torch.rand(3, 4, requires_grad=True, device="cpu")
    acc = torch.zeros(3, device="cpu")
    acc_in = acc
    acc_out, sq = ROWSQ(x, acc)
    assert acc_out is acc_in  # updated in place, same object, now recorded by autograd
    torch.testing.assert_close(acc, (x.detach() ** 2).sum(1))
    (acc_out * torch.tensor([1.0, 2.0, 3.0], device="cpu")).sum().add(sq.sum()).backward()
    expected = 2 * x.detach() * torch.tensor([1.0, 2.0, 3.0], device="cpu")[:, None] + 2.0
    torch.testing.assert_close(x.grad, expected)
    # the in-out gradient passes through unchanged (the kernel only accumulates into it)
    acc2 = torch.rand(3, requires_grad=True, device="cpu").clone()
    w = torch.tensor([1.0, -2.0, 3.0], device="cpu")
    base = acc2
    acc2.retain_grad()
    ROWSQ(x.detach(), acc2)
    (acc2 * w).sum().backward()
    assert base is acc2


# ---- second order -------------------------------------------------------------------------
def test_second_order_through_the_generated_tangent_kernel():
    """No backward=: the second derivative is Warp's adjoint of the generated tangent kernel
    (out = s sin x + s^2 y^2: d2/dx2 = -s sin x, d2/dy2 = 2 s^2)."""
    x, y = _r(4), _r(4, seed=1)
    (gx, gy) = torch.autograd.grad(SCALAR(x, y, 1.5).sum(), (x, y), create_graph=True)
    (hx,) = torch.autograd.grad(gx.sum(), x, retain_graph=True)
    (hy,) = torch.autograd.grad(gy.sum(), y)
    torch.testing.assert_close(hx, -1.5 * torch.sin(x.detach()))
    torch.testing.assert_close(hy, torch.full_like(y, 2 * 1.5**2).detach())
    assert torch.autograd.gradgradcheck(lambda x, y: SCALAR(x, y, 1.0), (_r(4), _r(4, seed=1)))


def test_second_order_through_hand_written_backward():
    x = _r(5)
    (g,) = torch.autograd.grad(CUBE(x).sum(), x, create_graph=True)
    torch.testing.assert_close(g, 3 * x.detach() ** 2)
    (h,) = torch.autograd.grad(g.sum(), x)
    torch.testing.assert_close(h, 6 * x.detach())
    assert torch.autograd.gradcheck(CUBE, (_r(5),))
    assert torch.autograd.gradgradcheck(CUBE, (_r(5),))


# ---- forward mode ----------------------------------------------------------------------------
@pytest.mark.parametrize("op_name", ["SCALAR", "CUBE"])
def test_forward_mode_gives_the_tangent_not_a_zero(op_name):
    # torch's custom_op runs the forward without its autograd.Function when no input requires
    # grad, so tangents were dropped (jvp and jacfwd gave zeros): calls under forward mode take the
    # Function, whose jvp launches the generated tangent kernel
    import torch.autograd.forward_ad as fwAD

    y = _r(4, seed=1, grad=False)
    f = (lambda x: SCALAR(x, y, 1.5)) if op_name == "SCALAR" else CUBE
    df = (lambda x: 1.5 * torch.cos(x)) if op_name == "SCALAR" else (lambda x: 3 * x * x)
    x, v = _r(4, grad=False), _r(4, seed=2, grad=False)
    f(x), f(x)  # the eager fast path is warm
    torch.testing.assert_close(torch.func.jvp(f, (x,), (v,))[1], df(x) * v)
    torch.testing.assert_close(torch.func.jacfwd(f)(x), torch.diag(df(x)))
    with fwAD.dual_level():
        torch.testing.assert_close(fwAD.unpack_dual(f(fwAD.make_dual(x, v))).tangent, df(x) * v)
        torch.testing.assert_close(
            fwAD.unpack_dual(f(fwAD.make_dual(x.clone().requires_grad_(), v))).tangent, df(x) * v
        )


def test_forward_mode_through_the_operator_is_refused_and_an_in_out_op_carries_tangents():
    import torch.autograd.forward_ad as fwAD

    x, y, v = _r(4, grad=False), _r(4, seed=1, grad=False), torch.ones(4, dtype=torch.float64, device="cpu")
    with fwAD.dual_level():
        with pytest.raises(UnsupportedError, match=r"op 'tt_ag::scalar64': forward-mode .* torch.ops.tt_ag.scalar64"):
            torch.ops.tt_ag.scalar64(fwAD.make_dual(x, v), y, 1.5)
        xs, tx = torch.rand(3, 4, device="cpu"), torch.rand(3, 4, device="cpu")
        acc, sq = ROWSQ(fwAD.make_dual(xs, tx), torch.zeros(3, device="cpu"))
        torch.testing.assert_close(fwAD.unpack_dual(acc).tangent, (2 * xs * tx).sum(1))
        torch.testing.assert_close(fwAD.unpack_dual(sq).tangent, 2 * tx)


def test_forward_mode_with_the_op_on_constants_is_exact():
    # no tangent reaches the op: its output is a constant, and the tangent of the rest is right
    c, y = _r(4, grad=False), _r(4, seed=1, grad=False)
    z, v = _r(4, seed=2, grad=False), _r(4, seed=3, grad=False)
    out, tangent = torch.func.jvp(lambda z: z * SCALAR(c, y, 1.5), (z,), (v,))
    torch.testing.assert_close(out, z * SCALAR(c, y, 1.5))
    torch.testing.assert_close(tangent, v * SCALAR(c, y, 1.5))


# ---- torch.func and vmap ---------------------------------------------------------------
def test_torch_func_grad_matches_autograd():
    x, y = _r(5, grad=False), _r(5, seed=1, grad=False)
    g = torch.func.grad(lambda x: SCALAR(x, y, 1.5).sum())(x)
    torch.testing.assert_close(g, 1.5 * torch.cos(x))


def test_vmap_matches_a_loop():
    X, Y = _r(4, 6, grad=False), _r(4, 6, seed=1, grad=False)
    batched = torch.vmap(lambda x, y: SCALAR(x, y, 0.5))(X, Y)
    looped = torch.stack([SCALAR(X[b], Y[b], 0.5) for b in range(4)])
    torch.testing.assert_close(batched, looped)
    # one batched argument, one shared; a vec kernel; batch dim not first
    torch.testing.assert_close(
        torch.vmap(lambda x: SCALAR(x, Y[0], 0.5))(X), torch.stack([SCALAR(X[b], Y[0], 0.5) for b in range(4)])
    )
    A, B = _r(3, 5, 3, grad=False), _r(5, 3, 3, seed=2, grad=False)
    got = torch.vmap(VEC3, in_dims=(0, 2))(A, B)
    torch.testing.assert_close(got, torch.stack([VEC3(A[b], B[:, :, b].contiguous()) for b in range(3)]))


def test_vmap_of_grad_and_of_an_in_out_op():
    X, Y = _r(3, 5, grad=False), _r(3, 5, seed=1, grad=False)
    per = torch.vmap(torch.func.grad(lambda x, y: SCALAR(x, y, 1.5).sum()))(X, Y)
    torch.testing.assert_close(per, 1.5 * torch.cos(X))
    xs = torch.rand(2, 3, 4, device="cpu")
    accs = torch.zeros(2, 3, device="cpu")
    acc_b, sq_b = torch.vmap(ROWSQ)(xs, accs)
    torch.testing.assert_close(accs, (xs**2).sum(-1))
    torch.testing.assert_close(sq_b, 2 * xs)


def test_opcheck_on_an_op_with_a_hand_written_backward():
    import adapters.torch as atorch

    ops = atorch.operators(CUBE)
    assert "backward" not in ops  # its backward is the registered operator of cube64_backward
    torch.library.opcheck(ops["functional"], (_r(5),))
    torch.library.opcheck(ops["functional"], (_r(5, grad=False),))
    bwd = atorch.operators(atorch._binding(CUBE).backward_op)["functional"]
    torch.library.opcheck(bwd, (_r(5), _r(5, seed=1)))
