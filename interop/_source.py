"""Kernel variants as source transformations: the one reader and emitter they share.

A kernel variant (the tangent kernel of forward mode, :mod:`interop._tangent`; the bounds-checked
kernel of checked mode, :mod:`interop._checked`) is the user's kernel read from its Python source,
rewritten, and built again as a Warp kernel or function of its own. This module is the part they
share: reading the source (:class:`Source`, :func:`parse_def`), the names its body sees
(:func:`namespace_of`, :func:`resolve`), compiling generated text (:func:`compile_function`), and
registering the result with Warp (:func:`build_kernel`, :func:`register_function`). Each variant
is then a set of rules over the parsed body.
"""

from __future__ import annotations

import ast
import builtins
import re
import textwrap
import weakref
from typing import Any

import warp as wp

from ._scalar_ref import retry_ast_race
from ._warp_compat import builtin_function, make_function, warp_function_class


class Source:
    """Where a function's source came from, for messages naming a line. A generated variant's
    source (a tangent kernel's) marks each line with the line of the source it was made from
    (``# interop:<line>``, see :data:`ORIGIN`): ``origin`` is that source, and lines are named there."""

    def __init__(self, fn_obj: Any, adj: Any, origin: Source | None = None):
        self.text = textwrap.dedent(adj.source)
        self.lines = self.text.splitlines()
        code = getattr(adj.func, "__code__", None)
        self.file = code.co_filename if code is not None else "<unknown>"
        self.first = int(getattr(adj, "fun_lineno", 1) or 1)
        self.name = getattr(fn_obj, "key", getattr(adj.func, "__name__", "?"))
        self.origin = origin

    def line_at(self, k: int) -> tuple[str, int, str]:
        """``(file, line number, the line's text)`` of line ``k`` (1-based) of the source."""
        text = self.lines[k - 1].strip() if 0 < k <= len(self.lines) else ""
        if self.origin is not None:
            marked = _ORIGIN_RE.search(text)
            if marked:
                return self.origin.line_at(int(marked.group(1)))
        return self.file, self.first + k - 1, text

    def line(self, node: ast.AST) -> tuple[str, int, str]:
        """``(file, line number, the line's text)`` of ``node``."""
        return self.line_at(int(getattr(node, "lineno", 1)))

    def where(self, node: ast.AST | None) -> str:
        if node is None or not hasattr(node, "lineno"):
            return f"in {self.name} ({self.file})"
        file, line, text = self.line(node)
        name = self.origin.name if self.origin is not None else self.name  # (the user's kernel)
        return f"at {file}:{line} in {name}: `{text}`"


# a generated line's mark: the line (1-based, in the source it was made from) it comes from
ORIGIN = "  # interop:{}"
_ORIGIN_RE = re.compile(r"# interop:(\d+)$")
_origins: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def marked_source(fdef: ast.FunctionDef) -> str:
    """``ast.unparse(fdef)`` with each statement's line marked with the line it came from (its
    ``lineno``, :data:`ORIGIN`): the source of a kernel made from an edited copy of another's parsed
    source, whose lines :meth:`Source.line_at` then names in that other kernel's source. A node
    without a line (made by the edit) is marked with its parent's (``ast.fix_missing_locations``)."""
    out: list[str] = []

    def mark(node: ast.AST) -> str:
        line = getattr(node, "lineno", None)
        return ORIGIN.format(line) if line else ""

    def block(stmts: list, depth: int) -> None:
        for st in stmts:
            statement(st, depth)

    def statement(st: ast.stmt, depth: int) -> None:
        ind = "    " * depth
        if isinstance(st, ast.If):
            out.append(f"{ind}if {ast.unparse(st.test)}:{mark(st)}")
            block(st.body, depth + 1)
            orelse = st.orelse
            while orelse:
                if len(orelse) == 1 and isinstance(orelse[0], ast.If):
                    e = orelse[0]
                    out.append(f"{ind}elif {ast.unparse(e.test)}:{mark(e)}")
                    block(e.body, depth + 1)
                    orelse = e.orelse
                else:
                    out.append(f"{ind}else:")
                    block(orelse, depth + 1)
                    break
        elif isinstance(st, (ast.For, ast.While)):
            head = (
                f"for {ast.unparse(st.target)} in {ast.unparse(st.iter)}"
                if isinstance(st, ast.For)
                else f"while {ast.unparse(st.test)}"
            )
            out.append(f"{ind}{head}:{mark(st)}")
            block(st.body, depth + 1)
            if st.orelse:
                out.append(f"{ind}else:")
                block(st.orelse, depth + 1)
        else:  # a simple statement is one line; anything else as ast.unparse writes it, its first line marked
            text = ast.unparse(st).split("\n")
            out.append(f"{ind}{text[0]}{mark(st)}")
            out.extend(f"{ind}{t}" for t in text[1:])

    args = ast.unparse(fdef.args)
    out.append(f"def {fdef.name}({args}):")
    block(fdef.body, 1)
    return "\n".join(out) + "\n"


