"""Generated calls of kernels that read and write through index arrays (issue 50): a gather
``out[i] = s * x[idx[i]]`` (its output at the thread index, sized by the launch) and a scatter
``wp.atomic_add(out, idx[i], x[i] * x[i])`` (its output at the index it reads: sized by
``output_dims``, given on the op or on the call). Drawn per framework: the sizes, the index values
(in range), the path (eager, the framework's autograd, ``jax.jit``), whether ``output_dims`` comes
with the op or the call, and now and then a scatter call without any (refused: an ``ArgumentError``
naming the output and asking for ``output_dims``). Values and gradients are compared with NumPy's
own formula (``np.add.at``), on the CPU.

The ``checked`` dimension (``property_calls.CHECKED``) draws checked ops (``interop.op(..., checked=True)``)
too, and a checked call may draw out-of-range indices (:func:`index_calls`), which must raise
``interop.BoundsError`` (under ``jax.jit``, JAX's runtime error carrying its text) and leave the
caller's arrays as they were. Unchecked calls only ever draw indices in range (an out-of-range index
there is undefined behaviour, as in a plain ``wp.launch``).

INTEROP_PROPERTY_EXAMPLES calls per framework (CI default small; ``nox -s properties`` full size).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import warp as wp
from _devices import jax_device
from hypothesis import event, given
from hypothesis import strategies as st
from property_calls import CHECKED, EXAMPLES, FRAMEWORKS, count, property_settings

import interop

pytestmark = pytest.mark.timeout(7200)


@wp.kernel
def gather_kernel(x: wp.array(dtype=float), idx: wp.array(dtype=wp.int32), s: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = s * x[idx[i]]


@wp.kernel
def scatter_kernel(x: wp.array(dtype=float), idx: wp.array(dtype=wp.int32), out: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(out, idx[i], x[i] * x[i])


_OPS: dict = {}


def _op(kind: str, dims_on_op: int | None, checked: bool):
    """The op of ``kind`` (described once per option set: the ops are reused across examples)."""
    key = (kind, dims_on_op, checked)
    op = _OPS.get(key)
    if op is None:
        kw = {"checked": True} if checked else {}  # (the checked-mode keyword: only drawn once it exists)
        if kind == "gather":
            op = interop.op(gather_kernel, **kw)
        else:
            op = interop.op(scatter_kernel, output_dims=dims_on_op, **kw)
        op = _OPS[key] = op
    return op


PATHS = {
    "numpy": ("eager",),
    "torch": ("eager", "grad"),
    "jax": ("eager", "jit", "grad", "jit_grad"),
    "paddle": ("eager", "grad"),
}


@dataclass
class IndexCall:
    kind: str  # "gather" or "scatter"
    n: int  # threads (index array length)
    m: int  # length of the indexed array (gather: x; scatter: out)
    idx: tuple
    path: str
    dims_at: str  # scatter: "op", "call" or "none" (refused)
    checked: bool
    out_of_range: bool
    seed: int
    scale: float = 1.5


@st.composite
def index_calls(draw, fw: str) -> IndexCall:
    kind = draw(st.sampled_from(["gather", "scatter"]))
    n, m = draw(st.integers(0, 7)), draw(st.integers(1, 5))
    checked = draw(st.sampled_from(CHECKED))
    out_of_range = checked and n > 0 and draw(st.integers(0, 3)) == 0
    idx = draw(st.lists(st.integers(0, m - 1), min_size=n, max_size=n))
    if out_of_range:  # only under checked mode (unchecked, such an index is undefined behaviour)
        k = draw(st.integers(0, n - 1))
        idx[k] = draw(st.sampled_from([m, m + 3, -1]))
    path = draw(st.sampled_from(PATHS[fw]))
    dims_at = "op"
    if kind == "scatter":
        dims_at = draw(st.sampled_from(["op", "call", "call", "none"]))
    return IndexCall(kind, n, m, tuple(idx), path, dims_at, checked, out_of_range, draw(st.integers(0, 2**31 - 1)))


def _reference(c: IndexCall, x: np.ndarray):
    """(values, d sum(w * out) / d x for weights w) by NumPy's own formula."""
    idx = np.asarray(c.idx, np.int64)
    if c.kind == "gather":
        out = c.scale * x[idx]
        return out, lambda w: _gather_grad(x, idx, w, c.scale)
    out = np.zeros(c.m, np.float32)
    np.add.at(out, idx, x * x)
    return out, lambda w: 2.0 * x * w[idx]


