"""Checked mode of Python-function ops: the launches the function makes are checked too.

While a checked Python-function op's function runs (its call, and its replay under the ``wp.Tape`` of
its backward), each ``wp.launch`` it makes from this thread launches the checked variant of its kernel
(:func:`interop._checked.checked_kernel`) with an error record of its own, and the record is read after
the launch: an index out of range raises :class:`~interop.BoundsError` from the ``wp.launch`` call
inside the function (on CUDA after waiting for the launch's stream). The tape records the checked
launch, so its adjoint launch is checked too; :meth:`CheckedLaunches.check` reads the records after
``tape.backward()``. Launches from other threads, adjoint and recorded-command launches made by the
function itself, and work outside ``wp.launch`` (``wp.copy``, host code) are as Warp makes them.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

import warp as wp

from . import checked_kernel, record

_state = threading.local()  # .launches: the CheckedLaunches of the function this thread runs, or None
_install_lock = threading.Lock()
_original: list[Callable] = []  # wp.launch as it was when the wrapper was installed
_installed = [0]


def _launch(kernel: Any, dim: Any, inputs: Sequence[Any] = (), outputs: Sequence[Any] = (), *args: Any, **kw: Any):
    """``wp.launch`` while checked launches are installed: this thread's take it, others go to Warp."""
    launches = getattr(_state, "launches", None)
    plain = args or not isinstance(kernel, wp.Kernel) or kw.get("adjoint") or kw.get("record_cmd")
    if launches is None or plain:
        return _original[0](kernel, dim, inputs, outputs, *args, **kw)
    return launches.launch(kernel, dim, list(inputs), list(outputs), kw)


class CheckedLaunches:
    """``with CheckedLaunches(label): fn(*args)``: each launch of ``fn`` checked (see the module)."""

    def __init__(self, label: str):
        self.label = label
        self.records: list[tuple[Any, Any, Any]] = []  # (error record, device, stream) per launch
        self._previous: CheckedLaunches | None = None

    def launch(self, kernel: Any, dim: Any, inputs: list, outputs: list, kw: dict) -> None:
        device = wp.get_device(kw.get("device"))
        err = record.new_record(device)
        self.records.append((err, device, kw.get("stream")))
        _original[0](checked_kernel(kernel, (), self.label), dim, [*inputs, *outputs, err], [], **kw)
        record.check_record(self.label, err, device, kw.get("stream"), "")

    def check(self, direction: str = " (backward)") -> None:
        """Raise what a launch recorded since (the adjoint launches of a tape's backward)."""
        for err, device, stream in self.records:
            record.check_record(self.label, err, device, stream, direction)

    def __enter__(self) -> CheckedLaunches:
        with _install_lock:
            if _installed[0] == 0:
                _original[:] = [wp.launch]
                wp.launch = _launch
            _installed[0] += 1
        self._previous = getattr(_state, "launches", None)
        _state.launches = self
        return self

    def __exit__(self, *exc: Any) -> None:
        _state.launches = self._previous
        with _install_lock:
            _installed[0] -= 1
            if _installed[0] == 0:
                if wp.launch is _launch:
                    wp.launch = _original[0]
                _original.clear()
