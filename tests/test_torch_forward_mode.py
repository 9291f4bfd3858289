"""PyTorch forward mode and second order through generated tangent kernels (issue 34): torch.func.jvp,
jacfwd, hessian, forward_ad dual tensors, gradcheck(check_forward_ad=True) and gradgradcheck without a
hand-written backward, torch.compile, a Python-function op (its tangent tape); and the refusals
(a builtin without a tangent rule, forward mode nested three deep); forward over forward and third order
through the tangent op's own tangent op (issue 42, row 5). float64 on the CPU, against plain torch."""

from __future__ import annotations

import pytest
import warp as wp

torch = pytest.importorskip("torch")

import torch.autograd.forward_ad as fwAD  # noqa: E402
from catalogue import (  # noqa: E402
    cube64,
    cube64_backward,
    function64_fn,
    inout64_kernel,
    mat33d_kernel,
    multi64_kernel,
    vec3d_kernel,
)

import adapters.torch as atorch  # noqa: E402
import interop  # noqa: E402
from interop._errors import UnsupportedError  # noqa: E402

f64 = wp.float64
DEVICE = "cpu"  # the current test's device (set by _on_device below)


@pytest.fixture(autouse=True)
def _on_device(device):
    """Every test runs on each device of INTEROP_TEST_DEVICES (CUDA ones skipped without a GPU)."""
    global DEVICE
    DEVICE = device
    yield
    DEVICE = "cpu"


@wp.kernel
def square_axpy64(x: wp.array(dtype=f64), y: wp.array(dtype=f64), a: f64, out: wp.array(dtype=f64)):
    # catalogue.square_axpy_kernel in float64: out = a x^2 + y, with a float scalar parameter
    i = wp.tid()
    out[i] = a * x[i] * x[i] + y[i]


@wp.kernel
def scatter_max64(x: wp.array(dtype=f64), idx: wp.array(dtype=wp.int32), out: wp.array(dtype=f64)):
    i = wp.tid()
    wp.atomic_max(out, idx[i], x[i])  # no tangent rule: the winning thread is known only at the end


CUBE = interop.op(cube64, name="tt_fm::cube")
VEC3 = interop.op(vec3d_kernel, name="tt_fm::vec3d")
MAT33 = interop.op(mat33d_kernel, name="tt_fm::mat33d")
MULTI = interop.op(multi64_kernel, outputs=2, name="tt_fm::multi")
INOUT = interop.op(inout64_kernel, outputs=2, in_out=["acc"], name="tt_fm::inout")
SAXPY = interop.op(square_axpy64, name="tt_fm::square_axpy")
MAX = interop.op(scatter_max64, output_dims={"out": 3}, name="tt_fm::scatter_max")
FUNC = interop.op(function64_fn, name="tt_fm::two_launches")
CUBE_HW = interop.op(cube64, backward=cube64_backward, name="tt_fm::cube_hand_written")


def _r(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g, dtype=torch.float64, device="cpu") * 2 - 1).to(DEVICE)


def _mv(m, v):
    return torch.einsum("nij,nj->ni", m, v)


# (the op as a function of its differentiable inputs, the same in plain torch, example inputs)
CASES = {
    "cube": (CUBE, lambda x: x**3, lambda: (_r(5),)),
    "vec3d": (
        VEC3,
        lambda a, b: torch.linalg.cross(a, b) + a * (a * b).sum(-1, keepdim=True),
        lambda: (_r(4, 3), _r(4, 3, seed=1)),
    ),
    "mat33d": (
        MAT33,
        lambda m, v: _mv(m, v) + _mv(m.transpose(1, 2), _mv(m, v)),
        lambda: (_r(3, 3, 3), _r(3, 3, seed=1)),
    ),
    "multi64": (MULTI, lambda a: (torch.sin(a), a**3), lambda: (_r(5),)),
    # in-out: the accumulator is an input of the transformed function (a copy is updated)
    "inout64": (
        lambda x, acc: INOUT(x, acc.clone()),
        lambda x, acc: (acc + (x * x).sum(1), 2 * x),
        lambda: (_r(3, 4), _r(3, seed=1)),
    ),
    # a float scalar as a 0-d tensor (differentiable), and as a Python number
    "square_axpy_scalar_tensor": (
        SAXPY,
        lambda x, y, a: a * x * x + y,
        lambda: (_r(5), _r(5, seed=1), torch.tensor(1.5, dtype=torch.float64, device=DEVICE)),
    ),
    "square_axpy_number": (
        lambda x, y: SAXPY(x, y, 1.5),
        lambda x, y: 1.5 * x * x + y,
        lambda: (_r(5), _r(5, seed=1)),
    ),
}
IDS = list(CASES)


