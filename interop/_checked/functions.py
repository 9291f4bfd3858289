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

from typing import Any

import warp as wp

from .._launch_hook import LaunchHook, original_launch
from . import checked_kernel, record


class CheckedLaunches(LaunchHook):
    """``with CheckedLaunches(label): fn(*args)``: each launch of ``fn`` checked (see the module)."""

    def __init__(self, label: str):
        self.label = label
        self.records: list[tuple[Any, Any, Any]] = []  # (error record, device, stream) per launch

    def launch(self, kernel: Any, dim: Any, inputs: Any, outputs: Any, kw: dict) -> None:
        device = wp.get_device(kw.get("device"))
        err = record.new_record(device)
        self.records.append((err, device, kw.get("stream")))
        original_launch()(checked_kernel(kernel, (), self.label), dim, [*inputs, *outputs, err], [], **kw)
        record.check_record(self.label, err, device, kw.get("stream"), "")

    def check(self, direction: str = " (backward)") -> None:
        """Raise what a launch recorded since (the adjoint launches of a tape's backward)."""
        for err, device, stream in self.records:
            record.check_record(self.label, err, device, stream, direction)
