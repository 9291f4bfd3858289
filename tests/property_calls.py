"""Generated calls for the property suite (tests/test_properties_*.py): what a call is, how to run it
in each framework, and the reference it must equal.

A *call* (:class:`Call`) is everything a user chooses for one call of an op: sizes, dtype, the layout of
each array argument (contiguous, strided, offset, broadcast, transposed, flipped, a user subclass), which
arrays require a gradient, the scalar's kind (Python float/int, NumPy scalar, 0-d array, 0-d array that
requires grad), how struct parameters are packed (a Warp struct instance, a dict, a dataclass, a
NamedTuple, a registered JAX pytree: the array and scalar arguments above are then the structs'
fields), the path (eager, ``torch.no_grad``, ``torch.compile``, ``torch.func``, ``jax.jit``,
``jax.vmap``, ``jax.grad``, ``paddle.no_grad``), JAX's x64 mode, ``launch_dims``, an in-place
modification of an input after the forward, and checked mode (the op's ``checked=True`` variant:
its calls, whose indices are in range, give the unchecked values). :func:`run_call` runs it and compares the returned arrays
and the gradients with Warp itself: ``wp.launch`` (for a tile kernel the launch Warp's own code gives it:
``wp.launch_tiled`` over the tile grid, or ``wp.launch(dim, block_dim)`` where the thread index indexes the
arrays, with the call's ``block_dim``) and ``wp.Tape`` on contiguous copies of the values
(:func:`warp_reference`). A call that the package documents as refused (:func:`expected_error`) must
raise that error, naming the op.

The device is one more dimension (issue 31): a call is drawn on the CPU or, where INTEROP_TEST_DEVICES
names CUDA and the framework has it here (tests/_devices.py ``devices_for``), on CUDA; its reference
runs on the same device. CuPy joins the generators only there (:data:`CALL_FRAMEWORKS`). Where CUDA is
absent no device is drawn at all, so the CPU cases are the same as before.

Counts of what ran, per framework and dimension, are kept in :data:`COUNTS` and printed at the end of
the pytest session (conftest.py); ``INTEROP_PROPERTY_COUNTS=<file>`` also writes them as JSON.
"""

from __future__ import annotations

import collections
import contextlib
import importlib.util
import math
import os
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
import warp as wp
from _devices import devices_for, jax_device
from catalogue import PROPERTY_OPS, PropertyOp, StructCall
from hypothesis import HealthCheck, assume, settings
from hypothesis import strategies as st

import interop

EXAMPLES = int(os.environ.get("INTEROP_PROPERTY_EXAMPLES", "25"))
RANDOM = os.environ.get("INTEROP_PROPERTY_RANDOM") == "1"
# Rows of issue 21 that the generators stay off while they are open (e.g. "1,3"): so that a known bug
# does not hide the next one. Empty by default: every combination is generated.
AVOID = {int(r) for r in os.environ.get("INTEROP_PROPERTY_AVOID", "").replace(" ", "").split(",") if r}
FRAMEWORKS = [f for f in ("numpy", "torch", "jax", "paddle") if f == "numpy" or importlib.util.find_spec(f)]
#: the frameworks of the generated calls and sequences: CuPy too where it has a CUDA device to run on
CALL_FRAMEWORKS = FRAMEWORKS + (["cupy"] if devices_for("cupy") else [])
DOCUMENTED = (interop.ArgumentError, interop.UnsupportedError)
#: Checked mode as a generator dimension (issue 50): the values ``checked`` is drawn from. On since
#: checked mode landed (``interop.op(..., checked=True)``, ``interop.BoundsError``);
#: ``INTEROP_PROPERTY_CHECKED=0`` switches it off. Drawn by every generated call (:func:`calls`:
#: the same values as unchecked) and by the index-array calls
#: (tests/test_properties_indices.py: a checked call may draw out-of-range indices, which must raise
#: BoundsError and leave the caller's arrays intact).
CHECKED = (False,) if os.environ.get("INTEROP_PROPERTY_CHECKED") == "0" else (False, True)


def property_settings(examples: int = EXAMPLES, **kw) -> settings:
    return settings(
        max_examples=max(1, examples),
        deadline=None,
        derandomize=not RANDOM,  # CI: the same cases every run
        suppress_health_check=list(HealthCheck),
        database=None,
        **kw,
    )


# ---- counts per framework and dimension ------------------------------------------------------------
COUNTS: collections.Counter = collections.Counter()


def count(fw: str, dimension: str, value: Any, n: int = 1) -> None:
    COUNTS[(fw, dimension, str(value))] += n


def counts_table() -> dict:
    """{framework: {dimension: {value: n}}}"""
    out: dict = {}
    for (fw, dim, val), n in sorted(COUNTS.items()):
        out.setdefault(fw, {}).setdefault(dim, {})[val] = n
    return out


