"""What the adapters' generated call code shares (``adapters/torch/eager.py``,
``adapters/paddle/eager.py``): a bounded cache of compiled code objects and the text helpers.

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


def kernel_with_signature(
    kernel: Any,
    tree: Any,
    fdef: Any,
    params: list[str],
    annotations: dict[str, Any],
    *,
    extra: dict[str, Any] | None = None,
    module: str,
    key: str,
    label: str,
) -> Any:
    """A ``wp.Kernel`` made from ``fdef`` (an edited copy of ``kernel``'s parsed source ``tree``),
    with parameters ``params`` annotated by ``annotations``. Its function closes over ``extra``
    (name -> value) and the kernel's own closure variables, and sees the kernel's globals (Warp
    resolves names through them); the kernel's module options carry over.
    Used for struct kernels made flat and for backward kernels taken in their author's order."""
    import ast
    import types as pytypes

    import warp as wp

    fdef.decorator_list = []
    fdef.args = ast.arguments(
        posonlyargs=[],
        args=[ast.arg(arg=n) for n in params],
        vararg=None,
        kwonlyargs=[],
        kw_defaults=[],
        kwarg=None,
        defaults=[],
    )
    fdef.returns = None
    ast.fix_missing_locations(tree)
    from ._source import marked_source, set_origin, source_of

    # each line marked with the kernel's line it comes from: messages (checked mode) name that one
    source = marked_source(fdef)
    f = kernel.func
    extra = dict(extra or {})
    freevars = dict(zip(f.__code__.co_freevars, f.__closure__ or ()))
    held = list(extra) + list(freevars)
    factory_src = (
        f"def __interop_factory({', '.join(held)}):\n"
        f"    def {f.__name__}({', '.join(params)}):\n"
        f"        return ({', '.join(held)}{',' if held else ''})\n"
        f"    return {f.__name__}\n"
    )
    ns: dict[str, Any] = {}
    exec(compile(factory_src, f"<interop {label} of {kernel.key}>", "exec"), f.__globals__, ns)  # noqa: S102
    values = list(extra.values()) + [_cell_value(c) for c in freevars.values()]
    fn = ns["__interop_factory"](*values)
    fn = pytypes.FunctionType(fn.__code__, f.__globals__, f.__name__, None, fn.__closure__)
    fn.__annotations__ = annotations
    fn.__qualname__ = f.__qualname__
    fn.__module__ = f.__module__
    options = dict(getattr(kernel.module, "options", {}) or {})
    options.update(kernel.options or {})
    made = wp.Kernel(fn, key=key, module=wp.get_module(module), options=options, source=source)
    set_origin(made, source_of(kernel))
    return made


def _cell_value(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # a closure variable not bound yet
        return None
