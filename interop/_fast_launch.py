"""Python-function ops' own launches at the cost of a kernel op's: cached launch records.

A Python-function op runs the user's function, which calls ``wp.launch``; its backward runs a
``wp.Tape`` over those launches. Warp's ``wp.launch`` packs every argument on every call (about
20 us a launch on the CPU) and ``Tape.backward`` calls it again per recorded launch, which made a
training step through a function op cost twice Warp's own loop (issue 49). While a function op's
function runs, :class:`FastLaunches` (a :class:`~interop._launch_hook.LaunchHook`) takes this
thread's ``wp.launch`` calls and replays a launch record made by Warp (``record_cmd=True``) once per
kernel, device, launch dimensions, block size and argument layout (each array's dtype, ndim,
device and whether it has a gradient; each value's type), copying each array's own descriptor
(what ``wp.array.__ctype__`` holds) into the record and setting scalars that changed; the launch is recorded
on the active tape as ``wp.launch`` records it. :func:`tape_backward` runs a tape's launches
backwards the same way (Warp's ``Tape.backward``: the same adjoint arguments, ``tape.gradients``
kept for ``tape.zero()``), with adjoint records cached alike. The function's own temporaries,
``wp.zeros``/``wp.empty`` (and their ``*_like``) with a shape of ints, a dtype, a device and ``requires_grad`` (the forces
of a step: 16 us a call through Warp with a gradient), are copies of the first array of their
signature on the CPU (:meth:`Records.allocate`, about 3 us), each with memory of its own.

What the records skip, they leave to Warp: any keyword other than ``device``, ``block_dim`` and
``max_blocks=0``; generic kernels; struct, indexed-array, tuple and NumPy arguments; launches over
zero threads; deterministic-mode records; Warp's launch checks (``wp.config.verify_fp``,
``verify_cuda``, ``print_launches``, ``verify_autograd_array_access``, an array-access mode other
than relaxed) and API capture; a tape holding such a launch (its whole backward is Warp's). The
records live with the op (:class:`Records`), at most ``LIMIT`` of them.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Sequence

import warp as wp

from ._launch_hook import LaunchHook, original_allocator, original_launch
from ._warp_compat import (
    LAYOUT_OK,
    VERIFIED,
    apic_active,
    array_t,
    array_view_maker,
    backward_enabled,
    clear_pointers,
    descriptor_bytes,
    direct_cpu_invoker,
    direct_cuda_launcher,
    fill_descriptor,
    is_deterministic_launch,
    launch_checks_on,
    owned_array_maker,
    pack_descriptor,
    record_on_tape,
    runtime,
)

_MISSING: Any = object()
LIMIT = 256  # records an op keeps (a function launching at ever new sizes starts over past it)
_PLAIN_VALUES = (float, int, bool)


def _value_ok(t: type) -> bool:
    """A value argument the records take: a Python number, or a Warp vector/matrix/quaternion."""
    return t in _PLAIN_VALUES or hasattr(t, "_wp_scalar_type_")


_TAKEN: set = set(_PLAIN_VALUES)  # the value types met so far that _value_ok takes


def _layout(args: Sequence[Any]) -> tuple | None:
    """The argument layout a record is made for, or None where Warp's own launch must run."""
    out: list[Any] = []
    for a in args:
        t = type(a)
        if t is wp.array:
            out.append((a.dtype, a.ndim, a.device.alias, a.grad is not None))
        elif t in _TAKEN:
            out.append(t)
        elif _value_ok(t):
            _TAKEN.add(t)
            out.append(t)
        else:
            return None
    return tuple(out)


def _dims(dim: Any) -> tuple | None:
    """Launch dimensions as a tuple of positive ints (what Warp records), or None (Warp's launch)."""
    if type(dim) is int:
        return (dim,) if dim > 0 else None
    if type(dim) in (tuple, list) and 0 < len(dim) <= 4 and all(type(d) is int and d > 0 for d in dim):
        return tuple(dim)
    return None


def _bits(v: Any) -> Any:
    """What a value argument packs to, to tell a changed one: a number itself (immutable; 0.0 and
    -0.0 told apart by their sign, NaN never equal to itself, so re-set), a Warp vector's or
    matrix's bytes (it may be changed in place between calls: ``wp.launch`` packs it anew each time)."""
    t = type(v)
    if t is float:
        return (t, v, math.copysign(1.0, v))
    if t is int or t is bool:
        return (t, v)
    return (t, bytes(v))