# ---- layouts -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """How a logical array of some shape is made: a view of a larger base (offset, steps), some dims
    broadcast from length 1 (stride 0), the dims permuted (transposed), one dim flipped, a subclass."""

    perm: tuple = ()
    steps: tuple = ()
    offsets: tuple = ()
    broadcast: tuple = ()
    flip: int | None = None
    subclass: bool = False
    negated: bool = False  # torch: a lazily negated view (``complex(0, -v).conj().imag``) holding -v in memory

    def kind(self) -> str:
        parts = []
        if any(o for o in self.offsets):
            parts.append("offset")
        if any(s > 1 for s in self.steps):
            parts.append("strided")
        if any(self.broadcast):
            parts.append("broadcast")
        if self.perm and tuple(self.perm) != tuple(range(len(self.perm))):
            parts.append("transposed")
        if self.flip is not None:
            parts.append("flipped")
        if self.subclass:
            parts.append("subclass")
        if self.negated:
            parts.append("negated")
        return "+".join(parts) or "contiguous"


CONTIGUOUS = Layout()


@st.composite
def layouts(draw, ndim: int, flip: bool = True, subclass: bool = True) -> Layout:
    """A layout of an ``ndim``-d array: contiguous about a third of the time."""
    if draw(st.integers(0, 2)) == 0:
        return Layout(subclass=subclass and draw(st.integers(0, 5)) == 0)
    perm = tuple(draw(st.permutations(range(ndim)))) if ndim > 1 and draw(st.booleans()) else tuple(range(ndim))
    steps = tuple(draw(st.integers(1, 3)) for _ in range(ndim))
    offsets = tuple(draw(st.integers(0, 2)) for _ in range(ndim))
    broadcast = tuple(draw(st.integers(0, 4)) == 0 for _ in range(ndim))
    fl = draw(st.integers(0, ndim * 4)) if flip else ndim * 4
    return Layout(perm, steps, offsets, broadcast, fl if fl < ndim else None, subclass and draw(st.integers(0, 5)) == 0)


def layout_pool(ndim: int) -> list[Layout]:
    """A few fixed layouts, drawn from in sequences so that calls repeat a signature (the caches' hits)."""
    ident = tuple(range(ndim))
    pool = [
        CONTIGUOUS,
        Layout(ident, (2,) + (1,) * (ndim - 1), (0,) * ndim, (False,) * ndim),  # every other row
        Layout(ident, (1,) * ndim, (1,) + (0,) * (ndim - 1), (False,) * ndim),  # offset
        Layout(ident, (1,) * ndim, (0,) * ndim, (True,) + (False,) * (ndim - 1)),  # broadcast rows
    ]
    if ndim > 1:
        rev = tuple(reversed(ident))
        pool.append(Layout(rev, (1,) * ndim, (0,) * ndim, (False,) * ndim))  # transposed
        pool.append(Layout(ident, (1,) * (ndim - 1) + (2,), (0,) * ndim, (False,) * ndim))  # strided columns
    return pool


def _norm(lay: Layout, ndim: int) -> Layout:
    if lay.perm:
        return lay
    return replace(lay, perm=tuple(range(ndim)), steps=(1,) * ndim, offsets=(0,) * ndim, broadcast=(False,) * ndim)


def base_shape(lay: Layout, shape: tuple) -> tuple:
    """The shape of the base array that ``lay`` views as ``shape``."""
    lay = _norm(lay, len(shape))
    pre = [0] * len(shape)
    for k, p in enumerate(lay.perm):
        pre[p] = shape[k]
    out = []
    for j, n in enumerate(pre):
        if lay.broadcast[j] and n >= 1:
            out.append(lay.offsets[j] + 1)
        else:
            out.append(lay.offsets[j] + max(n - 1, 0) * lay.steps[j] + 1)
    return tuple(out)


class UserArray(np.ndarray):
    """An ndarray subclass as user code defines them."""


_USER_TENSOR = None


def _user_tensor():
    global _USER_TENSOR
    if _USER_TENSOR is None:
        import torch

        class UserTensor(torch.Tensor):
            """A torch.Tensor subclass as user code defines them."""

        _USER_TENSOR = UserTensor
    return _USER_TENSOR


def view(fw: str, base, lay: Layout, shape: tuple):
    """``lay`` applied to framework array ``base`` with the framework's own operations: the result has
    ``shape``. NumPy and ``"index"`` (NumPy) give real views; JAX values inside a trace are fine too."""
    lay = _norm(lay, len(shape))
    pre = [0] * len(shape)
    for k, p in enumerate(lay.perm):
        pre[p] = shape[k]
    sl = []
    for j, n in enumerate(pre):
        o, s = lay.offsets[j], lay.steps[j]
        sl.append(slice(o, o + 1) if lay.broadcast[j] and n >= 1 else slice(o, o + n * s, s))
    v = base[tuple(sl)]
    if any(lay.broadcast[j] and pre[j] >= 1 for j in range(len(pre))):
        v = _expand(fw, v, tuple(pre))
    if tuple(lay.perm) != tuple(range(len(shape))):
        v = _permute(fw, v, lay.perm)
    if lay.flip is not None:
        v = _flip(fw, v, lay.flip)
    if lay.subclass and fw == "numpy":
        v = v.view(UserArray)
    if lay.subclass and fw == "torch":
        v = v.as_subclass(_user_tensor())
    if lay.negated and fw == "torch":
        import torch

        # the same values, from memory that holds their negatives (torch resolves the bit lazily)
        v = torch.complex(torch.zeros_like(v), -v).conj().imag
    return v


def _expand(fw, v, shape):
    if fw in ("numpy", "index"):
        return np.broadcast_to(v, shape)
    if fw == "cupy":
        import cupy

        return cupy.broadcast_to(v, shape)
    if fw == "torch":
        return v.expand(*shape)
    if fw == "jax":
        import jax.numpy as jnp

        return jnp.broadcast_to(v, shape)
    import paddle

    return paddle.expand(v, list(shape))


def _permute(fw, v, perm):
    if fw in ("numpy", "index"):
        return np.transpose(v, perm)
    if fw == "cupy":
        import cupy

        return cupy.transpose(v, perm)
    if fw == "torch":
        return v.permute(*perm)
    if fw == "jax":
        import jax.numpy as jnp

        return jnp.transpose(v, perm)
    import paddle

    return paddle.transpose(v, list(perm))


def _flip(fw, v, axis):
    if fw in ("numpy", "index"):
        return np.flip(v, axis)
    if fw == "cupy":
        import cupy

        return cupy.flip(v, axis)
    if fw == "torch":
        import torch

        return torch.flip(v, [axis])
    if fw == "jax":
        import jax.numpy as jnp

        return jnp.flip(v, axis)
    import paddle

    return paddle.flip(v, [axis])


def scatter_grad(lay: Layout, shape: tuple, grad_view: np.ndarray) -> np.ndarray:
    """The gradient of the base given the gradient of its view: summed through the same view of indices."""
    bshape = base_shape(lay, shape)
    size = int(np.prod(bshape))
    idx = view("index", np.arange(size).reshape(bshape), replace(lay, subclass=False), shape)
    g = np.zeros(size, np.float64)
    np.add.at(g, np.asarray(idx).ravel(), np.asarray(grad_view, np.float64).ravel())
    return g.reshape(bshape)


# ---- a call ------------------------------------------------------------------------------------------
SCALAR_KINDS = ("py_float", "py_int", "np_same", "np_f32", "np_f64", "0d", "0d_grad")
PATHS = {
    "numpy": ("eager",),
    "torch": ("eager", "no_grad", "compile", "vmap", "func_grad", "func_fwd", "hooks"),
    "jax": ("eager", "jit", "grad", "jit_grad", "fwd_grad", "vmap", "jit_vmap"),
    "paddle": ("eager", "no_grad", "hooks"),
    "cupy": ("eager",),
}
# "hooks" (torch, Paddle): the call under saved-tensor hooks that save copies and hand the backward
# every other one in another layout (a strided view of the same values): the backward must read the
# tensors it is given, in their layout (the forward's may be freed by then)
# "fwd_grad" (JAX), "func_fwd" (torch): the gradients by forward mode (jax.jacfwd, torch.func.jacfwd
# of the weighted loss: the generated tangent kernel), for ops that have one (kernels, tile kernels
# too; not Python functions); drawn for a Python-function op, the reverse-mode path of the same
# transform instead; for a tile kernel the generator refuses, the documented refusal (expected_error)
# how a struct argument is packed ("warp": a Warp struct instance, whose array fields are Warp arrays
# over the NumPy memory; every array of that call is then a Warp array)
PACKINGS = {
    "numpy": ("warp", "dict", "dataclass", "namedtuple"),
    "torch": ("dict", "dataclass", "namedtuple"),
    "jax": ("dict", "dataclass", "namedtuple", "pytree"),
    "paddle": ("dict", "dataclass", "namedtuple"),
    "cupy": ("dict", "dataclass", "namedtuple"),
}
#: threads per block a call of a tile op passes (None: the op's own block_dim); sequences change it
#: between calls, so a cache that ignores it would serve another block size's launch
TILE_BLOCK_DIMS = (None, 4, 8, 16, 32)
SEQUENCE_PATHS = {
    "numpy": ("eager",),
    "torch": ("eager", "no_grad", "func_fwd", "hooks"),
    "jax": ("eager", "jit", "grad", "fwd_grad"),
    "paddle": ("eager", "no_grad", "hooks"),
    "cupy": ("eager",),
}


class SavedCopies:
    """Saved-tensor hooks (``torch.autograd.graph.saved_tensors_hooks``,
    ``paddle.autograd.saved_tensors_hooks``) that save a copy of each tensor and unpack every other
    one as a strided view of a buffer twice its size (the same values in another layout: the first
    dimension strided). ``restride=False`` keeps each saved tensor's layout (a copy of a contiguous one, a strided one
    as it is): a tile kernel's adjoint refuses a strided array (``GRAD_LAYOUT``), and which layout
    the backward gets decides that refusal."""

    def __init__(self, fw: str, restride: bool = True):
        self.fw, self.n, self.restride = fw, 0, restride

    def pack(self, t):
        # (a tensor: Paddle hands unpack what pack returned only when it is one)
        return t.clone() if self.restride or t.is_contiguous() else t

    def unpack(self, t):
        self.n += 1
        if not self.restride or self.n % 2 or t.ndim == 0:
            return t
        # the outer dimension strided, the rest (vec/mat components) as they were
        if self.fw == "paddle":
            import paddle

            return paddle.stack([t, t], axis=1)[:, 0]
        import torch

        return torch.stack([t, t], 1)[:, 0]

    def __call__(self):
        if self.fw == "paddle":
            import paddle

            return paddle.autograd.saved_tensors_hooks(self.pack, self.unpack)
        import torch

        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)


def has_tangent(pop: PropertyOp) -> bool:
    """The op has a tangent op (forward mode): a kernel the generator transforms."""
    from interop._errors import UnsupportedError

    if pop.op.description.kind != "kernel":
        return False
    try:
        pop.op.tangent()
    except UnsupportedError:
        return False
    return True


