"""The few pieces of XLA's FFI C API that a Python handler needs, through ctypes.

XLA calls a registered handler with a pointer to an ``XLA_FFI_CallFrame``; the
handler reads its argument and result buffers (device pointers and dims), asks the
API for the CUDA stream, and returns NULL on success or an ``XLA_FFI_Error*``.
Layouts follow ``xla/ffi/api/c_api.h`` (API version 0.1, checked with jaxlib 0.9.0, 0.10.2
and 0.12.0.1).

:func:`register` turns a Python function ``handler(frame_address, platform)`` into a
ctypes callback, wraps its address in a PyCapsule and registers it with
``jax.ffi.register_ffi_target`` for the ``cpu`` and ``CUDA`` platforms. The callback
objects are kept alive here for the life of the process (XLA holds raw pointers, and a
registration cannot be undone); each reaches its handler through a :class:`Slot` that
holds it weakly, so a dropped op is freed, and registering the name again re-fills the slot.

The hot path reads the frame with :data:`MEM` (8-byte words of this process's memory,
indexed by ``address >> 3``) at offsets taken from the ctypes layouts below: a subscript
instead of a ctypes object per field.
"""

from __future__ import annotations

import ctypes
import dis
import itertools
import re
import sys
import threading
import traceback
import weakref
from typing import Any, Callable

_c_int64_p = ctypes.POINTER(ctypes.c_int64)


class _ExtensionBase(ctypes.Structure):
    pass


_ExtensionBase._fields_ = [
    ("struct_size", ctypes.c_size_t),
    ("type", ctypes.c_int),
    ("next", ctypes.POINTER(_ExtensionBase)),
]

_METADATA_EXTENSION = 1
_COMMAND_BUFFER_COMPATIBLE = 1


class Buffer(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.POINTER(_ExtensionBase)),
        ("dtype", ctypes.c_int),
        ("data", ctypes.c_void_p),
        ("rank", ctypes.c_int64),
        ("dims", _c_int64_p),
    ]


class _List(ctypes.Structure):  # XLA_FFI_Args and XLA_FFI_Rets share this layout
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.POINTER(_ExtensionBase)),
        ("size", ctypes.c_int64),
        ("types", ctypes.POINTER(ctypes.c_int)),
        ("items", ctypes.POINTER(ctypes.POINTER(Buffer))),
    ]


class _Attrs(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.POINTER(_ExtensionBase)),
        ("size", ctypes.c_int64),
        ("types", ctypes.c_void_p),
        ("names", ctypes.c_void_p),
        ("attrs", ctypes.c_void_p),
    ]


_ATTR_STRING = 4


class _ApiVersion(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.POINTER(_ExtensionBase)),
        ("major_version", ctypes.c_int),
        ("minor_version", ctypes.c_int),
    ]


class _Metadata(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("api_version", _ApiVersion), ("traits", ctypes.c_uint32)]


class _MetadataExtension(ctypes.Structure):
    _fields_ = [("extension_base", _ExtensionBase), ("metadata", ctypes.POINTER(_Metadata))]


class _ErrorCreateArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.POINTER(_ExtensionBase)),
        ("message", ctypes.c_char_p),
        ("errc", ctypes.c_int),
    ]


class _StreamGetArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.POINTER(_ExtensionBase)),
        ("ctx", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
    ]


class _DeviceOrdinalGetArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.POINTER(_ExtensionBase)),
        ("ctx", ctypes.c_void_p),
        ("device_ordinal", ctypes.c_int32),
    ]


_ErrorCreate = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(_ErrorCreateArgs))
_StreamGet = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(_StreamGetArgs))
_DeviceOrdinalGet = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(_DeviceOrdinalGetArgs))


class _Api(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.POINTER(_ExtensionBase)),
        ("api_version", _ApiVersion),
        ("internal_api", ctypes.c_void_p),
        ("error_create", _ErrorCreate),
        ("error_get_message", ctypes.c_void_p),
        ("error_destroy", ctypes.c_void_p),
        ("handler_register", ctypes.c_void_p),
        ("stream_get", _StreamGet),
        ("type_id_register", ctypes.c_void_p),
        ("execution_context_get", ctypes.c_void_p),
        ("state_set", ctypes.c_void_p),
        ("state_get", ctypes.c_void_p),
        ("device_memory_allocate", ctypes.c_void_p),
        ("device_memory_free", ctypes.c_void_p),
        ("thread_pool_schedule", ctypes.c_void_p),
        ("thread_pool_num_threads", ctypes.c_void_p),
        ("future_create", ctypes.c_void_p),
        ("future_set_available", ctypes.c_void_p),
        ("future_set_error", ctypes.c_void_p),
        ("run_id_get", ctypes.c_void_p),
        ("device_ordinal_get", _DeviceOrdinalGet),
    ]