class _Record:
    """One cached launch record: the ``wp.Launch``, its array descriptors by argument index, its
    value arguments as last set, and how to run it (the CPU entry point called directly, a CUDA
    launcher, or ``Launch.launch``)."""

    __slots__ = ("launch", "pairs", "adj_pairs", "values", "call", "sync", "cuda", "fill", "backward")

    def __init__(self, launch: Any, arrays: Sequence[int], adjoint: bool, values: dict[int, Any]):
        self.launch = launch
        kernel = launch.kernel if hasattr(launch, "kernel") else None
        self.backward = kernel is not None and isinstance(kernel, wp.Kernel) and backward_enabled(kernel)
        views = {i: array_t() for i in arrays}
        adj_views = {i: array_t() for i in arrays} if adjoint else {}
        for i, at in views.items():
            launch.set_param_at_index_from_ctype(i, at)
        for i, at in adj_views.items():
            launch.set_param_at_index_from_ctype(i, at, adjoint=True)
        self.values = values  # what each value argument packed to (see _bits)
        self.call: Any = None
        self.sync: Any = None
        self.cuda: Any = None
        if launch.device.is_cpu:
            direct = direct_cpu_invoker(launch, views, adj_views) if VERIFIED else None
            if direct is not None:  # (the views now point at the argument structs' copies)
                self.call, self.sync = direct
        else:
            self.cuda = direct_cuda_launcher(launch)
        # (descriptors written through their bytes where Warp's array_t has the layout checked)
        fill = pack_descriptor if LAYOUT_OK else fill_descriptor
        view = descriptor_bytes if LAYOUT_OK else (lambda at: at)
        self.fill = fill
        self.pairs = tuple((i, view(at)) for i, at in views.items())
        self.adj_pairs = tuple((i, view(at)) for i, at in adj_views.items())

    def run(self, args: Sequence[Any], adj: Sequence[Any] | None, device: Any) -> None:
        """Launch with ``args`` (and, for an adjoint record, the adjoints ``adj``): each array's own
        descriptor copied into the record, each value that changed set."""
        fill = self.fill
        for i, at in self.pairs:
            fill(at, args[i])
        if adj is not None:
            for i, at in self.adj_pairs:
                g = adj[i]
                if g is None:
                    clear_pointers(at)
                else:
                    fill(at, g)
        launch = self.launch
        values = self.values
        changed = False
        for i, old in values.items():
            v = args[i]
            bits = _bits(v)
            if bits != old:
                launch.set_param_at_index(i, v)
                values[i] = bits
                changed = True
        if self.call is not None:
            if changed:
                self.sync()
            self.call()
        elif self.cuda is not None:
            self.cuda(device.stream)
        else:
            launch.launch()


