"""An in-out parameter that is a strided view, in a call where another input needs a gradient.

Where two features meet: in-out arrays and strided arrays each work alone; together (the
functional twin of a differentiable call copies the in-out into a fresh contiguous tensor) the
kernel once wrote that contiguous copy with the view's strides, past its end: only the first
element was updated and sequences of calls aborted the process (``double free or corruption``).

Every path is compared with ``wp.launch`` / ``wp.Tape`` on contiguous copies, over a sequence of
calls (the first call validates, later ones reuse what it cached), and the buffer's elements
between the view's are checked untouched.
"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp
from catalogue import case, to_np

from interop._description import IN_OUT, INPUT, OUTPUT

CASES = ["in_out", "in_out_first"]  # the in-out after, and before, the differentiable input
STEP = 3  # the in-out is buf[1::STEP]
CALLS = 3


def _strided(n: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """A buffer with distinct values and its view ``buf[1::STEP]`` of ``n`` elements."""
    buf = rng.uniform(-1.0, 1.0, size=STEP * n + 1).astype(np.float32)
    return buf, buf[1::STEP]


def _warp_reference(c, args: tuple, weights: list[np.ndarray]) -> tuple[list[np.ndarray], list]:
    """``wp.launch`` under a ``wp.Tape`` on contiguous copies: the returned arrays (kernel order),
    and the gradients of ``sum_k sum(w_k * returned_k)`` for the call arguments."""
    desc = c.op.description
    it = iter(args)
    warr, dims = [], None
    for p in desc.params:
        if p.role == OUTPUT:
            warr.append(None)
            continue
        a = next(it)
        warr.append(wp.array(np.ascontiguousarray(a), dtype=float, requires_grad=True, device="cpu"))
        dims = dims or a.shape
    warr = [wp.zeros(dims, dtype=float, requires_grad=True, device="cpu") if w is None else w for w in warr]
    tape = wp.Tape()
    with tape:
        wp.launch(desc.fn, dim=dims, inputs=warr, device="cpu")
    returned = [w for p, w in zip(desc.params, warr) if p.role != INPUT]
    values = [w.numpy().copy() for w in returned]
    tape.backward(grads={w: wp.array(g.astype(np.float32), device="cpu") for w, g in zip(returned, weights)})
    grads = [w.grad.numpy() for p, w in zip(desc.params, warr) if p.role == INPUT]
    return values, grads


def _inputs(c, rng) -> tuple[tuple, int, np.ndarray]:
    """The case's arguments with its in-out replaced by a strided view (position, buffer)."""
    args = list(c.make(rng, np.float32))
    (k,) = c.in_out
    buf, view = _strided(len(args[k]), rng)
    args[k] = view
    return tuple(args), k, buf


def _in_out_result(c) -> int:
    """Where the in-out sits among the returned arrays."""
    return [p.role for p in c.op.description.returned_params].index(IN_OUT)


def _check_buffer(buf_after: np.ndarray, buf_before: np.ndarray, want_view: np.ndarray) -> None:
    expected = buf_before.copy()
    expected[1::STEP] = want_view
    np.testing.assert_allclose(buf_after, expected, rtol=1e-5, atol=1e-6)


# ---- torch --------------------------------------------------------------------------------------
def _torch_call(path: str, op, targs):
    import torch

    import adapters.torch as at

    if path == "eager":
        return op(*targs)
    if path == "functional_operator":  # the registered functional twin: new tensors, caller's untouched
        return at.operators(op)["functional"](*targs)
    if path == "compile":
        return torch.compile(lambda *a: op(*a), backend="aot_eager", fullgraph=True)(*targs)
    raise ValueError(path)