class CallFrame(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.POINTER(_ExtensionBase)),
        ("api", ctypes.POINTER(_Api)),
        ("ctx", ctypes.c_void_p),
        ("stage", ctypes.c_int),
        ("args", _List),
        ("rets", _List),
        ("attrs", _Attrs),
        ("future", ctypes.c_void_p),
    ]


_Handler = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)  # the frame's address as an int
_ERROR_UNKNOWN = 2
_EMPTY_EXT = ctypes.POINTER(_ExtensionBase)()

# -- raw reads of a call frame (the per-call path) ---------------------------------------------
#: 8-byte words of this process's memory: ``MEM[address >> 3]`` reads the aligned word at
#: ``address`` (what ``ctypes.c_uint64.from_address(address).value`` reads, without building a
#: ctypes object per read). Only addresses XLA hands over are read; every field read is 8 bytes.
MEM = memoryview((ctypes.c_char * (1 << 62)).from_address(0)).cast("B").cast("Q")
#: 4-byte words, for the ``int`` fields (attribute and data types)
MEM32 = memoryview((ctypes.c_char * (1 << 62)).from_address(0)).cast("B").cast("I")
#: bytes: ``BYTES[p : p + n] = zeros`` zero-fills host memory with one memcpy, several times
#: cheaper than a ``ctypes.memset`` foreign call for the small buffers where it shows
BYTES = memoryview((ctypes.c_char * (1 << 62)).from_address(0)).cast("B")
_ZEROS = memoryview(bytes(1 << 16))


def zeros(nbytes: int) -> memoryview | None:
    """A read-only view of ``nbytes`` zero bytes to assign into :data:`BYTES`, or None when
    ``nbytes`` is larger than the shared zero block (then use ``ctypes.memset``)."""
    return _ZEROS[:nbytes] if nbytes <= len(_ZEROS) else None


def zero_fill(ptr: int, nbytes: int) -> None:
    """Zero ``nbytes`` of host memory at ``ptr``."""
    z = zeros(nbytes)
    if z is None:
        ctypes.memset(ptr, 0, nbytes)
    else:
        BYTES[ptr : ptr + nbytes] = z


EXTENSION = CallFrame.extension_start.offset
ARGS_SIZE = CallFrame.args.offset + _List.size.offset
ARGS_ITEMS = CallFrame.args.offset + _List.items.offset
RETS_SIZE = CallFrame.rets.offset + _List.size.offset
RETS_ITEMS = CallFrame.rets.offset + _List.items.offset
ATTRS_SIZE = CallFrame.attrs.offset + _Attrs.size.offset
ATTRS_TYPES = CallFrame.attrs.offset + _Attrs.types.offset
ATTRS_VALUES = CallFrame.attrs.offset + _Attrs.attrs.offset
DATA = Buffer.data.offset  # of an XLA_FFI_Buffer

_ATTR_SCALAR = 3
_DTYPE_S64 = 5  # XLA_FFI_DataType of an int64 scalar
# XLA_FFI_Scalar {XLA_FFI_DataType dtype; void* value;}: the value pointer sits after the padded int
_SCALAR_VALUE = ctypes.sizeof(ctypes.c_void_p)


def int64_attr(p: int, k: int) -> int | None:
    """The call's attribute number ``k`` (attributes are sorted by name) when it is an int64 scalar,
    as an unsigned 64-bit int; None when it is anything else."""
    if MEM[(p + ATTRS_SIZE) >> 3] <= k or MEM32[(MEM[(p + ATTRS_TYPES) >> 3] >> 2) + k] != _ATTR_SCALAR:
        return None
    scalar = MEM[(MEM[(p + ATTRS_VALUES) >> 3] >> 3) + k]
    if MEM32[scalar >> 2] != _DTYPE_S64:
        return None
    return MEM[MEM[(scalar + _SCALAR_VALUE) >> 3] >> 3]


