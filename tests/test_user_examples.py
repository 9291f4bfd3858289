"""Kernels as users write them (tests/user_kernels.py: segmented sums, neighbour lists, Lennard-Jones
and Coulomb energies+forces, spherical harmonics, inverse cells, overload tables, a Python-function
op), through NumPy, PyTorch, JAX and Paddle: values against NumPy references, gradients against
finite differences of those references, and the physics identity forces = -dE/dpos."""

from __future__ import annotations

import importlib.util

import catalogue
import numpy as np
import pytest
import user_kernels as uk
from _devices import jax_device
from catalogue import fd_grad, loss_weights

import interop

FRAMEWORKS = [f for f in ("numpy", "torch", "jax", "jax.jit", "paddle") if importlib.util.find_spec(f.split(".")[0])]
GRAD_FRAMEWORKS = [f for f in FRAMEWORKS if f != "numpy"]


def _params(cases=None):
    out = []
    for c in uk.USER_CASES if cases is None else [uk.user_case(i) for i in cases]:
        for dt in c.dtypes:
            out.append(pytest.param(c.id, dt, id=f"{c.id}-{np.dtype(dt).name}"))
    return out


def _to(fw, a, grad=False):
    if not isinstance(a, np.ndarray):
        return a
    a = np.ascontiguousarray(a)
    if fw == "numpy":
        return a.copy()
    if fw == "torch":
        import torch

        return torch.from_numpy(a.copy()).requires_grad_(grad)
    if fw == "paddle":
        import paddle

        t = paddle.to_tensor(a.copy(), place=paddle.CPUPlace())
        t.stop_gradient = not grad
        return t
    import jax.numpy as jnp

    return jnp.asarray(a, device=jax_device("cpu"))


def _np(x):
    return np.asarray(interop.convert(x.detach() if hasattr(x, "detach") else x, to="numpy", copy=True))


def _tuple(out):
    return out if isinstance(out, tuple) else (out,)


def _tol(dt):
    return dict(rtol=2e-5, atol=2e-5) if dt == np.float32 else dict(rtol=1e-10, atol=1e-10)


