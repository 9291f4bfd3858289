"""``wp.launch`` taken over while a Python-function op's function runs, for the thread that runs it.

A Python-function op calls the user's function, which launches kernels with ``wp.launch``. Two
concerns take those launches over, each a :class:`LaunchHook`: checked mode launches each kernel's
checked variant (``interop._checked.functions``), and the fast path replays a launch record cached
per kernel and argument layout (``interop._fast_launch``). While any hook is entered, ``wp.launch``
(the ``warp`` module's attribute, which ``wp.launch(...)`` reads at each call) is a dispatcher that
hands this thread's launches to its innermost hook and every other thread's to Warp; it is put back
when the last hook exits. A launch a hook does not take (another thread's, an adjoint or
recorded-command launch, a keyword it does not know) goes to Warp unchanged.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

import warp as wp

_state = threading.local()  # .hook: the innermost LaunchHook this thread runs under, or None
_install_lock = threading.Lock()
_original: list[Callable] = []  # wp.launch as it was when the dispatcher was installed
_installed = [0]


def original_launch() -> Callable:
    """Warp's own ``wp.launch`` (also while the dispatcher is installed)."""
    return _original[0] if _original else wp.launch


def _launch(kernel: Any, dim: Any, inputs: Sequence[Any] = (), outputs: Sequence[Any] = (), *args: Any, **kw: Any):
    """``wp.launch`` while a hook is installed: this thread's launches go to its hook, others to Warp."""
    hook = getattr(_state, "hook", None)
    plain = args or not isinstance(kernel, wp.Kernel) or kw.get("adjoint") or kw.get("record_cmd")
    if hook is None or plain:
        return _original[0](kernel, dim, inputs, outputs, *args, **kw)
    return hook.launch(kernel, dim, inputs, outputs, kw)


class LaunchHook:
    """``with hook: fn(*args)``: the launches ``fn`` makes from this thread go to ``hook.launch``."""

    _previous: Any = None

    def launch(self, kernel: Any, dim: Any, inputs: Sequence[Any], outputs: Sequence[Any], kw: dict) -> Any:
        raise NotImplementedError  # pragma: no cover (each hook defines it)

    def check(self, direction: str = " (backward)") -> None:
        """Raise what the hook's launches recorded (checked mode); nothing for a hook that records
        nothing."""

    def __enter__(self) -> Any:
        with _install_lock:
            if _installed[0] == 0:
                _original[:] = [wp.launch]
                wp.launch = _launch
            _installed[0] += 1
        self._previous = getattr(_state, "hook", None)
        _state.hook = self
        return self

    def __exit__(self, *exc: Any) -> None:
        _state.hook = self._previous
        self._previous = None
        with _install_lock:
            _installed[0] -= 1
            if _installed[0] == 0:
                if wp.launch is _launch:
                    wp.launch = _original[0]
                _original.clear()
