"""``wp.launch`` taken over while a Python-function op's function runs, for the thread that runs it.

A Python-function op calls the user's function, which launches kernels with ``wp.launch``. Two
concerns take those launches over, each a :class:`LaunchHook`: checked mode launches each kernel's
checked variant (``interop._checked.functions``), and the fast path replays a launch record cached
per kernel and argument layout (``interop._fast_launch``). While any hook is entered, ``wp.launch``
(the ``warp`` module's attribute, which ``wp.launch(...)`` reads at each call) is a dispatcher that
hands this thread's launches to its innermost hook and every other thread's to Warp; it is put back
when the last hook exits. A launch a hook does not take (another thread's, an adjoint or
recorded-command launch, a keyword it does not know) goes to Warp unchanged.

``wp.zeros``, ``wp.empty``, ``wp.zeros_like`` and ``wp.empty_like`` are taken over alike
(:meth:`LaunchHook.allocate`): the fast path makes the function's temporaries,
``wp.zeros(n, dtype=..., requires_grad=True)`` for the forces of a step, by copying the fields of
the first one of each signature (``_warp_compat.owned_array_maker``).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

import warp as wp

_state = threading.local()  # .hook: the innermost LaunchHook this thread runs under, or None
_install_lock = threading.Lock()
#: wp.launch, wp.zeros, wp.empty, wp.zeros_like, wp.empty_like as they were when the dispatchers were installed
_original: list[Callable] = []
_NAMES = ("launch", "zeros", "empty", "zeros_like", "empty_like")
_installed = [0]


def original_launch() -> Callable:
    """Warp's own ``wp.launch`` (also while the dispatcher is installed)."""
    return _original[0] if _original else wp.launch


def original_allocator(zero: bool, like: bool = False) -> Callable:
    """Warp's own ``wp.zeros`` (``zero``) or ``wp.empty``, their ``*_like`` where ``like`` (also while
    the dispatchers are installed)."""
    i = (1 if zero else 2) + (2 if like else 0)
    try:
        return _original[i]
    except IndexError:  # (none installed, or the last hook of another thread just put them back)
        return getattr(wp, _NAMES[i])


def _launch(kernel: Any, dim: Any, inputs: Sequence[Any] = (), outputs: Sequence[Any] = (), *args: Any, **kw: Any):
    """``wp.launch`` while a hook is installed: this thread's launches go to its hook, others to Warp."""
    hook = getattr(_state, "hook", None)
    plain = args or not isinstance(kernel, wp.Kernel) or kw.get("adjoint") or kw.get("record_cmd")
    if hook is None or plain:
        return _original[0](kernel, dim, inputs, outputs, *args, **kw)
    return hook.launch(kernel, dim, inputs, outputs, kw)


def _allocator(zero: bool, like: bool) -> Callable:
    """``wp.zeros`` (``zero``) or ``wp.empty``, their ``*_like`` where ``like``, while a hook is
    installed: this thread's calls go to its hook, others (and those it does not take) to Warp."""

    def dispatch(*args: Any, **kw: Any) -> Any:
        hook = getattr(_state, "hook", None)
        if hook is not None:
            a = hook.allocate(args, kw, zero, like)
            if a is not None:
                return a
        return original_allocator(zero, like)(*args, **kw)

    dispatch.__name__ = dispatch.__qualname__ = f"_{_NAMES[(1 if zero else 2) + (2 if like else 0)]}"
    return dispatch


_DISPATCHERS = (
    _launch,
    _allocator(True, False),
    _allocator(False, False),
    _allocator(True, True),
    _allocator(False, True),
)


class LaunchHook:
    """``with hook: fn(*args)``: the launches ``fn`` makes from this thread go to ``hook.launch``."""

    _previous: Any = None

    def launch(self, kernel: Any, dim: Any, inputs: Sequence[Any], outputs: Sequence[Any], kw: dict) -> Any:
        raise NotImplementedError  # pragma: no cover (each hook defines it)

    def allocate(self, args: tuple, kw: dict, zero: bool, like: bool) -> Any:
        """A ``wp.zeros(*args, **kw)`` (``zero``) or ``wp.empty`` of this thread (their ``*_like``
        where ``like``), or None: Warp's own."""
        return None

    def check(self, direction: str = " (backward)") -> None:
        """Raise what the hook's launches recorded (checked mode); nothing for a hook that records
        nothing."""

    def __enter__(self) -> Any:
        with _install_lock:
            if _installed[0] == 0:
                _original[:] = [getattr(wp, name) for name in _NAMES]
                for name, fn in zip(_NAMES, _DISPATCHERS):
                    setattr(wp, name, fn)
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
                for name, fn, orig in zip(_NAMES, _DISPATCHERS, _original):
                    if getattr(wp, name) is fn:
                        setattr(wp, name, orig)
                _original.clear()