@dataclass
class Call:
    op: PropertyOp
    n: int
    m: int
    dtype: Any
    layouts: tuple  # per array argument (inputs and in-out, in call order)
    grads: tuple  # per array argument: requires grad
    scalar_kind: str = "py_float"
    scalar: float = 1.5
    path: str = "eager"
    launch: tuple | None = None  # launch_dims passed per call (None: not passed)
    inplace: int | None = None  # array argument modified in place after the forward
    x64: bool = False
    batch: int = 0  # vmap batch size
    vmap_method: str | None = None
    seed: int = 0
    packing: str | None = None  # struct ops: how each struct argument is packed (PACKINGS)
    device: str = "cpu"  # where the arrays live ("cpu", "cuda"): devices_for(fw)
    block_dim: int | None = None  # tile ops: block_dim passed per call (None: not passed, the op's)
    leaf_in_out: bool = False  # torch: an in-out that requires grad passed as (a view of) the leaf itself
    checked: bool = False  # the op's checked variant (interop.op(..., checked=True)): the same values
    # JAX, a Python-function op: its forward's tape kept for the backward (the default), or none kept
    # (INTEROP_KEPT_MB=0: the backward replays the function): the same values either way
    kept: bool = True
    notes: list = field(default_factory=list)

    def __repr__(self) -> str:
        return describe(self)


def _dtypes(fw: str, pop: PropertyOp, x64: bool) -> list:
    if fw == "jax" and not x64:
        return [d for d in pop.dtypes if np.dtype(d).itemsize < 8] or [None]
    return list(pop.dtypes)


@st.composite
def calls(draw, fw: str, pop: PropertyOp | None = None, paths=None, pools: bool = False, sizes=None) -> Call:
    """One generated call of ``pop`` (drawn from the catalogue's property ops when None) in ``fw``."""
    pop = pop or draw(st.sampled_from(PROPERTY_OPS))
    path = draw(st.sampled_from(paths or PATHS[fw]))
    if path in ("fwd_grad", "func_fwd") and not has_tangent(pop) and pop.block_dim is None:
        path = "grad" if path == "fwd_grad" else "func_grad"  # (reverse mode instead: the op has no forward mode)
    x64 = fw == "jax" and draw(st.booleans())
    dts = _dtypes(fw, pop, x64)
    assume(dts != [None])
    dtype = draw(st.sampled_from(dts))
    if sizes:
        n, m = draw(st.sampled_from(sizes))
    else:
        n, m = draw(st.integers(0, 5)), draw(st.integers(1, 4))
    batch = draw(st.integers(1, 3)) if "vmap" in path else 0
    ndims = [nd + (1 if batch else 0) for nd in pop.array_ndims]
    packing = draw(st.sampled_from(PACKINGS[fw])) if pop.structs else None
    lays, grads = [], []
    differentiable = fw not in ("numpy", "cupy") and path not in (
        "no_grad",
        "vmap",
        "jit_vmap",
        "eager" if fw == "jax" else "",
    )
    for nd in ndims:
        if pools:
            lay = draw(st.sampled_from(layout_pool(nd)))
        else:
            lay = draw(layouts(nd, flip=True, subclass=fw in ("numpy", "torch") and path != "compile"))
        if fw == "jax":
            lay = replace(lay, subclass=False)
        inner = pop.inner_ndims()[len(lays)]
        if inner and (packing == "warp" or draw(st.integers(0, 3))):
            # vec components packed (a Warp array of vec3 has no other layout; elsewhere, 3/4 of
            # the time: a kernel cannot read them otherwise, see expected_error)
            lay = _packed_inner(lay, nd, inner)
        lays.append(lay)
        grads.append(differentiable and draw(st.booleans()))
    kinds = [k for k in SCALAR_KINDS if k != "0d_grad" or differentiable] if pop.has_scalar else ["py_float"]
    if fw in ("numpy", "cupy"):
        kinds = [k for k in kinds if k != "0d_grad"]
    if path in ("vmap", "jit_vmap", "compile", "func_grad", "func_fwd"):
        kinds = ["py_float"]
    kind = draw(st.sampled_from(kinds))
    scalar = float(draw(st.integers(-3, 3))) if kind == "py_int" else draw(st.sampled_from([1.5, -0.75, 2.0, 0.0]))
    launch = None
    if pop.launch_override and not batch and path != "compile" and draw(st.integers(0, 3)) == 0:
        full = pop.launch(n, m)
        launch = draw(st.sampled_from([full, tuple(max(d - 1, 0) for d in full[:1]) + full[1:]]))
    inplace = None
    if fw in ("torch", "paddle") and path == "eager" and draw(st.integers(0, 4)) == 0:
        inplace = draw(st.integers(0, len(ndims) - 1))
    if fw == "torch" and path in ("eager", "no_grad") and np.dtype(dtype) in (np.float32, np.float64):
        # a lazily negated view among the inputs, now and then (the fast path's signature check must
        # tell it from the plain tensor of the same shape, strides and dtype)
        for k in range(len(lays)):
            # (of scalar elements: torch's dispatcher hands the op a packed copy of such a view, whose
            # vec components the view itself has 2 apart)
            if k not in pop.in_out and k != inplace and not pop.inner_ndims()[k] and draw(st.integers(0, 5)) == 0:
                lays[k] = replace(lays[k], negated=True)
    # torch: an in-out that requires grad given as (a view of) its leaf, not a copy, now and then:
    # refused at the call, before the launch (issue 33 row d)
    leaf_in_out = (
        fw == "torch" and path == "eager" and any(grads[k] for k in pop.in_out) and draw(st.integers(0, 3)) == 0
    )
    vm = None
    if fw == "jax" and batch:
        vm = draw(st.sampled_from(["loop", "sequential", "fold"] if pop.row_independent else ["loop"]))
    seed = draw(st.integers(0, 2**31 - 1))
    devs = devices_for(fw)
    # drawn only where there is a choice: on a CPU-only machine the draws (and so the cases) are as before
    device = draw(st.sampled_from(devs)) if len(devs) > 1 else devs[0]
    if device != "cpu" and packing == "warp":
        packing = "dict"  # a Warp struct instance over NumPy memory: NumPy lives on the CPU
    block_dim = None
    if pop.block_dim is not None:
        # (under torch.compile too: a variant first used there is made at trace time,
        # test_properties_calls.py test_per_call_block_dim_first_used_under_torch_compile)
        block_dim = draw(st.sampled_from(TILE_BLOCK_DIMS))
    # checked mode (issue 50): its in-range calls give the unchecked values, in every path
    checked = draw(st.sampled_from(CHECKED))
    kept = not (fw == "jax" and pop.op.description.kind == "function" and differentiable and draw(st.booleans()))
    call = Call(pop, n, m, dtype, tuple(lays), tuple(grads), kind, scalar, path, launch, inplace, x64, batch, vm,
                seed, packing, device=device, block_dim=block_dim, leaf_in_out=leaf_in_out,
                checked=checked, kept=kept)  # fmt: skip
    assume(not _avoided(fw, call))
    return call


def _packed_inner(lay: Layout, ndim: int, inner: int) -> Layout:
    """``lay`` with the vec/mat component dims left packed: a Warp array of vec3 has no other layout."""
    if not inner or not lay.perm:
        return lay
    outer = ndim - inner
    if any(p >= outer for p in lay.perm[:outer]):  # a component dim moved outward: no permutation
        lay = replace(lay, perm=tuple(range(ndim)))
    keep = slice(0, outer)
    return replace(
        lay,
        steps=lay.steps[keep] + (1,) * inner,
        offsets=lay.offsets[keep] + (0,) * inner,
        broadcast=lay.broadcast[keep] + (False,) * inner,
        flip=lay.flip if lay.flip is not None and lay.flip < outer else None,
    )


def _avoided(fw: str, c: Call) -> bool:
    """Calls that reproduce an open row of issue 21 named in INTEROP_PROPERTY_AVOID."""
    if (
        1 in AVOID
        and fw == "torch"
        and any(c.layouts[k].kind() != "contiguous" for k in c.op.in_out)
        and (any(c.grads) or c.scalar_kind == "0d_grad")
    ):
        return True
    if 4 in AVOID and fw == "paddle" and c.inplace is not None:
        return True
    if 8 in AVOID and any(lay.subclass for lay in c.layouts):
        return True
    return False