@pytest.mark.parametrize("path", ["eager", "functional_operator", "compile"])
@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no_grad"])
@pytest.mark.parametrize("case_id", CASES)
def test_torch_strided_in_out_matches_warp_on_contiguous_copies(case_id, grad, path):
    torch = pytest.importorskip("torch")
    if path == "compile":
        torch._dynamo.reset()
    c = case(case_id)
    rng = np.random.default_rng(7)
    for call in range(CALLS):
        args, k, buf = _inputs(c, rng)
        weights = [rng.uniform(0.5, 1.5, size=np.shape(r)) for r in c.reference(*[np.array(a) for a in args])]
        want, want_grads = _warp_reference(c, args, weights)
        tbuf = torch.from_numpy(buf.copy())
        targs = [
            tbuf[1::STEP]
            if j == k
            else torch.tensor(np.ascontiguousarray(a), requires_grad=grad and j not in c.in_out, device="cpu")
            for j, a in enumerate(args)
        ]
        got = _torch_call(path, c.op, targs)
        got = got if isinstance(got, tuple) else (got,)
        for r, w in zip(got, want):
            np.testing.assert_allclose(to_np(r), w, rtol=1e-5, atol=1e-6, err_msg=f"call {call}")
        ret = _in_out_result(c)
        if path == "functional_operator":
            np.testing.assert_array_equal(to_np(tbuf), buf)  # the twin does not write the caller's tensor
        else:
            assert got[ret] is targs[k]  # updated in place, returned as the same tensor
            _check_buffer(to_np(tbuf), buf, want[ret])
        if grad:
            loss = sum((r * torch.from_numpy(w).to(r.dtype)).sum() for r, w in zip(got, weights))
            loss.backward()
            gi = iter(want_grads)
            for j, t in enumerate(targs):
                if j != k:
                    np.testing.assert_allclose(t.grad.numpy(), next(gi), rtol=1e-5, atol=1e-5, err_msg=f"call {call}")


# ---- paddle and numpy: the same combination -----------------------------------------------------
@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no_grad"])
@pytest.mark.parametrize("case_id", CASES)
def test_paddle_strided_in_out_matches_warp_on_contiguous_copies(case_id, grad):
    paddle = pytest.importorskip("paddle")
    c = case(case_id)
    rng = np.random.default_rng(8)
    for call in range(CALLS):
        args, k, buf = _inputs(c, rng)
        weights = [rng.uniform(0.5, 1.5, size=np.shape(r)) for r in c.reference(*[np.array(a) for a in args])]
        want, want_grads = _warp_reference(c, args, weights)
        pbuf = paddle.to_tensor(buf.copy(), place=paddle.CPUPlace())
        pargs = []
        for j, a in enumerate(args):
            if j == k:
                pargs.append(pbuf[1::STEP])
            else:
                t = paddle.to_tensor(np.ascontiguousarray(a), place=paddle.CPUPlace())
                t.stop_gradient = not grad
                pargs.append(t)
        got = c.op(*pargs)
        got = got if isinstance(got, tuple) else (got,)
        for r, w in zip(got, want):
            np.testing.assert_allclose(r.numpy(), w, rtol=1e-5, atol=1e-6, err_msg=f"call {call}")
        _check_buffer(pbuf.numpy(), buf, want[_in_out_result(c)])
        if grad:
            ws = [paddle.to_tensor(w.astype(np.float32), place=paddle.CPUPlace()) for w in weights]
            loss = sum((r * w).sum() for r, w in zip(got, ws))
            loss.backward()
            gi = iter(want_grads)
            for j, t in enumerate(pargs):
                if j != k:
                    np.testing.assert_allclose(t.grad.numpy(), next(gi), rtol=1e-5, atol=1e-5, err_msg=f"call {call}")


@pytest.mark.parametrize("case_id", CASES)
def test_numpy_strided_in_out_matches_warp_on_contiguous_copies(case_id):
    c = case(case_id)
    rng = np.random.default_rng(9)
    for call in range(CALLS):
        args, k, buf = _inputs(c, rng)
        want, _ = _warp_reference(c, args, [np.ones(np.shape(r)) for r in c.reference(*[np.array(a) for a in args])])
        nbuf = buf.copy()
        nargs = [nbuf[1::STEP] if j == k else np.ascontiguousarray(a) for j, a in enumerate(args)]
        got = c.op(*nargs)
        got = got if isinstance(got, tuple) else (got,)
        for r, w in zip(got, want):
            np.testing.assert_allclose(r, w, rtol=1e-5, atol=1e-6, err_msg=f"call {call}")
        assert got[_in_out_result(c)] is nargs[k]
        _check_buffer(nbuf, buf, want[_in_out_result(c)])