def frame(p: int) -> CallFrame:
    """The call frame at address ``p`` as a ctypes structure (for the slower, rarer paths)."""
    return CallFrame.from_address(p)


def pointers(p: int, items: int, size: int) -> list[int]:
    """The data pointers of the frame's argument (``ARGS_ITEMS``, ``ARGS_SIZE``) or result buffers."""
    base = MEM[(p + items) >> 3] >> 3
    return [MEM[(MEM[base + k] + DATA) >> 3] for k in range(MEM[(p + size) >> 3])]


_c_int = ctypes.c_int
_c_ptr = ctypes.c_void_p
_c_size = ctypes.c_size_t
_string_at = ctypes.string_at


def string_attr(frame: CallFrame, name: bytes) -> bytes | None:
    """The value of the call's string attribute ``name`` (bytes), or None when it has none.

    Raw reads of the ``XLA_FFI_Attrs`` arrays (types: ``int``, names and values:
    ``XLA_FFI_ByteSpan*``): this runs on every call, and ctypes casts cost microseconds.
    """
    attrs = frame.attrs
    n = attrs.size
    if not n:
        return None
    types, names, values = attrs.types, attrs.names, attrs.attrs
    for k in range(n):
        if _c_int.from_address(types + 4 * k).value != _ATTR_STRING:
            continue
        span = _c_ptr.from_address(names + 8 * k).value or 0
        if _string_at(_c_ptr.from_address(span).value or 0, _c_size.from_address(span + 8).value) != name:
            continue
        value = _c_ptr.from_address(values + 8 * k).value or 0
        return _string_at(_c_ptr.from_address(value).value or 0, _c_size.from_address(value + 8).value)
    return None


class _ErrorGetMessageArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.POINTER(_ExtensionBase)),
        ("error", ctypes.c_void_p),
        ("message", ctypes.c_char_p),
    ]


class _ErrorDestroyArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("extension_start", ctypes.POINTER(_ExtensionBase)),
        ("error", ctypes.c_void_p),
    ]


_ErrorGetMessage = ctypes.CFUNCTYPE(None, ctypes.POINTER(_ErrorGetMessageArgs))
_ErrorDestroy = ctypes.CFUNCTYPE(None, ctypes.POINTER(_ErrorDestroyArgs))


def _raise_api_error(frame: CallFrame, error: int, call: str) -> None:
    """Raise the ``XLA_FFI_Error*`` an API call returned (its message read, then the error freed)."""
    api = frame.api.contents
    get = _ErrorGetMessageArgs(ctypes.sizeof(_ErrorGetMessageArgs), _EMPTY_EXT, error, None)
    _ErrorGetMessage(api.error_get_message)(get)
    message = (get.message or b"").decode("utf-8", "replace")
    _ErrorDestroy(api.error_destroy)(_ErrorDestroyArgs(ctypes.sizeof(_ErrorDestroyArgs), _EMPTY_EXT, error))
    raise RuntimeError(f"XLA's FFI {call} failed: {message}")


def cuda_stream(frame: CallFrame) -> int:
    """XLA's CUDA stream for this call (a ``cudaStream_t`` as an int); raises when XLA has none."""
    args = _StreamGetArgs(ctypes.sizeof(_StreamGetArgs), _EMPTY_EXT, frame.ctx, None)
    error = frame.api.contents.stream_get(args)
    if error:
        _raise_api_error(frame, error, "stream_get")
    return int(args.stream or 0)


API = CallFrame.api.offset
CTX = CallFrame.ctx.offset


def stream_getter() -> Callable[[int], int]:
    """``get(p) -> cudaStream_t``: :func:`cuda_stream` for the per-call path, reading the frame's
    API table and context with raw reads and reusing one argument struct per thread (XLA may run
    a handler on several threads at once)."""
    local = threading.local()
    fns: dict[int, Any] = {}

    def get(p: int) -> int:
        api = MEM[(p + API) >> 3]
        fn = fns.get(api)
        if fn is None:
            fn = fns[api] = _Api.from_address(api).stream_get
        try:
            args = local.args
        except AttributeError:
            args = local.args = _StreamGetArgs(ctypes.sizeof(_StreamGetArgs), _EMPTY_EXT, None, None)
        args.ctx = MEM[(p + CTX) >> 3]
        error = fn(args)
        if error:
            _raise_api_error(frame(p), error, "stream_get")
        return args.stream or 0

    return get