# ---- the reference: Warp itself on contiguous copies --------------------------------------------------
def _wp_scalar(dtype, value):
    return wp.dtype_from_numpy(np.dtype(dtype))(value)


def warp_reference(
    pop: PropertyOp,
    arrays: list[np.ndarray],
    dtype,
    s: float,
    launch: tuple,
    weights=None,
    device: str = "cpu",
    block_dim: int | None = None,
):
    """(returned arrays, gradients of the array arguments, gradient of the scalar) of one call, by
    ``wp.launch`` (or the Python function) under a ``wp.Tape`` on contiguous copies on ``device`` (the
    call's); gradients of ``sum_k sum(weights[k] * returned[k])`` when ``weights`` is given (else None)."""
    wdt = wp.dtype_from_numpy(np.dtype(dtype))
    grad = weights is not None
    # a concrete vec/mat element type of the kernel's parameter (a struct field's), else the call's
    types = [getattr(t, "dtype", None) for t in pop.param_types()]
    wdts = [t if getattr(t, "_shape_", None) else wdt for t in types]

    def run(s_value):
        args, it, returned = [], iter(arrays), []
        for role, pdt in zip(pop.roles, wdts):
            if role == "scalar":
                args.append(_wp_scalar(pop.scalar_dtype or dtype, s_value))
            elif role == "out":
                shape = pop.out_shape(launch)
                shape = shape[: len(shape) - len(getattr(pdt, "_shape_", ()))]
                a = wp.zeros(shape, dtype=pdt, requires_grad=grad, device=device)
                args.append(a)
                returned.append(a)
            else:
                a = wp.array(np.array(next(it), dtype=dtype, order="C"), dtype=pdt, requires_grad=grad, device=device)
                args.append(a)
                if role == "io":
                    returned.append(a)
        tape = wp.Tape()
        with tape:
            if pop.tile_launch == "tiled":  # a tile kernel: the tile grid, then the block's lanes
                wp.launch_tiled(pop.fn, dim=launch, inputs=args, block_dim=block_dim or pop.block_dim, device=device)
            elif pop.tile_launch == "threads":  # one thread per element, in blocks (Warp's n-body example)
                wp.launch(pop.fn, dim=launch, inputs=args, block_dim=block_dim or pop.block_dim, device=device)
            elif pop.kind == "kernel":  # struct kernels: on Warp struct instances of the leaves
                wp.launch(pop.fn, dim=launch, inputs=pop.kernel_args(args), device=device)
            else:
                with wp.ScopedDevice(device):  # a Python function launches on the device of its arrays
                    pop.fn(*args)
        return args, returned, tape

    args, returned, tape = run(s)
    outs = [r.numpy().copy() for r in returned]
    if not grad:
        return outs, None, None
    tape.backward(
        grads={r: wp.array(np.asarray(w, dtype), dtype=r.dtype, device=device) for r, w in zip(returned, weights)}
    )
    grads = [a.grad.numpy().copy() for a, role in zip(args, pop.roles) if role in ("in", "io")]
    gs = None
    if pop.has_scalar:  # F(s) = a + b s + c s^2 (c = 0 for most): d/ds = b + 2 c s from F(1), F(0), F(-1)
        one, zero = ([r.numpy().astype(np.float64) for r in run(v)[1]] for v in (1.0, 0.0))
        ws = [np.asarray(w, np.float64) for w in weights]
        gs = float(sum(np.sum(w * (a - b)) for w, a, b in zip(ws, one, zero)))
        if pop.scalar_degree == 2:
            minus = [r.numpy().astype(np.float64) for r in run(-1.0)[1]]
            b = sum(np.sum(w * (a - m)) for w, a, m in zip(ws, one, minus)) / 2
            c = sum(np.sum(w * ((a + m) / 2 - z)) for w, a, m, z in zip(ws, one, minus, zero))
            gs = float(b + 2 * c * float(s))
    return outs, grads, gs


# ---- what the package documents as refused ----------------------------------------------------------
def _strides(fw: str, x) -> tuple:
    """In bytes."""
    if fw in ("numpy", "cupy"):
        return tuple(x.strides)
    if fw == "torch":
        return tuple(s * x.element_size() for s in x.stride())
    if fw == "paddle":
        return tuple(s * x.element_size() for s in x.strides)
    return ()


GRAD_LAYOUT = "an adjoint through a strided array's own gradient pointer (tiles, struct values)"


def _grad_pointer_arrays(pop: PropertyOp) -> list[int]:
    """The array arguments whose adjoint Warp accumulates through their own gradient pointer: every
    one of a tile kernel (``adj_tile_load``), those the flat kernel builds struct values from (a
    struct passed whole to a ``wp.func``)."""
    if pop.block_dim is not None:
        return list(range(len(pop.array_ndims)))
    if not pop.structs:
        return []
    from interop._structs import grad_pointer_params

    names = grad_pointer_params(pop.op.description.fn)
    arrays = [p.name for p in pop.op.description.call_params if p.is_array]
    return [k for k, name in enumerate(arrays) if name in names]


def _contiguous(fw: str, v) -> bool:
    """Packed in C order, as Warp addresses memory: a dimension of length 1 may have any stride
    (Paddle's own ``is_contiguous()`` says False for a 1-element strided view; the package, like
    torch, reads it as packed)."""
    shape, strides = tuple(v.shape), _strides(fw, v)
    itemsize = v.element_size() if fw in ("torch", "paddle") else v.itemsize
    want = itemsize
    for d, step in zip(reversed(shape), reversed(strides)):
        if d > 1 and step != want:
            return False
        want *= d
    return True


def _stride_order_is_c(fw: str, v) -> bool:
    """Whether the dims of ``v`` longer than 1, ordered by decreasing stride, are in C order: a
    dense copy made in ``v``'s stride order (torch's ``empty_like`` of a non-dense view) is then
    packed in C order."""
    dims = [d for d, n in enumerate(v.shape) if n > 1]
    st_ = _strides(fw, v)
    order = sorted(dims, key=lambda d: (-abs(st_[d]), d))
    return order == dims


def _components_packed(fw: str, v, inner: int) -> bool:
    """Whether the ``inner`` trailing (vec/mat component) dims of view ``v`` are packed (C order)."""
    shape, st_ = tuple(v.shape), _strides(fw, v)
    if not inner or not st_ or 0 in shape:
        return True
    expected = np.dtype(v.dtype).itemsize if fw in ("numpy", "cupy") else v.element_size()
    for k in range(len(shape) - 1, len(shape) - 1 - inner, -1):
        if shape[k] > 1 and st_[k] != expected:
            return False
        expected *= shape[k]
    return True


