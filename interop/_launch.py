"""Launching forward and adjoint passes from raw pointers, with cached launch records.

Adapters hand over each array as ``(pointer, outer byte strides or None)``; nothing
here allocates framework memory or copies data. For a kernel op, a ``wp.Launch``
record is built once per (plan, device, direction) and replayed with updated
pointers, which is cheaper than a plain ``wp.launch``. Streams live in ``_streams``, the
scalar-as-array kernel variants (and the module build lock) in ``_scalar_ref``.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any, Callable, Sequence

import numpy as np
import warp as wp

from . import _dtypes, _precompiled
from ._checked import checked_kernel, record
from ._checked.record import check_record
from ._errors import ArgumentError, UnsupportedError, naming_op
from ._extent import uses_tiles
from ._fast_launch import Records
from ._function_calls import FunctionCalls
from ._plan import device_launch_dims, generic_build_error
from ._runtime import ensure_init, get_device  # noqa: F401 (adapters import them from here)
from ._scalar_ref import build_lock, scalar_ref_kernel
from ._streams import external_stream, ordered_warp_work, warp_side_stream  # noqa: F401 (adapters import them here)
from ._structs import grad_pointer_params, leaf_paths, readable
from ._values import check_scalar_value, value_range, vector_components
from ._warp_compat import APIC_FIELD as _APIC_FIELD
from ._warp_compat import VERIFIED as _WARP_VERIFIED
from ._warp_compat import apic_active as _apic_active
from ._warp_compat import array_t, block_threads, is_deterministic_launch, module_loaded, type_size_in_bytes
from ._warp_compat import direct_cpu_invoker as _direct_cpu_invoker_compat
from ._warp_compat import direct_cpu_record as _direct_cpu_record
from ._warp_compat import direct_cuda_launcher as _direct_cuda_launcher
from ._warp_compat import runtime as _warp_runtime


def contiguous_strides(shape: Sequence[int], itemsize: int) -> tuple[int, ...]:
    strides = []
    acc = itemsize
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(strides))


class _Slot:
    __slots__ = ("lock", "launch", "fwd", "adj", "strides", "adj_strides", "contiguous", "scalars", "err", "err_host")


def _null_arrays(plan: Any) -> frozenset[int]:
    """The array parameters without an element in calls of ``plan``: they reach the kernel as null
    arrays, as Warp's own empty arrays do, so a kernel's ``if arr:`` (Warp's idiom for an optional
    array) takes its else branch, where a framework's pointer (NumPy's, JAX's: never null) had it
    read past the array."""
    return frozenset(
        p.index for p in plan.desc.params if p.is_array and 0 in tuple(int(d) for d in plan.warp_shapes[p.index])
    )


def _set_arrays(descs: dict, current: dict, contiguous: dict, values: Sequence[Any], nulls: frozenset) -> None:
    """Point each array descriptor at this call's buffer (an array without an element: null, see
    :func:`_null_arrays`); ``None`` strides mean contiguous."""
    for i, at in descs.items():
        v = values[i]
        if v is None or i in nulls:
            at.data = 0
            continue
        ptr, strides = v
        at.data = ptr
        if strides is None:
            strides = contiguous[i]
        if strides != current[i]:
            for k, st in enumerate(strides):
                at.strides[k] = st
            current[i] = strides


class Runner(FunctionCalls):
    """Launches one :class:`CallPlan` on any device; caches launch records per device. A
    Python-function op's calls and ``wp.Tape`` backward are their own concern
    (:class:`interop._function_calls.FunctionCalls`)."""

    def __init__(self, plan):
        self.plan = plan
        desc = plan.desc
        self.array_idx = tuple(p.index for p in desc.params if p.is_array)
        self.scalar_idx = tuple(p.index for p in desc.params if not p.is_array)
        self.ref_idx = tuple(desc.param(n).index for n in plan.scalar_refs)
        self.itemsize = {i: type_size_in_bytes(plan.types[i]) for i in self.array_idx}
        self.vec_scalars = {
            i: desc.params[i] for i in self.scalar_idx if i not in self.ref_idx and _dtypes.split(plan.types[i])[1]
        }
        # scalars by value whose type does not hold every number of their kind, checked when a
        # new value comes: integers (Warp would wrap them), floats (a finite value must not become inf)
        self.ranged_scalars = {
            i: desc.params[i]
            for i in self.scalar_idx
            if i not in self.ref_idx and value_range(plan.types[i]) is not None
        }
        self._slots: dict[tuple, _Slot] = {}
        self._launchers: dict[tuple, Any] = {}  # see launcher()
        self._slot_lock = threading.Lock()
        self.fast_records = Records()  # a Python-function op's launch records (interop._fast_launch)
        # a Python-function op's caches and facts (interop._function_calls)
        self.view_makers, self.last_vectors = {}, {}
        self.nulls = _null_arrays(plan)  # (arrays without an element: null in the descriptors)
        # a kernel launched over zero threads does nothing (Warp records no launch for it)
        self.empty = plan.desc.kind == "kernel" and any(int(d) == 0 for d in plan.launch_dims)
        self.tiles = plan.desc.kind == "kernel" and uses_tiles(plan.kernel)
        # a struct kernel that builds struct values from arrays needs their gradient pointers too
        struct_grads = grad_pointer_params(plan.desc.fn) if plan.desc.kind == "kernel" else frozenset()
        self.grad_pointers = None if self.tiles else frozenset(p.index for p in desc.params if p.name in struct_grads)
        self.tiles = self.tiles or bool(self.grad_pointers)
        # outputs whose memory the adjoint never touches (the kernel only stores into them, or
        # adds atomically, see _warp_compat): an adapter need not keep them for the backward,
        # and may pass any pointer for them to the adjoint launch
        self.unread_outputs = frozenset(desc.param(name).index for name in desc.adjoint_unread)
        # checked mode: the kernel's checked variant, launched with an error record (interop._checked)
        self.checked = desc.checked and desc.kind == "kernel"
        self.leaf_names = leaf_paths(desc.entries) if self.checked else {}

    # -- kernel ops ------------------------------------------------------------------
    def _kernel(self, adjoint: bool):
        if self.checked:
            return checked_kernel(self.plan.kernel, self.plan.scalar_refs, self.plan.desc.label)
        if self.ref_idx:
            return scalar_ref_kernel(self.plan.kernel, self.plan.scalar_refs)
        return self.plan.kernel

    def _preload(self, kernel, device) -> None:
        """Load ``kernel``'s module on ``device`` from a registered precompiled folder that holds it
        (``interop.use_precompiled``), before ``wp.launch`` would compile it."""
        if _precompiled.registered():
            d = self.plan.desc
            _precompiled.preload(kernel, device, block_threads(device, d.block_dim), d.name, d.label)

    def _new_slot(self, device, adjoint: bool, plain: bool = False) -> _Slot:
        """A launch record of this plan on ``device`` with its descriptors; ``plain``: one that
        runs a plain ``wp.launch`` per call (:class:`_PlainLaunch`, what Warp's deterministic mode
        gets; forced only by tests, to run that path on the CPU)."""
        plan = self.plan
        kernel = self._kernel(adjoint)
        slot = _Slot()
        slot.lock = threading.Lock()
        slot.fwd = {}
        slot.adj = {}
        slot.strides = {}
        slot.adj_strides = {}
        slot.scalars = {}
        slot.contiguous = {}
        slot.err = record.new_record(device) if self.checked else None
        slot.err_host = record.host_view(slot.err) if self.checked else None
        inputs = []
        refs = set(self.ref_idx)
        for p in plan.desc.params:
            i = p.index
            if p.is_array or i in refs:
                if i in refs:
                    shape, itemsize = (1,), type_size_in_bytes(plan.types[i])
                else:
                    shape, itemsize = plan.warp_shapes[i], self.itemsize[i]
                strides = contiguous_strides(shape, itemsize)
                at = array_t(data=0, grad=0, ndim=len(shape), shape=shape, strides=strides)
                slot.fwd[i] = at
                slot.strides[i] = strides
                slot.contiguous[i] = strides
                inputs.append(at)
            else:
                v = _zero_of(plan.types[i])
                slot.scalars[i] = None
                inputs.append(v)
        if self.checked:
            inputs.append(slot.err)
        kw = {"adj_inputs": self._adjoint_inputs(slot, refs), "adjoint": True} if adjoint else {}
        try:
            if plan.desc.block_dim is not None:
                kw["block_dim"] = plan.desc.block_dim
            with build_lock:
                self._preload(kernel, device)
                slot.launch = wp.launch(
                    kernel,
                    dim=device_launch_dims(plan.desc, plan.launch_dims, device),
                    inputs=inputs,
                    device=device,
                    record_cmd=True,
                    **kw,
                )
        except Exception as e:
            parent = getattr(kernel, "generic_parent", None)
            if parent is None or parent is not plan.desc.fn:
                # not an overload this package made (e.g. the user's own wp.overload instance)
                raise naming_op(e, plan.desc.label)  # noqa: B904 (the original is its __cause__)
            # A failed overload build is recorded against the whole Warp module and would
            # break every other kernel in it: drop the overload so the module builds again.
            for sig, ovl in list(parent.overloads.items()):
                if ovl is kernel:
                    del parent.overloads[sig]
            parent.module.mark_modified()
            raise generic_build_error(plan.desc, plan.types, e) from e
        if plain or is_deterministic_launch(slot.launch):
            slot.launch = _PlainLaunch(self, kernel, device, slot, adjoint, plan.desc.block_dim)
            return slot
        # the launch record keeps the array_t objects it was given; we update them in place
        for i, at in slot.fwd.items():
            slot.launch.set_param_at_index_from_ctype(i, at)
        for i, at in slot.adj.items():
            slot.launch.set_param_at_index_from_ctype(i, at, adjoint=True)
        return slot

    def _adjoint_inputs(self, slot: _Slot, refs: set) -> list:
        """The adjoint launch's descriptors (kept in ``slot.adj``), like the forward's."""
        plan = self.plan
        adj_inputs: list = []
        for p in plan.desc.params:
            i = p.index
            if p.is_array or i in refs:
                at = array_t(data=0, grad=0, ndim=slot.fwd[i].ndim, shape=slot.fwd[i].shape, strides=slot.strides[i])
                slot.adj[i] = at
                slot.adj_strides[i] = slot.strides[i]
                adj_inputs.append(at)
            else:
                adj_inputs.append(_zero_of(plan.types[i]))
        if self.checked:
            adj_inputs.append(None)  # the error record has no adjoint
        return adj_inputs

    def _slot(self, device, adjoint: bool) -> tuple[_Slot, bool]:
        key = (device.alias, adjoint)
        slot = self._slots.get(key)
        if slot is None:
            with self._slot_lock:
                slot = self._slots.get(key)
                if slot is None:
                    slot = self._new_slot(device, adjoint)
                    self._slots[key] = slot
        if slot.lock.acquire(blocking=False):
            return slot, True
        # another thread is using the cached record: use a private one
        s = self._new_slot(device, adjoint)
        s.lock.acquire()
        return s, False

    def _fill(self, slot: _Slot, values: Sequence[Any], adj: Sequence[Any] | None) -> None:
        launch = slot.launch
        _set_arrays(slot.fwd, slot.strides, slot.contiguous, values, self.nulls)
        for i in self.scalar_idx:
            if i in slot.fwd:
                continue
            v = values[i]
            old = slot.scalars[i]
            if v is not old:
                # an equal, non-zero number of the same type has the same bits (0.0 vs -0.0 and NaN
                # are re-packed): torch's dispatcher hands over a new float object on every call
                if type(v) is type(old) and (type(v) is float or type(v) is int) and v == old and v != 0:
                    continue
                if i in self.ranged_scalars:
                    check_scalar_value(self.plan.desc, self.ranged_scalars[i], self.plan.types[i], v)
                elif i in self.vec_scalars and type(v) is not self.plan.types[i]:
                    v = self.plan.types[i](*vector_components(self.plan.desc, self.vec_scalars[i], v))
                launch.set_param_at_index(i, v)
                slot.scalars[i] = v
        if adj is not None:
            _set_arrays(slot.adj, slot.adj_strides, slot.contiguous, adj, self.nulls)
            if self.tiles:
                self._set_grads(slot, adj)

    def _set_grads(self, slot: _Slot, adj: Sequence[Any]) -> None:
        """Tile adjoints (``adj_tile_load`` of a view such as ``x[i]``) accumulate into the primal
        array's own ``grad`` pointer, as a ``wp.array`` with ``requires_grad`` carries it: set it."""
        for i, at in slot.fwd.items():
            a = adj[i]
            if a is None or (self.grad_pointers is not None and i not in self.grad_pointers):
                at.grad = 0
                continue
            ptr, strides = a
            strides = slot.contiguous[i] if strides is None else strides
            if strides != slot.strides[i] and any(
                a != b and at.shape[k] > 1 for k, (a, b) in enumerate(zip(strides, slot.strides[i]))
            ):  # (a dimension of length 1 is laid out alike whatever its stride)
                p = self.plan.desc.params[i]
                # a struct's field is named by its path ('o.inner.a'), as at the call
                raise readable(
                    ArgumentError(
                        f"op {self.plan.desc.label!r}, parameter {p.name!r}: the kernel's adjoint (tiles, or a "
                        "struct value built from the array) needs the array "
                        f"and its gradient laid out alike, got strides {slot.strides[i]} and {strides} (bytes); "
                        "pass a contiguous array"
                    ),
                    self.plan.desc.entries,
                )
            at.grad = ptr

    def fast_forward(self, device):
        """A launcher for repeated forward calls on ``device``: ``go(values, stream)``.

        On the CPU it calls the compiled kernel entry point with an argument struct built
        once and updated in place (only pointers and scalars change between calls); this is
        the replay path of ``wp.launch(record_cmd=True)`` without rebuilding the struct.
        """
        go = self._fast(device, False)
        return lambda values, stream=None: go(values, None, stream)

    def fast_adjoint(self, device):
        """Like :meth:`fast_forward`, for the adjoint: ``go(values, adj, stream)``."""
        return self._fast(device, True)

    def prepare(self, device, stream=None) -> None:
        """Build this plan's forward and adjoint launchers on CUDA ``device`` now (loading the
        kernel's module), so that no later call loads one: a first call, or a first backward,
        inside CUDA graph capture would. ``stream``: the caller's current stream; when it is
        capturing and the module is not loaded yet, Warp could only load it during the capture,
        which CUDA drivers before 12.3 do not allow: refused with an error that says to call the
        op once before capturing. A no-op on the CPU and for Python-function ops."""
        device = get_device(device)
        if not device.is_cuda or self.empty or self.plan.desc.kind != "kernel":
            return
        directions = (False, True) if self.plan.desc.has_adjoint else (False,)
        if all((device.alias, adjoint) in self._launchers for adjoint in directions):
            return
        kernel = self._kernel(False)
        if stream is not None and stream.is_capturing and not module_loaded(kernel, device):
            driver = wp.get_cuda_driver_version()
            if driver is not None and tuple(driver) < (12, 3):
                raise UnsupportedError(
                    f"op {self.plan.desc.label!r}: first call on {device.alias} inside CUDA graph capture, and Warp "
                    f"must load the kernel's module, which CUDA driver {driver[0]}.{driver[1]} cannot do during a "
                    "capture (12.3 or newer can): call the op once (forward and backward) before capturing"
                )
        self.launcher(device, False)
        if len(directions) > 1:
            try:
                self.launcher(device, True)
            except Exception:  # noqa: S110 - a kernel whose adjoint Warp refuses raises on its first backward
                pass

    def launcher(self, device, adjoint: bool):
        """``go(values, adj, stream)`` for the forward (``adj`` None) or the adjoint, built once per
        device and direction and kept with this runner (so it is freed with the plan): one layer
        less than :meth:`fast_forward`, for adapters that generate their call code."""
        key = (get_device(device).alias, adjoint)
        go = self._launchers.get(key)
        if go is None:
            with self._slot_lock:
                go = self._launchers.get(key)
                if go is None:
                    go = self._launchers[key] = self._fast(device, adjoint)
        return go

    def _fast(self, device, adjoint: bool):
        device = get_device(device)
        if adjoint:
            self.plan.desc.check_adjoint(self.plan.scalar_refs)
        if self.empty:
            return _nothing
        if self.plan.desc.kind == "function":
            if adjoint:
                return lambda values, adj, stream=None: self._tape_backward(device, values, adj, stream)
            return lambda values, adj, stream=None: self._call_function(device, values, stream)
        slot = self._new_slot(device, adjoint)
        go = self._fast_go(device, adjoint, slot)
        if slot.err is None:
            return go
        # checked mode: each launch's error record read after it (interop._checked)
        label, err, host, names = self.plan.desc.label, slot.err, slot.err_host, self.leaf_names
        direction = " (backward)" if adjoint else ""

        def checked(values, adj=None, stream=None):
            go(values, adj, stream)
            check_record(label, err, device, stream, direction, host, names)

        return checked

    def _fast_go(self, device, adjoint: bool, slot: _Slot):
        launch = slot.launch
        direct = (
            _direct_cpu_invoker_compat(launch, slot.fwd, slot.adj)
            if device.is_cpu and not isinstance(launch, _PlainLaunch)
            else None
        )
        fill = self._fill
        lock = slot.lock
        slow = self.adjoint if adjoint else (lambda d, v, a, s: self.forward(d, v, s))

        if direct is not None:
            call_hook, sync_struct = direct

            def go(values, adj=None, stream=None):
                if not lock.acquire(blocking=False):
                    return slow(device, values, adj, stream)
                try:
                    fill(slot, values, adj)
                    if _apic_active():
                        _captured(self, slot, device, adjoint).launch(stream)
                    else:
                        sync_struct()
                        call_hook()
                finally:
                    lock.release()

            return go

        cuda = _direct_cuda_launcher(launch) if device.is_cuda and not isinstance(launch, _PlainLaunch) else None
        if cuda is not None:
            # one foreign call per launch (what Launch.launch does for a CUDA record, its fixed
            # arguments bound once: _warp_compat.direct_cuda_launcher)
            replay = launch.launch

            def go(values, adj=None, stream=None):
                if not lock.acquire(blocking=False):
                    return slow(device, values, adj, stream)
                try:
                    fill(slot, values, adj)
                    if _apic_active():
                        _captured(self, slot, device, adjoint).launch(stream)
                    elif stream is None:
                        replay(None)
                    else:
                        cuda(stream)
                finally:
                    lock.release()

            return go

        def go(values, adj=None, stream=None):
            if not lock.acquire(blocking=False):
                return slow(device, values, adj, stream)
            try:
                fill(slot, values, adj)
                _launch_slot(self, slot, device, adjoint, stream)
            finally:
                lock.release()

        return go

    # -- straight-line launches (generated per call signature by an adapter) -----------
    def can_direct(self, device) -> bool:
        """Whether :meth:`direct` can give a record for ``device``: a kernel (not a function op) on
        the CPU, not launched over zero threads, without tiles, on a Warp version in
        ``_warp_compat.CHECKED``. Elsewhere generated code calls :meth:`launcher`'s ``go``."""
        return (
            get_device(device).is_cpu
            and not self.checked
            and not self.empty
            and not self.tiles
            and self.plan.desc.kind == "kernel"
            and (self.plan.desc.block_dim or 1) <= 1
            and _WARP_VERIFIED
            and hasattr(_warp_runtime(), _APIC_FIELD)
        )

    def cuda_record(self, device, adjoint: bool, values: Sequence[Any]) -> tuple[Any, dict, dict] | None:
        """A CUDA launch record of its own for generated code: ``(launch(stream), forward
        descriptors, adjoint descriptors)`` by parameter index, the scalars of ``values`` set once
        (the caller never changes them), every array descriptor contiguous and pointing nowhere
        until the caller sets its ``data``. ``launch`` takes a ``wp.Stream`` (see
        ``_warp_compat.direct_cuda_launcher``). None where that is not possible: a kernel with
        tiles or struct gradients (their gradients travel through the arrays), a deterministic-mode
        record, a Warp not in ``_warp_compat.CHECKED``, a kernel launched over zero threads."""
        device = get_device(device)
        if not device.is_cuda or self.empty or self.tiles or self.checked or self.plan.desc.kind != "kernel":
            return None
        if adjoint:
            self.plan.desc.check_adjoint(self.plan.scalar_refs)
        slot = self._new_slot(device, adjoint)
        if isinstance(slot.launch, _PlainLaunch):
            return None
        launcher = _direct_cuda_launcher(slot.launch)
        if launcher is None:
            return None
        self._fill(slot, values, [None] * len(values) if adjoint else None)
        return launcher, dict(slot.fwd), dict(slot.adj)

    def direct(self, device, adjoint: bool, strides: dict[int, tuple]) -> DirectLaunch:
        """A launch record of its own for one caller (an adapter's entry: fixed layouts), whose
        fields generated code sets line by line; see :func:`direct_lines`. ``strides`` (bytes)
        of the arrays that are not contiguous are set once here (the gradients of the adjoint are
        contiguous). Only where :meth:`can_direct` says so."""
        device = get_device(device)
        if adjoint:
            self.plan.desc.check_adjoint(self.plan.scalar_refs)
        slot = self._new_slot(device, adjoint)
        fwd, adj = dict(slot.fwd), dict(slot.adj)
        rec = _direct_cpu_record(slot.launch, fwd, adj)
        if rec is None:  # pragma: no cover - can_direct said yes
            raise RuntimeError(f"op {self.plan.desc.label!r}: no direct CPU launch for this kernel")
        d = DirectLaunch()
        d.launch, d.rec = slot.launch, rec
        d.busy = False  # set by generated code around its launch (see direct_lines)
        d.rt = _warp_runtime()  # its APIC_FIELD: Warp's API capture recording launches
        d.fn, d.br, d.ar, d.gr, d.s = rec.fn, rec.bounds_ref, rec.args_ref, rec.adj_ref, rec.args
        for i, at in fwd.items():
            st = strides.get(i)
            if st is not None:
                for k, x in enumerate(st):
                    at.strides[k] = x
            setattr(d, f"v{i}", at)
        for i, at in adj.items():
            setattr(d, f"w{i}", at)
        d.contiguous = slot.contiguous
        _vector_views(self, d, rec)
        runner, launch, labels, plan = self, slot.launch, rec.labels, self.plan

        def set_scalar(i: int, v: Any) -> None:
            # what _fill does for one scalar, then the struct's copy
            if i in runner.ranged_scalars:
                check_scalar_value(plan.desc, runner.ranged_scalars[i], plan.types[i], v)
            elif i in runner.vec_scalars and type(v) is not plan.types[i]:
                v = plan.types[i](*vector_components(plan.desc, runner.vec_scalars[i], v))
            launch.set_param_at_index(i, v)
            setattr(rec.args, labels[i], launch.params[1 + i])

        d.set = set_scalar
        return d

    def scalar_kind(self, i: int) -> tuple:
        """How generated code sets scalar parameter ``i`` in a :class:`DirectLaunch`'s struct: ``("bool",)``
        assigned as is (ctypes converts as Warp's packing does), ``("range", lo, hi)`` assigned after a
        range check (integers; float32/float64, whose finite values must not become inf; the exact
        check runs in ``d.set`` outside it), ``("set",)`` through ``d.set`` (vectors, half floats...)."""
        t = self.plan.types[i]
        if t is wp.float16 or t is wp.bfloat16:
            return ("set",)
        if i in self.ranged_scalars:
            return ("range", *value_range(t))
        if t is wp.bool:
            return ("bool",)
        return ("set",)

    def forward(self, device, values: Sequence[Any], stream=None) -> None:
        """Run the forward pass.

        Args:
            device: Warp device (object or name).
            values: per parameter in kernel order: ``(ptr, strides|None)`` for arrays and for
                scalars passed by reference (``plan.scalar_refs``), the value for other scalars.
            stream: Warp stream to launch on (CUDA), or None for the device's current stream.
        """
        device = get_device(device)
        if self.empty:
            return
        if self.plan.desc.kind == "function":
            self._call_function(device, values, stream)
            return
        slot, cached = self._slot(device, False)
        try:
            self._fill(slot, values, None)
            _launch_slot(self, slot, device, False, stream)
            if slot.err is not None:
                check_record(self.plan.desc.label, slot.err, device, stream, "", slot.err_host, self.leaf_names)
        finally:
            slot.lock.release()

    def adjoint(self, device, values: Sequence[Any], adj: Sequence[Any], stream=None) -> None:
        """Run Warp's adjoint: accumulate input gradients into the ``adj`` buffers.

        Args:
            values: as for :meth:`forward` (outputs may be None when the kernel never reads them).
            adj: per parameter: ``(ptr, strides|None)`` of the gradient buffer (zero-filled by the
                caller for inputs; the upstream gradient for outputs and in-out arrays), or None.
        """
        device = get_device(device)
        self.plan.desc.check_adjoint(self.plan.scalar_refs)
        if self.empty:
            return
        if self.plan.desc.kind == "function":
            self._tape_backward(device, values, adj, stream)
            return
        slot, cached = self._slot(device, True)
        try:
            self._fill(slot, values, adj)
            _launch_slot(self, slot, device, True, stream)
            if slot.err is not None:
                check_record(
                    self.plan.desc.label, slot.err, device, stream, " (backward)", slot.err_host, self.leaf_names
                )
        finally:
            slot.lock.release()