def device_ordinal(frame: CallFrame) -> int:
    """The ordinal of the device XLA runs this call on; raises when XLA cannot say."""
    args = _DeviceOrdinalGetArgs(ctypes.sizeof(_DeviceOrdinalGetArgs), _EMPTY_EXT, frame.ctx, 0)
    error = frame.api.contents.device_ordinal_get(args)
    if error:
        _raise_api_error(frame, error, "device_ordinal_get")
    return int(args.device_ordinal)


class Slot:
    """What one registered callback calls: a weak reference to its handler (the callbacks outlive
    every op, the handler lives as long as its op). An op described again under the same target
    name re-fills the slot; a call while it is empty raises an error naming the op."""

    __slots__ = ("ref", "name", "label")

    def __init__(self, name: str):
        self.name = name
        self.label = name
        self.ref: Callable[[], Callable[[int, str], None] | None] = _empty

    def fill(self, handler: Callable[[int, str], None], label: str) -> None:
        self.label = label
        self.ref = weakref.ref(handler)

    def dropped(self) -> RuntimeError:
        return RuntimeError(
            f"op {self.label!r}: its XLA FFI target {self.name!r} was called after the op was dropped (no "
            "reference to it was left, so its handlers were freed; XLA keeps only the name). Keep the op "
            "alive while compiled or deserialized functions call it, or describe it again"
        )


def _empty() -> None:
    return None


#: (target name, platform) -> the ctypes callbacks XLA holds raw pointers to, and their slots
_keep_alive: dict[tuple[str, str], object] = {}
#: target name -> (the execute stage's slot, the instantiate stage's slot or None, command_buffer)
_slots: dict[str, tuple[Slot, Slot | None, bool]] = {}

_INTERRUPTED = (
    "KeyboardInterrupt: Ctrl-C while the op ran; this call was abandoned (called eagerly, the op raises "
    "KeyboardInterrupt itself once JAX returns)"
)

# Exceptions raised in handlers, by a token their XLA error message carries, so an eager call
# can raise the original exception (type and message) instead of JAX's runtime error. Bounded:
# errors raised under a user's own jax.jit are never claimed.
_raised: dict[str, BaseException] = {}
_raised_counter = itertools.count()
_TOKEN = re.compile(r"\[interop-error-(\d+)\]")


def _remember(e: BaseException) -> str:
    token = f"interop-error-{next(_raised_counter)}"
    while len(_raised) >= 16:
        _raised.pop(next(iter(_raised)), None)
    _raised[token] = e
    return token


def original_error(e: BaseException) -> BaseException | None:
    """The exception a handler raised, if ``e`` (JAX's runtime error) reports one, else None."""
    m = _TOKEN.search(str(e))
    return _raised.pop(f"interop-error-{m.group(1)}", None) if m else None


class _Interrupt:
    count = 0  # Ctrl-C seen while handlers ran, ever


_interrupt = _Interrupt()


def interrupts() -> int:
    """How many Ctrl-C arrived while handlers ran: an adapter compares it before and after a call
    that failed, and raises ``KeyboardInterrupt`` when it grew."""
    return _interrupt.count


def was_interrupted(e: BaseException, seen: int) -> bool:
    """Whether the failed XLA call ``e`` failed for a Ctrl-C in a handler: the count of such
    interrupts grew since ``seen`` (:func:`interrupts` before the call), or ``e`` carries the report
    (a report interrupted twice hands XLA the error made in advance, not counted)."""
    return _interrupt.count != seen or _INTERRUPTED in str(e)


def run_eager(fn: Callable, *xs: Any) -> Any:
    """``fn(*xs)``, an XLA call with concrete operands made by the package itself (the launches of an
    eager ``jax.grad`` or ``jax.vmap``: their handlers run now), its failure translated as an eager
    call's: a Ctrl-C in a handler raises ``KeyboardInterrupt``, an exception a handler raised is
    raised as itself, not as JAX's runtime error (``ValueError: UNKNOWN: ...`` from its C++ fast
    path, ``JaxRuntimeError``)."""
    seen = _interrupt.count
    try:
        return fn(*xs)
    except KeyboardInterrupt:
        raise
    except Exception as e:
        if was_interrupted(e, seen):
            raise KeyboardInterrupt from None
        original = original_error(e)
        if original is not None and not isinstance(original, KeyboardInterrupt):
            raise original from original.__cause__
        raise


