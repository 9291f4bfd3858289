"""Checked mode: kernels whose every array access is bounds-checked (``interop.op(..., checked=True)``,
or ``INTEROP_CHECKED=1`` for every op of a process).

:func:`checked_kernel` makes the checked variant of a kernel (the rules: :mod:`.transform`; the
Warp functions it calls: :mod:`.checks`; the error record and the error: :mod:`.record`): the
kernel's own parameters, then one ``int64`` error array. Warp's adjoint of the variant replays the
same checks, so forward, adjoint and (a checked op's tangent op being checked) tangent launches
are all checked. It is built from the kernel's source by the reader and emitter that forward mode
uses (:mod:`interop._source`).
"""

from __future__ import annotations

import ast
import os
import threading
import weakref
from typing import Any

import warp as wp

from .._errors import UnsupportedError
from .._scalar_ref import _ScalarsAsArrays, build_lock
from .._source import (
    Refusal,
    Source,
    build_kernel,
    compile_function,
    function_bodies,
    namespace_of,
    overload_signature,
    parse_def,
    register_function,
    source_of,
)
from . import record
from .checks import AT, ERR, helpers
from .transform import Checker, array_ndim, rewrite

ENV = "INTEROP_CHECKED"


def from_environment() -> bool:
    """Whether ``INTEROP_CHECKED`` asks for checked mode (read when an op is described)."""
    return os.environ.get(ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


_kernels: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_functions: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_lock = threading.RLock()


def checked_kernel(kernel: Any, scalar_refs: tuple[str, ...] = (), label: str = "") -> Any:
    """The checked variant of ``kernel`` (cached), where ``scalar_refs`` name scalars passed as
    1-element arrays (see :mod:`interop._scalar_ref`): the kernel's parameters, then the error array."""
    with build_lock, _lock:
        per = _kernels.get(kernel)
        if per is None:
            per = _kernels[kernel] = {}
        k = per.get(scalar_refs)
        if k is None:
            try:
                k = per[scalar_refs] = _build(kernel, scalar_refs)
            except Refusal as r:
                where = Source(kernel, kernel.adj).where(r.node)
                raise UnsupportedError(f"op {label!r}: checked mode cannot check {r.what} {where}") from None
        return k


def _build(kernel: Any, scalar_refs: tuple[str, ...]) -> Any:
    adj = kernel.adj
    src = source_of(kernel)
    fdef = parse_def(adj)
    annotations = dict(adj.arg_types)
    for n in scalar_refs:
        annotations[n] = wp.array(dtype=annotations[n], ndim=1)
    if scalar_refs:
        fdef = _ScalarsAsArrays(scalar_refs).visit(fdef)
    arrays = {n: nd for n, t in annotations.items() if (nd := array_ndim(t)) is not None}
    ns = namespace_of(kernel.func)
    ns.update(helpers())
    checker = Checker(src, ns, arrays, "", _function_variant)
    name = f"{fdef.name}__checked"
    text = rewrite(fdef, checker, name)
    ns.update(checker.used)
    annotations[ERR] = wp.array(dtype=wp.int64)
    fn = compile_function(text, name, ns, annotations, "checked")
    sig = overload_signature(kernel)
    suffix = "_".join(scalar_refs) + (f"__{sig}" if sig else "") or "all"
    return build_kernel(kernel, fn, text, "checked", suffix)


def _function_variant(fobj: Any, node: ast.AST, caller: Source) -> tuple[str, Any] | None:
    """``(name, wp.func)`` of the checked variant of the ``wp.func`` ``fobj`` (cached), or None where
    it takes no array (it can access none) or cannot be read (native code: called as it is)."""
    bodies = function_bodies(fobj)
    if not bodies or not any(
        array_ndim(t) is not None for b in bodies for t in (getattr(b, "input_types", None) or {}).values()
    ):
        return None
    if getattr(fobj, "native_snippet", None) is not None or getattr(fobj, "custom_grad_func", None) is not None:
        return None  # its body is not what runs (native code) or not what is differentiated: as it is
    with _lock:
        hit = _functions.get(fobj)
        if hit == "building":
            raise Refusal(f"the recursive function {fobj.key!r}", node)
        if hit is not None:
            return hit
        _functions[fobj] = "building"
        try:
            made = _build_function(fobj, bodies)
        except BaseException:
            _functions.pop(fobj, None)
            raise
        _functions[fobj] = made
        return made


def _build_function(fobj: Any, bodies: list[Any]) -> tuple[str, Any]:
    unique = (getattr(fobj, "native_func", None) or fobj.key).replace(".", "_")
    name = f"_interop_ck_{unique}"
    module = wp.get_module(f"interop_checked_fn.{unique}")
    first: Any = None
    for body in bodies:
        src = source_of(body)
        fdef = parse_def(body.adj)
        annotations = dict(body.input_types or {})
        arrays = {n: nd for n, t in annotations.items() if (nd := array_ndim(t)) is not None}
        ns = namespace_of(body.func)
        ns.update(helpers())
        owner = src.origin.name if src.origin is not None else fobj.key  # a tangent's: its function's
        checker = Checker(src, ns, arrays, owner, _function_variant)
        text = rewrite(fdef, checker, name)
        ns.update(checker.used)
        annotations[ERR] = wp.array(dtype=wp.int64)
        annotations[AT] = wp.int64
        fn = compile_function(text, name, ns, annotations, "checked")
        first = register_function(fn, name, module, text, first)
    return name, first


__all__ = ["ENV", "checked_kernel", "from_environment", "record"]
