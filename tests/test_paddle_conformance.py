"""The conformance catalogue through Paddle: values against the NumPy references, gradients
(``loss.backward()`` through the op's PyLayer) against finite differences of those references."""

import numpy as np
import pytest

paddle = pytest.importorskip("paddle", reason="paddlepaddle is not installed")

from catalogue import CASE_IDS, case, fd_grad, loss_weights  # noqa: E402

from interop._frameworks import data_ptr  # noqa: E402


def _tensor(a, stop_gradient=True):
    t = paddle.to_tensor(np.array(a))
    t.stop_gradient = stop_gradient
    return t


@pytest.mark.parametrize("cid", CASE_IDS)
def test_values(cid):
    c = case(cid)
    for dt in c.dtypes:
        args = c.make(np.random.default_rng(0), dt)
        ref = c.reference(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
        pargs = [_tensor(a) if isinstance(a, np.ndarray) else a for a in args]
        ptrs = [data_ptr(a) if isinstance(a, paddle.Tensor) else None for a in pargs]
        out = c.op(*pargs, **c.call_kwargs)
        out = out if isinstance(out, tuple) else (out,)
        assert all(isinstance(o, paddle.Tensor) for o in out)
        for o, r in zip(out, ref):
            assert o.dtype == paddle.to_tensor(np.zeros(1, r.dtype)).dtype
            np.testing.assert_allclose(o.numpy(), r, rtol=1e-5, atol=1e-6)
        for k in c.in_out:  # updated in place, returned as the same tensor
            assert any(o is pargs[k] for o in out)
            assert data_ptr(pargs[k]) == ptrs[k]


@pytest.mark.parametrize("cid", CASE_IDS)
def test_gradients(cid):
    c = case(cid)
    dt = np.float64 if np.float64 in c.dtypes else c.dtypes[0]
    args = c.make(np.random.default_rng(1), dt)
    ref = c.reference(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
    weights = loss_weights(c, ref)
    leaves, pargs = [], []
    for k, a in enumerate(args):
        if not isinstance(a, np.ndarray):
            leaves.append(None)
            pargs.append(a)
            continue
        leaf = _tensor(a, stop_gradient=a.dtype.kind != "f")
        leaves.append(leaf)
        # an in-out tensor is updated in place, so it cannot be a leaf that needs a gradient
        pargs.append(leaf * 1.0 if k in c.in_out else leaf)
    out = c.op(*pargs, **c.call_kwargs)
    out = out if isinstance(out, tuple) else (out,)
    assert all(not o.stop_gradient for o in out)
    loss = sum((o * _tensor(w.astype(dt))).sum() for o, w in zip(out, weights))
    loss.backward()
    expected = fd_grad(c, args, weights)
    tol = 1e-7 if dt == np.float64 else 2e-4
    for leaf, g in zip(leaves, expected):
        if leaf is None or g is None:
            continue
        assert leaf.grad is not None
        np.testing.assert_allclose(leaf.grad.numpy(), g, rtol=tol, atol=tol)
