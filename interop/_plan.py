"""Resolving one call: dtypes, launch dims and output shapes, from shapes and dtypes only.

A plan needs no data, only each argument's framework shape and dtype, so the same
code answers PyTorch's fake (meta) tensors, JAX's abstract evaluation and an eager
call. Plans are cached per op by their argument specs.
"""

from __future__ import annotations

import math
import typing
from typing import Any, NamedTuple, Sequence

import numpy as np
import warp as wp

from . import _dtypes, _extent
from . import _warp_compat as _wpt
from ._description import (
    CUDA_BLOCK_DIM,
    IN_OUT,
    DtypeOf,
    OpDescription,
    Param,
    normalize_dims,
    normalize_output_dims,
    tile_grid_rank,
    tile_launch_given,
)
from ._errors import ArgumentError
from ._warp_compat import type_size_in_bytes


class ArraySpec(NamedTuple):
    """Framework view of an array argument: full shape (outer + vec/mat dims) and NumPy dtype."""

    shape: tuple[int, ...]
    dtype: np.dtype


class ScalarSpec(NamedTuple):
    """A scalar argument: ``kind`` is ``"py"`` (a Python/NumPy number, ``dtype`` its type) or
    ``"ref"`` (a value held in device memory, e.g. a 0-d tensor or a traced JAX value,
    with its framework ``shape`` and ``dtype``)."""

    kind: str
    dtype: Any
    shape: tuple[int, ...] = ()


class CallPlan:
    """Everything about one call that depends on shapes and dtypes only.

    Attributes:
        desc: the op description.
        kernel: the concrete Warp kernel (an overload for generic kernels), or the function.
        launch_dims: launch dimensions (None for function ops).
        types: per parameter, the concrete Warp element type.
        warp_shapes: per parameter, the Warp (outer) shape; None for scalars.
        out_specs: per returned parameter, its framework ArraySpec.
        differentiable: per parameter, can it receive a gradient in this call.
        scalar_refs: names of scalar parameters passed by reference (in memory).
    """

    __slots__ = (
        "desc",
        "kernel",
        "launch_dims",
        "types",
        "warp_shapes",
        "out_specs",
        "differentiable",
        "scalar_refs",
        "zero",
        "runner",
        "__weakref__",
    )

    def __init__(
        self, desc, kernel, launch_dims, types, warp_shapes, out_specs, differentiable, scalar_refs, zero=None
    ):
        self.desc = desc
        # per returned parameter (out_specs order): whether its new buffer is zero-filled before the
        # launch (outputs of a zero_outputs op that the launch does not provably write entirely)
        self.zero = zero if zero is not None else tuple(desc.zero_outputs for _ in out_specs)
        self.kernel = kernel
        self.launch_dims = launch_dims
        self.types = types
        self.warp_shapes = warp_shapes
        self.out_specs = out_specs
        self.differentiable = differentiable
        self.scalar_refs = scalar_refs
        # the plan's launcher (interop._launch.Runner), set by the op that made the plan: the
        # launch layer sits above the plan (STYLE.md 15)
        self.runner: Any = None

    def framework_shape(self, param: Param) -> tuple[int, ...]:
        return tuple(self.warp_shapes[param.index]) + self._inner(param)

    def _inner(self, param: Param) -> tuple[int, ...]:
        return _dtypes.split(self.types[param.index])[1]

    def __repr__(self) -> str:
        return f"CallPlan({self.desc.name!r}, launch_dims={self.launch_dims}, outputs={list(self.out_specs)})"


def _err(desc: OpDescription, p: Param, expected: str, got: str) -> ArgumentError:
    return ArgumentError(f"op {desc.label!r}, parameter {p.name!r}: expected {expected}, got {got}")


def _spec_text(spec: ArraySpec) -> str:
    d = np.dtype(spec.dtype)
    order = (
        "" if d.isnative else f" ({'big' if d.byteorder == '>' else 'little'}-endian: not this machine's byte order)"
    )
    return f"an array of shape {tuple(spec.shape)} and dtype {d.name}{order}"