class Records:
    """The launch records of one Python-function op, and the makers of the Warp arrays it hands its
    function (kept by its runner, freed with it)."""

    def __init__(self) -> None:
        self._records: dict[tuple, _Record | None] = {}
        self._views: dict[tuple, Any] = {}
        self._allocs: dict[tuple, Any] = {}

    def allocate_like(self, args: tuple, kw: dict, zero: bool) -> Any:
        """``wp.zeros_like(*args, **kw)`` (``zero``) or ``wp.empty_like``: what Warp makes of it, the
        ``wp.zeros``/``wp.empty`` call with the source's shape and dtype, its device, gradient and
        pinning where not given (:meth:`allocate`); None where Warp's own runs (a source other than a
        ``wp.array``, ``retain_grad``, pinned memory, another keyword)."""
        if not args or len(args) > 5 or (kw and not kw.keys() <= _LIKE_KEYWORDS):
            return None
        src = args[0]
        if type(src) is not wp.array:
            return None
        vals = dict(zip(_LIKE_KEYWORDS_ORDER, args[1:]))
        for k, v in kw.items():
            if k in vals:
                return None  # (Warp's TypeError)
            vals[k] = v
        if vals.get("retain_grad", False) is not False:
            return None
        pinned = vals.get("pinned")
        if pinned if pinned is not None else src.pinned:
            return None
        device = vals.get("device")
        rg = vals.get("requires_grad")
        shape = (
            src.shape,
            src.dtype,
            src.device if device is None else device,
            src.requires_grad if rg is None else rg,
        )
        return self.allocate(shape, {}, zero)

    def allocate(self, args: tuple, kw: dict, zero: bool) -> Any:
        """``wp.zeros(*args, **kw)`` (``zero``) or ``wp.empty``: the first call of a signature by
        Warp, the next ones copied from it (``_warp_compat.owned_array_maker``); None where the
        call is not one the copies take (Warp's own runs): a keyword other than ``shape``,
        ``dtype``, ``device`` and ``requires_grad``, a shape other than ints, a device Warp does
        not resolve, Warp's launch checks or API capture."""
        if len(args) > 4 or (kw and not kw.keys() <= _ALLOC_KEYWORDS):
            return None
        vals = dict(zip(_ALLOC_KEYWORDS_ORDER, args))
        for k, v in kw.items():
            if k in vals:
                return None  # (Warp's TypeError)
            vals[k] = v
        shape = vals.get("shape")
        rg = vals.get("requires_grad", False)
        ints = all(type(n) is int for n in shape) if type(shape) is tuple else type(shape) is int
        if not ints or type(rg) is not bool or launch_checks_on() or apic_active():
            return None
        try:
            device = runtime().get_device(vals.get("device"))
            key = (shape, vals.get("dtype", float), device.alias, rg, zero)
            make = self._allocs.get(key, _MISSING)
        except Exception:  # (an unhashable dtype, a device Warp refuses: Warp's own call says so)
            return None
        if make is not _MISSING:
            return None if make is None else make()
        a = original_allocator(zero)(*args, **kw)
        if len(self._allocs) >= LIMIT:
            self._allocs.clear()
        self._allocs[key] = owned_array_maker(a, zero) if type(a) is wp.array else None
        return a

    def view(self, ptr: int, dtype: Any, shape: tuple, strides: Any, device: Any) -> Any:
        """``wp.array(ptr=ptr, dtype=dtype, shape=shape, strides=strides, device=device)``, its
        fields copied from the first one of that layout (``_warp_compat.array_view_maker``)."""
        return self.maker(ptr, dtype, shape, strides, device)(ptr)

    def maker(self, ptr: int, dtype: Any, shape: tuple, strides: Any, device: Any) -> Any:
        """The maker of :meth:`view`'s arrays of that layout: ``make(ptr)``."""
        key = (dtype, shape, strides, device.alias)
        make = self._views.get(key)
        if make is None:
            if len(self._views) >= LIMIT:
                self._views.clear()
            make = self._views[key] = array_view_maker(ptr, dtype, shape, strides, device)
        return make

    def get(self, key: tuple, *make: Any) -> _Record | None:
        """The record of ``key``, made by ``_make_record(*make)`` on first use (None: Warp's launch)."""
        rec: Any = self._records.get(key, _MISSING)
        if rec is _MISSING:
            if len(self._records) >= LIMIT:
                self._records.clear()
            rec = self._records[key] = _make_record(*make)
        return rec


_ALLOC_KEYWORDS_ORDER = ("shape", "dtype", "device", "requires_grad")  # wp.zeros/wp.empty's first four
_ALLOC_KEYWORDS = frozenset(_ALLOC_KEYWORDS_ORDER)
_LIKE_KEYWORDS_ORDER = ("device", "requires_grad", "pinned", "retain_grad")  # after wp.zeros_like's source
_LIKE_KEYWORDS = frozenset(_LIKE_KEYWORDS_ORDER)


def _make_record(kernel, dims, args, adj, device, block_dim) -> _Record | None:
    """A record made by Warp's own ``wp.launch(record_cmd=True)`` (which checks the arguments
    as a launch does), or None where Warp gives none a replay can use."""
    kw: dict[str, Any] = {"device": device, "record_cmd": True}
    if block_dim is not None:
        kw["block_dim"] = block_dim
    if adj is not None:
        kw.update(adjoint=True, adj_inputs=list(adj))
    launch = original_launch()(kernel, dims, list(args), [], **kw)
    if launch is None or is_deterministic_launch(launch):
        return None
    arrays = [i for i, a in enumerate(args) if type(a) is wp.array]
    values = {i: _bits(a) for i, a in enumerate(args) if type(a) is not wp.array}
    return _Record(launch, arrays, adj is not None, values)