def expected_error(fw: str, c: Call, views: list, shapes: list) -> str | None:
    """The documented refusal this call must meet (a phrase of the message), or None."""
    pop = c.op
    if fw == "torch" and c.leaf_in_out:
        # checked before the arrays' layouts (issue 33 row d); a layout that copies (torch.flip) hands
        # the op a new tensor, which torch lets it update
        for k in pop.in_out:
            v = views[k]
            if v.requires_grad and (v.is_leaf or (v._base is not None and v._base.is_leaf)):
                return "leaf that requires grad"
    if partial_block(c):
        return "must run whole blocks"
    if pop.kind == "function" and c.scalar_kind == "0d_grad" and fw != "numpy":
        # wp.Tape records no scalar adjoint: refused at the call (torch, Paddle) or when JAX asks
        # for the scalar's gradient (issue 33 row c); a JAX path that asks for none (eager, jit: a
        # sequence keeps the scalar's kind when the path changes) reads the value (one sync on CUDA)
        if fw != "jax":
            return "no gradient for scalar"
        if c.path in ("grad", "jit_grad", "fwd_grad"):
            return "traced scalar"
    # (a Warp struct instance keeps the 0-d NumPy array set on its number field: among the Warp
    # arrays it is read as the number it holds, as at the top level)
    for v, inner in zip(views, pop.inner_ndims()):
        if fw == "numpy" and any(s < 0 for s in _strides(fw, v)) and v.size:
            return "negative strides"
        if fw == "cupy" and any(s < 0 for s in _strides(fw, v)) and v.size:
            return "negative strides?"  # not yet run on CuPy: a refusal or the right values
        if fw != "jax" and not _components_packed(fw, v, inner):
            # a struct's vec3 field too; torch.func.vmap's rule may hand the op packed copies
            return "vec components not contiguous" + ("?" if c.path == "vmap" else "")
    for k in pop.in_out:
        v, shp = views[k], shapes[k]
        st_ = _strides(fw, v)
        if any(s == 0 and d > 1 for s, d in zip(st_, shp)):
            return "in-out with two elements at one address"
        if fw == "numpy" and not v.flags.writeable and c.packing != "warp":
            return "read-only in-out"  # np.broadcast_to (a Warp array over its memory is writable)
    grad_paths = {"torch": ("eager", "compile", "func_grad", "hooks"), "paddle": ("eager", "hooks")}.get(fw, ())
    launched = math.prod(c.launch or pop.launch(c.n, c.m)) > 0  # an empty launch has no adjoint to run
    for k in _grad_pointer_arrays(pop):
        if c.path not in grad_paths or not c.grads[k] or not launched:
            continue
        # a negated view reaches the op as torch's copy of it, packed in the view's own stride order
        # (``empty_like``'s preserve_format): a transposed one stays transposed
        packed = _stride_order_is_c(fw, views[k]) if c.layouts[k].negated else _contiguous(fw, views[k])
        if math.prod(shapes[k]) and not packed:
            # Warp's adjoint writes through the array's own gradient pointer with the array's strides,
            # into the packed gradient the framework gives: refused at the backward (a tile kernel's
            # tile_load, a struct value built from the array; docs/contract.md, docs/structs.md)
            return GRAD_LAYOUT
    if c.path in ("fwd_grad", "func_fwd") and pop.block_dim is not None and any(c.grads) and not has_tangent(pop):
        return "no tangent rules for tiles"  # refused when the transform asks for the tangent
    if (
        fw == "torch"
        and c.path in ("func_grad", "func_fwd")
        and any(c.grads)
        and any(not c.grads[k] for k in pop.in_out)
    ):
        # the in-out is not an input of the transformed function: torch refuses to update it (a
        # subclass's own __torch_function__ may let the update through: then the values must be right)
        return "captured?"
    if fw == "jax" and _jax_scalar_is_array(c):
        if not c.x64 and np.dtype(c.op.scalar_dtype or c.dtype).itemsize == 8:
            # JAX made the traced or 0-d scalar 32-bit already: refused with the x64 hint
            return "64-bit types are disabled"
        sdt = _jax_scalar_dtype(c)
        if sdt is not None and sdt != np.dtype(c.op.scalar_dtype or c.dtype):
            return "scalar dtype"
    return None


def partial_block(c: Call) -> bool:
    """A ``wp.launch``-form tile op's launch that is not whole blocks of the call's ``block_dim``:
    refused at the call on every device (on CUDA a partial block's tile operations miss lanes), so no
    reference is launched either."""
    if c.op.tile_launch != "threads":
        return False
    return math.prod(c.launch or c.op.launch(c.n, c.m)) % (c.block_dim or c.op.block_dim) != 0


def call_kwargs(c: Call, launch: bool = True) -> dict:
    """The keyword arguments of the call: ``launch_dims`` (where the call passes it and ``launch``),
    ``block_dim`` (per call), and for an op whose launch and outputs are not read from its arrays both
    ``launch_dims`` and ``output_dims`` always (under vmap those of one batch element)."""
    kw: dict = {}
    if launch and c.launch:
        kw["launch_dims"] = c.launch
    if c.block_dim is not None:
        kw["block_dim"] = c.block_dim
    if c.op.explicit_dims:
        kw["launch_dims"] = c.launch or c.op.launch(c.n, c.m)
        kw["output_dims"] = c.op.out_shape(kw["launch_dims"])
    return kw


def _jax_scalar_is_array(c: Call) -> bool:
    """JAX hands the op the scalar as an array: a 0-d array, or any scalar passed into a jitted function."""
    return c.scalar_kind in ("0d", "0d_grad") or (c.path in ("jit", "jit_grad") and c.op.has_scalar)


def _jax_scalar_dtype(c: Call):
    """The dtype of that array (None: weakly typed, converted like jnp arithmetic converts it)."""
    if c.scalar_kind in ("py_float", "py_int"):
        return None
    if c.scalar_kind == "np_f32":
        return np.dtype(np.float32)
    if c.scalar_kind == "np_f64":
        return np.dtype(np.float64 if c.x64 else np.float32)
    dt = np.dtype(c.op.scalar_dtype or c.dtype)
    return np.dtype(np.float32) if dt == np.float64 and not c.x64 else dt  # JAX without x64


# ---- running a call in each framework ----------------------------------------------------------------
def _scalar_value(fw: str, c: Call):
    """The scalar argument as the call passes it, and the value the kernel must see."""
    dt = np.dtype(c.op.scalar_dtype or c.dtype)
    v = c.scalar
    if c.scalar_kind == "py_int":
        return int(v), dt.type(v)
    if c.scalar_kind == "py_float":
        return float(v), dt.type(v)
    if c.scalar_kind == "np_same":
        return dt.type(v), dt.type(v)
    if c.scalar_kind == "np_f32":
        return np.float32(v), dt.type(np.float32(v))
    if c.scalar_kind == "np_f64":
        return np.float64(v), dt.type(v)
    # 0-d arrays of the kernel's dtype
    a = np.asarray(v, dt)
    grad = c.scalar_kind == "0d_grad"
    if fw == "numpy":
        return a, dt.type(v)
    if fw == "torch":
        import torch

        return torch.tensor(a, requires_grad=grad, device=c.device), dt.type(v)
    if fw == "paddle":
        import paddle

        t = paddle.to_tensor(a, place=_paddle_place(c.device))
        t.stop_gradient = not grad
        return t, dt.type(v)
    if fw == "cupy":
        import cupy

        with cupy.cuda.Device(0):
            return cupy.asarray(a), dt.type(v)
    import jax.numpy as jnp

    return jnp.asarray(a, device=jax_device(c.device)), dt.type(v)


@dataclass
class Outcome:
    returned: list  # numpy arrays
    grads: list | None = None  # per array argument: gradient w.r.t. its base (None: not asked)
    gscalar: float | None = None
    after: list | None = None  # numpy/torch/paddle: each array argument's base after the call
    error: BaseException | None = None
    backward_error: BaseException | None = None
    aliased: list | None = None  # per array argument: its view shares the base's memory


def _aliased(views, srcs, nbytes) -> list:
    """Whether each view lies in its base's memory (a framework may make a view a copy)."""
    out = []
    for v, s, n in zip(views, srcs, nbytes):
        p, b = v.data_ptr(), s.data_ptr()
        out.append(b <= p < b + max(n, 1))
    return out


def _tol(dtype):
    return {"rtol": 2e-5, "atol": 2e-5} if np.dtype(dtype).itemsize <= 4 else {"rtol": 1e-10, "atol": 1e-10}


def _as_tuple(r):
    return list(r) if isinstance(r, (tuple, list)) else [r]


def _np(x) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return np.asarray(x)
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    if hasattr(x, "numpy") and type(x).__module__.startswith("paddle"):
        return x.numpy()
    return np.asarray(x)


@contextlib.contextmanager
def _x64(flag: bool):
    import jax

    with jax.enable_x64(flag):
        yield


