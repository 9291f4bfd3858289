"""The few pieces of XLA's FFI C API that a Python handler needs, through ctypes.

XLA calls a registered handler with a pointer to an ``XLA_FFI_CallFrame``; the
handler reads its argument and result buffers (device pointers and dims), asks the
API for the CUDA stream, and returns NULL on success or an ``XLA_FFI_Error*``.
Layouts follow ``xla/ffi/api/c_api.h`` (API version 0.1, checked with jaxlib 0.10.2).

:func:`register` turns a Python function ``handler(frame, platform)`` into a ctypes
callback, wraps its address in a PyCapsule and registers it with
``jax.ffi.register_ffi_target`` for the ``cpu`` and ``CUDA`` platforms. The callback
objects are kept alive here for the life of the process (XLA holds raw pointers).
"""

from __future__ import annotations

import ctypes
import itertools
import re
import signal
import threading
import traceback
from typing import Callable

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


_Handler = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(CallFrame))
_ERROR_UNKNOWN = 2
_EMPTY_EXT = ctypes.POINTER(_ExtensionBase)()


def buffers(lst: _List) -> list[tuple[int, tuple[int, ...]]]:
    """(data pointer, dims) of each buffer of an args/rets list."""
    out = []
    items = lst.items
    for k in range(lst.size):
        b = items[k].contents
        out.append((b.data or 0, tuple(b.dims[: b.rank])))
    return out


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


def device_ordinal(frame: CallFrame) -> int:
    """The ordinal of the device XLA runs this call on; raises when XLA cannot say."""
    args = _DeviceOrdinalGetArgs(ctypes.sizeof(_DeviceOrdinalGetArgs), _EMPTY_EXT, frame.ctx, 0)
    error = frame.api.contents.device_ordinal_get(args)
    if error:
        _raise_api_error(frame, error, "device_ordinal_get")
    return int(args.device_ordinal)


def _error(frame: CallFrame, message: str) -> int:
    args = _ErrorCreateArgs(ctypes.sizeof(_ErrorCreateArgs), _EMPTY_EXT, message.encode("utf-8"), _ERROR_UNKNOWN)
    return frame.api.contents.error_create(args)


_keep_alive: dict[tuple[str, str], object] = {}

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


def _defer_sigint():
    """On the main thread, swap Python's SIGINT handler for one that only records the signal."""
    if threading.current_thread() is not threading.main_thread():
        return None  # Python runs signal handlers on the main thread only: nothing to defer here
    try:
        previous = signal.getsignal(signal.SIGINT)
        if previous is not signal.default_int_handler:
            return None  # the user installed their own handler: leave it alone
        signal.signal(signal.SIGINT, _record_sigint)
    except (ValueError, TypeError):
        return None
    return previous


def _record_sigint(signum, frame):
    _interrupt.count += 1


def _restore_sigint(previous) -> None:
    if previous is not None:
        signal.signal(signal.SIGINT, previous)


def interrupts() -> int:
    """How many Ctrl-C arrived while handlers ran: an adapter compares it before and after a call
    that failed, and raises ``KeyboardInterrupt`` when it grew."""
    return _interrupt.count


def _instantiate_callback(instantiate: Callable[[CallFrame, str], None], platform: str, traits: int):
    """The ctypes callback of an instantiate-stage handler: XLA calls it once per call site when it
    instantiates an executable (attributes only: no buffers, no stream), never inside a capture."""

    def callback(frame_p):
        try:
            frame = frame_p.contents
            ext = frame.extension_start
            if ext and ext.contents.type == _METADATA_EXTENSION:
                md = ctypes.cast(ext, ctypes.POINTER(_MetadataExtension)).contents.metadata.contents
                md.api_version.major_version = 0
                md.api_version.minor_version = 1
                md.traits = traits
                return None
            instantiate(frame, platform)
            return None
        except BaseException as e:
            return _error(frame_p.contents, f"{type(e).__name__}: {e}\n{traceback.format_exc()}")

    return _Handler(callback)


def register(
    name: str,
    handler: Callable[[CallFrame, str], None],
    command_buffer: bool = False,
    instantiate: Callable[[CallFrame, str], None] | None = None,
) -> None:
    """Register ``handler(frame, platform)`` as XLA FFI target ``name`` on ``cpu`` and ``CUDA``.

    ``platform`` is ``"cpu"`` or ``"CUDA"``. An exception in the handler becomes an XLA
    error (raised by JAX as an ``XlaRuntimeError`` with the message and traceback).
    ``command_buffer``: on CUDA, declare the target command-buffer compatible (XLA may
    capture it into a CUDA graph: the handler then runs only while XLA records, so it must
    only enqueue work on XLA's stream).
    ``instantiate(frame, platform)``: also run at XLA's instantiate stage (once per call site,
    when an executable is compiled or deserialized; the frame has attributes only).
    """
    import jax

    for platform in ("cpu", "CUDA"):
        if (name, platform) in _keep_alive:
            continue

        traits = _COMMAND_BUFFER_COMPATIBLE if command_buffer and platform == "CUDA" else 0

        def callback(frame_p, platform=platform, traits=traits):
            # Nothing may unwind through XLA: an exception escaping a ctypes callback is printed
            # and the call reported as a success. On the main thread, Ctrl-C is deferred while
            # the handler runs (a KeyboardInterrupt could otherwise land between any two
            # bytecodes, outside every try); it fails this XLA call and is raised to the user
            # by the adapter once JAX returns (see take_interrupt).
            deferred = _defer_sigint()
            seen = _interrupt.count
            try:
                frame = frame_p.contents
                ext = frame.extension_start
                if ext and ext.contents.type == _METADATA_EXTENSION:
                    # XLA's first call asks for the API version and traits
                    md = ctypes.cast(ext, ctypes.POINTER(_MetadataExtension)).contents.metadata.contents
                    md.api_version.major_version = 0
                    md.api_version.minor_version = 1
                    md.traits = traits
                    return None
                try:
                    handler(frame, platform)
                except KeyboardInterrupt:
                    _interrupt.count += 1
                except BaseException as e:
                    token = _remember(e)
                    return _error(frame, f"{type(e).__name__}: {e} [{token}]\n{traceback.format_exc()}")
                if _interrupt.count != seen:
                    return _error(frame, _INTERRUPTED)
                return None
            except BaseException:
                _interrupt.count += 1
                return _error(frame_p.contents, _INTERRUPTED)
            finally:
                _restore_sigint(deferred)

        cb = _Handler(callback)
        capsule = jax.ffi.pycapsule(ctypes.cast(cb, ctypes.c_void_p).value)
        fn: object = capsule
        if instantiate is not None:
            icb = _instantiate_callback(instantiate, platform, traits)
            fn = {"instantiate": jax.ffi.pycapsule(ctypes.cast(icb, ctypes.c_void_p).value), "execute": capsule}
            cb = (cb, icb)  # type: ignore[assignment]
        jax.ffi.register_ffi_target(name, fn, platform=platform)
        _keep_alive[(name, platform)] = cb
