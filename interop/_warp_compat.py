"""Every use of Warp's internals (``warp._src``), in one place.

Checked against warp-lang 1.16.0, 1.17.0, 1.18.0 and 1.19.0 (``CHECKED``), each read from that
release's own source (``warp/_src/context.py``, ``codegen.py``, ``types.py``, ``native/warp.h``).
What differs between them, and how this module meets it:

- 1.16-1.19: ``context.invoke`` (the CPU entry point's argument struct), ``wp.Stream``'s fields,
  ``wp_cuda_launch_kernel``'s native signature (context, kernel, dim, max_blocks, block_dim,
  grid_stride, cluster_dim, shared memory, args, stream, API-capture info), ``wp_memset_device``,
  ``ModuleBuilder(module, options)`` / ``build_kernel``, ``runtime._apic_capture``,
  ``types._ArrayAnnotation`` / ``matches_array_class`` and the ``wp.Launch`` fields read here
  (``params``, ``params_addr``, ``bounds``, ``hooks``, ``max_blocks``, ``block_dim``,
  ``grid_stride``, ``cluster_dim``) are the same.
- ``_raise_cuda_launch_error(kernel, device)`` takes ``(kernel, device, hooks, adjoint)`` from 1.17
  on (:func:`direct_cuda_launcher` passes what the running Warp takes).
- ``wp.DeterministicMode`` and deterministic launch records (``det_meta``) are new in 1.19; on
  1.16-1.18 no kernel is deterministic (:func:`deterministic`).
- CPU blocks (``wp.config.enable_cpu_blocks``, ``_resolve_launch_block_dim``) are new in 1.18; on
  1.16 and 1.17 a CPU launch always runs one thread per block, which :func:`block_threads` answers
  there too.
- ``Function(..., inline_hint=, adjoint_uses_template_args=)`` are newer keywords this module does
  not pass.

Below 1.16 the first ``interop.op`` raises (:func:`require_supported`), naming the Warp found and
the range. A Warp newer than ``CHECKED`` runs the public paths: the direct CPU launch switches
itself off (one ``RuntimeWarning``) and Warp's own launch replay runs.

Warp has no public equivalent for:

- its type tables (``generic_types``, ``warp_type_to_np_dtype``, ``type_is_generic``, the
  ``Float``/``Int`` generic scalars, ``array_t``, the ctypes array descriptor a launch record
  holds), ``codegen.Struct`` and ``context.runtime`` (the active ``wp.Tape``, API capture);
- ``direct_cpu_invoker``, which mirrors ``warp._src.context.invoke`` to call a compiled CPU entry
  point with an argument struct built once. That mirror depends on the layout of Warp's
  launch records, so it is used only on the Warp versions in ``CHECKED``: on any other Warp the
  callers fall back to the public replay ``wp.Launch.launch`` (slower per call, same results),
  after a one-time ``RuntimeWarning``.

CUDA streams and launches (checked against Warp 1.19's ``context.py``, ``deterministic.py`` and
``native/warp.cu``):

- ``borrowed_stream``: a ``wp.Stream`` subclass that sets the fields ``Stream.__init__`` sets
  (``cuda_stream``, ``device``, ``owner``, ``_cached_event``, ``_is_blocking``) without
  registering the handle in Warp's native stream table, and unregisters nothing when dropped.
- ``is_deterministic_launch``: the ``det_meta`` field of deterministic-mode launch records;
  ``deterministic``: the ``"deterministic"`` kernel/module option; ``module_loaded``:
  ``Module.execs`` keyed by ``(device.context, block_dim)``.

Also the description's array and struct tests:

- ``warp._src.types.is_array``: is an annotation any Warp array type (plain, indexed,
  fabric), in either spelling: a ``wp.array(dtype=...)`` instance or one of the 1.19
  subscript annotations (``wp.array[float]``, ``wp.array2d[float]``, and the annotations of
  overload instances made by ``wp.overload`` / ``Kernel.add_overload``), which are
  ``warp._src.types._ArrayAnnotation`` objects rather than ``wp.array`` instances.
- ``warp._src.types.matches_array_class`` / ``_ArrayAnnotationBase._concrete_cls``: which
  array class an annotation stands for, so plain arrays are told from indexed/fabric ones
  whatever the spelling.
- ``warp._src.codegen.Struct``: the type of a ``@wp.struct`` (refused with a clear error).
- Indexed arrays (interop/_indexed.py): ``matches_array_class(ann, wp.indexedarray)`` tells a
  ``wp.indexedarray`` annotation; a ``wp.indexedarray`` value's ``data`` and ``indices`` (a list
  padded with ``None`` to Warp's 4 dimensions, trimmed to ``ndim``) are public attributes.
  Warp's adjoint of a read or write through an ``indexedarray_t`` is empty (``adj_address`` /
  ``adj_array_store`` for generic array types in warp/native/array.h, 1.19), which is why the
  package never launches one (the kernel is rewritten to index the data explicitly).
- A ``wp.array``'s fields live in its plain ``__dict__`` (1.16-1.19): :func:`array_view_maker`
  copies those of a view for each new pointer, and :func:`owned_array_maker` those of an array
  ``wp.zeros``/``wp.empty`` just made on the CPU (24 fields in 1.18-1.19, 22 in 1.16-1.17, listed
  in ``_FRESH_FIELDS``), with memory from the template's own ``_allocator`` and the CPU device's
  ``memset``: the temporaries a Python-function op's function makes (``interop/_fast_launch.py``).
- ``context.ModuleBuilder`` / ``context.Module``: Warp's code generation front end run on one
  generic overload while planning (:func:`check_kernel_types`), so a body its argument types do
  not fit fails before any tracing or launch; skipped on Warp versions not in ``CHECKED``.

Forward mode (``interop/_tangent/``):

- ``context.Function``: the class of ``wp.func`` functions and of Warp's builtins (``is_builtin()``,
  ``key``, ``input_types``, ``adj``, ``custom_grad_func``, ``native_snippet``, ``user_overloads``);
  :func:`make_function` builds a ``wp.func`` from generated source as the ``wp.func`` decorator does
  (``Function(func=..., key=..., namespace="", module=..., source=...)``, then the module's
  ``functions[key]`` group); ``context.builtin_functions``, the builtins as kernels resolve them. ``types.float_types`` / ``int_types`` / ``types_equal`` / ``type_repr``.
"""

