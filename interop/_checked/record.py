"""Checked mode, the error record: what each checked access names, and the error raised from it.

Each access a checked kernel makes gets a site number when the kernel is rewritten; the site says
which array (a kernel parameter, or an array parameter of a ``wp.func``), the source file, line and
text. A launch of a checked kernel takes a small ``int64`` array (``helpers.RECORD_SIZE``) as its
last parameter; the first access out of range writes its site, axis, index and the array's shape
there (the access itself is not made), and :func:`raise_recorded` turns that into a
:class:`~interop.BoundsError` after the launch.
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

import numpy as np
import warp as wp

from .._errors import BoundsError
from .helpers import RECORD_SIZE


class Site(NamedTuple):
    array: str
    owner: str  # "" for the kernel's own parameters, else the wp.func's name
    file: str
    line: int
    text: str


_sites: list[Site] = []
_index: dict[Site, int] = {}
_lock = threading.Lock()


def site(array: str, owner: str, file: str, line: int, text: str) -> int:
    """The number of an access (one per distinct array, owner and line; kept for the process)."""
    s = Site(array, owner, file, line, text)
    with _lock:
        k = _index.get(s)
        if k is None:
            k = _index[s] = len(_sites)
            _sites.append(s)
        return k


def new_record(device: Any) -> Any:
    """A zeroed error record on ``device``."""
    return wp.zeros(RECORD_SIZE, dtype=wp.int64, device=device)


def error(label: str, rec: np.ndarray, direction: str = "") -> BoundsError:
    """The :class:`BoundsError` of a host copy of a record whose count is not zero."""
    count, k, axis, index, ndim = (int(x) for x in rec[:5])
    shape = tuple(int(x) for x in rec[5 : 5 + max(1, min(ndim, 4))])
    s = _sites[k] if 0 <= k < len(_sites) else Site("?", "", "?", 0, "")
    what = f"parameter {s.array!r}" if not s.owner else f"array {s.array!r} of wp.func {s.owner!r}"
    more = f" ({count - 1} more out-of-range accesses in this launch)" if count > 1 else ""
    return BoundsError(
        f"op {label!r}{direction}: index {index} out of range for {what} along axis {axis}, whose shape is "
        f"{shape}, at {s.file}:{s.line}: `{s.text}`; the access was not made (checked mode){more}"
    )


def raise_recorded(label: str, err: Any, direction: str = "") -> None:
    """Raise the :class:`BoundsError` recorded in ``err`` (and zero it for the next launch); on CUDA
    this reads the record back, which waits for the launch."""
    host = err.numpy()
    if host[0] == 0:
        return
    e = error(label, host.copy(), direction)
    err.zero_()
    raise e


def check_record(label: str, err: Any, device: Any, stream: Any, direction: str) -> None:
    """After a checked launch on ``stream``: raise what it recorded. On CUDA this waits for the
    stream (the price of an error at the call); inside a CUDA graph capture nothing can be read,
    so the record keeps the error and the next checked launch of the op outside a capture raises."""
    if device.is_cuda:
        s = stream if stream is not None else device.stream
        if s.is_capturing:
            return
        wp.synchronize_stream(s)
    raise_recorded(label, err, direction)