def _resolve_array(desc: OpDescription, p: Param, spec: ArraySpec) -> tuple[Any, tuple[int, ...]]:
    """(concrete Warp element type, warp outer shape) of array argument ``spec`` for ``p``."""
    shape = tuple(int(s) for s in spec.shape)
    if _wpt.is_struct(p.dtype):
        if np.dtype(spec.dtype) != _wpt.struct_numpy_dtype(p.dtype) or len(shape) != p.ndim:
            raise _err(desc, p, p.expected_text(), _spec_text(spec))
        return p.dtype, shape
    scalar = _dtypes.wp_scalar(spec.dtype)
    if scalar is None:
        raise _err(desc, p, p.expected_text(), f"{_spec_text(spec)} (dtype not supported by Warp)")
    if p.generic:
        extra = len(shape) - p.ndim
        inner = p.inner
        if not inner:
            if p.scalar is not typing.Any and extra != 0:
                # a generic scalar type (wp.Float, wp.Int, wp.Scalar) takes no vec/mat trailing dims
                raise _err(desc, p, f"a {p.ndim}-d array of {_dtypes.type_name(p.scalar)}", _spec_text(spec))
            if extra not in (0, 1, 2):
                raise _err(
                    desc,
                    p,
                    f"a {p.ndim}-d array (plus up to 2 trailing vec/mat dims)",
                    _spec_text(spec),
                )
            inner = shape[p.ndim :]
        elif tuple(shape[p.ndim :]) != tuple(inner):
            raise _err(desc, p, p.expected_text(), _spec_text(spec))
        gscalar = p.scalar
        if gscalar is not typing.Any and not _dtypes.is_generic(gscalar) and gscalar != scalar:
            raise _err(desc, p, p.expected_text(), _spec_text(spec))
        if gscalar is _wpt.Float and not _dtypes.is_float(scalar):
            raise _err(desc, p, "a float array (generic Float)", _spec_text(spec))
        if gscalar is _wpt.Int and _dtypes.is_float(scalar):
            raise _err(desc, p, "an integer array (generic Int)", _spec_text(spec))
        return _dtypes.compose(scalar, tuple(inner)), shape[: p.ndim]
    expected_ndim = p.framework_ndim
    if len(shape) != expected_ndim or tuple(shape[p.ndim :]) != p.inner:
        if len(shape) == expected_ndim and p.inner:
            got = f"{_spec_text(spec)}: trailing dims {tuple(shape[p.ndim :])}, expected {p.inner}"
        else:
            got = _spec_text(spec)
        raise _err(desc, p, p.expected_text(), got)
    if scalar != p.scalar:
        raise _err(
            desc,
            p,
            f"{p.expected_text()} (dtype {np.dtype(_dtypes.np_dtype(p.scalar)).name})",
            f"{_spec_text(spec)}; arrays are never cast, convert it first",
        )
    return p.dtype, shape[: p.ndim]


def _as_output_shape(desc: OpDescription, p: Param, elem: Any, dims: tuple[int, ...], source: str) -> tuple[int, ...]:
    inner = _dtypes.split(elem)[1]
    if len(dims) == p.ndim:
        return dims
    if inner and len(dims) == p.ndim + len(inner) and tuple(dims[p.ndim :]) == inner:
        return dims[: p.ndim]
    accepted = f"{p.ndim} dims" + (f", or {p.ndim + len(inner)} ending in {inner}" if inner else "")
    raise ArgumentError(
        f"op {desc.label!r}, output {p.name!r}: {source} {dims} does not fit a {p.ndim}-d array of "
        f"{_dtypes.type_name(elem)} (expected {accepted}); pass output_dims={{{p.name!r}: ...}}"
    )


def _scalar_type(desc: OpDescription, p: Param, spec: ScalarSpec, generic_scalar: Any) -> Any:
    """Concrete Warp type for scalar parameter ``p`` given ``spec``."""
    target = p.dtype
    if p.generic:
        if generic_scalar is not None:
            target = _dtypes.compose(generic_scalar, p.inner) if p.inner else generic_scalar
        elif spec.kind == "ref" or (spec.kind == "py" and isinstance(spec.dtype, np.dtype)):
            s = _dtypes.wp_scalar(spec.dtype)
            if s is None:
                raise _err(desc, p, "a number", f"dtype {spec.dtype}")
            target = s
        else:
            target = _dtypes.normalize(spec.dtype)
            if target not in _dtypes._WP_TO_NP:
                raise _err(desc, p, "a number", f"{spec.dtype!r}")
    tscalar, tinner = _dtypes.split(target)
    if spec.kind == "ref":
        got_scalar = _dtypes.wp_scalar(spec.dtype)
        if got_scalar != tscalar or tuple(spec.shape) != tuple(tinner):
            raise _err(
                desc,
                p,
                f"a {_dtypes.type_name(target)} value ("
                + (
                    f"an array of {np.dtype(_dtypes.np_dtype(tscalar)).name} of shape {tuple(tinner)}, or a tuple "
                    f"of {math.prod(tinner)} numbers)"
                    if tinner
                    else f"a 0-d array of {np.dtype(_dtypes.np_dtype(tscalar)).name} or a Python number)"
                ),
                f"an array of shape {tuple(spec.shape)} and dtype {np.dtype(spec.dtype).name}",
            )
    elif spec.kind == "py":
        kind = spec.dtype
        if isinstance(kind, np.dtype):
            ok = (
                (_dtypes.is_float_dtype(kind) and _dtypes.is_float(tscalar))
                or (kind.kind in "iu" and not _dtypes.is_float(tscalar) and tscalar is not wp.bool)
                or (kind.kind == "b" and tscalar is wp.bool)
            )
            if kind.kind in "iu" and _dtypes.is_float(tscalar):
                ok = True  # an integer value is exact in a float parameter
        elif kind is bool:
            ok = tscalar is wp.bool
        elif kind is int:
            ok = tscalar is not wp.bool
        elif kind is float:
            ok = _dtypes.is_float(tscalar)
        else:
            ok = bool(tinner)  # sequences / Warp vector values for vec/mat params
        if not ok:
            raise _err(desc, p, f"a {_dtypes.type_name(target)} value", f"{getattr(kind, '__name__', kind)}")
    return target