from __future__ import annotations

import ctypes
import struct
import threading
import warnings
from typing import Any

import warp as wp

try:
    from warp._src import codegen as _codegen
    from warp._src import context as _context
    from warp._src import types as _types
except ImportError as e:  # pragma: no cover - depends on the installed Warp
    raise ImportError(
        f"warp-interop needs Warp's internal modules warp._src.{{types,codegen,context}} (checked on "
        f"warp-lang 1.19); the installed warp-lang {wp.config.version} does not have them: {e}"
    ) from e

#: (major, minor) Warp releases this module was checked against.
CHECKED = ((1, 16), (1, 17), (1, 18), (1, 19))
#: the oldest Warp the package supports (pyproject.toml's floor)
FLOOR = CHECKED[0]
VERSION = tuple(int(p) for p in wp.config.version.split(".")[:2] if p.isdigit())
#: True when the installed Warp is one this module was checked on; else the direct CPU path is off.
VERIFIED = VERSION in CHECKED
#: Warp's adjoint of ``a[i] = v`` and of ``wp.atomic_add/sub(a, i, v)`` reads only the gradient
#: of ``a``, never ``a``'s memory (the forward's stores are not replayed: ``adj_array_store`` and
#: ``adj_atomic_*`` in warp/native/array.h, the same text in 1.16, 1.17, 1.18 and 1.19). So an output that
#: a kernel only writes that way need not be kept alive for the backward. Off on other versions.
ADJOINT_SKIPS_WRITE_ONLY_OUTPUTS = VERIFIED


def require_supported() -> None:
    """Raise the package's error when the installed Warp is older than :data:`FLOOR`."""
    if VERSION < FLOOR:
        from ._errors import UnsupportedError

        raise UnsupportedError(
            f"warp-interop supports warp-lang >= {FLOOR[0]}.{FLOOR[1]} (checked on "
            f"{', '.join(f'{a}.{b}' for a, b in CHECKED)}); the installed warp-lang is {wp.config.version}: "
            f"pip install 'warp-lang>={FLOOR[0]}.{FLOOR[1]}'"
        )


# -- type tables --------------------------------------------------------------------------
is_array = _types.is_array
Struct = _codegen.Struct
generic_types = tuple(_types.generic_types)
warp_type_to_np_dtype = _types.warp_type_to_np_dtype
handle = _types.handle
bfloat16 = _types.bfloat16
type_is_generic = _types.type_is_generic
Float: Any = _types.Float  # generic scalar type variables (typing.TypeVar in Warp)
Int: Any = _types.Int
array_t = _types.array_t
type_size_in_bytes = _types.type_size_in_bytes


# -- runtime ------------------------------------------------------------------------------
def runtime() -> Any:
    """Warp's runtime object (None before ``wp.init()``)."""
    return _context.runtime


def precompiled_header_dirs() -> list[str]:
    """The folders this process's Warp made for precompiled headers (1.16-1.19:
    ``runtime._pch_dirs``, a ``tempfile.TemporaryDirectory`` per compiling thread, removed when the
    process exits); empty before ``wp.init()`` or where a Warp keeps none."""
    dirs = getattr(_context.runtime, "_pch_dirs", None) or {}
    return [d.name for d in list(dirs.values()) if isinstance(getattr(d, "name", None), str)]


def nvrtc_archs() -> tuple[int, ...]:
    """The GPU architectures Warp's NVRTC compiles for (``runtime.nvrtc_supported_archs``), with or
    without a GPU and a driver; empty for a build without CUDA."""
    return tuple(sorted(getattr(runtime(), "nvrtc_supported_archs", None) or ()))


def active_tape() -> Any:
    """The ``wp.Tape`` being recorded, or None."""
    rt = _context.runtime
    return rt.tape if rt is not None else None


def tape_launch_arrays(tape: Any) -> list[tuple[Any, list[tuple[str, Any]]]]:
    """The kernel launches a ``wp.Tape`` recorded, in order: ``(kernel, [(parameter, wp.array)...])``
    for the array arguments of each (a launch record is ``[kernel, dim, max_blocks, inputs, outputs,
    ...]`` in 1.16-1.19, read by ``Tape.backward``); functions recorded with ``record_func`` are
    skipped (they name their own arrays)."""
    found = []
    for launch in tape.launches:
        if callable(launch) or not isinstance(launch, (list, tuple)) or len(launch) < 5:
            continue
        kernel = launch[0]
        labels = [a.label for a in getattr(getattr(kernel, "adj", None), "args", ())]
        values = list(launch[3]) + list(launch[4])
        names = labels + [f"argument {k}" for k in range(len(labels), len(values))]
        found.append((kernel, [(n, v) for n, v in zip(names, values) if isinstance(v, wp.array)]))
    return found


