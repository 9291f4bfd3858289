"""CUDA streams for Warp work ordered with a framework's stream.

A framework's current stream is named to Warp without registering it (:func:`external_stream`);
Warp work that allocates runs on this package's own side stream, forked from and joined back into
the framework's (:func:`ordered_warp_work`).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import warp as wp

from ._runtime import get_device
from ._warp_compat import borrowed_stream

_external_streams: dict[tuple, Any] = {}
_side_streams: dict[str, Any] = {}
_streams_lock = threading.Lock()
# external_stream's cache holds no native resource (see _warp_compat.borrowed_stream): past this
# many handles (streams a framework made and destroyed, say) it is simply emptied
_MAX_EXTERNAL_STREAMS = 256


def external_stream(device: Any, handle: int):
    """A ``wp.Stream`` naming a framework's CUDA stream ``handle`` on ``device`` (cached per handle).

    It is not registered in Warp's native stream table and keeps nothing alive: the framework's
    stream object stays the framework's (the caller uses the stream only while it is current),
    and a ``wp.Stream`` the user makes on the same handle (``wp.stream_from_torch``) registers and
    unregisters it without touching this one. Kernel launches, events and memsets take the raw
    handle; Warp work that allocates or syncs through Warp's current stream runs in
    :func:`ordered_warp_work` instead.
    """
    device = get_device(device)
    key = (device.alias, int(handle))
    s = _external_streams.get(key)
    if s is None:
        with _streams_lock:
            s = _external_streams.get(key)
            if s is None:
                if len(_external_streams) >= _MAX_EXTERNAL_STREAMS:
                    _external_streams.clear()
                s = _external_streams[key] = borrowed_stream(device, int(handle))
    return s


def warp_side_stream(device: Any):
    """This package's own Warp stream on CUDA ``device`` (created once, Warp-owned, blocking)."""
    s = _side_streams.get(device.alias)
    if s is None:
        with _streams_lock:
            s = _side_streams.get(device.alias)
            if s is None:
                s = _side_streams[device.alias] = wp.Stream(device)
    return s


_NO_STREAM = contextlib.nullcontext()


def ordered_warp_work(device: Any, stream: Any):
    """A context that runs Warp work that allocates (scratch arrays, a Python-function op's own
    temporaries, the buffers of Warp's deterministic mode) in stream order with ``stream``.

    Warp allocates on its current stream and frees with ``cudaFreeAsync(ptr, 0)``, on the legacy
    default stream, which is not ordered after work on a non-blocking stream (PyTorch's side
    streams, XLA's): freed memory could be reused while a kernel on ``stream`` still reads it.
    So the work runs on :func:`warp_side_stream` (blocking: the legacy stream waits for it),
    forked from ``stream`` and joined back into it; Warp arrays made inside are freed after it.
    Nothing waits on the host. With ``stream`` None (the CPU, or Warp's own current stream) the
    work runs where it is.
    """
    if stream is None or not device.is_cuda:
        return _NO_STREAM
    return _forked(device, stream)


@contextlib.contextmanager
def _forked(device: Any, stream: Any):
    side = warp_side_stream(device)
    side.wait_stream(stream)
    try:
        with wp.ScopedStream(side, sync_enter=False, sync_exit=False):
            yield
    finally:
        stream.wait_stream(side)