class FastLaunches(LaunchHook):
    """``with FastLaunches(records): fn(*args)``: the function's launches replayed from ``records``
    (see the module); a launch the records do not take goes to Warp unchanged."""

    def __init__(self, records: Records):
        self.records = records

    def allocate(self, args: tuple, kw: dict, zero: bool, like: bool) -> Any:
        return self.records.allocate_like(args, kw, zero) if like else self.records.allocate(args, kw, zero)

    def launch(self, kernel: Any, dim: Any, inputs: Sequence[Any], outputs: Sequence[Any], kw: dict) -> Any:
        plain = (
            (kw and not kw.keys() <= {"device", "block_dim", "max_blocks"})
            or kw.get("max_blocks")
            or getattr(kernel, "is_generic", True)
            or launch_checks_on()
            or apic_active()  # (Warp's API capture records launches from their arrays)
        )
        dims = None if plain else _dims(dim)
        args = [*inputs, *outputs]
        layout = None if dims is None else _layout(args)
        if layout is None or len(args) != len(kernel.adj.args):
            return original_launch()(kernel, dim, inputs, outputs, **kw)
        device = runtime().get_device(kw.get("device"))
        block_dim = kw.get("block_dim")
        key = (kernel, device.alias, dims, block_dim, layout)
        rec = self.records.get(key, kernel, dims, args, None, device, block_dim)
        if rec is None:
            return original_launch()(kernel, dim, inputs, outputs, **kw)
        rec.run(args, None, device)
        tape = runtime().tape
        if tape is not None:
            f = sys._getframe(2)  # the caller of wp.launch (past the dispatcher)
            caller = {"file": f.f_code.co_filename, "lineno": f.f_lineno, "func": f.f_code.co_name}
            entry = record_on_tape(
                tape, kernel, dims, inputs, outputs, device, rec.launch.block_dim, {"caller": caller}
            )
            if rec.backward:
                # the record's key, for tape_backward (this entry is a launch the records take)
                keys = tape.__dict__.get(_KEYS)
                if keys is None:
                    keys = tape.__dict__[_KEYS] = {}
                keys[id(entry)] = (entry, key)
        return None


_KEYS = "_interop_record_keys"  # a tape's {id(entry): (entry, forward record key)}


def tape_backward(tape: Any, records: Records) -> None:
    """``tape.backward()`` with the adjoint launches replayed from ``records`` (see the module);
    Warp's own ``Tape.backward`` where a recorded launch is not one the records take."""
    steps: list[Any] = []
    if launch_checks_on() or apic_active():
        tape.backward()
        return
    keys = tape.__dict__.get(_KEYS) or {}
    for entry in tape.launches:
        if callable(entry):
            steps.append(entry)
            continue
        known = keys.get(id(entry))
        if known is not None and known[0] is entry:  # (recorded by FastLaunches.launch)
            steps.append((entry, known[1]))
            continue
        args = [*entry[3], *entry[4]] if _fast_entry(entry) else None
        layout = None if args is None else _layout(args)
        if layout is None:
            tape.backward()
            return
        kernel, dims, _, _, _, device, block_dim = entry[:7]
        steps.append((entry, (kernel, device.alias, dims, block_dim, layout)))
    gradients = tape.gradients
    for step in reversed(steps):
        if callable(step):
            step()
            continue
        entry, fwd_key = step
        kernel, dims, _, inputs, outputs, device, block_dim = entry[:7]
        args = [*inputs, *outputs]
        # Tape.get_adjoint of each argument: an array's gradient where it has one (kept in
        # tape.gradients for tape.zero()), else None (a value's adjoint too: Warp packs a zero one)
        adj: list[Any] = []
        adj_layout: list[Any] = []
        for a in args:
            g = a.grad if type(a) is wp.array else None
            if g:  # (Warp's test: an empty gradient array counts as none)
                gradients[a] = g
                adj.append(g)
                adj_layout.append((g.dtype, g.ndim))
            else:
                adj.append(None)
                adj_layout.append(None)
        key = (fwd_key, tuple(adj_layout))
        rec = records.get(key, kernel, dims, args, adj, device, block_dim)
        if rec is None:
            original_launch()(
                kernel, dims, list(inputs), list(outputs), adj[: len(inputs)], adj[len(inputs) :],
                device=device, adjoint=True, block_dim=block_dim,
            )  # fmt: skip
            continue
        rec.run(args, adj, device)


def _fast_entry(entry: Any) -> bool:
    """Whether a tape entry is a launch the records take, with its backward enabled (Warp warns
    and skips one that is not: its own ``Tape.backward`` does that)."""
    if not isinstance(entry, list) or len(entry) < 7 or entry[2]:
        return False
    kernel, dims = entry[0], entry[1]
    return (
        isinstance(kernel, wp.Kernel)
        and not getattr(kernel, "is_generic", True)
        and backward_enabled(kernel)
        and type(dims) is tuple
    )
