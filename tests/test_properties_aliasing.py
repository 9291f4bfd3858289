"""Generated sequences of calls of an op with an in-out array whose arguments are views of ONE buffer:
the input and the in-out share elements (the same array, overlapping slices), interleave without
sharing (even and odd elements), or lie apart. Each call's offsets, strides, length and path change
between calls, so a fast path that kept the last call's verdict (or checked address ranges, not
elements) is caught.

What each call must do (docs/bounds.md, "Arrays the kernel writes own their elements"):

- where the kernel writes the in-out in place (NumPy, Warp, CuPy, Paddle, torch without autograd) and
  the two share an element: an ``ArgumentError`` naming the op and both parameters, nothing written;
- otherwise the values of ``wp.launch`` on copies of the views taken before the call (JAX, torch with
  autograd and under ``torch.compile`` compute into a new array, so a shared element is read as it
  was; with autograd torch and Paddle copy such an input first), the in-out's elements of the buffer updated where the framework updates in place, and the
  buffer's gradient (torch autograd and compiled, JAX ``grad``, Paddle) the sum of ``wp.Tape``'s
  gradients of the two views scattered into it.

INTEROP_PROPERTY_EXAMPLES // 5 sequences per framework.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import catalogue as cat
import numpy as np
import pytest
import warp as wp
from _devices import TEST_DEVICES, devices_for, jax_device
from hypothesis import event, given
from hypothesis import strategies as st
from property_calls import EXAMPLES, count, property_settings

import interop

pytestmark = pytest.mark.timeout(3600)
F = np.float32
KERNELS = (cat.reverse_accumulate_kernel, cat.atomic_kernel)
OPS = {k.key: interop.op(k, in_out=["acc"], name=f"aliasing::{k.key}") for k in KERNELS}
PATHS = {
    "numpy": ("eager",),
    "warp": ("eager",),
    "torch": ("eager", "no_grad", "grad", "compile", "compile_grad"),
    "paddle": ("eager", "grad"),
    "jax": ("eager", "jit", "grad"),
    "cupy": ("eager",),
}
FRAMEWORKS = [f for f in PATHS if f in ("numpy", "warp") or importlib.util.find_spec(f)]


def _devices(fw: str) -> list[str]:
    if fw == "warp":
        return ["cpu"] + (["cuda"] if "cuda" in TEST_DEVICES and wp.get_cuda_device_count() else [])
    return devices_for(fw)


@dataclass(frozen=True)
class Slice:
    offset: int
    step: int

    def index(self, n: int) -> np.ndarray:
        return self.offset + self.step * np.arange(n)


@dataclass(frozen=True)
class AliasCall:
    kernel: str
    n: int
    x: Slice
    acc: Slice
    path: str

    @property
    def length(self) -> int:
        return max(int(s.index(self.n)[-1]) for s in (self.x, self.acc)) + 1

    def relation(self) -> str:
        xi, ai = set(self.x.index(self.n).tolist()), set(self.acc.index(self.n).tolist())
        if xi & ai:
            return "same" if xi == ai else "overlapping"
        lo = max(min(xi), min(ai))
        return "interleaved" if lo <= min(max(xi), max(ai)) else "apart"


def _slices(draw, n: int):
    x = Slice(draw(st.integers(0, 3)), draw(st.integers(1, 2)))
    kind = draw(st.sampled_from(["same", "shifted", "other"]))
    if kind == "same":
        return x, x
    if kind == "shifted":  # the same step: shares elements (shift < n * step) or interleaves (odd shift of step 2)
        return x, Slice(x.offset + draw(st.integers(1, 3)), x.step)
    return x, Slice(draw(st.integers(0, 3)), draw(st.integers(1, 2)))


@st.composite
def alias_calls(draw, fw: str, kernel: str) -> AliasCall:
    n = draw(st.integers(1, 6))
    x, acc = _slices(draw, n)
    if draw(st.booleans()):
        x, acc = acc, x
    return AliasCall(kernel, n, x, acc, draw(st.sampled_from(PATHS[fw])))


# ---- the reference: wp.launch / wp.Tape on copies of the two views ------------------------------
def _reference(c: AliasCall, base: np.ndarray, w: np.ndarray, device: str):
    xi, ai = c.x.index(c.n), c.acc.index(c.n)
    kernel = next(k for k in KERNELS if k.key == c.kernel)
    wx = wp.array(base[xi], dtype=float, device=device, requires_grad=True)
    wa = wp.array(base[ai], dtype=float, device=device, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(kernel, dim=c.n, inputs=[wx, wa], device=device)
    out = wa.numpy().copy()
    tape.backward(grads={wa: wp.array(w, dtype=float, device=device)})
    g = np.zeros_like(base)
    np.add.at(g, xi, wx.grad.numpy())
    np.add.at(g, ai, wa.grad.numpy())
    return out, g


# ---- one call in each framework: (returned, buffer after or None, buffer gradient or None) --------
def _views(buf, c: AliasCall):
    return [buf[s.offset : s.offset + s.step * (c.n - 1) + 1 : s.step] for s in (c.x, c.acc)]


def _in_place(fw: str, c: AliasCall) -> bool:
    """Whether the call writes the in-out array in place with the input as it is (so a shared element
    is refused); with autograd, torch and Paddle copy an input in the in-out's memory first."""
    return fw in ("numpy", "warp", "cupy") or (fw in ("torch", "paddle") and c.path in ("eager", "no_grad"))


def _call_numpy(op, c, base, w, device):
    buf = base.copy()
    return op(*_views(buf, c)), buf, None, None


def _call_cupy(op, c, base, w, device):
    import cupy as cp

    with cp.cuda.Device(0):
        buf = cp.asarray(base)
        return op(*_views(buf, c)), buf, None, None