# -- the callback: nothing may unwind into XLA ---------------------------------------------------
#
# A Python exception that escapes a ctypes callback is printed ("Exception ignored on calling
# ctypes callback function") and the C caller gets the return slot as it was: uninitialised
# stack, which XLA takes for an ``XLA_FFI_Error*`` and frees (SIGSEGV, "double free or
# corruption"). The exception that escapes is a KeyboardInterrupt: Python runs signal handlers
# between bytecodes of the main thread, and a Ctrl-C that arrived while XLA ran C code is
# handled at the first check of the callback, its entry (the RESUME instruction), before any
# ``try`` can be entered. So the callback's code enters without that check (see
# :func:`_enter_without_signal_check`), everything after the entry sits in a ``try``, and what
# runs once an exception is caught reports it again if a further Ctrl-C interrupts the report.
# The failed XLA call says KeyboardInterrupt; an eager call raises KeyboardInterrupt once JAX
# returns (the adapter compares :func:`interrupts`).
#
# No handler swap per call: replacing Python's SIGINT handler costs two sigaction system calls
# (1.5-12 us) on every call.

_spare_error = [0]  # an XLA error made in advance, for a report interrupted twice


def _api(p: int) -> _Api:
    return frame(p).api.contents


def _error(p: int, message: str) -> int:
    args = _ErrorCreateArgs(ctypes.sizeof(_ErrorCreateArgs), _EMPTY_EXT, message.encode("utf-8"), _ERROR_UNKNOWN)
    return _api(p).error_create(args) or 0


def _failed(p: int, e: BaseException) -> int:
    """The XLA error reporting exception ``e`` of a handler (counts a KeyboardInterrupt)."""
    if not _spare_error[0]:
        _spare_error[0] = _error(p, _INTERRUPTED)
    if isinstance(e, KeyboardInterrupt):
        _interrupt.count += 1
        return _error(p, _INTERRUPTED)
    token = _remember(e)
    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    return _error(p, f"{type(e).__name__}: {e} [{token}]\n{tb}")


def _metadata(p: int, traits: int) -> None:
    """XLA's first call of a handler asks for the API version and traits."""
    ext = frame(p).extension_start
    md = ctypes.cast(ext, ctypes.POINTER(_MetadataExtension)).contents.metadata.contents
    md.api_version.major_version = 0
    md.api_version.minor_version = 1
    md.traits = traits


def _enter_without_signal_check(fn):
    """``fn`` whose code enters without running pending signal handlers (CPython 3.11-3.13).

    CPython checks for pending signals at a function's entry (``RESUME`` with argument 0) and where
    a coroutine resumes after ``await`` it does not (argument 3, in 3.11, 3.12 and 3.13 alike).
    Marking the callback's entry so moves a pending Ctrl-C to the next check, inside its ``try``.
    Other versions keep the function as it is (a Ctrl-C at the entry escapes, as before).
    """
    if sys.version_info[:2] not in ((3, 11), (3, 12), (3, 13)):
        return fn
    original = fn.__code__
    patched = _patched_code.get(original)
    if patched is None:
        patched = original
        code = bytearray(original.co_code)
        resume = dis.opmap["RESUME"]
        for k in range(0, len(code), 2):
            if code[k] == resume:
                if code[k + 1] == 0:
                    code[k + 1] = 3
                    patched = original.replace(co_code=bytes(code))
                break
        _patched_code[original] = patched
    fn.__code__ = patched
    return fn


# one patched code object per function body: every target's callbacks share it (3 KiB each)
_patched_code: dict = {}


