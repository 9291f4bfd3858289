"""The core's adjoint path, driven directly (no framework autograd): ``op.plan(specs).runner.adjoint``
with NumPy buffers, for every differentiable catalogue case, against central finite differences.

The loss is ``sum_k sum(w_k * out_k)`` over the returned arrays (in-out and outputs), so the upstream
gradient of each returned array is ``w_k`` and the gradients of the inputs are compared with
``catalogue.fd_grad``. Inputs are asymmetric (and weights are not uniform) so a zero, a sign error or a
transposition fails.
"""

import numpy as np
import pytest
import warp as wp
from catalogue import BF16_GRAD_TOL, CASES, Case, fd_grad, is_bf16, loss_weights, reference_of

import interop
from interop._plan import ArraySpec, ScalarSpec


@wp.kernel
def _scale(a: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a[i] * s


def function_with_scalar(a: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
    wp.launch(_scale, dim=a.shape, inputs=[a, s], outputs=[out], device=a.device)


@wp.kernel
def _sq_acc(x: wp.array(dtype=float), acc: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(acc, 0, x[i] * x[i])


def function_in_out(x: wp.array(dtype=float), acc: wp.array(dtype=float)):
    wp.launch(_sq_acc, dim=x.shape, inputs=[x], outputs=[acc], device=x.device)


def _spec(a):
    if isinstance(a, np.ndarray):
        return ArraySpec(a.shape, a.dtype)
    if isinstance(a, bool):
        return ScalarSpec("py", bool)
    if isinstance(a, int):
        return ScalarSpec("py", int)
    return ScalarSpec("py", float)


def _ref(a: np.ndarray):
    return (a.ctypes.data, None)


def run_adjoint(op: interop.Op, args: tuple, weights: list, dt) -> tuple[list, list]:
    """Forward then adjoint through the runner. Returns (returned arrays after forward, gradient buffers per call arg)."""
    desc = op.description
    call_params = desc.call_params
    plan = op.plan([_spec(a) for a in args])
    n = len(desc.params)
    values: list = [None] * n
    adj: list = [None] * n
    keep = []
    # call arguments: arrays and 0-d arrays (scalars by reference) as pointers; in-out copied (updated in place)
    call = []
    for p, a in zip(call_params, args):
        if isinstance(a, np.ndarray):
            a = a.copy()  # C-contiguous (np.ascontiguousarray would make a 0-d array 1-d)
            values[p.index] = _ref(a)
        else:
            values[p.index] = a
        call.append(a)
    outs = {}
    for p, spec in zip(desc.returned_params, plan.out_specs):
        if p.role == "output":
            o = np.zeros(spec.shape, spec.dtype)
            values[p.index] = _ref(o)
            outs[p.name] = o
    returned_before = {p.name: call[call_params.index(p)].copy() for p in desc.returned_params if p.role == "in_out"}
    plan.runner.forward("cpu", values)
    returned = [outs[p.name] if p.role == "output" else call[call_params.index(p)].copy() for p in desc.returned_params]
    # the adjoint replays the forward; in-out arrays must hold their values from before the call
    for p in desc.returned_params:
        if p.role == "in_out":
            call[call_params.index(p)][...] = returned_before[p.name]
    grads = []
    for p, a in zip(call_params, call):
        if isinstance(a, np.ndarray) and p.role == "input":
            g = np.zeros_like(a)
            adj[p.index] = _ref(g)
            keep.append(g)
            grads.append(g)
        else:
            grads.append(None)
    for p, w in zip(desc.returned_params, weights):
        g = np.ascontiguousarray(w.astype(dt))
        keep.append(g)
        adj[p.index] = _ref(g)
        if p.role == "in_out":
            grads[call_params.index(p)] = g  # d loss / d acc_in = w (acc_out = acc_in + ...)
    plan.runner.adjoint("cpu", values, adj)
    return returned, grads


def tol(dt):
    if is_bf16(dt):
        return BF16_GRAD_TOL
    return dict(rtol=2e-3, atol=2e-4) if dt == np.float32 else dict(rtol=1e-6, atol=1e-8)


DIFF = [
    pytest.param(c, np.dtype(dt), id=f"{c.id}-{np.dtype(dt).name}")
    for c in CASES
    if c.differentiable
    for dt in c.dtypes
]


def asymmetric(case: Case, dt, seed=11):
    args = case.make(np.random.default_rng(seed), dt.type)
    # shift float arrays off zero so that no gradient can vanish by symmetry
    return tuple(
        (a + np.asarray(0.3, a.dtype)) if isinstance(a, np.ndarray) and (a.dtype.kind == "f" or is_bf16(a.dtype)) else a
        for a in args
    )


@pytest.mark.parametrize("case, dt", DIFF)
def test_adjoint_matches_finite_differences(case, dt):
    args = asymmetric(case, dt)
    expected_out = reference_of(case, args)
    weights = loss_weights(case, expected_out)
    returned, grads = run_adjoint(case.op, args, weights, dt.type)
    for r, e in zip(returned, expected_out):
        np.testing.assert_allclose(r.astype(np.float64), e, **tol(dt))
    fd = fd_grad(case, args, weights)
    checked = 0
    for p, g, f in zip(case.op.description.call_params, grads, fd):
        if f is None:
            continue
        assert g is not None, f"no gradient buffer for {p.name}"
        assert np.abs(f).max() > 1e-3, "degenerate test input"
        np.testing.assert_allclose(g.astype(np.float64), f, **tol(dt), err_msg=f"{case.id}: gradient of {p.name}")
        checked += 1
    assert checked >= 1


SCALAR_CASES = [
    pytest.param(c, np.dtype(dt), id=f"{c.id}-{np.dtype(dt).name}")
    for c in CASES
    if c.differentiable
    and c.op.description.kind == "kernel"
    and any(not p.is_array for p in c.op.description.call_params)
    for dt in c.dtypes
]


@pytest.mark.parametrize("case, dt", SCALAR_CASES)
def test_scalar_by_reference_gets_a_real_gradient(case, dt):
    """A scalar passed as a 0-d array runs the by-reference kernel variant; its gradient is summed over threads."""
    args = asymmetric(case, dt)
    params = case.op.description.call_params
    ref_args = tuple(np.asarray(a, dt) if not p.is_array and isinstance(a, float) else a for p, a in zip(params, args))
    assert any(isinstance(a, np.ndarray) and a.ndim == 0 for a in ref_args)
    expected_out = reference_of(case, ref_args)
    weights = loss_weights(case, expected_out)
    plan = case.op.plan([_spec(a) for a in ref_args])
    assert plan.scalar_refs, "the 0-d array should be passed by reference"
    returned, grads = run_adjoint(case.op, ref_args, weights, dt.type)
    for r, e in zip(returned, expected_out):
        np.testing.assert_allclose(r.astype(np.float64), e, **tol(dt))
    fd = fd_grad(case, ref_args, weights)
    for p, g, f in zip(params, grads, fd):
        if p.is_array or f is None:
            continue
        assert g.shape == () and abs(float(f)) > 1e-2, "the scalar gradient must not be trivially zero"
        np.testing.assert_allclose(
            g.astype(np.float64), f, **tol(dt), err_msg=f"{case.id}: gradient of scalar {p.name}"
        )
    # and the array gradients are unchanged by passing the scalar by reference
    for p, g, f in zip(params, grads, fd):
        if p.is_array and f is not None:
            np.testing.assert_allclose(g.astype(np.float64), f, **tol(dt))


def test_scalar_by_reference_forward_through_op_call():
    """The by-reference variant is also what an eager NumPy call with a 0-d array runs: same values."""
    case = next(c for c in CASES if c.id == "scalar")
    x, y, s = asymmetric(case, np.dtype(np.float32))
    by_value = case.op(x, y, s)
    by_ref = case.op(x, y, np.asarray(s, np.float32))
    np.testing.assert_allclose(by_ref, by_value, rtol=1e-6)


def test_scalar_by_reference_variant_keeps_the_kernels_module_options():
    """The by-reference variant lives in a module of its own; the kernel's module options (here
    fast_math, max_unroll, block_dim) hold for it too, as they do for the kernel."""
    options = {"fast_math": True, "max_unroll": 3, "block_dim": 64}
    k = wp.kernel(module="unique", module_options=options)(_scale.func)
    op = interop.op(k)
    a = np.arange(1.0, 5.0, dtype=np.float32)
    np.testing.assert_allclose(op(a, np.asarray(2.0, np.float32)), 2 * a)  # the variant ran
    plan = op.plan([_spec(a), _spec(np.asarray(2.0, np.float32))])
    from interop._scalar_ref import scalar_ref_kernel

    variant = scalar_ref_kernel(plan.kernel, plan.scalar_refs)
    assert variant is not k and variant.module is not k.module
    got = {name: variant.module.options[name] for name in options}
    assert got == {name: k.module.options[name] for name in options}, got
    assert got == options


def test_adjoint_accumulates_into_input_buffers():
    """Gradient buffers of inputs are accumulated into (the caller zero-fills them): twice gives double."""
    case = next(c for c in CASES if c.id == "vec3")
    args = asymmetric(case, np.dtype(np.float32))
    out = case.reference(*args)
    weights = loss_weights(case, out)
    plan = case.op.plan([_spec(a) for a in args])
    a, b = (np.ascontiguousarray(v) for v in args)
    o = np.zeros(plan.out_specs[0].shape, np.float32)
    ga, gb = np.zeros_like(a), np.zeros_like(b)
    w = weights[0].astype(np.float32)
    values = [_ref(a), _ref(b), _ref(o)]
    adj = [_ref(ga), _ref(gb), _ref(w)]
    plan.runner.adjoint("cpu", values, adj)
    once = ga.copy()
    plan.runner.adjoint("cpu", values, adj)
    np.testing.assert_allclose(ga, 2 * once, rtol=1e-6)
    np.testing.assert_allclose(once, fd_grad(case, args, weights)[0], **tol(np.float32))


def test_function_op_tape_path():
    """A Python-function op's adjoint runs its launches under wp.Tape (the catalogue's two-kernel function)."""
    case = next(c for c in CASES if c.id == "function")
    assert case.op.description.kind == "function"
    args = asymmetric(case, np.dtype(np.float32))
    out = case.reference(*args)
    weights = loss_weights(case, out)
    returned, grads = run_adjoint(case.op, args, weights, np.float32)
    np.testing.assert_allclose(returned[0], out[0], rtol=1e-5)
    fd = fd_grad(case, args, weights)
    np.testing.assert_allclose(grads[0], fd[0], **tol(np.float32))  # 6 a w
    np.testing.assert_allclose(grads[1], fd[1], **tol(np.float32))  # w


def test_function_op_with_python_scalar():
    op = interop.op(function_with_scalar)
    a = np.linspace(0.2, 1.4, 6).astype(np.float32)
    w = np.linspace(0.5, 1.5, 6)
    returned, grads = run_adjoint(op, (a, 2.5), [w], np.float32)
    np.testing.assert_allclose(returned[0], a * 2.5, rtol=1e-6)
    np.testing.assert_allclose(grads[0], 2.5 * w, rtol=1e-6)


def test_function_op_in_out_tape_path():
    op = interop.op(function_in_out, in_out=["acc"])
    x = np.linspace(-0.7, 1.1, 5).astype(np.float32)
    acc = np.array([0.25], np.float32)
    w = np.array([1.3])
    returned, grads = run_adjoint(op, (x, acc), [w], np.float32)
    np.testing.assert_allclose(returned[0], acc + np.sum(x * x), rtol=1e-6)
    np.testing.assert_allclose(grads[0], 2 * x * 1.3, rtol=1e-5)


def test_function_op_scalar_by_reference_gradient_is_refused():
    op = interop.op(function_with_scalar)
    a = np.ones(3, np.float32)
    s = np.asarray(2.0, np.float32)
    with pytest.raises(
        NotImplementedError,
        match=r"gradients with respect to scalar parameters \(s\) of a Python-function op are not supported",
    ):
        run_adjoint(op, (a, s), [np.ones(3)], np.float32)


def test_plan_differentiability_per_call():
    """Generic parameters are differentiable only when resolved to a float type."""
    case = next(c for c in CASES if c.id == "generic")
    fplan = case.op.plan([ArraySpec((3,), np.dtype(np.float64)), ScalarSpec("py", float)])
    iplan = case.op.plan([ArraySpec((3,), np.dtype(np.int32)), ScalarSpec("py", int)])
    assert fplan.differentiable[0] and not iplan.differentiable[0]


def test_runner_restores_contiguous_strides_after_a_strided_call():
    """The cached launch record is shared by calls with one plan: ``None`` strides after a strided
    call must mean contiguous again, not the strides left from the previous call."""
    op = next(c for c in CASES if c.id == "scalar").op
    base = np.arange(8, dtype=np.float32)
    y = np.zeros(4, np.float32)
    plan = op.plan(
        [ArraySpec((4,), np.dtype(np.float32)), ArraySpec((4,), np.dtype(np.float32)), ScalarSpec("py", float)]
    )
    for xs, strides in ((base[::2], (8,)), (base[4:].copy(), None)):
        out = np.zeros(4, np.float32)
        values = [(xs.ctypes.data, strides), (y.ctypes.data, None), 1.0, (out.ctypes.data, None)]
        plan.runner.forward("cpu", values)
        np.testing.assert_allclose(out, np.sin(xs), rtol=1e-6)
