"""What the adapters' generated call code shares (``adapters/_torch_eager.py``,
``adapters/_paddle_eager.py``): a bounded cache of compiled code objects and the text helpers.

Generated source depends only on a call signature's structure (which parameters are arrays,
strided, scalars, outputs); shapes, dtypes and launchers are bound as names in each function's
globals, so one code object serves every signature of the same structure.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from . import _cache

_CODE: dict[str, Any] = {}  # generated source -> compiled code object
_CODE_LIMIT = 1024
_code_lock = threading.Lock()


def compile_functions(source: str, env: dict[str, Any], names: tuple[str, ...], filename: str) -> tuple[Callable, ...]:
    """Run ``source`` (compiled once per distinct text, at most ``_CODE_LIMIT`` kept) with
    ``env`` as its globals; return the functions it defines under ``names``."""
    code = _CODE.get(source)
    if code is None:
        code = compile(source, filename, "exec")
        with _code_lock:
            _cache.put(_CODE, source, code, _CODE_LIMIT)
    exec(code, env)
    return tuple(env[n] for n in names)


def tuple_text(items: list[str]) -> str:
    """The source of a tuple of ``items`` (``()`` when empty)."""
    return "(" + "".join(f"{x}, " for x in items) + ")" if items else "()"


def adj_tuple_text(ptr: str, strides: str = "None") -> str:
    """A gradient for the shared launcher: ``(pointer, strides)``, or None where there is none
    (a null pointer: a Python-function op's tape tells "no gradient" from None)."""
    if ptr == "0":
        return "None"
    return f"(({ptr}, {strides}) if {ptr} else None)"
