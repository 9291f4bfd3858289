"""Python-function ops (a function annotated like a kernel that launches kernels itself): the
call with Warp arrays made over the caller's memory, and the backward by a ``wp.Tape`` over a
replay of the function. A concern of :class:`interop._launch.Runner`, which inherits it.
"""

from __future__ import annotations

import ast
import ctypes
import functools
import inspect
import numbers
import os
import textwrap
import threading
from operator import itemgetter
from typing import Any

import numpy as np
import warp as wp

from . import _dtypes
from ._description import IN_OUT, INPUT, OUTPUT
from ._errors import ArgumentError, UnsupportedError, naming_op
from ._fast_launch import FastLaunches, Records, _value_ok, tape_backward
from ._scalar_ref import build_lock
from ._streams import ordered_warp_work
from ._tape_grads import give_temporaries_grads
from ._values import check_scalar_value, vector_components
from ._warp_compat import VERIFIED, attach_grad, owned_bytes, repoint, type_size_in_bytes


class FunctionCalls:
    """Calls of a Python-function op and its ``wp.Tape`` backward. Reads the runner's ``plan``,
    ``ref_idx`` (scalars handed over as 0-d arrays), ``ranged_scalars`` and ``vec_scalars``."""

    plan: Any
    ref_idx: Any
    ranged_scalars: dict
    vec_scalars: dict
    fast_records: Records
    view_makers: dict
    last_vectors: dict
    nulls: frozenset  # array parameters without an element (interop._launch._null_arrays)

    def _wp_array(self, device, i: int, v, grad=None, shape=None):
        ptr, strides = v
        if shape is None and strides is None:
            # (the common case: a packed array of the plan's shape, its maker found by parameter)
            makers = self.view_makers
            make = makers.get((i, device.alias))
            if make is None:
                make = makers[(i, device.alias)] = self.fast_records.maker(
                    ptr, self.plan.types[i], tuple(self.plan.warp_shapes[i]), None, device
                )
            a: Any = make(ptr)
        else:
            shape = self.plan.warp_shapes[i] if shape is None else shape
            a = self.fast_records.view(ptr, self.plan.types[i], tuple(shape), strides, device)
        if grad is not None:
            a.grad = grad  # (also sets requires_grad, without allocating a gradient first)
        return a

    def _vector(self, i: int, p: Any, v: Any) -> Any:
        """A vector or matrix value as the parameter's Warp type. A flat tuple of numbers (the same
        object on every call: a constant, a JAX static argument) is converted once and its value
        handed out again while unchanged (the function may change its argument in place)."""
        t = self.plan.types[i]
        last = self.last_vectors
        got = last.get(i)
        if got is not None and got[0] is v and bytes(got[1]) == got[2]:
            return got[1]
        w = t(*vector_components(self.plan.desc, p, v))
        if type(v) is tuple and all(type(c) in _NUMBERS for c in v):
            last[i] = (v, w, bytes(w))
        return w

    def _function_args(self, device, values, adj=None, scratch_outputs=False):
        plan = self.plan
        args = []
        for p in plan.desc.params:
            i = p.index
            if i in self.ref_idx:
                # a scalar handed over as a 0-d array (a traced JAX value, a Python number JAX made an
                # operand of, a tensor): the function takes host numbers, so it is read back. On CUDA
                # that copy waits for the caller's stream (this runs in ordered_warp_work: Warp's
                # current stream waited on it): one sync per call, the price of a device scalar
                v = values[i]
                arr = self._wp_array(device, i, v, shape=(1,))
                args.append(
                    arr.numpy()[0].item()
                    if not _dtypes.split(plan.types[i])[1]
                    else plan.types[i](*arr.numpy()[0].flatten())
                )
                continue
            if not p.is_array:
                v = values[i]
                if i in self.ranged_scalars:
                    check_scalar_value(plan.desc, p, plan.types[i], v)
                elif i in self.vec_scalars and type(v) is not plan.types[i]:
                    v = self._vector(i, p, v)
                args.append(v)
                continue
            g = None
            if adj is not None and adj[i] is not None:
                g = self._wp_array(device, i, adj[i])
                if p.role != "input" and not g.is_contiguous:
                    # an upstream gradient the tape only reads (e.g. an expanded one): Warp wants a
                    # gradient laid out like its array, so hand it a packed copy
                    g = wp.clone(g)
            if scratch_outputs and p.role != "input":
                # recompute into scratch: in-out arrays only accumulate (documented rule), so
                # their adjoint does not depend on the value they held
                # with a gradient even where no upstream one comes: a later launch of the function may
                # read this output, and the gradient reaching the inputs through it must not be dropped
                floats = _dtypes.is_float(_dtypes.split(plan.types[i])[0])
                a = wp.zeros(self.plan.warp_shapes[i], dtype=plan.types[i], device=device)
                if g is not None:
                    a.grad = g
                elif floats:
                    a.requires_grad = True  # (a zero gradient, allocated only where none comes)
                args.append(a)
                continue
            if values[i] is None:
                raise ArgumentError(f"op {plan.desc.label!r}: missing array for parameter {p.name!r}")
            arr = self._wp_array(device, i, values[i])
            if g is not None and tuple(arr.strides) != tuple(g.strides):
                # Warp wants a gradient laid out like its array: recompute from a packed copy of a
                # strided input (the gradient buffer, allocated by the adapter, is packed)
                arr = wp.clone(arr)
            if g is not None:
                arr.grad = g
            # (an input whose gradient no one asked for gets none: its adjoints are not computed,
            # and nothing else reads them)
            args.append(arr)
        return args

    def _launches(self) -> Any:
        """The function's launches: a checked op's checked (``interop._checked.functions``), else
        replayed from this op's launch records (``interop._fast_launch``)."""
        if not self.plan.desc.checked:
            return FastLaunches(self.fast_records)
        from ._checked.functions import CheckedLaunches

        return CheckedLaunches(self.plan.desc.label)

    def _backward(self, tape) -> None:
        """``tape.backward()``: a checked op's by Warp (its adjoint launches checked), else with
        the adjoint launches replayed from this op's launch records."""
        if self.plan.desc.checked:
            tape.backward()
        else:
            tape_backward(tape, self.fast_records)

    def _run(self, args) -> None:
        """The function called with ``args``; a value it returns is refused (it would be dropped:
        a Python-function op's results are the arrays it writes)."""
        got = self.plan.kernel(*args)
        if got is not None:
            desc = self.plan.desc
            raise ArgumentError(
                f"op {desc.label!r}: the function returned a value ({type(got).__name__}); a Python-function op returns "
                f"the arrays it writes (its outputs {[p.name for p in desc.output_params]}), so write the "
                "result into an output instead of returning it"
            )

    def _call_function(self, device, values, stream) -> None:
        # the function's own wp.launch calls may load modules: one Python-function op at a time.
        # Its arrays, and whatever it allocates, live in stream order with the caller's stream.
        with build_lock, wp.ScopedDevice(device), ordered_warp_work(device, stream):
            args = self._function_args(device, values)
            try:
                with self._launches():
                    self._run(args)
            except Exception as e:
                raise naming_op(e, self.plan.desc.label)  # noqa: B904 (the original is its __cause__)

    def _tape_backward(self, device, values, adj, stream) -> None:
        self._refuse_scalar_gradients(adj)
        tape = wp.Tape()
        # the scratch arrays (recomputed outputs, packed copies, throwaway gradients) are made, used
        # and freed in stream order with the caller's stream (see ordered_warp_work)
        with build_lock, wp.ScopedDevice(device), ordered_warp_work(device, stream):
            args = self._function_args(device, values, adj, scratch_outputs=True)
            try:
                with self._launches() as launches:
                    with tape:
                        self._run(args)
                    # temporaries the function made without requires_grad still carry the gradient
                    give_temporaries_grads(tape, args, self.plan.desc.label)
                    self._backward(tape)
                if launches is not None:
                    launches.check()
            except Exception as e:
                raise naming_op(e, self.plan.desc.label)  # noqa: B904 (the original is its __cause__)

    # -- kept tapes: the forward recorded for the backward -----------------------------------
    def record_forward(self, device, values, stream=None) -> KeptTape | None:
        """The forward of a Python-function op whose backward will run: the call under a kept
        ``wp.Tape``; the adapter holds the result in its autograd node and hands it to
        :meth:`kept_backward`. None when the call launches nothing (an empty launch)."""
        if self.empty:  # type: ignore[attr-defined]
            return None
        return self._record_function(wp.get_device(device), values, stream)

    def kept_backward(self, kept: KeptTape | None, device, values, adj, stream=None) -> None:
        """The backward from the tape :meth:`record_forward` kept (released here); without one
        (released by an earlier backward, ``retain_graph=True``), a replay under a new tape."""
        if self.empty:  # type: ignore[attr-defined]
            return
        if kept is None or kept.tape is None:
            self._tape_backward(wp.get_device(device), values, adj, stream)
            return
        over = kept.over
        if over is not None and over[0](values) != over[1] and not self._moved_onto(kept, values):
            kept.release()
            self._tape_backward(wp.get_device(device), values, adj, stream)
            return
        self._kept_backward(kept, adj, stream)

    def _moved_onto(self, kept: KeptTape, values) -> bool:
        """Whether ``kept``, recorded over other memory than ``values`` (the tensors the node saved,
        as the backward got them), was moved onto them: the same contents elsewhere. Saved-tensor
        hooks hand the backward other tensors than the forward's (``torch.utils.checkpoint``
        recomputes them, ``save_on_cpu`` and a user's pack/unpack hooks copy them), and the
        forward's may be freed by then: a tape left on them reads freed memory (a wrong gradient,
        NaN). Moved as JAX's adjoint moves its tapes (only arrays this package made, the same
        layout); False (the function is replayed over ``values``) otherwise."""
        _, recorded, idx = kept.over
        if len(idx) == 1:
            recorded = (recorded,)
        changed = [(i, v) for i, v in zip(idx, recorded) if values[i] != v]
        if any(values[i] is None or values[i][1] != v[1] for i, v in changed):
            return False  # (another layout: the recorded arrays cannot be moved onto it)
        forward = list(values)
        for i, v in zip(idx, recorded):
            forward[i] = v
        if self._movable(kept, forward) is None:
            return False
        for i, _ in changed:
            repoint(kept.args[i], values[i][0])
        return True

    def _record_function(self, device, values, stream) -> KeptTape:
        """The forward of a Python-function op under a ``wp.Tape`` that is kept for the backward
        (:meth:`_kept_backward`): what ``wp.Tape`` users do, no replay of the function. The
        tape reads the caller's memory: the adapter keeps the inputs and the returned arrays alive
        for its backward (a function op's ``adjoint_unread`` is empty: its node saves them all), and
        the framework refuses a backward after one was modified in place. In-out arrays run on a
        copy (written back after the call): the tape must see the value the function read.
        Memory: the tape keeps every array the function allocates (its intermediates) until the
        backward runs or the framework drops the node."""
        plan = self.plan
        tape = wp.Tape()
        with build_lock, wp.ScopedDevice(device), ordered_warp_work(device, stream):
            args = self._function_args(device, values)
            kept: dict[int, Any] = {}
            grads: dict[int, Any] = {}  # the gradients given before the call, by parameter index
            over = []  # the arrays recorded over the caller's memory (not a copy made here)
            for p in plan.desc.params:
                i = p.index
                if not p.is_array or i in self.ref_idx:
                    continue
                a = args[i]
                if p.role == IN_OUT or (p.role == OUTPUT and not a.is_contiguous):
                    # a packed copy, written back after the call (Warp wants a gradient laid out
                    # like its array; an in-out array's tape must keep the value the function read)
                    scratch = wp.clone(a)
                    kept[i] = (scratch, a)
                    args[i] = scratch
                elif p.role == INPUT and plan.differentiable[i] and not a.is_contiguous:
                    args[i] = wp.clone(a)  # Warp wants a gradient laid out like its array
                else:
                    over.append(i)
                if p.role != OUTPUT and plan.differentiable[i] and not only_launches(plan.desc.fn):
                    # a gradient from the start, as the replay's arrays have (_tape_backward): Warp
                    # records a wp.clone/wp.copy of an array only if it has one, a struct made in the
                    # function keeps the gradient it had, the function may read requires_grad. The
                    # backward runs into it (copied in and out: _kept_backward)
                    b = args[i]
                    grads[i] = b.grad = self.fast_records.allocate_like((b,), {}, True) or wp.zeros_like(b)
            try:
                with self._launches() as launches:
                    with tape:
                        self._run(args)
            except Exception as e:
                raise naming_op(e, self.plan.desc.label)  # noqa: B904 (the original is its __cause__)
            for scratch, mine in kept.values():
                wp.copy(mine, scratch)
        # where the recorded arrays lie (pointers, strides): the backward checks that its saved
        # tensors are still there (kept_backward); a getter, so that the check is one C call
        get = itemgetter(*over) if over else None
        return KeptTape(tape, args, device, launches, (get, get(values), tuple(over)) if get else None, grads)

    def _kept_backward(self, kept: KeptTape, adj, stream) -> None:
        """The backward from a tape :meth:`_record_function` kept: the upstream gradients and the
        gradient buffers are attached to the recorded arrays, then ``tape.backward()``. The tape
        is released (the caller drops ``kept``); a second backward replays the function."""
        plan = self.plan
        self._refuse_scalar_gradients(adj)
        device = kept.device
        copies = []  # (the adapter's gradient buffer, the gradient the forward gave the array)
        with build_lock, wp.ScopedDevice(device), ordered_warp_work(device, stream):
            for p in plan.desc.params:
                i = p.index
                if adj is None or adj[i] is None or not p.is_array or i in self.ref_idx:
                    # (an input whose gradient no one asked for gets none: its adjoints are not
                    # computed, and nothing else reads them)
                    continue
                a = kept.args[i]
                g = self._wp_array(device, i, adj[i])
                if i in kept.grads:
                    wp.copy(kept.grads[i], g)  # (the buffer the forward's records hold: in, then out)
                    copies.append((g, kept.grads[i]))
                elif g.strides != a.strides or g.shape != a.shape:
                    # Warp wants a gradient laid out like its array (the recorded arrays are packed,
                    # as are the adapter's gradient buffers): a packed copy of an upstream gradient
                    a.grad = wp.clone(g)
                else:
                    attach_grad(a, g)  # (the same dtype, shape, strides and device: made alike)
            try:
                # temporaries the function made without requires_grad still carry the gradient
                give_temporaries_grads(kept.tape, kept.args, plan.desc.label)
                self._backward(kept.tape)
                for g, given in copies:
                    wp.copy(g, given)
                if kept.launches is not None:  # a checked op: its recorded launches' error records
                    kept.launches.check()
            except Exception as e:
                raise naming_op(e, plan.desc.label)  # noqa: B904 (the original is its __cause__)
            finally:
                # the tape's arrays (the function's intermediates) are freed here, in stream
                # order with the caller's stream (see ordered_warp_work)
                kept.release()

    # -- kept tapes across calls: a forward and its backward in two calls (JAX's FFI calls) ---------
    def keep_forward(self, device, values, stream, token: int) -> None:
        """The forward of a Python-function op whose backward runs in another call with other
        buffers (JAX: the adjoint's operands), keeping its tape (:data:`KEPT`): the token of the
        kept tape is written to the ``uint32`` at ``token`` (host memory; zero-filled by the
        caller, and 0 stays: no tape kept, the backward replays the function). Kept on the CPU
        when the tape can be moved to the backward's buffers (:meth:`_movable`); on CUDA the
        backward would have to read the token back from the device (a synchronisation per call),
        so it replays the function instead."""
        if not (device.is_cpu and VERIFIED) or self.empty or KEPT.limit <= 0 or self.nulls:  # type: ignore[attr-defined]
            # (an empty array: XLA may skip an adjoint whose results are all empty, leaving the
            # tape unused; nothing is saved by keeping one)
            self._call_function(device, values, stream)
            return
        kept = self._record_function(device, values, stream)
        movable = self._movable(kept, values)
        tid = 0
        if movable is not None:
            tid = KEPT.put(kept, *movable)
        else:
            kept.release()
        if tid:
            ctypes.c_uint32.from_address(token).value = tid

    def kept_adjoint(self, device, values, adj, stream, token: int) -> None:
        """The backward of a :meth:`keep_forward` call from the tape it kept, moved to this call's
        buffers: the recorded inputs and outputs onto ``values``' (the adjoint's operands: the
        forward's inputs and outputs, the same contents). Warp's adjoint kernels only read them
        (the forward's stores and atomics are not replayed), as the kept tapes of torch and Paddle
        read the tensors their nodes saved. Without a tape (none kept, already used by another
        backward, evicted), a replay of the function under a new tape."""
        tid = ctypes.c_uint32.from_address(token).value if device.is_cpu and token else 0
        got = KEPT.pop(tid) if tid else None
        if got is None:
            self._tape_backward(device, values, adj, stream)
            return
        kept, moved = got
        if any(values[i] is None for i in moved):
            kept.release()
            self._tape_backward(device, values, adj, stream)
            return
        for i in moved:
            repoint(kept.args[i], values[i][0])
        self._kept_backward(kept, adj, stream)

    def _movable(self, kept: KeptTape, values) -> tuple[tuple[int, ...], int] | None:
        """The parameter indices of the arrays of ``kept`` over the caller's buffers (what the
        backward points at its own buffers), and the bytes the tape's other arrays allocated
        (intermediates, their gradients). None where the tape cannot be moved: a
        launch recorded as a function (``Tape.record_func``), an argument that may hold a pointer
        (a struct, an indexed array) or an array the function made over the caller's memory (a
        view of an argument): only the arrays this package made are moved."""
        plan = self.plan
        moved = []
        ranges = []
        seen = set()
        for p in plan.desc.params:
            i = p.index
            if not p.is_array or i in self.ref_idx or values[i] is None:
                continue
            a = kept.args[i]
            if a.ptr != values[i][0] or not a.ptr:
                continue  # a copy the forward made (an in-out array): the tape's own
            moved.append(i)
            ranges.append((a.ptr, a.ptr + int(a.size) * type_size_in_bytes(plan.types[i])))
            seen.add(id(a))
        total = 0
        for launch in kept.tape.launches:
            if type(launch) is not list:
                return None
            for group in (launch[3], launch[4]):
                for a in group:
                    t = type(a)
                    if t is wp.array:
                        k = id(a)
                        if k in seen:
                            continue
                        seen.add(k)
                        own = owned_bytes(a)
                        if own:
                            total += own + owned_bytes(a.grad) if a.requires_grad else own
                            continue
                        ptr = a.ptr or 0
                        for lo, hi in ranges:
                            if lo <= ptr < hi:
                                return None
                    elif not (t in _NUMBERS or _plain_value(a)):
                        return None
        return tuple(moved), total

    def _refuse_scalar_gradients(self, adj) -> None:
        asked = [self.plan.desc.params[i].name for i in self.ref_idx if adj is not None and adj[i] is not None]
        if asked:
            # only gradients *with respect to* such scalars are unknown; array gradients still work
            names = ", ".join(asked)
            raise UnsupportedError(
                f"op {self.plan.desc.label!r}: gradients with respect to scalar parameters ({names}) of a "
                "Python-function op are not supported (wp.Tape does not record scalar adjoints); pass the "
                "scalar as a 1-element array parameter instead"
            )