def _gather_grad(x, idx, w, s):
    g = np.zeros_like(x)
    np.add.at(g, idx, s * w)
    return g


def _call(fw: str, c: IndexCall, x: np.ndarray, idx: np.ndarray, w: np.ndarray):
    """Run ``c`` in ``fw``: (values, gradient or None) as NumPy arrays."""
    op = _op(c.kind, c.m if c.dims_at == "op" else None, c.checked)
    kw = {"output_dims": c.m} if c.dims_at == "call" else {}
    extra = (c.scale,) if c.kind == "gather" else ()
    if fw == "numpy":
        return np.asarray(op(x, idx, *extra, **kw)), None
    if fw == "torch":
        import torch

        xt = torch.tensor(x, device="cpu", requires_grad=c.path == "grad")
        out = op(xt, torch.tensor(idx, device="cpu"), *extra, **kw)
        if c.path != "grad":
            return out.detach().numpy(), None
        (g,) = torch.autograd.grad((out * torch.tensor(w, device="cpu")).sum(), [xt], allow_unused=True)
        return out.detach().numpy(), (np.zeros_like(x) if g is None else g.numpy())
    if fw == "paddle":
        import paddle

        xt = paddle.to_tensor(x, place=paddle.CPUPlace(), stop_gradient=c.path != "grad")
        out = op(xt, paddle.to_tensor(idx, place=paddle.CPUPlace()), *extra, **kw)
        if c.path != "grad":
            return out.numpy(), None
        (g,) = paddle.grad([(out * paddle.to_tensor(w, place=paddle.CPUPlace())).sum()], [xt], allow_unused=True)
        return out.numpy(), (np.zeros_like(x) if g is None else g.numpy())
    import jax
    import jax.numpy as jnp

    cpu = jax_device("cpu")
    xj, ij, wj = (jax.device_put(a, cpu) for a in (x, idx, w))

    def f(a):
        return op(a, ij, *extra, **kw)

    if c.path in ("eager", "jit"):
        fn = jax.jit(f) if c.path == "jit" else f
        return np.asarray(fn(xj)), None
    grad = jax.grad(lambda a: jnp.sum(f(a) * wj))
    grad = jax.jit(grad) if c.path == "jit_grad" else grad
    return np.asarray(f(xj)), np.asarray(grad(xj))


def run_index_call(fw: str, c: IndexCall) -> str:
    rng = np.random.default_rng(c.seed)
    x = rng.uniform(-1, 1, c.m if c.kind == "gather" else c.n).astype(np.float32)
    idx = np.asarray(c.idx, np.int32)
    out_len = c.n if c.kind == "gather" else c.m
    w = rng.uniform(-1, 1, out_len).astype(np.float32)
    before = (x.copy(), idx.copy())
    if c.kind == "scatter" and c.dims_at == "none":
        with pytest.raises(interop.ArgumentError, match=r"output 'out': .*atomic_add\(out, idx\[i\].*output_dims"):
            _call(fw, c, x, idx, w)
        return "refused: output_dims asked for"
    if c.out_of_range:
        with pytest.raises(Exception) as info:  # checked mode: never a crash, never a wrong value
            _call(fw, c, x, idx, w)
        jitted = fw == "jax" and "jit" in c.path  # JAX's runtime error carries the BoundsError text
        assert isinstance(info.value, interop.BoundsError) or (jitted and "BoundsError" in str(info.value)), info.value
        assert "out of range for parameter" in str(info.value), info.value
        np.testing.assert_array_equal(x, before[0])
        np.testing.assert_array_equal(idx, before[1])
        return "BoundsError"
    got, g = _call(fw, c, x, idx, w)
    want, want_g = _reference(c, x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    if g is not None:
        np.testing.assert_allclose(g, want_g(w), rtol=1e-5, atol=1e-6)
        return "values and gradient"
    return "values"


@pytest.mark.parametrize("fw", FRAMEWORKS)
@property_settings(EXAMPLES)
@given(data=st.data())
def test_generated_index_call_equals_numpy(fw, data):
    c = data.draw(index_calls(fw), label="call")
    outcome = run_index_call(fw, c)
    count(fw, "cases", "index-array calls")
    count(fw, "index kernel", c.kind)
    count(fw, "index path", c.path)
    if c.kind == "scatter":
        count(fw, "scatter output_dims given", c.dims_at)
    count(fw, "checked", c.checked)
    count(fw, "index out of range", c.out_of_range)
    count(fw, "index outcome", outcome)
    event(f"{c.kind} {c.path}: {outcome}")