def _launch_slot(runner: Runner, slot: _Slot, device, adjoint: bool, stream) -> None:
    """Launch a filled slot: its record, or while Warp's API capture records launches (CPU graph
    capture, ``wp.ScopedCapture(device="cpu")``), a plain ``wp.launch`` of its arrays
    (:func:`_captured`)."""
    if _apic_active() and not isinstance(slot.launch, _PlainLaunch):
        _captured(runner, slot, device, adjoint).launch(stream)
    else:
        slot.launch.launch(stream)


def _captured(runner: Runner, slot: _Slot, device, adjoint: bool) -> _PlainLaunch:
    """A plain launch of a filled slot, for Warp's API capture: it records a launch from its
    ``wp.array`` arguments (their memory regions), and refuses the raw descriptors a record holds
    (Warp 1.19: ``NotImplementedError``)."""
    plain = _PlainLaunch(runner, runner._kernel(adjoint), device, slot, adjoint, runner.plan.desc.block_dim)
    for i, v in slot.scalars.items():
        if v is not None:
            plain.scalars[i] = v
    return plain


class _PlainLaunch:
    """Stands in for a launch record where Warp's is unusable: Warp's deterministic mode (CUDA
    kernels with atomics, ``wp.config.deterministic``) records a launch that refuses in-place
    descriptor updates for its atomic targets and allocates scratch buffers on every launch.
    This one keeps the slot's descriptors and scalars and runs a plain ``wp.launch`` with array
    views of them, in :func:`ordered_warp_work` (the scratch lives in stream order). Used only in
    that mode: slower per call, same results."""

    def __init__(self, runner: Runner, kernel, device, slot: _Slot, adjoint: bool, block_dim: int | None):
        self.runner, self.kernel, self.device, self.slot = runner, kernel, device, slot
        self.adjoint, self.block_dim = adjoint, block_dim
        types = runner.plan.types
        self.scalars = {p.index: _zero_of(types[p.index]) for p in runner.plan.desc.params if p.index not in slot.fwd}

    def set_param_at_index(self, i: int, value: Any, adjoint: bool = False) -> None:
        self.scalars[i] = value

    def _view(self, i: int, at) -> Any:
        if not at.data:
            return None
        shape = tuple(at.shape[k] for k in range(at.ndim))
        t = self.runner.plan.types[i]
        a = wp.array(
            ptr=at.data, dtype=t, shape=shape, strides=tuple(at.strides[k] for k in range(at.ndim)), device=self.device
        )
        if at.grad:  # a tile kernel's gradient travels with its array (Runner._set_grads)
            a.grad = wp.array(ptr=at.grad, dtype=t, shape=shape, strides=a.strides, device=self.device)
        return a

    def launch(self, stream=None) -> None:
        plan, slot = self.runner.plan, self.slot
        inputs, adj_inputs = [], []
        for p in plan.desc.params:
            i = p.index
            if i in slot.fwd:
                inputs.append(self._view(i, slot.fwd[i]))
                adj_inputs.append(self._view(i, slot.adj[i]) if self.adjoint else None)
            else:
                inputs.append(self.scalars[i])
                adj_inputs.append(_zero_of(plan.types[i]))
        if slot.err is not None:
            inputs.append(slot.err)
            adj_inputs.append(None)
        kw: dict[str, Any] = {}
        if self.block_dim is not None:
            kw["block_dim"] = self.block_dim
        if self.adjoint:
            kw.update(adj_inputs=adj_inputs, adjoint=True)
        with ordered_warp_work(self.device, stream):
            dims = device_launch_dims(plan.desc, plan.launch_dims, self.device)
            wp.launch(self.kernel, dim=dims, inputs=inputs, device=self.device, **kw)