def launch_checks_on() -> bool:
    """Whether ``wp.config`` asks ``wp.launch`` for checks a replayed launch record skips
    (``verify_fp``, ``verify_cuda``, ``print_launches``, ``verify_autograd_array_access``, an
    array-access mode other than relaxed: ``launch_array_access_mode``, 1.16-1.19)."""
    c = wp.config
    return bool(
        c.verify_fp
        or c.verify_cuda
        or c.print_launches
        or getattr(c, "verify_autograd_array_access", False)
        or int(getattr(c, "launch_array_access_mode", 0))
    )


def backward_enabled(kernel: Any) -> bool:
    """Whether ``Tape.backward`` launches ``kernel``'s adjoint: its ``enable_backward`` option, or
    else its module's, is true (1.16-1.19: the kernel option takes precedence; Warp warns and skips
    the launch where it is false)."""
    own = kernel.options.get("enable_backward")
    if own is not None:
        return bool(own)
    return bool(kernel.module.options.get("enable_backward"))


def array_view_maker(ptr: int, dtype: Any, shape: tuple, strides: Any, device: Any) -> Any:
    """``make(ptr)``: a ``wp.array`` over ``ptr`` (not owning it) with ``dtype``, ``shape``,
    ``strides`` (bytes, None: contiguous) and ``device``, as ``wp.array(ptr=..., ...)`` makes it,
    without re-deriving the fields on every call: the fields of one array made that way are
    copied, with the pointer set. 1.16-1.19: ``wp.array`` keeps its fields in a plain ``__dict__``
    and a new array holds no descriptor (``ctype``), gradient, array interface or read flag yet;
    on another Warp, ``wp.array(...)`` itself."""
    if any(int(n) == 0 for n in shape):
        # no element: a null array, as Warp's own empty arrays are (a kernel's `if arr:`, Warp's
        # idiom for an optional array, takes its else branch; a framework's pointer had it read)
        return lambda p: wp.empty(shape, dtype=dtype, device=device)
    template: Any = wp.array(ptr=ptr, dtype=dtype, shape=shape, strides=strides, device=device)
    if not VERIFIED:
        return lambda p: wp.array(ptr=p, dtype=dtype, shape=shape, strides=strides, device=device)
    fields = dict(template.__dict__)
    new, cls = object.__new__, wp.array

    def make(p: int) -> Any:
        a = new(cls)
        d = a.__dict__
        d.update(fields)
        d["ptr"] = p
        return a

    return make


#: the fields of a CPU ``wp.array`` just made by ``wp.zeros``/``wp.empty`` (1.18-1.19; 1.16 and 1.17
#: lack the two ``_storage_*``, :data:`_NEWER_FIELDS`), with the value each must have for
#: :func:`owned_array_maker` to copy it: ``None``: no view, interface, capture or cached descriptor
#: yet; ``...``: any value (copied as is). ``ptr`` and ``_grad`` are replaced in each copy.
_FRESH_FIELDS = {
    "_allocator": ..., "_apic_capture_origin": None, "_array_interface": None, "_grad": ...,
    "_is_read": False, "_memory_kind": ..., "_ref": None, "_requires_grad": ..., "_retain_grad": False,
    "_storage_base_ptr": None, "_storage_nbytes": None, "capacity": ..., "ctype": None, "deleter": ...,
    "device": ..., "dtype": ..., "is_contiguous": True, "is_transposed": False, "ndim": ...,
    "pinned": False, "ptr": ..., "shape": ..., "size": ..., "strides": ...,
}  # fmt: skip
_NEWER_FIELDS = frozenset({"_storage_base_ptr", "_storage_nbytes"})


def owned_array_maker(template: Any, zero: bool) -> Any:
    """``make()``: a new ``wp.array`` with the fields of ``template`` (a CPU array that
    ``wp.zeros``/``wp.empty`` just made, untouched since) owning memory of its own from the same
    allocator, zero-filled when ``zero`` (``wp.zeros``; ``wp.empty`` leaves it as it comes), and a
    new zero-filled gradient where the template has one: what another ``wp.zeros``/``wp.empty``
    call with the same arguments makes, without re-deriving the fields (about 3 us against 16 for
    ``wp.zeros(..., requires_grad=True)``). None where that is not known to hold: a Warp not in
    ``CHECKED``, a field 1.16-1.19 do not have or with another value than a fresh array's
    (:data:`_FRESH_FIELDS`), pinned or CUDA memory, an empty array, a gradient that is not itself
    such an array. Each array frees its memory as any other (``deleter(ptr, capacity)``)."""
    if not VERIFIED:
        return None
    pairs = [(template, True)]
    g = template.__dict__.get("_grad")
    if g is not None:
        pairs.append((g, False))
    specs = []
    for a, own in pairs:
        d = a.__dict__
        if (
            type(a) is not wp.array
            or d.keys() - _FRESH_FIELDS.keys()
            or _FRESH_FIELDS.keys() - d.keys() - _NEWER_FIELDS
        ):
            return None
        for k, want in _FRESH_FIELDS.items():
            if want is not ... and k in d and d[k] is not want and d[k] != want:
                return None
        dev = d["device"]
        if not dev.is_cpu or not d["capacity"] or d["size"] * _types.type_size_in_bytes(d["dtype"]) != d["capacity"]:
            return None
        if not own and d["_grad"] is not None:
            return None
        fields = dict(d)
        fields["ptr"] = None  # (set once allocated: a failed allocation frees nothing)
        fields["_grad"] = None
        specs.append((fields, d["capacity"], d["_allocator"].allocate, dev.memset))
    new, cls = object.__new__, wp.array
    (fields, capacity, alloc, memset), grad = specs[0], (specs[1] if len(specs) > 1 else None)

    def make() -> Any:
        a = new(cls)
        d = a.__dict__
        d.update(fields)
        p = alloc(capacity)
        d["ptr"] = p
        if zero:
            memset(p, 0, capacity)
        if grad is not None:
            gfields, gcap, galloc, gmemset = grad
            ga = new(cls)
            gd = ga.__dict__
            gd.update(gfields)
            gp = galloc(gcap)
            gd["ptr"] = gp
            gmemset(gp, 0, gcap)
            d["_grad"] = ga
        return a

    return make