def run_call(fw: str, c: Call) -> str:
    """Run call ``c`` in ``fw`` and check it against Warp; returns what was checked (for counting)."""
    pop = c.op
    rng = np.random.default_rng(c.seed)
    shapes = [tuple(s) for s in pop.array_shapes(c.n, c.m)]
    if c.batch:
        shapes = [(c.batch, *s) for s in shapes]
    bases = [rng.uniform(*pop.value_range(k), base_shape(lay, shp)).astype(c.dtype) for k, (lay, shp) in enumerate(zip(c.layouts, shapes))]  # fmt: skip
    values = [np.ascontiguousarray(view("index", b, replace(lay, subclass=False), shp)) for b, lay, shp in zip(bases, c.layouts, shapes)]  # fmt: skip
    launch = c.launch or pop.launch(c.n, c.m)
    # the reference (per batch element under vmap)
    with _x64(c.x64) if fw == "jax" else contextlib.nullcontext():
        s_arg, s_val = _scalar_value(fw, c)
    want_grad = fw not in ("numpy", "cupy") and (any(c.grads) or c.scalar_kind == "0d_grad")
    bd = c.block_dim
    if partial_block(c):  # refused at the call on every device: no reference (Warp's own is undefined on CUDA)
        want, weights, want_g, want_gs, want_grad = [], None, None, None, False
    elif c.batch:
        per = [
            warp_reference(pop, [v[b] for v in values], c.dtype, s_val, launch, device=c.device, block_dim=bd)
            for b in range(c.batch)
        ]
        want = [np.stack([p[0][k] for p in per]) for k in range(len(per[0][0]))]
        weights, want_g, want_gs = None, None, None
    else:
        want, _, _ = warp_reference(pop, values, c.dtype, s_val, launch, device=c.device, block_dim=bd)
        weights = [rng.uniform(0.5, 1.5, w.shape).astype(c.dtype) for w in want]
        want_g, want_gs = None, None
        if want_grad:
            _, want_g, want_gs = warp_reference(
                pop, values, c.dtype, s_val, launch, weights, device=c.device, block_dim=bd
            )
    with _x64(c.x64) if fw == "jax" else contextlib.nullcontext():
        out = RUNNERS[fw](c, bases, shapes, s_arg, weights if want_grad else None)
    # a documented refusal
    if out.error is not None:
        phrase = out.expected
        if (
            fw == "torch"
            and c.path == "compile"
            and phrase == "in-out with two elements at one address"
            and "more than one element of the written-to tensor refers to a single memory location" in str(out.error)
        ):
            # under torch.compile torch's fake copy_ refuses it first, in its own words (docs/limitations.md)
            return f"refused ({phrase}, by torch.compile)"
        if phrase is None or not isinstance(out.error, DOCUMENTED) or pop.op.description.label not in str(out.error):
            raise AssertionError(
                f"{fw} call {describe(c)} raised unexpectedly: {type(out.error).__name__}: {out.error}"
            ) from out.error
        return f"refused ({phrase})"
    if out.expected not in (None, GRAD_LAYOUT) and not out.expected.endswith("?"):  # "?": a refusal or the right values
        raise AssertionError(f"{fw} call {describe(c)}: expected a refusal ({out.expected}), the call ran")
    t = _tol(c.dtype)
    assert len(out.returned) == len(want), (len(out.returned), len(want))
    for k, (g, w) in enumerate(zip(out.returned, want)):
        assert g.dtype == w.dtype, f"returned #{k}: dtype {g.dtype}, want {w.dtype} ({describe(c)})"
        assert g.shape == w.shape, f"returned #{k}: shape {g.shape}, want {w.shape} ({describe(c)})"
        np.testing.assert_allclose(g, w, **t, err_msg=f"{fw} returned #{k} of {describe(c)}")
    # in-out arguments updated in place, inputs never written (mutable frameworks)
    if out.after is not None:
        ret_io = {k: out.returned[j] for j, k in enumerate(pop.in_out)}
        for k, (b0, b1) in enumerate(zip(bases, out.after)):
            if k == c.inplace:
                continue
            if k in ret_io and not out.aliased[k]:
                # the framework made the view a copy (torch.flip, paddle.flip, paddle.expand): the
                # in-out is that copy, the base stays as it was
                np.testing.assert_array_equal(b1, b0, err_msg=f"{fw} in-out #{k} of {describe(c)}")
            elif k in ret_io:
                expect = b0.copy()
                # the view's elements hold the new values: written through the same view of the base
                idx = view(
                    "index", np.arange(b0.size).reshape(b0.shape), replace(c.layouts[k], subclass=False), shapes[k]
                )
                expect.reshape(-1)[np.asarray(idx).ravel()] = ret_io[k].ravel()
                np.testing.assert_allclose(b1, expect, **t, err_msg=f"{fw} in-out #{k} (base) of {describe(c)}")
            else:
                np.testing.assert_array_equal(b1, b0, err_msg=f"{fw} input #{k} was written: {describe(c)}")
    if out.backward_error is not None:
        if c.inplace is not None:
            return "backward refused the modified input"
        e = out.backward_error
        # Paddle hands an error raised in a backward on as its OSError, with the text (limitations.md)
        documented = isinstance(e, DOCUMENTED) or (
            fw == "paddle" and isinstance(e, OSError) and "ArgumentError" in str(e)
        )
        if out.expected == GRAD_LAYOUT and documented and pop.op.description.label in str(e):
            return f"refused ({GRAD_LAYOUT}, at the backward)"
        raise AssertionError(f"{fw} backward of {describe(c)} raised {e!r}") from e
    if out.expected == GRAD_LAYOUT:
        raise AssertionError(f"{fw} call {describe(c)}: expected a refusal ({GRAD_LAYOUT}), the call ran")
    if out.grads is not None:
        gt = t if np.dtype(c.dtype).itemsize > 4 else {"rtol": 1e-4, "atol": 1e-4}
        for k, g in enumerate(out.grads):
            if g is None:
                continue
            w = scatter_grad(c.layouts[k], shapes[k], want_g[k])
            np.testing.assert_allclose(g, w, **gt, err_msg=f"{fw} gradient of array argument #{k} of {describe(c)}")
        if out.gscalar is not None:
            np.testing.assert_allclose(out.gscalar, want_gs, **gt, err_msg=f"{fw} scalar gradient of {describe(c)}")
        return "values and gradients"
    return "values"


def describe(c: Call) -> str:
    lays = ",".join(lay.kind() for lay in c.layouts)
    return (
        f"{c.op.id}(n={c.n}, m={c.m}, {np.dtype(c.dtype).name}, layouts=[{lays}], grads={list(map(int, c.grads))}, "
        f"scalar={c.scalar_kind}:{c.scalar}, path={c.path}, launch={c.launch}, inplace={c.inplace}, x64={c.x64}, "
        f"batch={c.batch}, vmap_method={c.vmap_method}, device={c.device}"
        + (f", block_dim={c.block_dim}" if c.block_dim else "")
        + (f", packing={c.packing}" if c.packing else "")
        + (", leaf_in_out=1" if c.leaf_in_out else "")
        + (", checked=1" if c.checked else "")
        + (", kept=0)" if not c.kept else ")")
    )


def count_call(fw: str, c: Call, outcome: str, source: str = "single calls") -> None:
    count(fw, "cases", source)
    count(fw, "device", c.device)
    count(fw, "op", c.op.id)
    count(fw, "path", c.path)
    count(fw, "dtype", np.dtype(c.dtype).name)
    for k, lay in enumerate(c.layouts):
        role = "in-out" if k in c.op.in_out else "input"
        count(fw, f"{role} layout", lay.kind())
        count(fw, f"{role} requires grad", c.grads[k])
    if c.op.has_scalar:
        count(fw, "scalar kind", c.scalar_kind)
    if c.packing:
        count(fw, "struct packing", c.packing)
    count(fw, "launch_dims", "per call" if c.launch else "default")
    count(fw, "checked", c.checked)
    if c.op.block_dim is not None:
        count(fw, "tile block_dim", c.block_dim or "the op's")
    if fw in ("torch", "paddle"):
        count(fw, "in-place after forward", c.inplace is not None)
    if fw == "torch" and any(c.grads[k] for k in c.op.in_out):
        count(fw, "in-out requiring grad passed as", "leaf" if c.leaf_in_out else "copy")
    if fw == "jax":
        count(fw, "x64", c.x64)
        if c.vmap_method:
            count(fw, "vmap_method", c.vmap_method)
        if c.op.op.description.kind == "function":
            count(fw, "function op's forward tape", "kept" if c.kept else "none kept (replayed)")
    count(fw, "outcome", outcome)