def _output_dtype(desc: OpDescription, p: Param, rule: Any, types: list) -> Any:
    """The element type ``output_dtypes`` gives generic output ``p`` for a call whose call
    parameters resolved to ``types``; an error when it does not fit the output's annotation."""
    if isinstance(rule, DtypeOf):
        src = types[desc.param(rule.param).index]
        scalar = _dtypes.split(src)[0]
        inner = rule.inner or p.inner
    else:
        scalar, inner = _dtypes.split(rule)
        inner = inner or p.inner
    if p.inner and tuple(inner) != tuple(p.inner):
        raise ArgumentError(
            f"op {desc.label!r}, output {p.name!r}: output_dtypes gives it {_dtypes.type_name(rule)}, but it is "
            f"annotated {p.expected_text()}"
        )
    gscalar = p.scalar
    if (gscalar is _wpt.Float and not _dtypes.is_float(scalar)) or (gscalar is _wpt.Int and _dtypes.is_float(scalar)):
        raise ArgumentError(
            f"op {desc.label!r}, output {p.name!r}: output_dtypes gives it {_dtypes.type_name(scalar)} in this "
            f"call, but it is annotated {p.expected_text()}"
        )
    return _dtypes.compose(scalar, tuple(inner))


def number_type(desc: OpDescription, p: Param, number: type, generic_scalar: Any = None) -> Any:
    """Warp type a Python ``number`` (``float``, ``int`` or ``bool``) takes for scalar parameter ``p``.

    ``generic_scalar`` is the scalar type the call's generic arrays resolve to (None if none).
    Raises the error a Python number of that kind would meet (e.g. a float for an int parameter).
    """
    return _scalar_type(desc, p, ScalarSpec("py", number), generic_scalar)


def default_launch(desc: OpDescription, shape_of: Any, *, check: bool = True) -> tuple[int, ...]:
    """The launch dims of a kernel call that gives no ``launch_dims``: the domain the kernel is
    written for (docs/contract.md, "Launch dimensions").

    - When the first array input is indexed by the thread index, one dimension per index, in order
      (``i = wp.tid()`` then ``a[i]`` or ``a[i + 1]``; ``i, j = wp.tid()`` then ``a[i, j]``), its shape.
    - Otherwise each launch dimension takes the extent of the array inputs the kernel indexes with
      that bare thread index anywhere in its body (newton's ``eval_springs`` reads particles through
      spring indices and springs by ``tid``: one thread per spring); they must agree. With none, the
      first array input indexed by that thread index shifted by a constant (``a[i + 1]``); with
      none either, the first array input's extent when it is indexed by another thread index and
      has one dimension per thread index (``i, lane = wp.tid()`` then ``x[i]`` in a tile kernel).
    - When no array input is indexed so, the first array input's shape (Warp's own default).
    - When some are, but a launch dimension is indexed by none of them, an error.

    Args:
        desc: a kernel op's description.
        shape_of: ``name -> Warp (outer) shape`` of an array input or in-out (ints, or a tracer's
            symbolic sizes, returned as they are).
        check: raise when indexed arrays disagree (False: the first one decides; for placeholder
            shapes, whose real call checks).

    Raises:
        ArgumentError naming the op, the arrays and their extents, asking for ``launch_dims=``.
    """
    arrays = [p for p in desc.call_params if p.is_array]
    if not arrays:
        raise ArgumentError(
            f"op {desc.label!r}: cannot infer the launch dimensions: the op has no array input; pass launch_dims="
        )
    first = arrays[0]
    # a wp.launch_tiled kernel: its tile grid (the thread indices but its lane)
    domain = desc.domain[: tile_grid_rank(desc)] if desc.tiles and desc.tile_form[0] == "tiled" else desc.domain
    if first.ndim == len(domain) and all(any(t[:2] == (first.name, d) for t in ts) for d, ts in enumerate(domain)):
        return tuple(shape_of(first.name))
    names = {p.name for p in arrays}
    launch = []
    for d, triples in enumerate(domain):
        seen = [(n, k, shape_of(n)[k]) for n, k, exact in triples if n in names and exact]
        seen = seen or [(n, k, shape_of(n)[k]) for n, k, exact in triples if n in names][:1]
        if not seen:
            if first.ndim == len(domain) and any(t[0] == first.name for ts in domain for t in ts):
                launch.append(shape_of(first.name)[d])  # the first array is one of them: its extent
                continue
            break
        if check and any(e != seen[0][2] for _, _, e in seen):
            text = ", ".join(f"{n!r} dim {k} has extent {e}" for n, k, e in seen)
            raise ArgumentError(
                f"op {desc.label!r}: cannot infer the launch dimensions: the kernel indexes several arrays with "
                f"wp.tid() dimension {d} and they disagree ({text}); pass arrays of one extent, or launch_dims= "
                "to say how many threads to run"
            )
        launch.append(seen[0][2])
    if domain and len(launch) == len(domain):
        return tuple(launch)
    indexed = {t[0] for ts in domain for t in ts if t[0] in names}
    if not indexed and not desc.tiles:
        # nothing says otherwise: the first array input's shape, as Warp's own jax_kernel does (its
        # guide's funky_kernel reads a[i % a.shape[0]] and relies on it)
        return tuple(shape_of(first.name))
    what = (
        f"no array input it indexes with wp.tid() dimension {len(launch)} tells its extent"
        if indexed
        else "the kernel indexes none of its array inputs with its bare thread index (i = wp.tid() then a[i])"
    )
    raise ArgumentError(
        f"op {desc.label!r}: cannot infer the launch dimensions: {what}; pass launch_dims= (to interop.op or "
        "to the call) with the number of threads to run"
    )


