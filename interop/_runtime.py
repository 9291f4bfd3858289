"""Warp's runtime, initialised once: the bottom of the core's import stack.

``_frameworks`` (framework detection), ``_convert`` and ``_launch`` all need an initialised Warp;
they find it here, so no module needs one above it (STYLE.md 15: description, plan, launch, op).
"""

from __future__ import annotations

import threading
from typing import Any

import warp as wp

_devices: dict[Any, Any] = {}
_init_done = False
_init_lock = threading.Lock()


def ensure_init() -> None:
    """Initialise Warp once, under a lock (``wp.from_*`` helpers fail before ``wp.init()``)."""
    global _init_done
    if not _init_done:
        with _init_lock:
            if not _init_done:
                wp.init()
                _init_done = True


def get_device(device: Any):
    """The ``wp.Device`` for a device name (cached); a ``wp.Device`` is returned as it is."""
    if not isinstance(device, str):
        return device
    d = _devices.get(device)
    if d is None:
        ensure_init()
        d = wp.get_device(device)
        _devices[device] = d
    return d
