"""The conformance catalogue through Paddle: values against the NumPy references, gradients
(``loss.backward()`` through the op's PyLayer) against finite differences of those references."""

import numpy as np
import pytest

paddle = pytest.importorskip("paddle", reason="paddlepaddle is not installed")

from catalogue import (  # noqa: E402
    BF16_GRAD_TOL,
    BF16_VALUE_TOL,
    CASE_IDS,
    case,
    fd_grad,
    is_bf16,
    is_float_dtype,
    loss_weights,
    paddle_to_numpy,
    reference_of,
    to_paddle,
)

from interop._frameworks import data_ptr  # noqa: E402


@pytest.mark.parametrize("cid", CASE_IDS)
def test_values(cid, device):
    from _cuda import require_cuda

    require_cuda("paddle", device)
    c = case(cid)
    for dt in c.dtypes:
        args = c.make(np.random.default_rng(0), dt)
        ref = reference_of(c, args)
        pargs = [to_paddle(a, device=device) if isinstance(a, np.ndarray) else a for a in args]
        ptrs = [data_ptr(a) if isinstance(a, paddle.Tensor) else None for a in pargs]
        out = c.op(*pargs, **c.call_kwargs)
        out = out if isinstance(out, tuple) else (out,)
        assert all(isinstance(o, paddle.Tensor) for o in out)
        for o, r in zip(out, ref):
            assert o.dtype == to_paddle(np.zeros(1, dt)).dtype
            np.testing.assert_allclose(
                paddle_to_numpy(o), r, **(BF16_VALUE_TOL if is_bf16(dt) else dict(rtol=1e-5, atol=1e-6))
            )
        for k in c.in_out:  # updated in place, returned as the same tensor
            assert any(o is pargs[k] for o in out)
            assert data_ptr(pargs[k]) == ptrs[k]


def _grad_params():
    out = []
    for cid in CASE_IDS:
        c = case(cid)
        dts = [np.float64 if np.float64 in c.dtypes else c.dtypes[0]] + [d for d in c.dtypes if is_bf16(d)]
        out += [pytest.param(cid, d, id=f"{cid}-{np.dtype(d).name}") for d in dict.fromkeys(dts)]
    return out


@pytest.mark.parametrize("cid, dt", _grad_params())
def test_gradients(cid, dt):
    c = case(cid)
    args = c.make(np.random.default_rng(1), dt)
    ref = reference_of(c, args)
    weights = loss_weights(c, ref)
    leaves, pargs = [], []
    for k, a in enumerate(args):
        if not isinstance(a, np.ndarray):
            leaves.append(None)
            pargs.append(a)
            continue
        leaf = to_paddle(a, stop_gradient=not is_float_dtype(a.dtype))
        leaves.append(leaf)
        # an in-out tensor is updated in place, so it cannot be a leaf that needs a gradient
        pargs.append(leaf * 1.0 if k in c.in_out else leaf)
    out = c.op(*pargs, **c.call_kwargs)
    out = out if isinstance(out, tuple) else (out,)
    assert all(not o.stop_gradient for o in out)
    loss = sum((o * to_paddle(w.astype(dt))).sum() for o, w in zip(out, weights))
    assert loss.dtype == out[0].dtype
    loss.backward()
    expected = fd_grad(c, args, weights)
    tol = 1e-7 if dt == np.float64 else 2e-4
    tol = BF16_GRAD_TOL if is_bf16(dt) else dict(rtol=tol, atol=tol)
    for leaf, g in zip(leaves, expected):
        if leaf is None or g is None:
            continue
        assert leaf.grad is not None and leaf.grad.dtype == leaf.dtype
        np.testing.assert_allclose(paddle_to_numpy(leaf.grad), g, **tol)