def record_on_tape(
    tape: Any, kernel: Any, dims: Any, inputs: Any, outputs: Any, device: Any, block_dim: int, metadata: dict
) -> Any:
    """``tape.record_launch(kernel, dims, 0, inputs, outputs, device, block_dim, metadata)`` for a
    resolved ``device`` (a ``Device``) and ``block_dim`` (the launch's own): 1.16-1.19 append this
    list to ``tape.launches`` (1.18 on, after resolving the device and block size again); returns
    that entry."""
    if VERIFIED:
        tape.launches.append([kernel, dims, 0, inputs, outputs, device, block_dim, metadata])
    else:
        tape.record_launch(kernel, dims, 0, inputs, outputs, device, block_dim, metadata=metadata)
    return tape.launches[-1]


def attach_grad(a: Any, g: Any) -> None:
    """``a.grad = g`` for a gradient the caller made with ``a``'s dtype, shape, strides and device
    (what the setter checks): 1.16-1.19 set ``_grad``, ``_requires_grad`` and drop the cached
    descriptor (``ctype``)."""
    if VERIFIED:
        a._grad = g
        a._requires_grad = True
        a.ctype = None
    else:
        a.grad = g


def repoint(a: Any, ptr: int) -> None:
    """Point ``a``, a ``wp.array`` over memory it does not own (``array_view_maker``'s), at ``ptr``.
    1.16-1.19: ``ptr`` is a plain field and ``ctype`` the descriptor cached from it (rebuilt when None)."""
    a.ptr = ptr
    a.ctype = None


def owned_bytes(a: Any) -> int:
    """The bytes a ``wp.array`` allocated itself (0 for a view over other memory): 1.16-1.19 free
    ``capacity`` bytes through ``deleter``, which a view has none of."""
    return int(a.capacity or 0) if getattr(a, "deleter", None) is not None else 0


def tape_launch_values(tape: Any) -> Any:
    """The arguments (inputs, then outputs) of each kernel launch a ``wp.Tape`` recorded, in order
    (the records :func:`tape_launch_arrays` reads, without naming them)."""
    for launch in tape.launches:
        if not callable(launch) and isinstance(launch, (list, tuple)) and len(launch) >= 5:
            yield launch[3]
            yield launch[4]


_RETAIN_GRAD = getattr(_types, "ARRAY_FLAG_RETAIN_GRAD", 1)
_ARRAY_T_SIZE = ctypes.sizeof(array_t)


def descriptor_bytes(at: Any) -> memoryview:
    """The bytes of the ``array_t`` ``at`` (what :func:`pack_descriptor` writes), kept by a launch
    record next to the descriptor itself."""
    return memoryview(at).cast("B")


# array_t, 1.16-1.19: data and grad pointers, shape and strides (4 ints each), ndim, flags (52 bytes
# of a 56-byte struct); checked against ctypes at import (a Warp with another layout is refused)
_DESCRIPTOR = struct.Struct("<QQ4i4iHH")
_PACK = _DESCRIPTOR.pack_into
_POINTERS = struct.Struct("<QQ").pack_into
LAYOUT_OK = [(name, ctypes.sizeof(t)) for name, t in array_t._fields_] == [
    ("data", 8),
    ("grad", 8),
    ("shape", 16),
    ("strides", 16),
    ("ndim", 2),
    ("flags", 2),
] and getattr(array_t, "ndim").offset == 48  # noqa: B009 (a ctypes field, on the class)


def pack_descriptor(mv: memoryview, a: Any) -> None:
    """Write ``wp.array`` ``a``'s launch descriptor (what ``a.__ctype__()`` builds: pointer, gradient
    pointer, dimensions, shape, strides, retain-grad flag; unused shape and stride slots zero) into
    ``mv`` (:func:`descriptor_bytes` of an ``array_t``) in place, with one ``struct.pack_into``: a
    launch record's arguments are new arrays on every call (a Python-function op's views and
    temporaries). 1.16-1.19: ``a._grad`` and ``a._retain_grad`` are the fields ``__ctype__`` reads."""
    g = a._grad
    shape, strides = a.shape, a.strides
    gp = 0 if g is None else (g.ptr or 0)
    flags = _RETAIN_GRAD if a._retain_grad else 0
    n = len(shape)
    if n == 1:
        _PACK(mv, 0, a.ptr or 0, gp, shape[0], 0, 0, 0, strides[0], 0, 0, 0, 1, flags)
    else:
        pad = (0,) * (4 - n)
        _PACK(mv, 0, a.ptr or 0, gp, *shape, *pad, *strides, *pad, n, flags)