# ---- per framework -----------------------------------------------------------------------------------
_STRUCT_CALLS: dict = {}


_CHECKED_OPS: dict = {}


def checked_variant(op: interop.Op) -> interop.Op:
    """``op`` described again with ``checked=True`` (its own name: a registered torch operator and a
    JAX FFI target of its own), made once."""
    got = _CHECKED_OPS.get(op.name)
    if got is None:
        from interop import _op

        desc = replace(op.description, checked=True, name=f"{op.description.name}_checked")
        got = _CHECKED_OPS[op.name] = interop.Op(desc)
        _op._notify_adapters(got)
    return got


def op_callable(c: Call) -> Callable:
    """What the call calls with the leaves: the op (its checked variant for a checked call), or for a
    struct op the op behind the call's packing (StructCall packs the leaves into structures and takes
    the returned ones apart)."""
    op = checked_variant(c.op.op) if c.checked else c.op.op
    if c.packing is None:
        return op
    key = (c.op.id, c.packing, c.checked)
    if key not in _STRUCT_CALLS:
        _STRUCT_CALLS[key] = StructCall(op, c.packing)
    return _STRUCT_CALLS[key]


def _warp_view(v: np.ndarray, inner: int):
    """A Warp array over NumPy view ``v``'s memory (its strides, offset, broadcast), as a Warp user
    has them; ``inner`` trailing dims are the components of a vec element."""
    dtype = wp.dtype_from_numpy(v.dtype)
    if inner:
        dtype = wp.types.vector(v.shape[-1], dtype)
    shape = v.shape[: v.ndim - inner]
    if v.size == 0:
        return wp.empty(shape, dtype=dtype, device="cpu")
    return wp.array(ptr=v.__array_interface__["data"][0], shape=shape, strides=v.strides[: v.ndim - inner],
                    dtype=dtype, device="cpu")  # fmt: skip


def _run_numpy(c: Call, bases, shapes, s_arg, weights) -> Outcome:
    pop, opf = c.op, op_callable(c)
    arrs = [b.copy() for b in bases]
    views = [view("numpy", a, lay, shp) for a, lay, shp in zip(arrs, c.layouts, shapes)]
    o = Outcome([])
    o.expected = expected_error("numpy", c, views, shapes)
    if c.packing == "warp":  # Warp struct instances hold Warp arrays: every array of the call is one
        views = [_warp_view(v, inner) for v, inner in zip(views, pop.inner_ndims())]
    try:
        r = opf(*pop.call_args(views, s_arg), **call_kwargs(c))
    except Exception as e:  # noqa: BLE001 - checked by the caller
        o.error = e
        return o
    o.returned = [x.numpy().copy() if isinstance(x, wp.array) else np.array(x) for x in _as_tuple(r)]
    for j, k in enumerate(c.op.in_out):
        if not views[k].size:
            continue
        x = _as_tuple(r)[j]
        ok = x is views[k] if isinstance(x, wp.array) else np.shares_memory(x, arrs[k])
        if not ok:
            raise AssertionError(f"numpy in-out #{k} returned an array that is not the caller's: {describe(c)}")
    o.after = arrs
    o.aliased = [True] * len(arrs)
    return o


def _run_torch(c: Call, bases, shapes, s_arg, weights) -> Outcome:
    import torch

    pop, opf = c.op, op_callable(c)
    leaves = [torch.tensor(b, requires_grad=g, device=c.device) for b, g in zip(bases, c.grads)]
    # an in-out that requires grad is a non-leaf (a leaf that requires grad cannot be updated in place;
    # c.leaf_in_out passes the leaf, which the op refuses)
    srcs = [lf.clone() if (k in pop.in_out and c.grads[k] and not c.leaf_in_out) else lf for k, lf in enumerate(leaves)]
    o = Outcome([])
    views = [view("torch", s, lay, shp) for s, lay, shp in zip(srcs, c.layouts, shapes)]
    o.expected = expected_error("torch", c, views, shapes)
    kw = call_kwargs(c)
    try:
        if c.path == "no_grad":
            with torch.no_grad():
                r = opf(*pop.call_args(views, s_arg), **kw)
        elif c.path == "compile":

            def f(*ss):
                vs = [view("torch", s, lay, shp) for s, lay, shp in zip(ss, c.layouts, shapes)]
                return opf(*pop.call_args(vs, s_arg), **kw)

            torch.compiler.reset()  # a fresh compile per call: no recompile limit, no cached graph
            r = torch.compile(f, backend="aot_eager", fullgraph=True)(*srcs)
        elif c.path == "vmap":
            vkw = call_kwargs(c, launch=False)
            r = torch.func.vmap(lambda *vs: opf(*pop.call_args(list(vs), s_arg), **vkw))(*views)
        elif c.path in ("func_grad", "func_fwd"):
            # func_fwd: the same gradients by forward mode (jacfwd of the loss: tangent kernels)
            diff = [k for k in range(len(srcs)) if c.grads[k]]
            if diff:

                def loss(*ds):
                    ss = list(srcs)
                    for k, d in zip(diff, ds):
                        ss[k] = d.clone() if k in pop.in_out else d
                    vs = [view("torch", s, lay, shp) for s, lay, shp in zip(ss, c.layouts, shapes)]
                    rr = _as_tuple(opf(*pop.call_args(vs, s_arg), **kw))
                    total = sum((x * torch.tensor(w, device=c.device)).sum() for x, w in zip(rr, weights))
                    return total, tuple(x.detach() for x in rr)

                detached = [leaves[k].detach() for k in diff]
                transform = torch.func.grad if c.path == "func_grad" else torch.func.jacfwd
                gs, rr = transform(loss, argnums=tuple(range(len(diff))), has_aux=True)(*detached)
                o.returned = [x.cpu().numpy() for x in rr]
                o.grads = [None] * len(srcs)
                for k, g in zip(diff, gs):
                    o.grads[k] = g.cpu().numpy()
                return o
            r = opf(*pop.call_args(views, s_arg), **kw)
        elif c.path == "hooks":
            with SavedCopies("torch", restride=not _grad_pointer_arrays(pop))():
                r = opf(*pop.call_args(views, s_arg), **kw)
        else:
            r = opf(*pop.call_args(views, s_arg), **kw)
    except Exception as e:  # noqa: BLE001
        o.error = e
        return o
    rs = _as_tuple(r)
    for j, k in enumerate(pop.in_out):
        if c.path != "vmap" and rs[j] is not views[k] and c.path != "compile":
            raise AssertionError(f"torch in-out #{k}: the returned tensor is not the caller's ({describe(c)})")
    o.returned = [x.detach().cpu().numpy().copy() for x in rs]
    o.after = [s.detach().cpu().numpy().copy() for s in srcs]
    o.aliased = _aliased(views, srcs, [b.nbytes for b in bases])
    if weights is not None and c.path in ("eager", "compile", "hooks") and any(x.requires_grad for x in rs):
        if c.inplace is not None:
            with torch.no_grad():
                srcs[c.inplace].mul_(3.0)
        loss = sum((x * torch.tensor(w, device=c.device)).sum() for x, w in zip(rs, weights))
        try:
            loss.backward()
        except Exception as e:  # noqa: BLE001
            o.backward_error = e
            return o
        o.grads = [
            (lf.grad.cpu().numpy().copy() if lf.grad is not None else np.zeros(lf.shape)) if c.grads[k] else None
            for k, lf in enumerate(leaves)
        ]
        if c.scalar_kind == "0d_grad":
            o.gscalar = float(s_arg.grad) if s_arg.grad is not None else 0.0
    return o


def _paddle_place(device: str):
    """The Paddle place of a call's device ("cpu", "cuda" or "cuda:N")."""
    import paddle

    platform, _, index = device.partition(":")
    return paddle.CPUPlace() if platform == "cpu" else paddle.CUDAPlace(int(index or 0))


