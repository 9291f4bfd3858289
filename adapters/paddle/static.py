"""``paddle.jit.to_static``: with SOT (``full_graph=False``) an op is a graph break, run eagerly
between compiled segments."""

from __future__ import annotations

import sys
import threading
import weakref
from typing import Any

import paddle

from interop._op import Op

from .._common import after_import
from .hook import _register

# ---- paddle.jit.to_static ------------------------------------------------------------------
# SOT (to_static with full_graph=False) would otherwise simulate the op's Python code and
# fail inside it; a "break graph function" is called eagerly between compiled segments.
# Checked against Paddle 3.3.1 (paddle.jit.sot.utils.paddle_api_config).
# That registry is a set which would keep every op alive (and an op described in a loop is
# dropped): it holds a weak stand-in of the op instead (_WeakEntry), removed when the op goes.
# Importing SOT costs a plain eager call 0.2-0.4 s: functions wait here until Paddle imports it
# (SOT's own import, when a to_static function first runs; _common.after_import).
_SOT_CONFIG = "paddle.jit.sot.utils.paddle_api_config"
_waiting: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()  # id -> fn, until SOT loads
_watching = False
_lock = threading.Lock()


def _sot_registry():
    """SOT's ``(add_break_graph_function, break_graph_functions)``, or None where this Paddle lacks them."""
    try:
        from paddle.jit.sot.utils.paddle_api_config import add_break_graph_function, break_graph_functions
    except ImportError:  # pragma: no cover - other Paddle versions: full_graph=False may not run the op
        return None
    return add_break_graph_function, break_graph_functions


class _WeakEntry:
    """Stands for ``fn`` in SOT's set of break-graph functions without keeping it alive: the same
    hash as ``fn`` and equal to it (SOT asks ``fn in the_set``), equal to nothing else."""

    __slots__ = ("_ref", "_hash")

    def __init__(self, fn):
        self._ref = weakref.ref(fn)
        self._hash = hash(fn)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return other is self or (other is not None and self._ref() is other)


def _run_eagerly_under_sot(fn) -> None:
    """Make ``fn`` a graph break for SOT: now if SOT is imported, else when it is."""
    global _watching
    if _SOT_CONFIG not in sys.modules:
        with _lock:
            _waiting[id(fn)] = fn
            if not _watching:
                _watching = True
                after_import(_SOT_CONFIG, _add_waiting)
            if _SOT_CONFIG not in sys.modules:
                return
    _add(fn)


def _add_waiting() -> None:
    with _lock:
        fns = list(_waiting.values())
        _waiting.clear()
    for fn in fns:
        _add(fn)


def _add(fn) -> None:
    registry = _sot_registry()
    if registry is None:
        return
    add, registered = registry
    if not isinstance(registered, set):  # pragma: no cover - another Paddle: held strongly
        add(fn)
        return
    entry = _WeakEntry(fn)
    add(entry)
    weakref.finalize(fn, registered.discard, entry)


# AST mode (full_graph=True) would rewrite the op's Python code for symbolic values; left as
# it is, the call reaches this adapter, which names the op and says what to use instead.
paddle.jit.not_to_static(Op.__call__)


def _register_existing_ops() -> None:
    from interop import _op

    for o in list(_op._ops.values()):
        _run_eagerly_under_sot(o)
        _register(o)


_register_existing_ops()