def tile_launch(desc: OpDescription, ld: tuple | None, shape_of: Any, *, check: bool = True) -> tuple:
    """The launch dims of a tile kernel call, as Warp's own code launches the kernel (its form is
    read from the kernel: ``OpDescription.tile_form``; docs/contract.md, "Devices"):

    - ``"threads"`` (``i = wp.tid()`` indexes array elements and no tile coordinate): as
      ``wp.launch(kernel, dim, block_dim=b)``: ``launch_dims`` or the domain inferred as for any
      kernel (:func:`default_launch`); :func:`check_whole_blocks` refuses partial blocks.
    - ``"tiled"`` (thread indices read tile coordinates): as ``wp.launch_tiled(kernel, dim=grid,
      block_dim=b)``, ``(*grid, b)``: the grid is ``launch_dims`` (:func:`_blocks.tile_launch_given`)
      or read from the thread indices but the lane (``i, lane = wp.tid()`` then
      ``wp.tile_load(x[i], ...)``: one tile per row of ``x``).
    - ``"none"`` (no ``wp.tid()``): one block per element of ``launch_dims``, which must be given.

    ``b`` is the op's ``block_dim`` or Warp's CUDA default (256), one decision for every device;
    on the CPU the launch then runs the lanes Warp gives a CPU block (:func:`device_launch_dims`).

    Raises:
        ArgumentError naming the op, ``launch_dims`` and ``block_dim``.
    """
    form = desc.tile_form[0]
    if form == "threads":
        return tuple(ld) if ld is not None else tuple(default_launch(desc, shape_of, check=check))
    if ld is not None:
        return tile_launch_given(desc, ld)
    bd = desc.block_dim or CUDA_BLOCK_DIM
    why = f"block_dim={desc.block_dim}" if desc.block_dim else f"block_dim unset: Warp's CUDA default {bd}"
    if form == "none":
        raise ArgumentError(
            f"op {desc.label!r}: cannot infer the launch dimensions of a tile kernel without wp.tid(): pass "
            f"launch_dims= with the number of blocks to run, as wp.launch_tiled's dim (launch_dims=1: one "
            f"block, as wp.launch(kernel, dim=1) runs it; each block has {bd} threads, {why})"
        )
    g = tile_grid_rank(desc)
    if g == 0:
        raise ArgumentError(
            f"op {desc.label!r}: cannot infer the launch dimensions of a tile kernel whose wp.tid() names only "
            f"the block's lane; pass launch_dims=({bd},) for one block (the full launch, ending with the block's "
            f"{bd} threads, {why})"
        )
    try:
        grid = default_launch(desc, shape_of, check=check)
    except ArgumentError as e:
        raise ArgumentError(
            f"{e} (a tile kernel: launch_dims= takes its tile grid of {g} dim(s), as wp.launch_tiled's dim; "
            f"the block's {bd} threads are appended, {why})"
        ) from None
    return tuple(grid) + (bd,)


def tile_output_dims(desc: OpDescription, launch: tuple) -> tuple[tuple, str]:
    """The default output dims of a tile kernel call with full launch dims ``launch``, and what
    they are: a ``wp.launch``-form kernel's launch (one element per thread, as any kernel's), else
    the tile grid (one element per tile)."""
    if desc.tile_form[0] == "threads":
        return tuple(launch), "launch_dims (one element per thread)"
    return tuple(launch[:-1]) or (1,), "the tile grid (launch_dims without the block's lanes)"


def check_whole_blocks(desc: OpDescription, launch: tuple) -> None:
    """A ``wp.launch``-form tile kernel (``"threads"``) must run whole blocks: on CUDA the threads
    past the launch's size leave a partial block before its tile operations, which then miss their
    lanes' share (only the CPU, one lane per block, would be right). Refused on every device."""
    if not desc.tiles or desc.tile_form[0] != "threads":
        return
    total = 1
    for d in launch:
        total *= d
    bd = desc.block_dim or CUDA_BLOCK_DIM
    if total % bd == 0:
        return
    why = f"block_dim={desc.block_dim}" if desc.block_dim else f"block_dim unset: Warp's CUDA default {bd}"
    fits = next((b for b in (1024, 512, 256, 128, 64, 32, 16, 8, 4, 2, 1) if total % b == 0), 1)
    raise ArgumentError(
        f"op {desc.label!r}: a tile kernel launched one thread per element (wp.tid() indexes its arrays, as "
        f"wp.launch(kernel, dim, block_dim) runs it) must run whole blocks: launch_dims={tuple(launch)} is "
        f"{total} threads, not a multiple of the block's {bd} ({why}); on CUDA a partial block's tile "
        f"operations would miss lanes. Pass block_dim= a divisor of {total} (e.g. block_dim={fits}), or "
        f"arrays / launch_dims= whose size is a multiple of {bd}"
    )