_NUMBERS = (float, int, bool)


def _plain_value(v: Any) -> bool:
    """A launch argument that holds no pointer: a number, a Warp vector or matrix, a tuple or list
    of numbers, a NumPy array (host memory of its own)."""
    if _value_ok(type(v)) or isinstance(v, (numbers.Number, np.generic, np.ndarray)):
        return True
    return isinstance(v, (tuple, list)) and all(isinstance(x, (numbers.Number, np.generic)) for x in v)


class KeptTapes:
    """Forward tapes of Python-function ops kept for a backward in another call (JAX: the forward and
    the adjoint are two FFI calls), by token (1 to 2**32 - 1). A tape is used once (``pop``). The
    tapes nobody takes under ``jax.jit`` (a ``jax.checkpoint`` forward that is recomputed, a
    forward whose results carry no gradient back; an eager one is freed with its pullback) are
    evicted oldest first once the arrays they allocated (intermediates, their gradients) pass
    ``limit`` bytes
    (``INTEROP_KEPT_MB``, default 256 MiB; 0: no tape is kept) or they number more than
    ``count``; a backward whose tape was evicted replays the function."""

    def __init__(self, limit: int, count: int = 16384):
        self.limit = limit
        self.count = count
        self.bytes = 0
        self._lock = threading.Lock()
        self._tapes: dict[int, tuple[KeptTape, tuple, int]] = {}
        self._next = 0

    def put(self, kept: KeptTape, moved: tuple, nbytes: int) -> int:
        """Keep ``kept`` (the backward moves its arrays of parameters ``moved``; its own arrays
        allocated ``nbytes``); its token, or 0 when it alone passes the limit."""
        if nbytes > self.limit:
            kept.release()
            return 0
        dropped = []
        with self._lock:
            self._next = self._next % 0xFFFFFFFF + 1
            tid = self._next
            old = self._tapes.pop(tid, None)  # (wrapped around: a tape 2**32 tokens old)
            if old is not None:
                self.bytes -= old[2]
                dropped.append(old[0])
            self._tapes[tid] = (kept, moved, nbytes)
            self.bytes += nbytes
            while self.bytes > self.limit or len(self._tapes) > self.count:
                k = next(iter(self._tapes))
                e = self._tapes.pop(k)
                self.bytes -= e[2]
                dropped.append(e[0])
        for d in dropped:
            d.release()
        return tid

    def pop(self, tid: int) -> tuple[KeptTape, tuple] | None:
        """The tape of token ``tid`` and its moved parameters, no longer kept; None if there is none."""
        with self._lock:
            e = self._tapes.pop(tid, None)
            if e is None:
                return None
            self.bytes -= e[2]
        return e[0], e[1]

    def discard(self, tid: int) -> None:
        """Free the tape of token ``tid`` if it is still kept (no backward will take it)."""
        got = self.pop(tid)
        if got is not None:
            got[0].release()

    def __len__(self) -> int:
        return len(self._tapes)

    def clear(self) -> None:
        with self._lock:
            tapes = list(self._tapes.values())
            self._tapes.clear()
            self.bytes = 0
        for e in tapes:
            e[0].release()


