"""Checked mode, the error record: what each checked access names, and the error raised from it.

Each access a checked kernel makes gets a site number when the kernel is rewritten; the site says
which array (a kernel parameter, or an array parameter of a ``wp.func``), the source file, line and
text. A launch of a checked kernel takes a small ``int64`` array (``checks.RECORD_SIZE``) as its
last parameter; the first access out of range writes its site, axis, index and the array's shape
there (the access itself is not made), and :func:`raise_recorded` turns that into a
:class:`~interop.BoundsError` after the launch.
"""

from __future__ import annotations

import re
import threading
from typing import Any, NamedTuple

import numpy as np
import warp as wp

from .._errors import BoundsError
from .checks import CALLER, RECORD_SIZE


class Site(NamedTuple):
    array: str
    owner: str  # "" for the kernel's own parameters, else the wp.func's name
    file: str
    line: int
    text: str
    args: tuple = ()  # a kernel's call of a wp.func: (the function's parameter, the argument) pairs


_sites: list[Site] = []
_index: dict[Site, int] = {}
_lock = threading.Lock()


def site(array: str, owner: str, file: str, line: int, text: str, args: tuple = ()) -> int:
    """The number of an access or a call (one per distinct array, owner and line; kept for the process)."""
    s = Site(array, owner, file, line, text, args)
    with _lock:
        k = _index.get(s)
        if k is None:
            k = _index[s] = len(_sites)
            _sites.append(s)
        return k


def new_record(device: Any) -> Any:
    """A zeroed error record on ``device``."""
    return wp.zeros(RECORD_SIZE, dtype=wp.int64, device=device)


def _site(k: int) -> Site:
    return _sites[k] if 0 <= k < len(_sites) else Site("?", "", "?", 0, "")


def _what(s: Site, call: Site | None, names: dict) -> str:
    """The array an access names: the op's parameter, or a ``wp.func``'s (and the argument it was);
    ``names``: a struct op's flat parameters by their field paths (``state__x`` -> ``state.x``)."""
    if not s.owner:
        return f"parameter {names.get(s.array, s.array)!r}"
    inner = f"array {s.array!r} of wp.func {s.owner!r}"
    if call is None:
        return inner
    arg = dict(call.args).get(s.array)
    arg = names.get(arg, arg)
    head = f"parameter {arg!r}" if arg is not None else "an array"
    return f"{head} (as {inner}, called at {call.file}:{call.line}: `{call.text}`)"


def error(label: str, rec: np.ndarray, direction: str = "", names: dict | None = None) -> BoundsError:
    """The :class:`BoundsError` of a host copy of a record whose count is not zero."""
    count, code, axis, index, ndim = (int(x) for x in rec[:5])
    shape = tuple(int(x) for x in rec[5 : 5 + max(1, min(ndim, 4))])
    s = _site(code % CALLER)
    call = _site(code // CALLER - 1) if code >= CALLER else None
    more = f" ({count - 1} more out-of-range accesses in this launch)" if count > 1 else ""
    return BoundsError(
        f"op {label!r}{direction}: index {index} out of range for {_what(s, call, names or {})} along axis {axis}, whose "
        f"shape is {shape}, at {s.file}:{s.line}: `{s.text}`; the access was not made (checked mode){more}"
    )


def _named(label: str, direction: str) -> tuple[str, str]:
    """A tangent op's label (``<kernel>__tangent_<mask>``, ``<function>__tangent``, ``<name>__jvp``) as
    its op's, in forward mode."""
    m = re.search(r"__tangent(_\w*)?$|__jvp$", label)
    if m is None:
        return label, direction
    return label[: m.start()], " (forward mode)" + direction


def raise_recorded(
    label: str, err: Any, direction: str = "", host: np.ndarray | None = None, names: dict | None = None
) -> None:
    """Raise the :class:`BoundsError` recorded in ``err`` (and zero it for the next launch); ``host``:
    a view of ``err`` in host memory (a CPU record's, made once), else read back (CUDA: a copy)."""
    if host is None:
        host = err.numpy()
    if host[0] == 0:
        return
    label, direction = _named(label, direction)
    e = error(label, host.copy(), direction, names)
    err.zero_()
    if err.device.is_cuda:  # zeroed on Warp's stream: done before a launch on another stream reads it
        wp.synchronize_device(err.device)
    raise e


def host_view(err: Any) -> np.ndarray | None:
    """A CPU record's memory as a NumPy array (no copy), read after each launch; None on CUDA."""
    return err.numpy() if err.device.is_cpu else None


def check_record(
    label: str,
    err: Any,
    device: Any,
    stream: Any,
    direction: str,
    host: np.ndarray | None = None,
    names: dict | None = None,
) -> None:
    """After a checked launch on ``stream``: raise what it recorded. On CUDA this waits for the
    stream (the price of an error at the call); inside a CUDA graph capture nothing can be read,
    so the record keeps the error and the next checked launch of the op outside a capture raises."""
    if device.is_cuda:
        s = stream if stream is not None else device.stream
        if s.is_capturing:
            return
        wp.synchronize_stream(s)
    raise_recorded(label, err, direction, host, names)