def set_origin(variant: Any, origin: Source) -> None:
    """Record that ``variant`` (a generated ``wp.Kernel`` or ``wp.func``) was made from ``origin``."""
    _origins[variant] = origin


def source_of(obj: Any) -> Source:
    """The :class:`Source` of a kernel or ``wp.func``, naming lines in its origin where it has one."""
    return Source(obj, obj.adj, _origins.get(obj))


class Refusal(Exception):
    """Raised inside a variant's rules for what it cannot transform; the caller turns it into an
    ``UnsupportedError`` naming the op and the source line."""

    def __init__(self, what: str, node: ast.AST | None):
        super().__init__(what)
        self.what = what
        self.node = node


def parse_def(adj: Any) -> ast.FunctionDef:
    """The function definition of a kernel's or ``wp.func``'s source."""
    tree = ast.parse(textwrap.dedent(adj.source))
    fdef = tree.body[0]
    if not isinstance(fdef, ast.FunctionDef):
        raise Refusal("a source that is not a function definition", None)
    return fdef


def namespace_of(func: Any) -> dict:
    """The names a function's body sees: its globals, then its closure's cells."""
    ns = dict(func.__globals__)
    for name, cell in zip(func.__code__.co_freevars, func.__closure__ or ()):
        try:
            ns[name] = cell.cell_contents
        except ValueError:
            pass
    return ns


def resolve(node: ast.AST, ns: dict) -> Any:
    """The object a call's function expression names (``wp.sin``, ``my_func``, ``wp.vec3``), or None."""
    if isinstance(node, ast.Name):
        if node.id in ns:
            return ns[node.id]
        return getattr(builtins, node.id, None)
    if isinstance(node, ast.Attribute):
        base = resolve(node.value, ns)
        if base is None:
            return None
        obj = getattr(base, node.attr, None)
        if (base is wp or base is wp.types) and (not isinstance(obj, type) or node.attr == "tile"):
            # wp.tid, wp.tile_load, wp.vector, wp.types.vector... exist only as kernels see them
            return builtin_function(node.attr) or obj
        return obj
    return None


def is_builtin(obj: Any) -> bool:
    return isinstance(obj, warp_function_class()) and bool(obj.is_builtin())


def is_user_function(obj: Any) -> bool:
    return isinstance(obj, warp_function_class()) and not obj.is_builtin()


def compile_function(text: str, name: str, ns: dict, annotations: dict | None, what: str = "variant") -> Any:
    """The Python function ``name`` defined by the generated ``text`` in namespace ``ns``, with
    ``annotations`` (None: those the text gives)."""
    code = compile(text, f"<interop {what} {name}>", "exec")
    exec(code, ns)  # noqa: S102 (source generated here from the kernel's own)
    fn = ns[name]
    if annotations is not None:
        fn.__annotations__ = annotations
    return fn


def overload_signature(kernel: Any) -> str:
    """The signature of a generic kernel's overload (its variants are told apart by it), or ''."""
    parent = getattr(kernel, "generic_parent", None)
    return next((s for s, k in (parent.overloads.items() if parent else ()) if k is kernel), "")


def build_kernel(kernel: Any, fn: Any, text: str, variant: str, suffix: str) -> Any:
    """A Warp kernel of the generated function ``fn`` (source ``text``), the ``variant`` of
    ``kernel`` (``"tangent"``, ``"checked"``) told apart from its siblings by ``suffix``: in a module
    of its own, with the kernel's module and kernel options."""
    fn.__module__ = kernel.func.__module__
    module = wp.get_module(f"interop_{variant}.{kernel.key}.{suffix}")
    # the kernel's module options hold for its variant too (fast_math, mode, block_dim, ...)
    module.options.update(kernel.module.options)
    return retry_ast_race(
        lambda: wp.Kernel(
            fn,
            key=f"{kernel.key}__{variant}_{suffix}",
            module=module,
            options=dict(kernel.options or {}),
            source=text,
        )
    )


def register_function(fn: Any, name: str, module: Any, text: str, first: Any = None) -> Any:
    """Register one body of a generated ``wp.func`` (the first, or an overload of ``first``)."""
    return retry_ast_race(lambda: make_function(fn, name, module, text, overload_of=first))


def function_bodies(fobj: Any) -> list[Any]:
    """The bodies a call of ``fobj`` may run: its overloads as written (concrete and generic; not
    the concrete ones Warp instantiated from a generic one), each once."""
    seen: dict[int, Any] = {}
    for f in [
        fobj,
        *(getattr(fobj, "user_overloads", {}) or {}).values(),
        *(getattr(fobj, "user_templates", {}) or {}).values(),
    ]:
        if getattr(f, "generic_parent", None) is None and f.func is not None:
            seen.setdefault(id(f.func), f)
    return list(seen.values())