def _kept_limit() -> int:
    """``INTEROP_KEPT_MB`` (MiB, default 256) in bytes, or an error naming the variable."""
    text = os.environ.get("INTEROP_KEPT_MB", "256")
    try:
        mb = float(text)
    except ValueError:
        mb = -1.0
    if not mb >= 0 or mb == float("inf"):
        raise ValueError(f"INTEROP_KEPT_MB must be a number of MiB >= 0 (0: keep no tape), got {text!r}")
    return int(mb * (1 << 20))


KEPT = KeptTapes(_kept_limit())


# what a Python-function op's function may call and still leave its arguments to its launches alone:
# Warp's launch and allocations, value constructors, Python's builtins of numbers
_PLAIN_CALLS = frozenset(
    {"launch", "zeros", "empty", "zeros_like", "empty_like", "len", "range", "int", "float", "min", "max", "abs"}
)
_VALUE_PREFIXES = ("vec", "mat", "quat", "transform", "float", "int", "uint")


@functools.lru_cache(maxsize=512)
def only_launches(fn: Any) -> bool:
    """Whether function ``fn``'s source calls nothing but ``wp.launch``, Warp's allocations
    (``wp.zeros``/``wp.empty``/``*_like``), value constructors (``wp.vec3``...) and Python's number
    builtins, and reads no array's ``grad``/``requires_grad``: its arguments then reach Warp only
    through its launches, and its forward needs no gradient on them to be recorded right. False
    where it may hand an argument to anything else (``wp.clone``, a struct, a helper) or where its
    source cannot be read."""
    try:
        fdef = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        return False
    if not isinstance(fdef, ast.FunctionDef):
        return False
    for node in (n for stmt in fdef.body for n in ast.walk(stmt)):  # (the body: not the annotations)
        if isinstance(node, ast.Attribute) and node.attr in ("grad", "requires_grad"):
            return False
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            if name is None or not (name in _PLAIN_CALLS or name.startswith(_VALUE_PREFIXES)):
                return False
    return True


class KeptTape:
    """What the forward of a Python-function op recorded for its backward: the ``wp.Tape`` and the
    Warp arrays it was called with (by parameter index). Held by the framework's autograd node
    (``ctx``), released by the backward."""

    __slots__ = ("tape", "args", "device", "launches", "over", "grads")

    def __init__(self, tape: Any, args: list, device: Any, launches: Any = None, over: Any = None, grads: Any = None):
        self.tape: Any = tape
        self.args: Any = args
        self.grads: dict = grads or {}  # gradients the forward gave its arrays, by parameter index
        self.device = device
        self.launches: Any = launches  # a checked op's CheckedLaunches (their error records), else None
        # (getter, what it got, parameter indices): the (pointer, strides) of each recorded array
        # over the caller's memory, read from the call's values by the getter (operator.itemgetter)
        self.over: Any = over

    def release(self) -> None:
        self.tape, self.args, self.launches, self.over = None, None, None, None
