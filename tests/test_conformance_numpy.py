"""The shared conformance catalogue through NumPy arrays and Warp arrays: values against the NumPy reference."""

import numpy as np
import pytest
import warp as wp
from catalogue import BF16_VALUE_TOL, CASES, Case, is_bf16, reference_of

import interop

PARAMS = [pytest.param(c, np.dtype(dt), id=f"{c.id}-{np.dtype(dt).name}") for c in CASES for dt in c.dtypes]


def tol(dt):
    if is_bf16(dt):  # NumPy arrays of ml_dtypes.bfloat16, Warp arrays of wp.bfloat16
        return BF16_VALUE_TOL
    return dict(rtol=1e-5, atol=1e-6) if dt == np.float32 else dict(rtol=1e-12, atol=1e-13)


def inputs(case: Case, dt):
    return case.make(np.random.default_rng(123), dt.type)


def check(case, dt, got, args):
    expected = reference_of(case, args)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        g = g.numpy() if isinstance(g, wp.array) else g
        assert g.shape == e.shape, (g.shape, e.shape)
        assert g.dtype == dt
        np.testing.assert_allclose(g.astype(np.float64), e, **tol(dt))


@pytest.mark.parametrize("case, dt", PARAMS)
def test_numpy(case, dt):
    args = inputs(case, dt)
    call = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    got = case.op(*call, **case.call_kwargs)
    check(case, dt, got, args)
    got_t = got if isinstance(got, tuple) else (got,)
    for k in case.in_out:  # in-out arrays come back as the very object passed
        assert any(g is call[k] for g in got_t)
    # a second call with fresh inputs goes through the cached fast path: same answers
    args2 = case.make(np.random.default_rng(7), dt.type)
    call2 = [a.copy() if isinstance(a, np.ndarray) else a for a in args2]
    check(case, dt, case.op(*call2, **case.call_kwargs), args2)


@pytest.mark.parametrize("typed", [False, True], ids=["flat", "typed"])
@pytest.mark.parametrize("case, dt", PARAMS)
def test_warp(case, dt, typed):
    """Warp arrays in, Warp arrays out. ``typed``: vec/mat arguments as arrays of wp.vec3/mat33 (else float (n, 3))."""
    args = inputs(case, dt)
    params = case.op.description.call_params
    call = []
    for p, a in zip(params, args):
        if not isinstance(a, np.ndarray):
            call.append(a)
            continue
        w = wp.array(a.copy(), device="cpu")
        if typed and p.inner:
            w = interop.convert(w, to="warp", dtype=p.dtype)
            assert w.dtype == p.dtype
        call.append(w)
    got = case.op(*call, **case.call_kwargs)
    got_t = got if isinstance(got, tuple) else (got,)
    assert all(isinstance(g, wp.array) for g in got_t)
    for p, g in zip(case.op.description.returned_params, got_t):  # returned in kernel order
        if p.inner and p.role == "output":
            assert g.dtype == p.dtype  # outputs keep Warp's element types
    check(case, dt, got, args)
    for k in case.in_out:
        assert any(g is call[k] for g in got_t)


def test_scalar_by_reference_numpy_0d():
    """A 0-d NumPy array for a scalar parameter is read from memory (the by-reference kernel variant)."""
    case = next(c for c in CASES if c.id == "scalar")
    x, y, s = case.make(np.random.default_rng(3), np.float32)
    s0 = np.array(s, np.float32)
    got = case.op(x, y, s0)
    np.testing.assert_allclose(got, case.reference(x, y, s)[0], rtol=1e-6)
    s0[...] = -2.0  # the value is read at each call
    np.testing.assert_allclose(case.op(x, y, s0), case.reference(x, y, -2.0)[0], rtol=1e-6)


def test_every_catalogue_kind_is_covered():
    ids = {c.id for c in CASES}
    assert {"scalar", "vec3", "mat33", "multi_output", "in_out", "generic", "function"} <= ids
    # kernels as others write them (issue 8): subscript annotations, overload tables, outputs and
    # in-out anywhere in the signature, tile kernels with block_dim (in the description and per call)
    assert {"subscript", "overload_float32", "overload_float64", "outputs_middle", "in_out_first"} <= ids
    assert {"tile", "tile_block_dim_per_call"} <= ids