def clear_pointers(d: Any) -> None:
    """Zero the data and gradient pointers of a descriptor (an absent adjoint): its bytes
    (:func:`descriptor_bytes`) where ``LAYOUT_OK``, else the ``array_t`` itself."""
    if LAYOUT_OK:
        _POINTERS(d, 0, 0, 0)
    else:
        d.data = d.grad = 0


def fill_descriptor(at: Any, a: Any) -> None:
    """:func:`pack_descriptor` into the ``array_t`` ``at``; field by field on a Warp whose ``array_t``
    has another layout."""
    if LAYOUT_OK:
        pack_descriptor(descriptor_bytes(at), a)
        return
    at.data = a.ptr or 0
    g = a._grad
    at.grad = 0 if g is None or g.ptr is None else g.ptr
    at.flags = _RETAIN_GRAD if a._retain_grad else 0
    n = at.ndim = a.ndim
    for k in range(n):
        at.shape[k] = a.shape[k]
        at.strides[k] = a.strides[k]


#: The runtime field that holds Warp's active API capture (None when none records launches):
#: generated launch code reads it directly (``interop._launch.direct_lines``).
APIC_FIELD = "_apic_capture"


def apic_active() -> bool:
    """True while Warp's API capture (``wp.capture_*`` of launches) is recording."""
    rt = _context.runtime
    return rt is not None and getattr(rt, "_apic_capture", None) is not None


_warned = False
_warn_lock = threading.Lock()


def _warn_unverified() -> None:
    global _warned
    with _warn_lock:
        if _warned:
            return
        _warned = True
    checked = ", ".join(f"{a}.{b}" for a, b in CHECKED)
    warnings.warn(
        f"warp-interop: warp-lang {wp.config.version} is not a version its direct CPU launch path was checked "
        f"on ({checked}); using Warp's public launch replay instead (same results, more per-call overhead)",
        RuntimeWarning,
        stacklevel=3,
    )


_STRUCTS: dict[tuple, type] = {}
_structs_lock = threading.Lock()


def _args_struct_class(fields: tuple) -> type:
    """The ctypes argument struct of one parameter layout, made once: a ctypes class made per
    launch record is never freed (each new call signature would leak a few KiB)."""
    cls = _STRUCTS.get(fields)
    if cls is None:
        with _structs_lock:
            cls = _STRUCTS.get(fields)
            if cls is None:
                cls = _STRUCTS[fields] = type("ArgsStruct", (ctypes.Structure,), {"_fields_": list(fields)})
    return cls


class CpuRecord:
    """A recorded CPU launch callable without Warp's per-call argument packing (see
    :func:`direct_cpu_record`): ``fn(bounds_ref, args_ref)`` (forward) or ``fn(bounds_ref,
    args_ref, adj_ref)`` (adjoint) calls the compiled entry point; ``args`` is the argument struct,
    whose scalar fields are named ``labels[i]`` for kernel parameter ``i``."""

    __slots__ = ("fn", "bounds_ref", "args_ref", "adj_ref", "args", "labels", "sync")
    fn: Any
    bounds_ref: Any
    args_ref: Any
    adj_ref: Any
    args: Any
    labels: tuple
    sync: Any


def direct_cpu_record(launch, fwd_views: dict, adj_views: dict) -> CpuRecord | None:
    """The argument structs of a recorded CPU launch, built once, and its compiled entry point.

    Mirrors ``warp._src.context.invoke`` (Warp 1.19): one ctypes struct with a field per
    kernel parameter (and a second one for the adjoint arguments). Array descriptors are
    nested structs updated through views (``fwd_views``/``adj_views`` map a parameter index to
    its descriptor and are updated to point at the struct's copy); ``sync()`` copies the
    record's scalar parameters into the struct. Returns None where that path does not apply
    (tile kernels with block_dim > 1) or the installed Warp is not in ``CHECKED`` (after a
    one-time warning): the caller then uses ``launch.launch``.
    """
    if not VERIFIED:
        _warn_unverified()
        return None
    if launch.block_dim > 1:
        return None
    kernel = launch.kernel
    params = launch.params
    nargs = len(kernel.adj.args)

    def build(offset, views):
        fields = tuple((a.label, type(params[offset + i])) for i, a in enumerate(kernel.adj.args))
        struct = _args_struct_class(fields)()
        scalars = []
        for i, (name, _) in enumerate(fields):
            setattr(struct, name, params[offset + i])
            if i in views:
                # the struct holds its own copy of the descriptor: update that copy from now on
                views[i] = getattr(struct, name)
            else:
                scalars.append((name, offset + i))
        return struct, scalars

    rec = CpuRecord()
    args, scalar_fields = build(1, fwd_views)
    rec.args = args
    rec.labels = tuple(a.label for a in kernel.adj.args)
    rec.bounds_ref, rec.args_ref = ctypes.byref(launch.bounds), ctypes.byref(args)

    def sync():
        for name, k in scalar_fields:
            setattr(args, name, params[k])

    rec.sync = sync
    if not launch.adjoint:
        rec.fn, rec.adj_ref = launch.hooks.forward, None
        return rec
    adj_args, _ = build(1 + nargs, adj_views)
    rec.fn, rec.adj_ref = launch.hooks.backward, ctypes.byref(adj_args)
    return rec