def _call(fw, case, args):
    """The case's op on ``args`` (already in ``fw``); ``jax.jit``: arrays traced, the rest static."""
    if fw != "jax.jit":
        return _tuple(case.op(*args, **case.call_kwargs))
    import jax

    pos = [k for k, a in enumerate(args) if isinstance(a, jax.Array)]

    def f(*arrays):
        full = list(args)
        for k, a in zip(pos, arrays):
            full[k] = a
        return _tuple(case.op(*full, **case.call_kwargs))

    return jax.jit(f)(*[args[k] for k in pos])


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("case_id, dt", _params())
def test_values(fw, case_id, dt):
    case = uk.user_case(case_id)
    ctx = _x64(fw, dt)
    with ctx:
        args = case.make(np.random.default_rng(0), dt)
        ref = case.reference(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
        fargs = [_to(fw, a) for a in args]
        out = _call(fw, case, fargs)
        assert len(out) == len(ref)
        for k in case.in_out:
            if fw.startswith("jax"):  # JAX returns new arrays; the caller's is unchanged
                np.testing.assert_array_equal(_np(fargs[k]), args[k])
            else:  # updated in place, returned as the same object
                assert any(o is fargs[k] for o in out)
        for o, r in zip(out, ref):
            got = _np(o)
            assert got.shape == r.shape and got.dtype == r.dtype, (got.shape, got.dtype, r.shape, r.dtype)
            np.testing.assert_allclose(got, r, **_tol(dt))


def _x64(fw, dt):
    import contextlib

    if fw.startswith("jax") and dt == np.float64:
        import jax

        return jax.enable_x64(True)
    return contextlib.nullcontext()


def _grads(fw, case, args, weights):
    """Gradients of sum_k sum(w_k * out_k) w.r.t. every float array argument, through ``fw``'s autograd."""
    diff = [k for k, a in enumerate(args) if isinstance(a, np.ndarray) and a.dtype.kind == "f"]
    if fw == "torch":
        import torch

        leaves = [_to(fw, a, grad=k in diff) for k, a in enumerate(args)]
        # an in-out tensor is updated in place: a non-leaf that carries the gradient to its leaf
        targs = [t * 1.0 if k in case.in_out else t for k, t in enumerate(leaves)]
        out = _tuple(case.op(*targs, **case.call_kwargs))
        loss = sum((torch.from_numpy(w).to(o.dtype) * o).sum() for w, o in zip(weights, out))
        return diff, [g.numpy() for g in torch.autograd.grad(loss, [leaves[k] for k in diff])]
    if fw == "paddle":
        import paddle

        leaves = [_to(fw, a, grad=k in diff) for k, a in enumerate(args)]
        pargs = [t * 1.0 if k in case.in_out else t for k, t in enumerate(leaves)]
        out = _tuple(case.op(*pargs, **case.call_kwargs))
        ws = [
            paddle.to_tensor(w.astype(np.dtype(o.numpy().dtype)), place=paddle.CPUPlace()) for w, o in zip(weights, out)
        ]
        loss = sum((o * w).sum() for w, o in zip(ws, out))
        loss.backward()
        return diff, [leaves[k].grad.numpy() for k in diff]
    import jax
    import jax.numpy as jnp

    jargs = [_to(fw, a) for a in args]

    def loss(*arrays):
        full = list(jargs)
        for k, a in zip(diff, arrays):
            full[k] = a
        out = _tuple(case.op(*full, **case.call_kwargs))
        return sum(jnp.sum(jnp.asarray(w, o.dtype, device=jax_device("cpu")) * o) for w, o in zip(weights, out))

    g = jax.grad(loss, argnums=tuple(range(len(diff))))
    g = jax.jit(g) if fw == "jax.jit" else g
    return diff, [np.asarray(x) for x in g(*[jargs[k] for k in diff])]


DIFF_CASES = [c.id for c in uk.USER_CASES if c.differentiable]


@pytest.mark.parametrize("fw", GRAD_FRAMEWORKS)
@pytest.mark.parametrize("case_id, dt", _params(DIFF_CASES))
def test_gradients_match_finite_differences(fw, case_id, dt):
    case = uk.user_case(case_id)
    with _x64(fw, dt):
        args = case.make(np.random.default_rng(1), dt)
        ref = case.reference(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
        weights = loss_weights(case, ref)
        diff, grads = _grads(fw, case, args, weights)
        fd = fd_grad(case, args, weights)
        tol = dict(rtol=2e-3, atol=2e-3) if dt == np.float32 else dict(rtol=1e-6, atol=1e-6)
        for k, g in zip(diff, grads):
            assert g.shape == args[k].shape
            np.testing.assert_allclose(g, fd[k], **tol, err_msg=f"{case_id}: gradient of argument {k}")


@pytest.mark.parametrize("fw", GRAD_FRAMEWORKS)
@pytest.mark.parametrize("case_id", ["lennard_jones", "coulomb"])
def test_forces_are_minus_energy_gradient(fw, case_id):
    """Training on energies: d(sum E)/d pos through the framework equals -forces from the kernel."""
    case = uk.user_case(case_id)
    args = case.make(np.random.default_rng(2), np.float32)
    energy, forces = case.reference(*args)
    weights = [np.ones_like(energy, np.float64), np.zeros_like(forces, np.float64)]
    diff, grads = _grads(fw, case, args, weights)
    np.testing.assert_allclose(grads[diff.index(0)], -forces, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fw", ["torch", "paddle", "jax"])
def test_gradient_wrt_lj_parameters_passed_as_0d_arrays(fw):
    """Fitting epsilon and sigma: scalars handed over as 0-d arrays get their real gradients."""
    pytest.importorskip(fw)
    case = uk.user_case("lennard_jones")
    pos, pairs, eps, sig = case.make(np.random.default_rng(3), np.float32)

    def energy(e, s):
        return float(case.reference(pos.astype(np.float64), pairs, e, s)[0][0])

    h = 1e-5
    fd = [
        (energy(eps + h, sig) - energy(eps - h, sig)) / (2 * h),
        (energy(eps, sig + h) - energy(eps, sig - h)) / (2 * h),
    ]
    kw = case.call_kwargs
    if fw == "torch":
        import torch

        e, s = torch.tensor(eps, requires_grad=True, device="cpu"), torch.tensor(sig, requires_grad=True, device="cpu")
        en, _ = case.op(torch.from_numpy(pos), torch.from_numpy(pairs), e, s, **kw)
        got = [g.item() for g in torch.autograd.grad(en.sum(), [e, s])]
    elif fw == "paddle":
        import paddle

        cpu = paddle.CPUPlace()
        e, s = paddle.to_tensor(eps, dtype="float32", place=cpu), paddle.to_tensor(sig, dtype="float32", place=cpu)
        e.stop_gradient = s.stop_gradient = False
        en, _ = case.op(paddle.to_tensor(pos, place=cpu), paddle.to_tensor(pairs, place=cpu), e, s, **kw)
        en.sum().backward()
        got = [float(e.grad), float(s.grad)]
    else:
        import jax

        def f(e, s):
            return case.op(
                jax.numpy.asarray(pos, device=jax_device("cpu")),
                jax.numpy.asarray(pairs, device=jax_device("cpu")),
                e,
                s,
                **kw,
            )[0].sum()

        got = [float(g) for g in jax.jit(jax.grad(f, argnums=(0, 1)))(np.float32(eps), np.float32(sig))]
    np.testing.assert_allclose(got, fd, rtol=2e-3, atol=2e-3)


def test_jax_vmap_over_configurations_with_a_shared_pair_list():
    """jax.vmap over a batch of configurations (the pair list unbatched), values and grad of vmap."""
    jax = pytest.importorskip("jax")
    import functools

    case = uk.user_case("lennard_jones")
    batch = [case.make(np.random.default_rng(30 + b), np.float32) for b in range(3)]
    pairs = jax.numpy.asarray(batch[0][1], device=jax_device("cpu"))
    pos = jax.numpy.asarray(np.stack([b[0] for b in batch]), device=jax_device("cpu"))
    call = functools.partial(case.op, **case.call_kwargs)
    energy, forces = jax.jit(jax.vmap(lambda p: call(p, pairs, 0.8, 1.0)))(pos)
    for b, args in enumerate(batch):
        e_ref, f_ref = case.reference(*args)
        np.testing.assert_allclose(np.asarray(energy[b]), e_ref, rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(np.asarray(forces[b]), f_ref, rtol=2e-5, atol=2e-5)
    g = jax.jit(jax.grad(lambda p: jax.vmap(lambda q: call(q, pairs, 0.8, 1.0)[0])(p).sum()))(pos)
    for b in range(3):
        np.testing.assert_allclose(np.asarray(g[b]), -np.asarray(forces[b]), rtol=1e-4, atol=1e-4)


def _any_case(case_id):
    return uk.user_case(case_id) if case_id in uk.USER_CASE_IDS else catalogue.case(case_id)


COMPILE_CASES = ["lennard_jones", "lj_add_forces_in_out", "coulomb", "neighbors", "inverse_cells", "segment_sum_vec3"]
# the catalogue's in-out kernels too: gradients through in-out arrays under torch.compile
COMPILE_CASES += ["in_out", "in_out_first", "outputs_middle"]


@pytest.mark.parametrize("case_id", COMPILE_CASES)
def test_torch_compile_matches_eager(case_id):
    """torch.compile(fullgraph=True): values, gradients and the in-place update of in-out tensors as eager.

    In-out tensors are non-leaf tensors (a leaf that requires grad cannot be updated in place) whose
    gradient reaches their leaf; gradients are taken w.r.t. the leaves, as a training loop does.
    """
    torch = pytest.importorskip("torch")
    case = _any_case(case_id)
    args = case.make(np.random.default_rng(4), np.float32)
    grad = case.differentiable

    def run(*targs):
        out = _tuple(case.op(*targs, **case.call_kwargs))
        return sum((o.to(torch.float32) * (j + 1.0)).sum() for j, o in enumerate(out))

    def make():
        leaves = [_to("torch", a, grad=grad and isinstance(a, np.ndarray) and a.dtype.kind == "f") for a in args]
        return leaves, [t * 1.0 if k in case.in_out else t for k, t in enumerate(leaves)]

    eager_leaves, eager = make()
    ref = run(*eager)
    leaves = [t for t in eager_leaves if isinstance(t, torch.Tensor) and t.requires_grad]
    ref_grads = torch.autograd.grad(ref, leaves) if leaves else ()
    torch._dynamo.reset()
    compiled = torch.compile(run, backend="aot_eager", fullgraph=True)
    cleaves, cargs = make()
    got = compiled(*cargs)
    cleaves = [t for t in cleaves if isinstance(t, torch.Tensor) and t.requires_grad]
    got_grads = torch.autograd.grad(got, cleaves) if cleaves else ()
    torch.testing.assert_close(got, ref)
    assert len(got_grads) == len(ref_grads) == (len(leaves) if grad else 0)
    for g, r in zip(got_grads, ref_grads):
        torch.testing.assert_close(g, r)
    for k in case.in_out:  # the caller's in-out tensor was updated in place, as in eager
        torch.testing.assert_close(cargs[k], eager[k])
    torch._dynamo.reset()


# ---- hostile inputs as users produce them --------------------------------------------------------
@pytest.mark.parametrize("fw", ["torch", "jax", "paddle", "numpy"])
def test_int64_pair_list_is_refused_naming_the_parameter(fw):
    """Index arrays default to int64 in torch/NumPy (and JAX with x64): an int32 parameter refuses them, never casts."""
    pytest.importorskip(fw)
    case = uk.user_case("lennard_jones")
    pos, pairs, eps, sig = case.make(np.random.default_rng(5), np.float32)
    with (
        _x64("jax", np.float64 if fw == "jax" else np.float32),
        pytest.raises(interop.ArgumentError, match=r"op 'lj_energy_forces', parameter 'pairs'.*int32.*int64"),
    ):
        case.op(_to(fw, pos), _to(fw, pairs.astype(np.int64)), eps, sig, **case.call_kwargs)


@pytest.mark.parametrize("fw", ["numpy", "torch", "paddle"])
def test_positions_as_a_strided_view_are_read_in_place(fw):
    """xyz columns of an (n, 4) xyzq array are a vec3 array with an outer stride of 16 bytes: read without a copy."""
    pytest.importorskip(fw)
    case = uk.user_case("spherical_harmonics")
    (r,) = case.make(np.random.default_rng(6), np.float32)
    xyzq = np.concatenate([r, np.ones((len(r), 1), np.float32)], axis=1)
    big = _to(fw, xyzq)
    view = big[:, :3]
    (out,) = _tuple(case.op(view, **case.call_kwargs))
    np.testing.assert_allclose(_np(out), case.reference(r)[0], **_tol(np.float32))


# ---- second derivatives and kernels without adjoint (Warp's PyTorch guide pattern) --------------
@pytest.mark.parametrize("fw", ["torch", "jax", "jax.jit", "paddle"])
def test_second_derivative_through_a_hand_written_backward(fw):
    """d/dx sum(grad) of x^3 with a hand-written (differentiable) backward kernel: 6x, in every framework."""
    pytest.importorskip(fw.split(".")[0])
    op = uk.cube_op()
    x = np.array([1.0, -2.0, 0.5], np.float32)
    if fw == "torch":
        import torch

        t = torch.from_numpy(x).requires_grad_(True)
        (g,) = torch.autograd.grad(op(t).sum(), [t], create_graph=True)
        (h,) = torch.autograd.grad(g.sum(), [t])
    elif fw == "paddle":
        import paddle

        t = paddle.to_tensor(x, place=paddle.CPUPlace())
        t.stop_gradient = False
        (g,) = paddle.grad(op(t).sum(), [t], create_graph=True)
        g.sum().backward()  # paddle.grad(g.sum(), [t]) meets Paddle's PyLayer rule, see the report
        h = t.grad
    else:
        import jax

        f = jax.grad(lambda z: jax.grad(lambda y: op(y).sum())(z).sum())
        h = (jax.jit(f) if fw == "jax.jit" else f)(jax.numpy.asarray(x, device=jax_device("cpu")))
    np.testing.assert_allclose(_np(h), 6.0 * x, rtol=1e-6)


def test_jax_second_derivative_without_a_hand_written_backward():
    """grad of grad through Warp's adjoint: the second-order launch (Warp's adjoint of the generated
    tangent kernel) gives d/dx sum(3 x^2) = 6 x, eager and under jit."""
    jax = pytest.importorskip("jax")
    op = interop.op(uk.cube)
    x = np.array([1.0, -2.0, 0.5], np.float32)
    f = jax.grad(lambda z: jax.grad(lambda y: op(y).sum())(z).sum())
    for g in (f, jax.jit(f)):
        np.testing.assert_allclose(np.asarray(g(jax.numpy.asarray(x, device=jax_device("cpu")))), 6.0 * x, rtol=1e-6)


def test_jax_gradient_of_a_kernel_without_adjoint_raises_naming_the_op():
    """enable_backward=False and no backward=: asking JAX for the gradient raises (it was a silent zero)."""
    jax = pytest.importorskip("jax")
    op = interop.op(uk.sum_squares_forward)
    b = jax.numpy.ones(3, device=jax_device("cpu"))
    with pytest.raises(
        NotImplementedError,
        match=r"op 'sum_squares_forward': no gradient: the kernel was compiled with enable_backward=False",
    ):
        jax.jit(jax.grad(lambda a: op(a, b).sum()))(jax.numpy.ones(3, device=jax_device("cpu")))
    # integer outputs of such a kernel (a neighbour list) carry no gradient: differentiating around them works
    nb = interop.op(uk.neighbors_no_adjoint, outputs=["nbr", "num"], output_dims={"nbr": (uk.NATOMS, uk.MAX_NBR)})
    pos = jax.numpy.asarray(
        uk.user_case("neighbors").make(np.random.default_rng(0), np.float32)[0], device=jax_device("cpu")
    )

    def f(p):
        _, num = nb(p, uk.CUTOFF, uk.MAX_NBR)
        return jax.numpy.sum(p * num[:, None].astype(p.dtype))

    _, num = nb(pos, uk.CUTOFF, uk.MAX_NBR)
    np.testing.assert_array_equal(np.asarray(jax.jit(jax.grad(f))(pos)), np.repeat(np.asarray(num)[:, None], 3, 1))


def test_paddle_grad_listing_every_input_that_requires_grad():
    """paddle.grad(loss, [pos, q]) of the Coulomb energy: both gradients against finite differences."""
    paddle = pytest.importorskip("paddle")
    case = uk.user_case("coulomb")
    args = case.make(np.random.default_rng(7), np.float32)
    pos, q = (paddle.to_tensor(a, place=paddle.CPUPlace()) for a in args[:2])
    pos.stop_gradient = q.stop_gradient = False
    energy, _ = case.op(pos, q, paddle.to_tensor(args[2], place=paddle.CPUPlace()), args[3], **case.call_kwargs)
    grads = paddle.grad(energy.sum(), [pos, q])
    weights = [np.ones(uk.NATOMS), np.zeros((uk.NATOMS, 3))]
    fd = fd_grad(case, args, weights)
    for g, k in zip(grads, (0, 1)):
        np.testing.assert_allclose(g.numpy(), fd[k], rtol=2e-3, atol=2e-3)


_FRESH_COMPILE = """
import sys
sys.path.insert(0, {tests!r})
import numpy as np
import torch
from torch._dynamo.testing import CompileCounterWithBackend
import user_kernels as uk

lj = uk.user_case("lennard_jones")


def energy(pos, pairs):
    dims = {{"energy": 1, "forces": pos.shape[0]}}
    e, f = lj.op(pos, pairs, 0.8, 1.0, launch_dims=pairs.shape[0], output_dims=dims)
    return e.sum(), f


cnt = CompileCounterWithBackend("aot_eager")
compiled = torch.compile(energy, backend=cnt, fullgraph=True, dynamic=True)
for n in (5, 7, 9):
    pos = uk._lattice(np.random.default_rng(n), np.float32, n)
    pairs = uk.all_pairs(n)
    tp = torch.from_numpy(pos).requires_grad_(True)
    e, f = compiled(tp, torch.from_numpy(pairs))
    (g,) = torch.autograd.grad(e, [tp])
    forces = uk.ref_lj(pos, pairs, 0.8, 1.0)[1]
    np.testing.assert_allclose(f.detach().numpy(), forces, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(g.numpy(), -forces, rtol=1e-4, atol=1e-4)
print("frames", cnt.frame_count)
"""


def test_torch_compile_dynamic_first_call_of_the_process_compiles_once():
    """The first interop call of a process made inside torch.compile(dynamic=True), over systems of 5, 7
    and 9 atoms (pair counts vary): one compilation (the core's type cache once failed a guard)."""
    pytest.importorskip("torch")
    import os
    import subprocess
    import sys

    tests = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(tests), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run(
        [sys.executable, "-c", _FRESH_COMPILE.format(tests=tests)], capture_output=True, text=True, env=env, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().splitlines()[-1] == "frames 1"