class DirectLaunch:
    """A private recorded CPU launch for generated code (:meth:`Runner.direct`), used by one
    thread (:func:`direct_env`): ``busy`` while a launch fills it (a call re-entering from the
    same thread takes the shared launch); ``rt`` Warp's runtime (its
    ``_warp_compat.APIC_FIELD``); ``fn``
    with ``br``/``ar``/``gr`` (bounds, argument and adjoint-argument struct references: call
    ``fn(br, ar)`` or ``fn(br, ar, gr)``); ``s`` the argument struct; ``v<i>``/``w<i>`` the
    descriptors of array parameter ``i`` and of its gradient; ``set(i, value)`` for a scalar
    that needs converting. ``launch`` keeps the record (and so the structs) alive."""

    def packed_buffer(self, i: int) -> Callable[[int], None]:
        """Make the record's packed buffer for gradient descriptor ``i`` (an upstream gradient that
        is an expanded scalar, as the gradient of ``.sum()``: generated code fills it with that
        one element and points the descriptor at it, so the adjoint reads packed arrays, the
        kernel's faster path, without a framework copy). Sets ``zf<i>`` (fill with an element's
        bits), ``zr<i>`` (read an element's bits at an address) and ``zp<i>`` (the buffer's
        address); returns ``zf<i>``. Only for descriptors whose elements are one scalar."""
        at = getattr(self, f"w{i}")
        itemsize = self.contiguous[i][-1] if self.contiguous[i] else 0
        bits = _BITS.get(itemsize)
        if bits is None:  # pragma: no cover - generated code asks only for scalar dtypes
            raise RuntimeError(f"no packed buffer for gradient {i}: element of {itemsize} bytes")
        count = 1
        for k in range(at.ndim):
            count *= at.shape[k]
        buf = np.empty(max(count, 1), dtype=bits[0])
        self.__dict__[f"zb{i}"] = buf  # kept alive with the record
        self.__dict__[f"zr{i}"] = bits[1].from_address
        self.__dict__[f"zp{i}"] = buf.ctypes.data
        self.__dict__[f"zv{i}"] = None  # the bits the buffer holds
        fill = self.__dict__[f"zf{i}"] = buf.fill
        return fill