def direct_cpu_invoker(launch, fwd_views: dict, adj_views: dict):
    """(call, sync) to run a recorded CPU launch without rebuilding its argument structs
    (:func:`direct_cpu_record`), or None where that path does not apply."""
    rec = direct_cpu_record(launch, fwd_views, adj_views)
    if rec is None:
        return None
    fn, bounds_ref, args_ref, adj_ref = rec.fn, rec.bounds_ref, rec.args_ref, rec.adj_ref
    if adj_ref is None:

        def call_forward():
            fn(bounds_ref, args_ref)

        return call_forward, rec.sync

    def call_backward():
        fn(bounds_ref, args_ref, adj_ref)

    return call_backward, rec.sync


class _BorrowedStream(wp.Stream):
    """A ``wp.Stream`` naming a framework's CUDA stream by its handle, kept out of Warp's native
    stream table (see :func:`borrowed_stream`)."""

    def __init__(self, device: Any, handle: int):  # no super().__init__: it would register the handle
        self._cached_event = None
        self.device = device
        self.cuda_stream = handle
        self.owner = False
        self._is_blocking = None

    def __del__(self) -> None:
        pass  # nothing was registered, so nothing is unregistered


def borrowed_stream(device: Any, handle: int) -> Any:
    """A ``wp.Stream`` for the framework stream ``handle`` on CUDA ``device``, for launches, events
    and memsets on it (all of which take the raw handle).

    ``wp.Stream(device, cuda_stream=handle)`` registers the handle in Warp's native stream table
    (Warp 1.19, ``wp_cuda_stream_register``: one entry per handle, no reference count) and its
    ``__del__`` removes that entry: a second wrapper of the same handle (``wp.stream_from_torch``)
    dropping would unregister ours, and ours being cached would keep the entry (and the framework's
    stream object) alive forever. This wrapper registers nothing, so it never disturbs another
    wrapper's entry and may be dropped at any time. Work that needs a registered current stream
    (Warp allocating, ``wp.ScopedStream`` syncs, captures) runs on a Warp-owned stream instead
    (``interop._streams.warp_side_stream``).
    """
    return _BorrowedStream(device, int(handle))


def is_deterministic_launch(launch: Any) -> bool:
    """True when ``wp.launch(..., record_cmd=True)`` gave Warp's deterministic-mode record
    (``warp._src.deterministic.DeterministicLaunch``, made for kernels with atomics on CUDA when
    ``wp.config.deterministic`` is on): it refuses in-place descriptor updates for its atomic
    targets and allocates scratch buffers on every launch."""
    return getattr(launch, "det_meta", None) is not None


def deterministic(kernel: Any) -> bool:
    """Whether Warp's deterministic mode applies to ``kernel`` (its own option, else its module's,
    which Warp takes from ``wp.config.deterministic`` when the module is made)."""
    mode = (getattr(kernel, "options", None) or {}).get("deterministic")
    if mode is None:
        mode = (getattr(getattr(kernel, "module", None), "options", None) or {}).get("deterministic")
    modes = getattr(wp, "DeterministicMode", None)  # new in Warp 1.19
    return mode is not None and modes is not None and mode != modes.NOT_GUARANTEED


def module_loaded(kernel: Any, device: Any) -> bool:
    """Whether ``kernel``'s module is already loaded on ``device`` (Warp 1.19: ``Module.execs`` is
    keyed by ``(device.context, block_dim)``). Unknown layouts answer False."""
    execs = getattr(kernel.module, "execs", None)
    if not isinstance(execs, dict):
        return False
    return any(isinstance(k, tuple) and k and k[0] == device.context for k in execs)


def cuda_memset_async(device, ptr: int, nbytes: int, stream: int) -> None:
    """Zero ``nbytes`` at device pointer ``ptr`` on CUDA stream ``stream``, without a sync.

    Warp's public ``array.zero_()`` uses the device's current stream; the native call takes
    an explicit stream (XLA's), so that stream's order is kept without swapping Warp's.
    """
    rt: Any = _context.runtime
    if not rt.core.wp_memset_device(device.context, ctypes.c_void_p(ptr), 0, nbytes, ctypes.c_void_p(stream)):
        raise RuntimeError(f"memset of {nbytes} bytes on {device} failed")


# -- annotations (interop/_description.py) ---------------------------------------------------
def is_array_annotation(ann: Any) -> bool:
    """True for any Warp array annotation (plain, indexed or fabric; either spelling)."""
    return bool(_types.is_array(ann))


def is_plain_array_annotation(ann: Any) -> bool:
    """True for a plain ``wp.array`` annotation: ``wp.array(dtype=...)`` or ``wp.array[...]``/``wp.arrayNd[...]``."""
    return bool(_types.matches_array_class(ann, wp.array))


def is_indexed_array_annotation(ann: Any) -> bool:
    """True for a ``wp.indexedarray`` annotation: ``wp.indexedarray(dtype=...)`` or ``wp.indexedarray[...]``."""
    return bool(_types.is_array(ann)) and bool(_types.matches_array_class(ann, wp.indexedarray))