def register(
    name: str,
    handler: Callable[[int, str], None],
    command_buffer: bool = False,
    instantiate: Callable[[int, str], None] | None = None,
    label: str | None = None,
) -> None:
    """Register ``handler(frame_address, platform)`` as XLA FFI target ``name`` on ``cpu`` and ``CUDA``.

    ``platform`` is ``"cpu"`` or ``"CUDA"``. An exception in the handler becomes an XLA
    error (raised by JAX as an ``XlaRuntimeError`` with the message and traceback).
    ``command_buffer``: on CUDA, declare the target command-buffer compatible (XLA may
    capture it into a CUDA graph: the handler then runs only while XLA records, so it must
    only enqueue work on XLA's stream).
    ``instantiate(frame_address, platform)``: also run at XLA's instantiate stage (once per call
    site, when an executable is compiled or deserialized, never inside a capture; the frame has
    attributes only, no buffers or stream). Its callback is as interrupt-safe as the handler's.
    ``label``: the op's name in the error of a call made after the handler was freed.

    ``handler`` and ``instantiate`` are held weakly (the caller keeps them alive as long as the
    op): a name registered before gets its slots re-filled, nothing is registered again (XLA
    cannot undo a registration, and its traits stay those of the first registration).
    """
    import jax

    label = label if label is not None else name
    slots = _slots.get(name)
    if slots is None:
        slots = (Slot(name), Slot(name) if instantiate is not None else None, command_buffer)
    execute, at_instantiate, capturable = slots
    if capturable and not command_buffer:
        raise ValueError(
            f"op {label!r}: its XLA FFI target {name!r} was registered in this process by an op described "
            "earlier under the same name whose launches XLA may capture into CUDA graphs; this op's may not "
            "be captured (a Python-function op, or Warp's deterministic mode), and XLA keeps a target's "
            "traits for good: describe it under another name="
        )
    execute.fill(handler, label)
    if at_instantiate is not None and instantiate is not None:
        at_instantiate.fill(instantiate, label)
    if name in _slots:
        return
    for platform in ("cpu", "CUDA"):
        traits = _COMMAND_BUFFER_COMPATIBLE if command_buffer and platform == "CUDA" else 0
        cb = _Handler(_callback(execute, platform, traits))
        capsule = jax.ffi.pycapsule(ctypes.cast(cb, ctypes.c_void_p).value)
        fn: object = capsule
        if at_instantiate is not None:
            icb = _Handler(_callback(at_instantiate, platform, traits))
            fn = {"instantiate": jax.ffi.pycapsule(ctypes.cast(icb, ctypes.c_void_p).value), "execute": capsule}
            cb = (cb, icb)  # type: ignore[assignment]
        jax.ffi.register_ffi_target(name, fn, platform=platform)
        _keep_alive[(name, platform)] = cb
    _slots[name] = slots


# -- a thread state kept on XLA's threads ---------------------------------------------------------
#
# XLA's CPU client runs an executable on the caller's thread only when its cost analysis counts
# fewer than 1,000 flops (``cheap_computation_`` in ``xla/pjrt/cpu/cpu_client.cc``): an op alone
# (a custom call counts none) runs there, an op whose result flows into any XLA operation on 1,024
# floats (``jnp.sum(op(x))``) runs on a worker thread of XLA's. A ctypes callback on a thread
# Python did not start gets a Python thread state for the call (``PyGILState_Ensure``) and frees it
# when the call returns (``PyGILState_Release`` at a count of zero): 20-25 us a call on the CPU,
# and every ``threading.local`` of the handlers (their launch records) is built anew per call. One
# more ``PyGILState_Ensure``, never released, keeps the thread's state for the thread's life:
# later calls on that thread find it (XLA's threads are a fixed pool). The main thread's state is
# Python's own; counting it once more changes nothing there.

_here = threading.local()
_gil_state_ensure = ctypes.pythonapi.PyGILState_Ensure


def _keep_thread_state() -> None:
    """Keep this thread's Python thread state beyond the running callback (once per thread)."""
    _gil_state_ensure()
    _here.kept = True


def kept_thread_state() -> bool:
    """Whether a callback has kept the calling thread's Python thread state."""
    return getattr(_here, "kept", False)


def _callback(slot: Slot, platform: str, traits: int):
    mem, extension, here, keep = MEM, EXTENSION, _here, _keep_thread_state

    @_enter_without_signal_check
    def callback(p):
        # (no call may sit before the try: each call is followed by a check for pending signals)
        try:
            if mem[(p + extension) >> 3]:
                return _metadata(p, traits)
            if not getattr(here, "kept", False):
                keep()
            handler = slot.ref()  # the one weak dereference per call (the op may have been dropped)
            if handler is None:
                raise slot.dropped()
            return handler(p, platform)
        except BaseException as e:
            failure = e
        try:
            return _failed(p, failure)
        except BaseException as e:  # a further Ctrl-C while reporting
            failure = e
        try:
            return _failed(p, failure)
        except BaseException:
            spare = _spare_error[0]  # (subscripts and stores only: no check for signals here)
            _spare_error[0] = 0
            return spare

    return callback