#: element size -> (NumPy unsigned integer type, ctypes type) holding an element's bits
_BITS = {
    1: (np.uint8, ctypes.c_uint8),
    2: (np.uint16, ctypes.c_uint16),
    4: (np.uint32, ctypes.c_uint32),
    8: (np.uint64, ctypes.c_uint64),
}


def direct_env(
    runner: Runner,
    device,
    strides: dict[int, tuple],
    env: dict[str, Any],
    adj_strides: dict[int, tuple] | None = None,
) -> None:
    """Bind in ``env`` (the globals of generated code) what :func:`direct_lines` reads for the
    names ``"DF"`` (forward) and ``"DA"`` (adjoint): a ``threading.local`` whose ``d`` is the
    calling thread's :class:`DirectLaunch` of that direction, made on its first use by
    ``make_DF()``/``make_DA()``. One record per thread: no lock on the way to the kernel, and
    threads never share the fields they fill.

    ``strides`` (bytes, by parameter index) are the strided arrays of the forward's launch,
    ``adj_strides`` those of the adjoint's (default: the same). They differ where generated code
    hands a launch another tensor than the caller's for a parameter (a contiguous copy of a strided
    in-out): that parameter must not keep the caller's strides, or the kernel writes the copy with
    them, past its end."""
    for name, adjoint in (("DF", False), ("DA", True)):
        local = threading.local()
        st = adj_strides if adjoint and adj_strides is not None else strides

        def make(local=local, adjoint=adjoint, st=st) -> DirectLaunch:
            d = local.d = runner.direct(device, adjoint, st)
            return d

        env[name], env[f"make_{name}"] = local, make