def is_indexedarray_value(x: Any) -> bool:
    """True for a ``wp.indexedarray`` instance (an array, not an annotation: it has data)."""
    return isinstance(x, wp.indexedarray) and getattr(x, "data", None) is not None


def indexedarray_parts(x: Any) -> tuple[Any, list]:
    """The data and the per-dimension indices (``None`` for a whole dimension) of a ``wp.indexedarray``;
    ``indices`` is padded to Warp's 4 dimensions in every checked version: trimmed to ``ndim``."""
    return x.data, list(x.indices)[: x.ndim]


def is_fabric_value(x: Any) -> bool:
    """True for a ``wp.fabricarray`` / ``wp.indexedfabricarray`` instance."""
    kinds = tuple(k for k in (getattr(wp, "fabricarray", None), getattr(wp, "indexedfabricarray", None)) if k)
    return bool(kinds) and isinstance(x, kinds)


def array_class_name(ann: Any) -> str:
    """The user-facing name of the array class an annotation stands for (``indexedarray``, ``fabricarray``...)."""
    cls = getattr(ann, "_concrete_cls", None) or type(ann)
    return cls.__name__


def is_struct(t: Any) -> bool:
    """True for a ``@wp.struct`` type."""
    return isinstance(t, _codegen.Struct)


# -- structs (interop/_structs.py) ------------------------------------------------------------
def struct_fields(t: Any) -> tuple[tuple[str, Any], ...]:
    """``(name, annotation)`` of each field of a ``@wp.struct`` type, in declaration order
    (``Struct.vars``, a dict of ``codegen.Var``)."""
    return tuple((name, var.type) for name, var in t.vars.items())


def struct_name(t: Any) -> str:
    """The user's class name of a ``@wp.struct`` type (``Struct.cls``)."""
    return getattr(getattr(t, "cls", None), "__qualname__", None) or str(getattr(t, "key", t))


def struct_of_instance(v: Any) -> Any:
    """The ``@wp.struct`` type of a Warp struct instance, or None for any other value
    (``codegen.StructInstance`` and its ``_cls``)."""
    if isinstance(v, _codegen.StructInstance):
        return getattr(v, "_cls", None)
    return None


def struct_numpy_dtype(t: Any) -> Any:
    """The NumPy structured dtype of one element of a ``wp.array(dtype=t)`` (``Struct.numpy_dtype``)."""
    import numpy as np

    return np.dtype(t.numpy_dtype())


def check_kernel_types(kernel: Any) -> None:
    """Run Warp's code generation front end (parsing, type inference) on ``kernel`` alone, without
    compiling anything, raising Warp's own error where it cannot be built (e.g. a generic overload
    whose argument types do not fit its body). Warp does the same with a throw-away builder to learn
    a function's return type (``context.py``, ``match_function``); checked on ``CHECKED``. On
    any other Warp it does nothing: the launch reports such a kernel (``_launch.Runner``)."""
    if not VERIFIED:
        return
    options = dict(kernel.module.options) | {"output_arch": None}
    options.setdefault("block_dim", 256)
    builder = _context.ModuleBuilder(_context.Module("interop_type_check", None), options)
    with getattr(_context, "_codegen_lock", threading.RLock()):
        builder.build_kernel(kernel)


def block_threads(device: Any, block_dim: int | None) -> int:
    """The threads Warp runs per block on ``device`` for a launch asking ``block_dim`` (None: none
    asked): Warp 1.19's ``_resolve_launch_block_dim`` (``context.py``), used by ``wp.launch`` and
    ``wp.launch_tiled``: 256 on CUDA when none is asked; on the CPU 1, or ``block_dim`` itself when
    ``wp.config.enable_cpu_blocks`` is set. Written out here (a public rule, documented in
    ``wp.launch``), so no internal is imported for it."""
    if not getattr(device, "is_cpu", False):
        return block_dim if block_dim else 256
    if not block_dim or block_dim == 1 or not getattr(wp.config, "enable_cpu_blocks", False):
        return 1
    return block_dim


def direct_cuda_launcher(launch: Any) -> Any:
    """``run(stream)``: replay CUDA launch record ``launch`` on ``stream`` (a ``wp.Stream`` or a raw
    ``cudaStream_t`` int) with one foreign call, or None where that is not possible (a Warp not in ``CHECKED``, a CPU record,
    a deterministic-mode record).

    It is ``wp.Launch.launch`` for a CUDA record (Warp 1.19's ``context.py``) with everything
    that cannot change between replays bound once: the device context, the kernel's entry point
    and shared memory for the record's direction, the thread count, ``max_blocks``,
    ``block_dim``, ``grid_stride``, ``cluster_dim`` and the parameter block's address (the
    record's parameters are updated in place by the caller, as for ``Launch.launch``). While a
    CUDA graph or Warp's API capture records (``runtime.captures`` non-empty, ``_apic_capture``
    set) it calls ``Launch.launch`` itself, which keeps the module alive for the graph and
    records the launch.
    """
    if not VERIFIED or getattr(launch, "device", None) is None or launch.device.is_cpu:
        return None
    if getattr(launch, "det_meta", None) is not None:
        return None
    rt: Any = _context.runtime
    try:
        hooks = launch.hooks
        core_launch = rt.core.wp_cuda_launch_kernel
        adjoint = bool(launch.adjoint)
        bound = (
            launch.device.context,
            hooks.backward if adjoint else hooks.forward,
            launch.bounds.size,
            launch.max_blocks,
            launch.block_dim,
            int(launch.grid_stride),
            launch.cluster_dim,
            hooks.backward_smem_bytes if adjoint else hooks.forward_smem_bytes,
            launch.params_addr,
        )
        raise_error = _context._raise_cuda_launch_error
        if VERSION < (1, 17):  # (kernel, device) before 1.17
            _two = raise_error

            def raise_error(kernel, device, hooks, adjoint):
                _two(kernel, device)

    except AttributeError:  # a record of another layout
        return None
    captures = rt.captures
    replay = launch.launch

    device = launch.device

    def run(stream: Any) -> None:
        # stream: a wp.Stream, or a raw cudaStream_t (an int: XLA's, read from its call frame)
        handle = stream if type(stream) is int else stream.cuda_stream
        if captures or rt._apic_capture is not None:
            replay(borrowed_stream(device, handle) if type(stream) is int else stream)
            return
        if core_launch(*bound, handle, None):
            raise_error(launch.kernel, device, hooks, adjoint)

    return run