def device_launch_dims(desc: OpDescription, launch: tuple, device: Any) -> tuple:
    """``launch`` as it runs on ``device``: a tile kernel's lanes are the threads Warp gives one
    block there (on the CPU one, unless ``wp.config.enable_cpu_blocks`` and a ``block_dim``; as
    ``wp.launch_tiled`` resolves them), so each tile is computed once on every device."""
    if not desc.tiles or not launch or desc.tile_form[0] == "threads":
        return launch  # a wp.launch-form tile kernel: Warp's plain launch, block_dim passed on
    lanes = _wpt.block_threads(device, desc.block_dim)
    return launch if lanes == launch[-1] else tuple(launch[:-1]) + (lanes,)


def make_plan(
    desc: OpDescription,
    specs: Sequence[Any],
    launch_dims: Any = None,
    output_dims: Any = None,
    *,
    extents: bool = True,
) -> CallPlan:
    """Resolve a call of ``desc`` from the specs of its call parameters (in order).

    Args:
        desc: op description.
        specs: one :class:`ArraySpec` per array call parameter and one :class:`ScalarSpec`
            per scalar, in the order of ``desc.call_params``.
        launch_dims: per-call override (int or tuple), or None.
        output_dims: per-call override (int, tuple, or dict by output name), or None.
        extents: check arrays' extents against the launch (see ``interop/_extent.py``);
            False for plans made from placeholder shapes.

    Raises:
        TypeError / ValueError naming the op and parameter.
    """
    call_params = desc.call_params
    if len(specs) != len(call_params):
        raise ArgumentError(
            f"op {desc.label!r} takes {len(call_params)} argument(s) {[p.name for p in call_params]}, got {len(specs)}"
        )
    n = len(desc.params)
    types: list[Any] = [None] * n
    shapes: list[Any] = [None] * n
    generic_elem, scalar_refs = _input_types(desc, specs, types, shapes)
    ld, od = _call_dims(desc, launch_dims, output_dims)
    _output_types(desc, od, generic_elem, types, shapes)
    # an output written at other indices than the thread's is never sized from the launch
    _extent.check_scattered(
        desc.label, desc.fn, desc.scattered, {p.name for p in desc.output_params if shapes[p.index] is not None}
    )
    default_dims, source, tile_dims = _default_dims(desc, ld, shapes, extents)
    for p in desc.output_params:
        if shapes[p.index] is not None:
            continue
        if default_dims is None:
            raise ArgumentError(
                f"op {desc.label!r}: cannot size output {p.name!r}: the op has no array input; "
                "pass launch_dims= (or output_dims=)"
            )
        dims = tuple(default_dims)
        perm = dict(desc.permuted).get(p.name)
        if perm is not None:  # written at another order of the thread indices (a transpose)
            if len(perm) != len(dims):
                raise ArgumentError(
                    f"op {desc.label!r}, output {p.name!r}: the kernel writes it at its thread indices in "
                    f"another order, which a {len(dims)}-d launch {dims} does not size; pass "
                    f"output_dims={{{p.name!r}: shape}}"
                )
            dims, source = tuple(dims[k] for k in perm), f"{source}, permuted {perm} as the kernel writes it,"
        shapes[p.index] = _as_output_shape(desc, p, types[p.index], dims, source)
    for p in desc.output_params if extents else ():
        _extent.check_output(desc.label, p.name, shapes[p.index], type_size_in_bytes(types[p.index]))
    kernel, launch = _kernel_and_launch(desc, default_dims, tile_dims, types, shapes, extents)

    out_specs = []
    for p in desc.returned_params:
        scalar, inner = _dtypes.split(types[p.index])
        out_specs.append(ArraySpec(tuple(shapes[p.index]) + inner, _dtypes.np_dtype(scalar)))
    diff = tuple(p.differentiable and _dtypes.is_float(_dtypes.split(types[p.index])[0]) for p in desc.params)
    full = frozenset()
    if launch is not None and desc.written:
        full = _extent.fully_written(desc.written, launch, {p.name: shapes[p.index] for p in desc.output_params})
    zero = tuple(desc.zero_outputs and p.name not in full for p in desc.returned_params)
    return CallPlan(
        desc,
        kernel,
        launch,
        tuple(types),
        tuple(None if s is None else tuple(s) for s in shapes),
        tuple(out_specs),
        diff,
        tuple(scalar_refs),
        zero,
    )