def _tuple(x):
    return x if isinstance(x, tuple) else (x,)


def _leaves(x):
    """The tensors of a nested tuple of Jacobians or Hessians, in order."""
    if isinstance(x, torch.Tensor):
        return [x]
    return [t for y in x for t in _leaves(y)]


def _max_err(got, want) -> float:
    got, want = _leaves(got), _leaves(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
    return max(float((g - w).abs().max()) for g, w in zip(got, want))


def _loss(f):
    return lambda *xs: sum((torch.tanh(o) ** 2).sum() for o in _tuple(f(*xs)))


def _case(name):
    f, ref, make = CASES[name]
    xs = make()
    return f, ref, xs, tuple(_r(*x.shape, seed=7 + k) for k, x in enumerate(xs))


# ---- first order ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", IDS)
def test_jvp_equals_jacobian_times_tangent_from_reverse_mode(name):
    f, ref, xs, ts = _case(name)
    out, tangent = torch.func.jvp(f, xs, ts)
    argnums = tuple(range(len(xs)))
    jac = torch.func.jacrev(f, argnums=argnums)(*xs)  # per output (several), per input
    jac = jac if isinstance(out, tuple) else (jac,)
    jt = tuple(sum(torch.tensordot(j, t, dims=t.dim()) for j, t in zip(row, ts)) for row in jac)
    assert _max_err(_tuple(tangent), jt) < 1e-13
    assert _max_err(_tuple(out), _tuple(ref(*xs))) < 1e-13
    assert _max_err(_tuple(tangent), _tuple(torch.func.jvp(ref, xs, ts)[1])) < 1e-13


@pytest.mark.parametrize("name", IDS)
def test_jacfwd_equals_jacrev(name):
    f, _, xs, _ = _case(name)
    argnums = tuple(range(len(xs)))
    fwd = torch.func.jacfwd(f, argnums=argnums)(*xs)
    rev = torch.func.jacrev(f, argnums=argnums)(*xs)
    assert _max_err(fwd, rev) < 1e-13


@pytest.mark.parametrize("name", IDS)
def test_forward_ad_dual_tensors(name):
    f, ref, xs, ts = _case(name)
    with fwAD.dual_level():
        out = f(*[fwAD.make_dual(x, t) for x, t in zip(xs, ts)])
        tangents = tuple(fwAD.unpack_dual(o).tangent for o in _tuple(out))
    assert _max_err(tangents, _tuple(torch.func.jvp(ref, xs, ts)[1])) < 1e-13


def test_forward_ad_updates_the_in_out_tensor_with_its_tangent():
    x, acc, tx, tacc = _r(3, 4), _r(3, seed=1), _r(3, 4, seed=2), _r(3, seed=3)
    with fwAD.dual_level():
        # (make_dual keeps the tangent tensor itself: the in-place update writes the new tangent into it)
        a = fwAD.make_dual(acc.clone(), tacc.clone())
        got, _ = INOUT(fwAD.make_dual(x, tx), a)
        assert got is a  # updated in place, as a call without tangents
        tangent = fwAD.unpack_dual(a).tangent
    torch.testing.assert_close(fwAD.unpack_dual(got).primal, acc + (x * x).sum(1))
    torch.testing.assert_close(tangent, tacc + (2 * x * tx).sum(1))


@pytest.mark.parametrize("name", IDS)
def test_gradcheck_with_forward_ad(name):
    f, _, xs, _ = _case(name)
    assert torch.autograd.gradcheck(f, tuple(x.clone().requires_grad_() for x in xs), check_forward_ad=True)


def test_a_hand_written_backward_keeps_its_second_order_and_gets_a_tangent():
    x, v = _r(5), _r(5, seed=1)
    _, tangent = torch.func.jvp(CUBE_HW, (x,), (v,))
    torch.testing.assert_close(tangent, 3 * x * x * v)
    torch.testing.assert_close(torch.func.hessian(lambda x: CUBE_HW(x).sum())(x), torch.diag(6 * x))
    assert torch.autograd.gradgradcheck(CUBE_HW, (x.clone().requires_grad_(),))


# ---- second order ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", IDS)
def test_hessian_of_a_scalar_loss_matches_plain_torch(name):
    f, ref, xs, _ = _case(name)
    argnums = tuple(range(len(xs)))
    got = torch.func.hessian(_loss(f), argnums=argnums)(*xs)
    want = torch.func.hessian(_loss(ref), argnums=argnums)(*xs)
    assert _max_err(got, want) < 1e-12


@pytest.mark.parametrize("name", IDS)
def test_gradgradcheck_without_a_hand_written_backward(name):
    f, _, xs, _ = _case(name)
    # both second-order rules of the backward: reverse over reverse and forward over reverse
    assert torch.autograd.gradgradcheck(f, tuple(x.clone().requires_grad_() for x in xs), check_fwd_over_rev=True)


@pytest.mark.parametrize("name", ["vec3d", "inout64", "square_axpy_scalar_tensor"])
def test_grad_of_grad_with_create_graph(name):
    f, ref, xs, ts = _case(name)

    def hvp(fn):
        leaves = [x.clone().requires_grad_() for x in xs]
        grads = torch.autograd.grad(_loss(fn)(*leaves), leaves, create_graph=True)
        return torch.autograd.grad(sum((g * t).sum() for g, t in zip(grads, ts)), leaves)

    assert _max_err(hvp(f), hvp(ref)) < 1e-12


@pytest.mark.parametrize("name", ["cube", "mat33d", "multi64"])
def test_other_second_order_compositions(name):
    f, ref, xs, ts = _case(name)
    loss, ref_loss = _loss(f), _loss(ref)
    # Hessian-vector product as forward over reverse, and both reverse over forward and reverse over reverse
    hvp = torch.func.jvp(torch.func.grad(loss, argnums=0), xs, ts)[1]
    assert _max_err(hvp, torch.func.jvp(torch.func.grad(ref_loss, argnums=0), xs, ts)[1]) < 1e-12
    want = torch.func.jacrev(torch.func.jacrev(f))(*xs)
    assert _max_err(torch.func.jacrev(torch.func.jacfwd(f))(*xs), want) < 1e-12
    assert _max_err(torch.func.jacrev(torch.func.jacrev(ref))(*xs), want) < 1e-12


# ---- torch.compile -----------------------------------------------------------------------------
def test_compiled_jvp_equals_eager_by_running_the_transform_eagerly():
    x, v = _r(5), _r(5, seed=1)

    def f(x, v):
        out, tangent = torch.func.jvp(CUBE, (x,), (v,))
        return out.sin() + tangent * 2

    torch.compiler.reset()
    torch.testing.assert_close(torch.compile(f)(x, v), f(x, v), rtol=0, atol=1e-14)
    h = torch.compile(torch.func.hessian(_loss(CUBE)))(x)
    torch.testing.assert_close(h, torch.func.hessian(_loss(lambda x: x**3))(x), rtol=0, atol=1e-12)
    # Dynamo cannot trace an autograd.Function's jvp rule: the call is a graph break that says so
    # (torch 2.13 and newer print the reason; 2.11 and 2.12 name torch.compiler.disable only)
    from adapters.torch.compat import TORCH_VERSION

    said = r"forward-mode AD .* runs eagerly" if TORCH_VERSION >= (2, 13) else r"torch.compiler.disable"
    torch.compiler.reset()
    with pytest.raises(Exception, match=said):
        torch.compile(f, fullgraph=True)(x, v)
    torch.compiler.reset()


def test_the_tangent_operators_pass_opcheck():
    x, v = _r(5), _r(5, seed=1)
    ops = atorch.operators(CUBE.tangent())
    torch.library.opcheck(ops["functional"], (x, v))


# ---- refusals ----------------------------------------------------------------------------------
_ATOMIC_MAX = r"op 'tt_fm::scatter_max'.*'wp\.atomic_max'.*test_torch_forward_mode\.py:\d+"


def test_a_kernel_the_generator_refuses_raises_at_jvp_naming_the_builtin_and_line():
    x, v = _r(5), _r(5, seed=1)
    idx = torch.tensor([0, 1, 2, 0, 1], dtype=torch.int32, device=DEVICE)
    torch.testing.assert_close(
        MAX(x, idx), torch.zeros(3, dtype=torch.float64, device=DEVICE).scatter_reduce(0, idx.long(), x, "amax")
    )
    with pytest.raises(UnsupportedError, match=_ATOMIC_MAX):
        torch.func.jvp(lambda x: MAX(x, idx), (x,), (v,))
    with pytest.raises(UnsupportedError, match=_ATOMIC_MAX):
        torch.func.jacfwd(lambda x: MAX(x, idx))(x)
    with fwAD.dual_level(), pytest.raises(UnsupportedError, match=_ATOMIC_MAX):
        MAX(fwAD.make_dual(x, v), idx)
    # reverse mode is unchanged; a second derivative through Warp's adjoint names the builtin too
    xg = x.clone().requires_grad_()
    (g,) = torch.autograd.grad((MAX(xg, idx) ** 2).sum(), xg, create_graph=True)
    with pytest.raises(UnsupportedError, match=r"second derivatives are not available.*'wp\.atomic_max'"):
        g.sum().backward()
    with pytest.raises(UnsupportedError, match=_ATOMIC_MAX):
        torch.func.hessian(lambda x: (MAX(x, idx) ** 2).sum())(x)


def test_a_python_function_op_has_forward_mode_and_second_order_through_its_tangent_tape():
    a, b, v = _r(5), _r(5, seed=1), _r(5, seed=2)
    _, t = torch.func.jvp(lambda a: FUNC(a, b), (a,), (v,))
    torch.testing.assert_close(t, 6 * a * v, rtol=1e-12, atol=1e-12)
    with fwAD.dual_level():
        torch.testing.assert_close(fwAD.unpack_dual(FUNC(fwAD.make_dual(a, v), b)).tangent, 6 * a * v)
    ag = a.clone().requires_grad_()
    (g,) = torch.autograd.grad(FUNC(ag, b).sin().sum(), ag, create_graph=True)
    g.sum().backward()
    y = 3 * a * a + b.exp()
    torch.testing.assert_close(ag.grad, -y.sin() * 36 * a * a + 6 * y.cos(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", IDS)
def test_forward_over_forward_matches_plain_torch_reverse_mode_and_finite_differences(name):
    """jacfwd(jacfwd(f)) (issue 42, row 5): the op's jvp, under a second forward-mode transform, runs its
    tangent op where the outer transform differentiates it (through the tangent op's own tangent op).
    Against plain torch, against reverse mode (jacrev(jacrev), Warp's adjoints), and against central
    differences of Warp's reverse-mode gradient along a tangent."""
    f, ref, xs, ts = _case(name)
    argnums = tuple(range(len(xs)))
    loss = _loss(f)
    got = torch.func.jacfwd(torch.func.jacfwd(loss, argnums=argnums), argnums=argnums)(*xs)
    assert _max_err(got, torch.func.hessian(_loss(ref), argnums=argnums)(*xs)) < 1e-12
    assert _max_err(got, torch.func.jacrev(torch.func.jacrev(loss, argnums=argnums), argnums=argnums)(*xs)) < 1e-12
    grad = torch.func.grad(loss, argnums=argnums)
    eps = 1e-6
    plus = grad(*[x + eps * t for x, t in zip(xs, ts)])
    minus = grad(*[x - eps * t for x, t in zip(xs, ts)])
    for i in range(len(xs)):
        ht = sum(torch.tensordot(got[i][j], ts[j], dims=ts[j].ndim) for j in range(len(xs)))
        torch.testing.assert_close(ht, (plus[i] - minus[i]) / (2 * eps), rtol=1e-6, atol=1e-7)
    # a jvp of a jacfwd of the op itself (its Jacobian's directional derivative)
    jac = torch.func.jacfwd(f, argnums=argnums)
    want = torch.func.jvp(torch.func.jacfwd(ref, argnums=argnums), xs, ts)[1]
    assert _max_err(torch.func.jvp(jac, xs, ts)[1], want) < 1e-12


def test_third_order_matches_plain_torch_and_deeper_forward_nesting_raises():
    x = _r(4)
    loss, ref = _loss(CUBE), _loss(lambda x: x**3)
    # third order: the tangent op's own second order (its tangent op's adjoint)
    want = torch.func.jacrev(torch.func.hessian(ref))(x)
    assert _max_err(torch.func.jacrev(torch.func.hessian(loss))(x), want) < 1e-11
    xg, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
    for leaf, fn in ((xg, CUBE), (xr, lambda x: x**3)):
        (g,) = torch.autograd.grad(fn(leaf).sin().sum(), leaf, create_graph=True)
        (h,) = torch.autograd.grad(g.sum(), leaf, create_graph=True)
        h.sum().backward()
    torch.testing.assert_close(xg.grad, xr.grad, rtol=1e-12, atol=1e-12)
    with pytest.raises(UnsupportedError, match=r"op 'tt_fm::cube': forward mode under 3 nested forward-mode"):
        torch.func.jacfwd(torch.func.jacfwd(torch.func.jacfwd(loss)))(x)
    with pytest.raises(UnsupportedError, match=r"op 'tt_fm::cube': forward over reverse mode .* under 2 nested"):
        torch.func.jacfwd(torch.func.hessian(loss))(x)


def test_a_direct_operator_call_with_dual_tensors_is_refused_naming_the_fix():
    x, v = _r(4), _r(4, seed=1)
    with fwAD.dual_level(), pytest.raises(UnsupportedError, match=r"torch\.ops\.tt_fm\.cube .* call the op object"):
        torch.ops.tt_fm.cube(fwAD.make_dual(x, v))


# ---- the whole catalogue, and hessians of an atomic scatter and a loop -------------------------------
def _catalogue_kernel_cases():
    from catalogue import CASES

    return [c for c in CASES if c.differentiable and c.op.description.kind == "kernel" and not c.op.description.tiles]


@pytest.mark.parametrize("case", _catalogue_kernel_cases(), ids=lambda c: c.id)
def test_catalogue_jvp_and_jacfwd_equal_reverse_mode(case):
    import numpy as np

    dt = next((d for d in (np.float64, np.float32) if d in case.dtypes), None)
    if dt is None:
        pytest.skip("no float32/float64 variant (torch's forward mode of bfloat16 is not compared)")
    args = list(case.make(np.random.default_rng(3), dt))
    params = case.op.description.call_params
    call = [torch.from_numpy(np.ascontiguousarray(a)).to(DEVICE) if isinstance(a, np.ndarray) else a for a in args]
    diff = [
        i
        for i, (a, p) in enumerate(zip(call, params))
        if isinstance(a, torch.Tensor) and a.dtype.is_floating_point and p.differentiable and p.role == "input"
    ]
    if not diff:
        pytest.skip("no differentiable input array")

    def fn(*xs):
        # in-out arrays: a copy made inside the transformed function (torch refuses to update a
        # captured tensor in place), so every call starts from the same values
        full = [a.clone() if p.role == "in_out" else a for a, p in zip(call, params)]
        for i, x in zip(diff, xs):
            full[i] = x
        r = case.op(*full, **case.call_kwargs)
        return r if isinstance(r, tuple) else (r,)

    xs = tuple(call[i].clone() for i in diff)
    tol = dict(rtol=1e-10, atol=1e-12) if dt == np.float64 else dict(rtol=2e-5, atol=2e-5)
    if case.id == "struct_nested":  # it hands a struct value to a wp.func: refused, naming it
        with pytest.raises(UnsupportedError, match=r"a value of struct"):
            torch.func.jvp(fn, xs, xs)
        return
    argnums = tuple(range(len(xs)))
    fwd = torch.func.jacfwd(fn, argnums=argnums)(*xs)
    rev = torch.func.jacrev(fn, argnums=argnums)(*xs)
    for a, b in zip(torch.utils._pytree.tree_leaves(fwd), torch.utils._pytree.tree_leaves(rev)):
        torch.testing.assert_close(a, b, **tol)
    ts = tuple(torch.rand_like(x) for x in xs)
    _, touts = torch.func.jvp(fn, xs, ts)
    for k, t_k in enumerate(touts):
        want = sum(torch.tensordot(rev[k][j], ts[j], dims=ts[j].ndim) for j in range(len(xs)))
        torch.testing.assert_close(t_k, want, **tol)


@pytest.mark.parametrize("which", ["atomic_scatter", "loop"])
def test_hessian_of_an_atomic_scatter_and_a_loop(which):
    from catalogue import atomic_kernel, loop_kernel

    op = interop.op(atomic_kernel if which == "atomic_scatter" else loop_kernel)
    ref = (lambda x: 2.0 * x) if which == "atomic_scatter" else (lambda a: a.sum().expand(a.shape))
    x = _r(5).float()
    f = lambda x: (torch.tanh(op(x)) ** 2).sum()  # noqa: E731
    g = lambda x: (torch.tanh(ref(x)) ** 2).sum()  # noqa: E731
    torch.testing.assert_close(torch.func.hessian(f)(x), torch.func.hessian(g)(x), rtol=2e-4, atol=2e-4)
