"""``op.jvp`` in every framework: the generated tangent kernel's results and tangents against the
catalogue's NumPy references (values) and central finite differences of them (tangents)."""

from __future__ import annotations

import contextlib
import importlib.util

import numpy as np
import pytest
from catalogue import CASES, to_fw, to_np

import interop

FRAMEWORKS = [
    f
    for f in ("numpy", "warp", "torch", "jax", "paddle", "cupy")
    if f in ("numpy", "warp") or importlib.util.find_spec(f)
]
KERNEL_CASES = [
    c
    for c in CASES
    if c.differentiable
    and c.op.description.kind == "kernel"
    and not c.op.description.tiles
    and not c.op.description.entries
    and (np.float64 in c.dtypes or np.float32 in c.dtypes)
]


def _fd(case, args, diff, tangents, eps=1e-6):
    """Central differences of the NumPy reference along the tangents."""

    def at(sign):
        moved = list(args)
        for i, t in zip(diff, tangents):
            moved[i] = args[i] + sign * eps * t
        return case.reference(*[a.copy() if isinstance(a, np.ndarray) else a for a in moved])

    plus, minus = at(1.0), at(-1.0)
    return [(p - m) / (2 * eps) for p, m in zip(plus, minus)]


@pytest.mark.parametrize("case", KERNEL_CASES, ids=[c.id for c in KERNEL_CASES])
@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_op_jvp_matches_finite_differences(fw, case, device):
    if fw == "cupy" and device == "cpu":
        pytest.skip("CuPy arrays live on the GPU")
    with contextlib.ExitStack() as stack:
        if fw == "jax":
            import jax

            stack.enter_context(jax.enable_x64(True))  # float64 arrays stay float64 (for this test only)
        _check_op_jvp(fw, case, device)


def _check_op_jvp(fw, case, device):
    rng = np.random.default_rng(7)
    dt = np.float64 if np.float64 in case.dtypes else np.float32
    args = list(case.make(rng, dt))
    params = case.op.description.call_params
    diff = [i for i, (a, p) in enumerate(zip(args, params)) if p.differentiable]
    tangents = [
        rng.uniform(-1, 1, size=np.shape(args[i])) if isinstance(args[i], np.ndarray) else float(rng.uniform(-1, 1))
        for i in diff
    ]
    want_values = case.reference(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
    # the tangents (and the reference's finite differences) in float64 whatever the kernel's dtype
    wide = [a.astype(np.float64) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a for a in args]
    want = _fd(case, wide, diff, [np.asarray(t) for t in tangents])
    tangents = [t.astype(dt) if isinstance(t, np.ndarray) else t for t in tangents]
    tol = dict(rtol=1e-6, atol=1e-7) if dt == np.float64 else dict(rtol=2e-3, atol=2e-4)
    call = [to_fw(fw, a, device=device) if isinstance(a, np.ndarray) else a for a in args]
    ts = [to_fw(fw, np.asarray(t), device=device) if isinstance(t, np.ndarray) else t for t in tangents]
    values, touts = case.op.jvp(*call, tangents=ts, **case.call_kwargs)
    values = values if isinstance(values, tuple) else (values,)
    touts = touts if isinstance(touts, tuple) else (touts,)
    for got, ref in zip(values, want_values):
        np.testing.assert_allclose(
            to_np(got).reshape(np.shape(ref)), ref, rtol=1e-10 if dt == np.float64 else 1e-5, atol=1e-6
        )
    for got, ref in zip(touts, want):
        np.testing.assert_allclose(to_np(got).reshape(np.shape(ref)), ref, **tol)


def test_op_jvp_argument_errors():
    from catalogue import cube64

    op = interop.op(cube64)
    x = np.ones(3)
    with pytest.raises(
        TypeError,
        match=r"op 'cube64', jvp: expected 1 tangent\(s\), one per differentiable call parameter \['x'\], got 2",
    ):
        op.jvp(x, tangents=[x, x])
    with pytest.raises(TypeError, match=r"op 'cube64', jvp: tangents must be a list"):
        op.jvp(x, tangents=x)
    _, t = op.jvp(x, tangents=[None])  # a zero tangent
    np.testing.assert_array_equal(t, np.zeros(3))