def _input_types(desc: OpDescription, specs: Sequence[Any], types: list, shapes: list) -> tuple[Any, list]:
    """Fill ``types`` and ``shapes`` of the call parameters; returns ``(the element type that
    resolves generic parameters or None, the scalars passed by reference)``. Arrays first: they fix
    generic types, which the scalars then take."""
    generic_elem = None
    generic_scalar = None
    for p, spec in zip(desc.call_params, specs):
        if not p.is_array:
            continue
        if not isinstance(spec, ArraySpec):
            raise _err(desc, p, p.expected_text(), "a scalar")
        elem, wshape = _resolve_array(desc, p, spec)
        _extent.check_array(desc.label, f"parameter {p.name!r}", wshape, type_size_in_bytes(elem))
        types[p.index] = elem
        shapes[p.index] = wshape
        if p.generic and generic_elem is None:
            generic_elem = elem
            generic_scalar = _dtypes.split(elem)[0]
    scalar_refs = []
    for p, spec in zip(desc.call_params, specs):
        if p.is_array:
            continue
        if isinstance(spec, ArraySpec):
            spec = ScalarSpec("ref", spec.dtype, tuple(spec.shape))
        types[p.index] = _scalar_type(desc, p, spec, generic_scalar)
        if spec.kind == "ref":
            scalar_refs.append(p.name)
    return generic_elem, scalar_refs


def _call_dims(desc: OpDescription, launch_dims: Any, output_dims: Any) -> tuple[Any, Any]:
    """The call's ``(launch_dims, output_dims)``: the per-call overrides, else the op's."""
    ld = desc.launch_dims if launch_dims is None else normalize_dims(launch_dims, "launch_dims", desc.label)
    if desc.kind == "function" and launch_dims is not None:
        raise ArgumentError(
            f"op {desc.label!r}: launch_dims does not apply to a Python-function op (it launches its own "
            "kernels); use output_dims to size its outputs"
        )
    od = desc.output_dims
    if output_dims is not None:
        od = normalize_output_dims(output_dims, desc.output_params, desc.label)
    return ld, od


def _output_types(desc: OpDescription, od: Any, generic_elem: Any, types: list, shapes: list) -> None:
    """Fill ``types`` of the pure outputs (declared, by ``output_dtypes=`` rule, or resolved from
    the generic inputs) and ``shapes`` of those ``output_dims`` sizes."""
    generic_scalar = None if generic_elem is None else _dtypes.split(generic_elem)[0]
    by_name = dict(od[1]) if od is not None and od[0] == "by_name" else {}
    rules = dict(desc.output_dtypes)
    for p in desc.output_params:
        elem = p.dtype
        if p.name in rules:
            elem = _output_dtype(desc, p, rules[p.name], types)
        elif p.generic:
            if generic_elem is None:
                raise ArgumentError(
                    f"op {desc.label!r}, output {p.name!r}: its dtype is generic and no generic array input "
                    "fixes it; give the output a concrete dtype"
                )
            if p.inner or p.scalar is not typing.Any:
                # a generic vec/mat or a generic scalar type (wp.Float...) takes only the resolved scalar
                elem = _dtypes.compose(generic_scalar, p.inner)
            else:
                elem = generic_elem
        types[p.index] = elem
        if od is not None and od[0] == "all":
            shapes[p.index] = _as_output_shape(desc, p, elem, tuple(od[1]), "output_dims")
        elif p.name in by_name:
            shapes[p.index] = _as_output_shape(desc, p, elem, tuple(by_name[p.name]), f"output_dims[{p.name!r}]")


def _default_dims(desc: OpDescription, ld: Any, shapes: list, extents: bool) -> tuple[Any, Any, Any]:
    """``(the dims an output without output_dims takes, where they come from, the tile launch or
    None)``: a tile kernel's launch, else ``launch_dims``, else the domain read from the kernel,
    else (a Python-function op) the first array input's shape."""
    first = next((p for p in desc.call_params if p.is_array), None)
    by_param = {p.name: shapes[p.index] for p in desc.call_params if p.is_array}
    if desc.tiles:
        tile_dims = tile_launch(desc, ld, by_param.__getitem__, check=extents)
        if extents:
            check_whole_blocks(desc, tile_dims)
        default_dims, source = tile_output_dims(desc, tile_dims)
        return default_dims, source, tile_dims
    if ld is not None:
        return ld, "launch_dims", None
    if desc.kind == "kernel":
        unsized = next((p for p in desc.output_params if shapes[p.index] is None), None)
        if first is None and unsized is not None:
            raise ArgumentError(
                f"op {desc.label!r}: cannot size output {unsized.name!r}: the op has no array input; "
                "pass launch_dims= (or output_dims=)"
            )
        default_dims = default_launch(desc, by_param.__getitem__, check=extents)
        return default_dims, "the launch dims inferred from the arrays the kernel indexes with wp.tid()", None
    if first is not None:
        return tuple(shapes[first.index]), f"the shape of the first array input {first.name!r}", None
    return None, None, None