def _run_paddle(c: Call, bases, shapes, s_arg, weights) -> Outcome:
    import paddle

    pop, opf = c.op, op_callable(c)
    leaves = []
    for b, g in zip(bases, c.grads):
        t = paddle.to_tensor(b, place=_paddle_place(c.device))
        t.stop_gradient = not g
        leaves.append(t)
    srcs = [lf.clone() if (k in pop.in_out and c.grads[k]) else lf for k, lf in enumerate(leaves)]
    o = Outcome([])
    views = [view("paddle", s, lay, shp) for s, lay, shp in zip(srcs, c.layouts, shapes)]
    o.expected = expected_error("paddle", c, views, shapes)
    kw = call_kwargs(c)
    try:
        if c.path == "no_grad":
            with paddle.no_grad():
                r = opf(*pop.call_args(views, s_arg), **kw)
        elif c.path == "hooks":
            with SavedCopies("paddle", restride=not _grad_pointer_arrays(pop))():
                r = opf(*pop.call_args(views, s_arg), **kw)
        else:
            r = opf(*pop.call_args(views, s_arg), **kw)
    except Exception as e:  # noqa: BLE001
        o.error = e
        return o
    rs = _as_tuple(r)
    for j, k in enumerate(pop.in_out):
        if rs[j] is not views[k]:
            raise AssertionError(f"paddle in-out #{k}: the returned tensor is not the caller's ({describe(c)})")
    o.returned = [x.numpy().copy() for x in rs]
    o.after = [s.numpy().copy() for s in srcs]
    o.aliased = _aliased(views, srcs, [b.nbytes for b in bases])
    if weights is not None and c.path in ("eager", "hooks") and any(not x.stop_gradient for x in rs):
        if c.inplace is not None:
            with paddle.no_grad():
                srcs[c.inplace].scale_(3.0)
        loss = sum((x * paddle.to_tensor(w, place=_paddle_place(c.device))).sum() for x, w in zip(rs, weights))
        try:
            loss.backward()
        except Exception as e:  # noqa: BLE001
            o.backward_error = e
            return o
        o.grads = [
            (lf.grad.numpy().copy() if lf.grad is not None else np.zeros(lf.shape)) if c.grads[k] else None
            for k, lf in enumerate(leaves)
        ]
        if c.scalar_kind == "0d_grad":
            o.gscalar = float(s_arg.grad) if s_arg.grad is not None else 0.0
    return o


def _run_jax(c: Call, bases, shapes, s_arg, weights) -> Outcome:
    """:func:`_jax_call`, with no forward tape kept where the call says so (``kept``); a Python-function
    op's kept tapes must all have been used by the call's backward (none left behind)."""
    from interop._function_calls import KEPT

    limit = KEPT.limit
    if not c.kept:
        KEPT.limit = 0
    try:
        o = _jax_call(c, bases, shapes, s_arg, weights)
    finally:
        KEPT.limit = limit
    left = len(KEPT)
    KEPT.clear()
    if left and o.error is None:
        raise AssertionError(f"jax: {left} kept tape(s) left behind by the call ({describe(c)})")
    return o


def _jax_call(c: Call, bases, shapes, s_arg, weights) -> Outcome:
    import jax
    import jax.numpy as jnp

    pop, opf = c.op, op_callable(c)
    o = Outcome([])
    o.expected = None
    arrs = [jnp.asarray(b, device=jax_device(c.device)) for b in bases]
    if any(a.dtype != b.dtype for a, b in zip(arrs, bases)):
        raise AssertionError("jax converted an input's dtype: the generator should not make such a call")
    kw = call_kwargs(c)
    if c.vmap_method:
        kw["vmap_method"] = c.vmap_method
    traced_s = _jax_scalar_is_array(c)
    o.expected = expected_error("jax", c, [None] * len(arrs), shapes)

    def f(ss, s):
        vs = [view("jax", a, lay, shp) for a, lay, shp in zip(ss, c.layouts, shapes)]
        return tuple(_as_tuple(opf(*pop.call_args(vs, s), **kw)))

    def jit(fn):
        return jax.jit(fn) if traced_s else jax.jit(fn, static_argnums=1)

    try:
        if c.path == "eager":
            r = f(arrs, s_arg)
        elif c.path == "jit":
            r = jit(f)(arrs, s_arg)
        elif c.path in ("vmap", "jit_vmap"):
            vm = jax.vmap(lambda *vs: tuple(_as_tuple(opf(*pop.call_args(list(vs), s_arg), **kw))))
            views = [view("jax", a, lay, shp) for a, lay, shp in zip(arrs, c.layouts, shapes)]
            r = (jax.jit(vm) if c.path == "jit_vmap" else vm)(*views)
        else:  # grad, jit_grad: the returned arrays and the gradients from one value_and_grad
            # fwd_grad: the same gradients by forward mode (jacfwd of the loss: tangent kernels)
            diff = [k for k in range(len(arrs)) if c.grads[k]]
            want_s = c.scalar_kind == "0d_grad"

            def loss(dd, s):
                ss = list(arrs)
                for k, d in zip(diff, dd):
                    ss[k] = d
                rr = f(ss, s)
                total = (
                    sum(jnp.sum(x * jnp.asarray(w, device=jax_device(c.device))) for x, w in zip(rr, weights))
                    if weights
                    else jnp.zeros((), device=jax_device(c.device))
                )
                return total, rr

            g = jax.value_and_grad(loss, argnums=(0, 1) if want_s else 0, has_aux=True)
            if c.path == "fwd_grad":

                def g(dd, s):
                    if not dd and not want_s:  # nothing to differentiate (jacfwd needs an argument)
                        return (None, loss(dd, s)[1]), []
                    jf = jax.jacfwd(lambda dd, s: loss(dd, s)[0], argnums=(0, 1) if want_s else 0)
                    return (None, loss(dd, s)[1]), jf(dd, s)

            if c.path == "jit_grad":
                g = jit(g)
            (_, r), gr = g([arrs[k] for k in diff], s_arg)
            o.returned = [np.asarray(x) for x in r]
            if weights is not None:
                o.grads = [None] * len(arrs)
                gd = gr[0] if want_s else gr
                for k, gk in zip(diff, gd):
                    o.grads[k] = np.asarray(gk)
                if want_s:
                    o.gscalar = float(gr[1])
            return o
    except Exception as e:  # noqa: BLE001
        o.error = e
        return o
    o.returned = [np.asarray(x) for x in r]
    return o


def _run_cupy(c: Call, bases, shapes, s_arg, weights) -> Outcome:
    """CuPy (CUDA only): NumPy's view operations on device memory; no autograd (values and in-outs)."""
    import cupy

    pop, opf = c.op, op_callable(c)
    with cupy.cuda.Device(0):
        arrs = [cupy.asarray(b) for b in bases]
        views = [view("cupy", a, lay, shp) for a, lay, shp in zip(arrs, c.layouts, shapes)]
        o = Outcome([])
        o.expected = expected_error("cupy", c, views, shapes)
        kw = call_kwargs(c)
        try:
            r = opf(*pop.call_args(views, s_arg), **kw)
        except Exception as e:  # noqa: BLE001
            o.error = e
            return o
        rs = _as_tuple(r)
        for j, k in enumerate(pop.in_out):
            if views[k].size and rs[j] is not views[k] and not cupy.shares_memory(rs[j], arrs[k]):
                raise AssertionError(f"cupy in-out #{k}: the returned array is not the caller's ({describe(c)})")
        o.returned = [cupy.asnumpy(x) for x in rs]
        o.after = [cupy.asnumpy(a) for a in arrs]
        o.aliased = [True] * len(arrs)  # CuPy's slicing, transpose, flip and broadcast_to are views
    return o


RUNNERS: dict[str, Callable] = {
    "numpy": _run_numpy,
    "torch": _run_torch,
    "jax": _run_jax,
    "paddle": _run_paddle,
    "cupy": _run_cupy,
}
