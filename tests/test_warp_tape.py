"""Warp arrays in, Warp arrays out: a call inside ``wp.Tape`` is recorded, and ``tape.backward``
gives the gradients of the catalogue (checked against finite differences of the NumPy reference)."""

import numpy as np
import pytest
import warp as wp
from catalogue import BF16_GRAD_TOL, BF16_VALUE_TOL, CASES, fd_grad, is_bf16, loss_weights, reference_of


# a hand-written backward= is not run by wp.Tape (documented; tests/test_no_backward.py checks the error)
@pytest.mark.parametrize(
    "case", [c for c in CASES if c.differentiable and c.op.description.backward is None], ids=lambda c: c.id
)
def test_tape_gradients_match_finite_differences(case):
    rng = np.random.default_rng(3)
    dt = np.float32 if np.float32 in case.dtypes else case.dtypes[0]  # the bfloat16 case: bfloat16
    args = case.make(rng, dt)
    # keep inputs away from 0 so a missing gradient cannot pass by accident
    args = tuple(a + np.asarray(0.3, a.dtype) if isinstance(a, np.ndarray) else a for a in args)
    wargs = tuple(
        wp.array(a, dtype=wp.dtype_from_numpy(a.dtype), requires_grad=True, device="cpu")
        if isinstance(a, np.ndarray)
        else a
        for a in args
    )
    tape = wp.Tape()
    with tape:
        outs = case.op(*wargs, **case.call_kwargs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    ref = reference_of(case, args)
    weights = loss_weights(case, ref)
    for o, r in zip(outs, ref):
        tol = BF16_VALUE_TOL if is_bf16(dt) else dict(rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(o.numpy().reshape(r.shape).astype(np.float64), r, **tol)
    tape.backward(
        grads={
            o: wp.array(w.reshape(o.numpy().shape).astype(dt), dtype=o.dtype, device="cpu")
            for o, w in zip(outs, weights)
        }
    )
    expected = fd_grad(case, args, weights)
    for k, (a, g) in enumerate(zip(wargs, expected)):
        if g is None or k in case.in_out:
            continue
        got = a.grad.numpy().reshape(g.shape).astype(np.float64)
        assert np.abs(got).max() > 0
        np.testing.assert_allclose(got, g, **(BF16_GRAD_TOL if is_bf16(dt) else dict(rtol=2e-3, atol=2e-3)))


def test_tape_not_active_records_nothing_and_outputs_have_no_grad():
    c = next(c for c in CASES if c.id == "scalar")
    x = wp.array(np.ones(3, np.float32), requires_grad=True, device="cpu")
    out = c.op(x, x, 1.0)
    assert not out.requires_grad