def _kernel_and_launch(
    desc: OpDescription, default_dims: Any, tile_dims: Any, types: list, shapes: list, extents: bool
) -> tuple[Any, Any]:
    """``(the kernel to launch, the launch dims)``: for a kernel, its overload for these types and
    the launch checked against the arrays' extents; a Python-function op has no launch."""
    if desc.kind != "kernel":
        return desc.fn, None
    launch = tuple(default_dims) if tile_dims is None else tile_dims
    _extent.check_launch(desc.label, launch)
    if extents:
        _extent.check_extents(
            desc.label,
            desc.direct_index,
            launch,
            {p.name: shapes[p.index] for p in desc.params if p.is_array},
            {p.name: p.role for p in desc.params},
            tiled=tile_dims is not None and desc.tile_form[0] == "tiled",
        )
    kernel = desc.fn
    if kernel.is_generic:
        arg_types = []
        for p in desc.params:
            if p.is_array:
                arg_types.append(wp.array(dtype=types[p.index], ndim=p.ndim))
            else:
                arg_types.append(types[p.index])
        kernel = _overload(desc, kernel, arg_types, types)
    return kernel, launch


def _overload(desc: OpDescription, kernel: Any, arg_types: list, types: list) -> Any:
    """The overload of generic ``kernel`` for ``arg_types``, checked by Warp's front end when new, so
    a body that does not fit the types fails here, while planning (at trace time under ``jax.jit``
    and ``torch.compile``, as a plain call), with an :class:`ArgumentError` naming every argument's
    type, and never leaves a broken overload in the module for later calls."""
    before = len(kernel.overloads)
    ovl = kernel.add_overload(arg_types)
    if len(kernel.overloads) == before:
        return ovl  # made (and checked) before
    try:
        _wpt.check_kernel_types(ovl)
    except Exception as e:
        for sig, o in list(kernel.overloads.items()):
            if o is ovl:
                del kernel.overloads[sig]
        kernel.module.mark_modified()
        raise generic_build_error(desc, types, e) from e
    return ovl


def generic_build_error(desc: OpDescription, types: Sequence[Any], e: Exception) -> ArgumentError:
    """The error of a generic kernel Warp could not build for a call's types: every argument's type
    and, where a generic output's dtype was guessed (the first generic input's, no ``output_dtypes``
    rule), that output, the guess and ``output_dtypes=`` as the fix (a scalar energy of vec3
    positions taken as vec3 is the usual case)."""
    text = ", ".join(f"{p.name}: {_dtypes.type_name(types[p.index])}" for p in desc.params)
    msg = f"op {desc.label!r}: Warp could not build the generic kernel for the argument types ({text})"
    rules = dict(desc.output_dtypes)
    guessed = [p for p in desc.output_params if p.generic and p.name not in rules]
    first = next((p for p in desc.call_params if p.is_array and p.generic), None)
    if guessed and first is not None:
        outs = ", ".join(f"{p.name!r} took {_dtypes.type_name(types[p.index])}" for p in guessed)
        fix = ", ".join(f"{p.name!r}: interop.scalar_of({first.name!r})" for p in guessed)
        msg += (
            f". Generic output {outs}: a guess, the type of the first generic input {first.name!r} (no "
            f"output_dtypes rule); if it holds another type, give it with output_dtypes=, e.g. interop.op(..., "
            f"output_dtypes={{{fix}}}) for the scalar type of {first.name!r}, or a Warp type"
        )
    scalars = [p.name for p in desc.call_params if p.generic and not p.is_array]
    if scalars and first is not None:
        msg += (
            f". Generic scalar(s) {scalars} took the scalar type of the first generic array {first.name!r}; "
            "for a kernel whose generic scalars or arrays need other types (mixed precision), describe a "
            "concrete overload: interop.op(wp.overload(kernel, {...}))"
        )
    return ArgumentError(f"{msg}. Warp: {e}")


def check_layout(
    desc: OpDescription,
    p: Param,
    shape: Sequence[int],
    strides: Sequence[int],
    itemsize: int,
    written: bool = False,
) -> tuple:
    """Outer byte strides of an array argument, or an error if a kernel cannot read it.

    Warp reads any positive outer strides, but the vec/mat components of one element
    must be packed (C order) and every stride must be a multiple of the item size. An
    array the kernel writes (``written``: an in-out argument) must not have two elements
    in one memory location (an expanded, zero-stride or overlapping view): the framework
    itself refuses to write such a view in place.
    """
    nd = len(shape)
    if any(int(s) == 0 for s in shape):
        return (0,) * (p.ndim if p.is_array else 0)  # no element: nothing is read or written
    inner = nd - p.ndim if p.is_array else nd
    expected = itemsize
    for k in range(nd - 1, nd - 1 - inner, -1):
        if shape[k] > 1 and strides[k] != expected:
            raise ArgumentError(
                f"op {desc.label!r}, parameter {p.name!r}: the vec/mat components of each element must be "
                f"contiguous, got strides {tuple(strides)} (bytes) for shape {tuple(shape)}; "
                "pass a contiguous array (e.g. .copy() / .contiguous())"
            )
        expected *= shape[k]
    outer = tuple(strides[: nd - inner])
    _extent.check_strides(desc.label, f"parameter {p.name!r}", shape[: nd - inner], outer)
    for s in outer:
        if s < 0 or s % itemsize:
            raise ArgumentError(
                f"op {desc.label!r}, parameter {p.name!r}: a Warp kernel cannot read strides {tuple(strides)} "
                f"(bytes) for shape {tuple(shape)}: strides must be non-negative multiples of the item size "
                f"{itemsize}; pass a contiguous array"
            )
    if written:
        elem = expected  # bytes of one (vec/mat) element
        dims = sorted((st, n) for st, n in zip(outer, shape[: nd - inner]) if n > 1)
        for st, n in dims:
            if st < elem:
                raise ArgumentError(
                    f"op {desc.label!r}, parameter {p.name!r}: the kernel writes this array, but it has several "
                    f"elements in one memory location (strides {tuple(strides)} bytes for shape {tuple(shape)}, "
                    "e.g. an expanded or broadcast view); pass an array that owns its elements (.clone() / .copy())"
                )
            elem = st * n
    return outer