# -- forward mode (interop/_tangent/) ------------------------------------------------------
def warp_function_class() -> Any:
    """The class of ``wp.func`` functions and Warp's builtins."""
    return _context.Function


def builtin_function(name: str) -> Any:
    """Warp's builtin ``name`` as kernels see it (``wp.tid`` and ``wp.tile_load`` exist only there)."""
    return _context.builtin_functions.get(name)


def make_function(fn: Any, key: str, module: Any, source: str, overload_of: Any = None) -> Any:
    """A ``wp.func`` of the Python function ``fn`` whose source text is ``source`` (generated code,
    which ``inspect`` cannot read), registered in ``module`` as the ``wp.func`` decorator does; with
    ``overload_of`` (a function of the same name), registered as its overload (``Function`` looks the
    name up in ``scope_locals``, as two ``@wp.func`` definitions of one name in a module)."""
    scope = {fn.__name__: overload_of} if overload_of is not None else {}
    _context.Function(func=fn, key=key, namespace="", module=module, value_func=None, source=source, scope_locals=scope)
    return module.functions[key]


# -- precompiled modules (interop/_precompiled.py) --------------------------------------------
# ``Module.get_module_hash(block_dim)``, ``resolved_options[block_dim]``, ``get_module_identifier``,
# ``_get_meta_name``, ``_get_compile_output_name(device, block_dim=)``, ``_compile(device, output_dir,
# output_name, output_arch, use_ptx, options)``, ``Module.load(device, block_dim, binary_path,
# output_arch, meta_path)`` and ``Module.execs[(device.context, block_dim)].module_hash``: the same
# signatures in 1.16, 1.17, 1.18 and 1.19 (``Module.load`` with a ``binary_path`` loads that file
# without checking it against the module's hash: the caller checks). Warp's public
# ``compile_aot_module`` builds only the module's default ``block_dim`` (256), while a CPU launch
# loads the ``block_dim=1`` variant, so the build calls ``_compile`` for the variant it needs.
def module_hash(module: Any, block_dim: int) -> str:
    """The full content hash (hex) of ``module``'s ``block_dim`` variant: every kernel's source and
    adjoint, the functions and structs they use, and the resolved module options."""
    return module.get_module_hash(block_dim).hex()


def module_identifier(module: Any, block_dim: int) -> str:
    """The folder name Warp gives the module variant in its kernel cache (``wp_<name>_<hash7>``)."""
    return module.get_module_identifier(block_dim)


def module_current(module: Any, device: Any, block_dim: int) -> bool:
    """Whether ``module``'s ``block_dim`` variant is loaded on ``device`` and still matches its hash."""
    execs = getattr(module, "execs", None)
    ex = execs.get((device.context, block_dim)) if isinstance(execs, dict) else None
    return ex is not None and getattr(ex, "module_hash", None) == module.get_module_hash(block_dim)


def cpu_binary_name(module: Any, device: Any, block_dim: int) -> str:
    """The file name of the variant's CPU object on this machine: Warp names it by the LLVM version,
    the target triple and, with ``-march=native``, this CPU's instruction set."""
    return module._get_compile_output_name(device, block_dim=block_dim)


def meta_name(module: Any, block_dim: int) -> str:
    """The file name of the variant's metadata (shared memory sizes...), next to its binaries."""
    return module._get_meta_name(block_dim)


def compile_module(module: Any, out_dir: str, block_dim: int, device: Any = None, arch: int | None = None) -> str:
    """Build ``module``'s ``block_dim`` variant into ``out_dir``: for ``device`` (the CPU) or, with
    ``device=None``, a CUDA cubin for ``arch`` through Warp's NVRTC (no GPU needed). Returns the
    binary's file name."""
    module.get_module_hash(block_dim)
    options = module.resolved_options[block_dim]
    if arch is None:
        name = module._get_compile_output_name(device, block_dim=block_dim)
    else:
        name = module._get_compile_output_name(None, arch, use_ptx=False, block_dim=block_dim)
    module._compile(device, out_dir, name, arch, False if arch is not None else None, options)
    return name


def load_module_binary(module: Any, device: Any, block_dim: int, binary: str, meta: str, arch: int | None) -> None:
    """Load a prebuilt binary as ``module``'s ``block_dim`` variant on ``device`` (the caller has
    checked that it was built from this module's hash, for this Warp and this device)."""
    module.load(device, block_dim, binary_path=binary, output_arch=arch, meta_path=meta)