def direct_lines(
    runner: Runner,
    device,
    d: str,
    values: dict[int, str],
    adj: dict[int, str] | None,
    fallback: str,
    indent: str = "    ",
    zero: dict[int, str] | None = None,
    vectors: dict[int, str] | None = None,
) -> list[str]:
    """Python source lines of one launch through a :class:`DirectLaunch`, for generated code.

    ``d`` is ``"DF"`` or ``"DA"``, bound with the record's maker by :func:`direct_env`; ``values`` maps each parameter index to an
    expression of its data pointer (arrays) or value (scalars), ``adj`` each array parameter to
    the expression of its gradient's pointer (``"0"`` for none) for the adjoint, and ``zero``
    some of those gradients to a boolean expression: True when that gradient is an expanded
    scalar (all strides 0: the kernel then reads the record's packed buffer filled with its one
    element, see :meth:`DirectLaunch.packed_buffer`), False when contiguous. When the thread's record
    is busy (a call re-entering from a callback) or Warp's API capture records launches,
    ``fallback`` (a statement) runs instead. Where :meth:`Runner.can_direct` says no, the lines are only ``fallback``.

    ``vectors`` maps vector parameters (:func:`vector_field`) to the expression of the value
    as the call gave it, ``values`` holding its conversion: a list or tuple of as many Python floats,
    each within the component type's range (what ``torch.ops`` hands over for a ``float[]``), is written
    into the struct's bytes of that parameter as they are (``c<i>[:] = value``: ctypes rounds each
    float as Warp's vector constructor does); any other value is converted and checked by ``d.set``.
    """
    if not runner.can_direct(device):
        return [indent + fallback]
    i1, i2 = indent + "    ", indent + "        "
    # (no Python call between the user's call and the kernel: each costs several times more
    # inside autograd than alone, so the capture test reads Warp's runtime field directly)
    lines = [f"{indent}try:", f"{i1}_d = {d}.d", f"{indent}except AttributeError:", f"{i1}_d = make_{d}()"]
    lines.append(f"{indent}if _d.rt.{_APIC_FIELD} is None and not _d.busy:")
    lines.append(f"{i1}_d.busy = True")
    lines.append(f"{i1}try:")
    for i in sorted(values):
        expr = values[i]
        p = runner.plan.desc.params[i]
        if p.is_array or i in runner.ref_idx:
            lines.append(f"{i2}_d.v{i}.data = {0 if i in runner.nulls else expr}")
            continue
        kind = runner.scalar_kind(i)
        label = runner.plan.kernel.adj.args[i].label
        vf = vector_field(runner, i) if vectors and i in vectors else None
        if vf is not None:
            raw, n, lo, hi = vectors[i], vf[1], vf[2], vf[3]  # type: ignore[index]
            test = ["(type(_v) is list or type(_v) is tuple)", f"len(_v) == {n}"]
            test += [f"type(_v[{k}]) is float" for k in range(n)]
            test += [f"{lo!r} <= _v[{k}] <= {hi!r}" for k in range(n)]
            lines.append(f"{i2}_v = {raw}")
            lines.append(f"{i2}if {' and '.join(test)} and _d.c{i} is not None:")
            lines.append(f"{i2}    _d.c{i}[:] = _v")
            lines.append(f"{i2}else:")
            lines.append(f"{i2}    _d.set({i}, {expr})")
            continue
        if kind[0] == "range":
            lines.append(f"{i2}if not ({kind[1]!r} <= {expr} <= {kind[2]!r}):")
            lines.append(f"{i2}    _d.set({i}, {expr})  # refuses the value")
            lines.append(f"{i2}_d.s.{label} = {expr}")
        elif kind[0] == "set":
            lines.append(f"{i2}_d.set({i}, {expr})")
        else:
            lines.append(f"{i2}_d.s.{label} = {expr}")
    if adj is None:
        lines.append(f"{i2}_d.fn(_d.br, _d.ar)")
    else:
        for i in sorted(adj):
            lines.append(f"{i2}_d.w{i}.data = {0 if i in runner.nulls else adj[i]}")
        for i, flag in sorted((zero or {}).items()):
            # an expanded scalar: the record's packed buffer, filled with its one element, stands in
            lines.append(f"{i2}if {flag}:")
            lines.append(f"{i2}    try:")
            lines.append(f"{i2}        _f = _d.zf{i}")
            lines.append(f"{i2}    except AttributeError:")
            lines.append(f"{i2}        _f = _d.packed_buffer({i})")
            lines.append(f"{i2}    _v = _d.zr{i}({adj[i]}).value")
            lines.append(
                f"{i2}    if _v != _d.zv{i}:  # (the buffer holds that element already: .sum()'s 1.0, each step)"
            )
            lines.append(f"{i2}        _f(_v)")
            lines.append(f"{i2}        _d.zv{i} = _v")
            lines.append(f"{i2}    _d.w{i}.data = _d.zp{i}")
        lines.append(f"{i2}_d.fn(_d.br, _d.ar, _d.gr)")
    lines.append(f"{i1}finally:")
    lines.append(f"{i2}_d.busy = False")
    lines.append(f"{indent}else:")
    lines.append(f"{i1}{fallback}")
    return lines


