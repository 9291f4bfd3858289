"""``paddle.jit.to_static``: with SOT (``full_graph=False``) an op is a graph break, run eagerly
between compiled segments."""

from __future__ import annotations

import weakref

import paddle

from interop._op import Op

from .hook import _register

# ---- paddle.jit.to_static ------------------------------------------------------------------
# SOT (to_static with full_graph=False) would otherwise simulate the op's Python code and
# fail inside it; a "break graph function" is called eagerly between compiled segments.
# Checked against Paddle 3.3.1 (paddle.jit.sot.utils.paddle_api_config).
# That registry is a set which would keep every op alive (and an op described in a loop is
# dropped): it holds a weak stand-in of the op instead (_WeakEntry), removed when the op goes.
try:
    from paddle.jit.sot.utils.paddle_api_config import add_break_graph_function as _add_break_graph_function
    from paddle.jit.sot.utils.paddle_api_config import break_graph_functions as _break_graph_functions
except ImportError:  # pragma: no cover - other Paddle versions: full_graph=False may not run the op
    _add_break_graph_function = _break_graph_functions = None


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
    if _add_break_graph_function is None:
        return
    if not isinstance(_break_graph_functions, set):  # pragma: no cover - another Paddle: held strongly
        _add_break_graph_function(fn)
        return
    entry = _WeakEntry(fn)
    _add_break_graph_function(entry)
    weakref.finalize(fn, _break_graph_functions.discard, entry)


# AST mode (full_graph=True) would rewrite the op's Python code for symbolic values; left as
# it is, the call reaches this adapter, which names the op and says what to use instead.
paddle.jit.not_to_static(Op.__call__)


def _register_existing_ops() -> None:
    from interop import _op

    for o in list(_op._ops.values()):
        _run_eagerly_under_sot(o)
        _register(o)


_register_existing_ops()