def _call_warp(op, c, base, w, device):
    buf = wp.array(base, dtype=float, device=device)
    vs = [
        wp.array(ptr=buf.ptr + 4 * s.offset, shape=(c.n,), strides=(4 * s.step,), dtype=float, device=device)
        for s in (c.x, c.acc)
    ]
    return op(*vs), buf, None, [True, True]


def _call_torch(op, c, base, w, device):
    import torch

    grad = c.path in ("grad", "compile_grad")
    leaf = torch.tensor(base, device=device, requires_grad=grad)
    buf = leaf.clone() if grad else leaf
    if c.path.startswith("compile"):
        torch.compiler.reset()
        r = torch.compile(lambda b: op(*_views(b, c)), backend="aot_eager", fullgraph=True)(buf)
    elif c.path == "no_grad":
        with torch.no_grad():
            r = op(*_views(buf, c))
    else:
        r = op(*_views(buf, c))
    g = None
    if grad:
        (r * torch.tensor(w, device=device)).sum().backward()
        g = leaf.grad
    return r, buf, g, None


def _call_paddle(op, c, base, w, device):
    import paddle

    place = paddle.CPUPlace() if device == "cpu" else paddle.CUDAPlace(0)
    leaf = paddle.to_tensor(base, place=place)
    leaf.stop_gradient = c.path != "grad"
    buf = leaf.clone() if c.path == "grad" else leaf
    vs = _views(buf, c)
    views = [v.data_ptr() == buf.data_ptr() + 4 * s.offset for v, s in zip(vs, (c.x, c.acc))]
    r = op(*vs)
    g = None
    if c.path == "grad":
        (r * paddle.to_tensor(w, place=place)).sum().backward()
        g = leaf.grad
    return r, buf, g, views


def _call_jax(op, c, base, w, device):
    import jax
    import jax.numpy as jnp

    v = jnp.asarray(base, device=jax_device(device))
    if c.path == "grad":
        r, pullback = jax.vjp(lambda b: op(*_views(b, c)), v)
        (g,) = pullback(jnp.asarray(w, device=jax_device(device)))
        return r, None, g, None
    f = (lambda b: op(*_views(b, c))) if c.path == "eager" else jax.jit(lambda b: op(*_views(b, c)))
    return f(v), None, None, None


CALLS = {
    "numpy": _call_numpy,
    "warp": _call_warp,
    "torch": _call_torch,
    "paddle": _call_paddle,
    "jax": _call_jax,
    "cupy": _call_cupy,
}


def _np(x) -> np.ndarray:
    if isinstance(x, wp.array):
        return x.numpy()
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    if type(x).__module__.startswith("cupy"):
        return x.get()
    return np.asarray(x)


def run_alias_call(fw: str, c: AliasCall, device: str, seed: int) -> str:
    rng = np.random.default_rng(seed)
    base = rng.uniform(-1, 1, c.length).astype(F)
    w = rng.uniform(0.5, 1.5, c.n).astype(F)
    want, want_g = _reference(c, base, w, device)
    op = OPS[c.kernel]
    shares = c.relation() in ("same", "overlapping")
    try:
        r, buf, g, views = CALLS[fw](op, c, base, w, device)
    except interop.ArgumentError as e:
        assert shares and _in_place(fw, c), f"{fw} {c}: refused unexpectedly: {e}"
        assert f"op '{op.description.label}', parameter 'acc'" in str(e) and "parameter 'x'" in str(e), str(e)
        return "refused"
    views = views or [True, True]  # (Paddle may make a strided slice a copy of its own)
    shared = shares and all(views)
    assert not (shared and _in_place(fw, c)), f"{fw} {c}: the in-out shares memory with x and the call ran"
    np.testing.assert_allclose(_np(r), want, rtol=2e-6, atol=2e-6, err_msg=f"{fw} {c}")
    if buf is not None:
        after = base.copy()
        if views[1]:
            after[c.acc.index(c.n)] = want
        np.testing.assert_allclose(_np(buf), after, rtol=2e-6, atol=2e-6, err_msg=f"{fw} {c}: the buffer after")
    if g is not None:
        np.testing.assert_allclose(_np(g), want_g, rtol=1e-5, atol=1e-5, err_msg=f"{fw} {c}: the gradient")
        return "values and gradient"
    return "values"


@pytest.mark.parametrize("fw", FRAMEWORKS)
@property_settings(max(1, EXAMPLES // 5))
@given(data=st.data())
def test_sequence_of_calls_over_one_buffer(fw, data):
    devices = _devices(fw)
    if not devices:
        pytest.skip(f"no device for {fw} here")
    device = data.draw(st.sampled_from(devices), label="device")
    kernel = data.draw(st.sampled_from([k.key for k in KERNELS]), label="kernel")
    seq = data.draw(st.lists(alias_calls(fw, kernel), min_size=2, max_size=6), label="calls")
    done = []
    for k, c in enumerate(seq):
        try:
            outcome = run_alias_call(fw, c, device, seed=k)
        except AssertionError as e:
            history = "\n".join(f"  #{j}: {d}" for j, d in enumerate(done))
            raise AssertionError(f"call #{k} of a sequence failed after:\n{history}\n{e}") from None
        done.append(c)
        count(fw, "aliasing", f"{c.relation()}: {outcome}")
        event(f"{c.relation()}: {outcome}")


def test_relations_are_all_generated():
    """The strategy reaches each relation of the two views (a generator that never made the views
    share would prove nothing)."""
    seen = set()

    @property_settings(200)
    @given(c=alias_calls("numpy", KERNELS[0].key))
    def draw(c):
        seen.add(c.relation())

    draw()
    assert seen == {"same", "overlapping", "interleaved", "apart"}, seen