def vector_field(runner: Runner, i: int) -> tuple | None:
    """``(ctypes scalar, n, lo, hi)`` of a vector parameter ``i`` of ``runner``'s kernel (vec, quat,
    transform) of float32/float64 components, passed by value: generated code may write its ``n``
    components into a :class:`DirectLaunch`'s struct (``c<i>``), each a float within ``[lo, hi]``;
    None for every other parameter (``d.set`` converts and checks those)."""
    if i not in runner.vec_scalars:
        return None
    t = runner.plan.types[i]
    shape = getattr(t, "_shape_", None)
    ct = _VECTOR_CTYPES.get(getattr(t, "_wp_scalar_type_", None))
    if ct is None or shape is None or len(shape) != 1 or not 0 < shape[0] <= 16 or runner.vec_scalars[i].generic:
        return None
    lo, hi = value_range(t._wp_scalar_type_)
    return ct, int(shape[0]), lo, hi


def _vector_views(runner: Runner, d: Any, rec: Any) -> None:
    """Set ``d.c<i>`` for each vector parameter: the struct's own bytes of it as n floats (see
    :func:`direct_lines`), or None where its field is not that."""
    for i in runner.vec_scalars:
        vf = vector_field(runner, i)
        field = getattr(type(rec.args), rec.labels[i], None)
        view = None
        if vf is not None and field is not None and field.size == vf[1] * ctypes.sizeof(vf[0]):
            view = (vf[0] * vf[1]).from_buffer(rec.args, field.offset)
        setattr(d, f"c{i}", view)


#: a vector's component type -> the ctypes type Warp stores it as (see vector_field)
_VECTOR_CTYPES = {wp.float32: ctypes.c_float, wp.float64: ctypes.c_double}


def _nothing(values, adj=None, stream=None) -> None:
    return None


def _zero_of(t: Any):
    scalar, inner = _dtypes.split(t)
    if inner:
        return t()
    return scalar(0) if scalar is not wp.bool else False