def byte_span(shape: Sequence[int], strides: Sequence[int], itemsize: int) -> int:
    """Bytes from an array's first element to one past its last (0: no element), for non-negative
    byte ``strides`` along ``shape`` (vec/mat dims included, or as part of ``itemsize``)."""
    if any(int(n) == 0 for n in shape):
        return 0
    return sum((int(n) - 1) * int(s) for n, s in zip(shape, strides)) + itemsize


class Footprint(NamedTuple):
    """The memory an array argument's elements occupy: its byte span (first element to one past the
    last) and the layout that tells whether two overlapping spans share an element."""

    span: int
    shape: tuple
    strides: tuple
    itemsize: int


def footprint(shape: Sequence[int], strides: Sequence[int], itemsize: int) -> Footprint:
    """An array's :class:`Footprint` (non-negative byte ``strides``)."""
    shape, strides = tuple(int(n) for n in shape), tuple(int(s) for s in strides)
    return Footprint(byte_span(shape, strides, itemsize), shape, strides, int(itemsize))


_TOO_HARD = getattr(np, "exceptions", np).TooHardError  # (np.exceptions: NumPy 1.25 and newer)


class _Addresses:
    """An array interface over addresses no one reads: NumPy's exact overlap test
    (``np.shares_memory``) works on addresses and strides alone."""

    def __init__(self, ptr: int, f: Footprint):
        self.__array_interface__ = {
            "shape": f.shape,
            "strides": f.strides,
            "typestr": f"|V{f.itemsize}",
            "data": (ptr, True),
            "version": 3,
        }


def _share_an_element(ptr: int, f: Footprint, ptr2: int, f2: Footprint) -> bool:
    """Whether two arrays whose byte spans overlap have a byte in common (views that interleave,
    ``x[:, 0]`` and ``x[:, 1]``, do not); a case too hard to solve quickly counts as sharing."""
    try:
        return bool(np.shares_memory(np.asarray(_Addresses(ptr, f)), np.asarray(_Addresses(ptr2, f2)), max_work=10**4))
    except (_TOO_HARD, ValueError, TypeError):
        return True


def overlapping_pairs(regions: Sequence[tuple[Param, int, Footprint]]) -> list[tuple[int, int]]:
    """``(k, j)`` for each in-out array ``regions[k]`` that shares an element with another array
    ``regions[j]`` (``regions``: ``(parameter, pointer, footprint)``): compared by address range,
    then element by element (views that interleave without sharing an element do not count)."""
    pairs = []
    for k, (p, lo, f) in enumerate(regions):
        if p.role != IN_OUT or not f.span:
            continue
        for j, (_, lo2, f2) in enumerate(regions):
            if j != k and f2.span and lo < lo2 + f2.span and lo2 < lo + f.span and _share_an_element(lo, f, lo2, f2):
                pairs.append((k, j))
    return pairs


def refuse_overlaps(desc: OpDescription, regions: Sequence[tuple[Param, int, Footprint]]) -> None:
    """Raise where an array the kernel writes in place (an in-out argument) shares memory with
    another array argument: ``regions`` are ``(parameter, pointer, footprint)``. The kernel's
    threads would read what others already wrote (or write one element twice), in an order no one
    chose; the framework's own in-place operators refuse such arguments (torch's "some elements
    of the input tensor and the written-to tensor refer to a single memory location"), and a
    functional framework (JAX, a compiled torch graph) reads the values from before the call.
    Compared by address range first, then element by element: views that interleave without
    sharing an element (the columns of one matrix) pass."""
    for k, j in overlapping_pairs(regions):
        p, q = regions[k][0], regions[j][0]
        raise ArgumentError(
            f"op {desc.label!r}, parameter {p.name!r}: the kernel writes this array in place, and it shares "
            f"memory with parameter {q.name!r} (the same array, or views over the same memory): its threads "
            f"would read values others already wrote; pass a copy of one of them (.clone() / .copy())"
        )
