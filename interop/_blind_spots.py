"""Warp's reverse-mode blind spots: kernels whose gradient Warp's generated adjoint gets wrong.

Measured on Warp 1.16 to 1.19 (``tests/test_blind_spots.py`` compares ``wp.Tape`` with finite
differences for each pattern):

- **A local reassigned inside a dynamic loop.** Warp unrolls a ``for`` over a ``range`` of
  constants (at most the module's ``max_unroll`` iterations, no ``break``); any other ``for`` and
  every ``while`` is a dynamic loop, whose reassigned locals Warp writes over in place (it warns
  "detected mutated variable ... this may not be a differentiable operation" in debug mode). Its
  adjoint replays neither the loop's updates before the reverse loop nor each iteration's value
  inside it, so every read of such a local, inside the loop or after it, sees a stale value. The
  gradient is still right where the stale value is not needed: ``acc += a[j] * b[j]`` (a sum's
  adjoint needs no operand) followed by ``out[i] = 2.0 * acc``. It is wrong (often zero) where it is:
  ``out[i] = w[i] * acc`` (``w``'s gradient is ``acc``), ``wp.sqrt(acc)``, ``acc = acc * a[j]``,
  ``a[j]`` with ``j`` counted by hand in a ``while``, a branch on it. A local first assigned inside a
  dynamic loop and read after it gets no gradient at all.
- **A tuple bound to one name**: ``r = f(x)`` with ``f`` returning several values (a ``wp.func`` or
  a builtin such as ``quat_to_axis_angle``), then ``r[0]``: no gradient reaches ``x``. Unpacking
  (``a, b = f(x)``) is right.

:func:`refusal` finds these in a kernel and the ``wp.func``s it calls, from their Python source,
and returns the error an op raises at its first backward (never at description: the forward and
forward mode are right). A ``wp.func`` with a custom gradient is not read (its adjoint is its own).
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass
from typing import Any, Sequence

import warp as wp

from ._errors import UnsupportedError
from ._source import source_of
from ._tangent import _is_builtin, _ns_of, _resolve, _static_value
from ._warp_compat import is_struct, warp_function_class

# builtins whose adjoint needs none of its operands' values (linear in each, constants aside)
_LINEAR = frozenset({"add", "sub", "neg", "pos", "float", "float32", "float64", "float16", "int", "extract"})
# bilinear builtins: an operand's value is needed for the other operands' gradients only
_BILINEAR = frozenset({"mul", "dot", "cross", "outer", "cw_mul", "ddot"})
_STORES = frozenset({"atomic_add", "atomic_sub", "tile_store", "tile_atomic_add", "array_store"})
_CONSTRUCTOR_PREFIXES = ("vec", "mat", "quat", "transform", "spatial_", "vector", "matrix")


@dataclass(frozen=True)
class BlindSpot:
    """One place where Warp's adjoint is wrong: what, where, and the rewrite."""

    what: str
    where: str
    rewrite: str
    # the scalar parameters whose gradient alone is wrong (None: every gradient may be)
    scalars: frozenset[str] | None = None

    def message(self, label: str) -> str:
        return (
            f"op {label!r}: Warp's reverse mode would give a wrong gradient (often zero, with no error) for "
            f"this kernel: {self.what} {self.where}. Rewrite: {self.rewrite}. Forward mode (jvp, jacfwd) is "
            "right; see docs/gradients.md, 'Warp's reverse-mode blind spots'"
        )


def refusal(fn: Any, label: str) -> UnsupportedError | None:
    """The error a first backward of kernel ``fn`` raises, or None where Warp's adjoint is right."""
    spot = find(fn)
    return None if spot is None else UnsupportedError(spot.message(label))


def in_out_spot(fn: Any, in_out: Sequence[str], accumulations: bool = False) -> BlindSpot | None:
    """Where kernel ``fn`` reads one of its in-out parameters ``in_out`` as a value (``acc[i]`` in
    an expression, ``acc[i] = acc[i] + x[i]`` included), or None. An in-out parameter's gradient is
    its upstream gradient passed through, right for a kernel that only accumulates into it
    (``wp.atomic_add``, ``+=``). A read's adjoint needs the value from before the call, which the
    mutable frameworks no longer hold (``out[i] = acc[i] * x[i]`` gave ``x`` the gradient of the
    updated value), and Warp keeps one adjoint array for the in-out before and after the call, so
    the read's adjoint adds to the passed-through gradient (``acc[i] = acc[i] + x[i]`` gave 2 for 1).
    (A kernel that only stores into an in-out, ``w[j] = v``, gives its other parameters the right
    gradients; the in-out's own gradient passes through where it was overwritten: docs/gradients.md.)
    ``accumulations``: a read that only adds to the element it reads (``acc[i] = acc[i] + v``, as
    ``acc[i] += v``) does not count: the in-out's gradient alone passes through it unchanged."""
    from ._promises import accesses

    found = accesses(fn, list(in_out))
    if found is None:
        return None
    adj: Any = getattr(fn, "adj", None)
    fdef = ast.parse(textwrap.dedent(adj.source)).body[0]
    names = _aliases(fdef, in_out)  # local name -> the in-out parameter it is (`a = acc`)
    added = _accumulating_reads(fdef, names) if accumulations else set()
    for node in ast.walk(fdef):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id in names
            and isinstance(node.ctx, ast.Load)
            and id(node) not in added
        ):
            name = names[node.value.id]
            return BlindSpot(
                f"in-out parameter `{name}` is read as a value (its gradient is only defined for a kernel that "
                "accumulates into it without reading it)",
                found.where(node),
                f"only accumulate into `{name}` (`wp.atomic_add({name}, i, v)` or `{name}[i] += v`), reading the "
                f"values the kernel needs from an input (pass the old value as one), or make `{name}` an output",
            )
    return None


def _accumulating_reads(fdef: ast.AST, names: dict[str, str]) -> set[int]:
    """Ids of the reads ``a[k]`` in ``a[k] = a[k] + v``, ``a[k] = v + a[k]`` and ``a[k] = a[k] - v``
    (``v`` not reading ``a``): an accumulation written out, the new value the old one plus ``v``."""
    out: set[int] = set()
    for node in ast.walk(fdef):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.BinOp)):
            continue
        t, v = node.targets[0], node.value
        if not (isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id in names):
            continue
        sides = [(v.left, v.right)] + ([(v.right, v.left)] if isinstance(v.op, ast.Add) else [])
        if not isinstance(v.op, (ast.Add, ast.Sub)):
            continue
        for read, other in sides:
            if (
                isinstance(read, ast.Subscript)
                and ast.dump(read.value) == ast.dump(t.value)
                and ast.dump(read.slice) == ast.dump(t.slice)
                and not any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(other))
            ):
                out.add(id(read))
                break
    return out


def _aliases(fdef: ast.AST, params: Sequence[str]) -> dict[str, str]:
    """``params`` and the locals bound to one of them (``a = acc``, ``b = a``), each mapped to the
    parameter it is."""
    names = {p: p for p in params}
    changed = True
    while changed:
        changed = False
        for node in ast.walk(fdef):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in names:
                for t in node.targets:
                    if isinstance(t, ast.Name) and t.id not in names:
                        names[t.id] = names[node.value.id]
                        changed = True
    return names


def _local_names(fdef: ast.FunctionDef) -> set[str]:
    """The names a function body assigns (its locals, loop variables included)."""
    names: set[str] = set()
    for node in ast.walk(fdef):
        for target, _ in _assignments(node):
            names.update(_target_names(target))
        if isinstance(node, (ast.For, ast.comprehension)):
            names.update(_target_names(node.target))
    return names


def find(fn: Any) -> BlindSpot | None:
    """The first blind spot in kernel (or ``wp.func``) ``fn`` and the functions it calls, or None."""
    module = getattr(fn, "module", None)
    options = getattr(module, "options", None) or {}
    max_unroll = int(options.get("max_unroll", getattr(wp.config, "max_unroll", 16)) or 16)
    return _Function(fn, max_unroll, set(), top=True).scan()


class _Function:
    """The analysis of one function's body."""

    def __init__(self, fn: Any, max_unroll: int, seen: set[int], top: bool = False):
        self.fn = fn
        self.max_unroll = max_unroll
        self.seen = seen
        self.top = top  # the kernel itself: its float scalar parameters are told apart
        self.scalar_hits: list[tuple[str, ast.AST, set[str]]] = []
        # condition text -> (the names it reads, the locals made fresh under it): see _compound
        self._guards: dict[str, tuple[set[str], set[str]]] = {}
        seen.add(id(fn))

    def _read(self, active_params: set[str] | None = None) -> ast.FunctionDef | None:
        """Parses the function; ``active_params``: the parameters carrying a gradient (default: the
        float ones). None where there is no Python source, or a custom gradient replaces the adjoint."""
        adj = getattr(self.fn, "adj", None)
        if adj is None or getattr(self.fn, "custom_grad_func", None) is not None:
            return None
        try:
            self.src = source_of(self.fn)  # (a generated kernel's lines named in its origin)
            fdef = ast.parse(textwrap.dedent(adj.source)).body[0]
        except Exception:  # noqa: BLE001 (no Python source: a native function, nothing to read)
            return None
        if not isinstance(fdef, ast.FunctionDef):
            return None
        self.ns = _ns_of(adj.func)
        self.constants = _literal_locals(fdef)
        # parameters and locals hide the module's globals of the same name (as in Warp's codegen):
        # `range(n)` over a parameter `n` is a dynamic loop though the module has an `n = 4`
        self.hidden = {a.arg for a in fdef.args.args} | _local_names(fdef)
        self.active = self._active(fdef, adj, active_params)
        return fdef

    def scan(self) -> BlindSpot | None:
        fdef = self._read()
        if fdef is None:
            return None
        for check in (self._tuples, self._component_stores, self._loops, self._callees):
            spot = check(fdef)
            if spot is not None:
                return spot
        if self.scalar_hits:  # only the gradients of float scalars are wrong
            name, node, scalars = self.scalar_hits[0]
            every = frozenset(set().union(*(h[2] for h in self.scalar_hits)))
            return BlindSpot(
                f"local `{name}`, reassigned inside a dynamic loop, is read where the gradient of the scalar "
                f"parameter(s) {sorted(every)} needs its value (Warp's adjoint sees a stale value there)",
                self.src.where(node),
                f"do not differentiate {sorted(every)} (pass a Python number, or stop its gradient), or give the "
                "loop a static bound (`range(wp.static(N))`); the arrays' gradients are right",
                every,
            )
        return None

    def needs_params(self, stale: set[str], active: set[str]) -> bool:
        """Whether a gradient through this function needs the value of one of the parameters
        ``stale`` (with ``active`` the parameters carrying a gradient at the call): where it does
        not (``_interop_mul_tb(a, b, tb)`` returns ``a * tb``), a stale argument does no harm."""
        fdef = self._read(active)
        if fdef is None:
            return True
        self._guards = {}
        return self._walk(fdef.body, set(stale), self._needs_value, header=True) is not None

    # -- which locals carry a gradient -------------------------------------------------
    def _active(self, fdef: ast.FunctionDef, adj: Any, params: set[str] | None) -> set[str]:
        types = dict(getattr(adj, "arg_types", {}) or {})
        if params is None:
            active = {a.arg for a in fdef.args.args if _float_like(types.get(a.arg))}
        else:
            active = set(params)
        self.kernel_scalars = (
            {a.arg for a in fdef.args.args if a.arg in active and not wp.types.is_array(types.get(a.arg))}
            if self.top
            else set()
        )
        self.deps = _dependencies(fdef)
        # array parameters: a store into one writes memory, not a local the loop carries
        self.arrays = {a.arg for a in fdef.args.args if wp.types.is_array(types.get(a.arg))}
        changed = True
        while changed:
            changed = False
            for node in ast.walk(fdef):
                for target, value in _assignments(node):
                    if value is not None and self.reads(value, active):
                        for name in _target_names(target):
                            if name not in active:
                                active.add(name)
                                changed = True
        return active

    @staticmethod
    def reads(expr: ast.AST | None, names: set[str]) -> bool:
        """``expr`` reads one of ``names`` as a value (an index alone does not carry it)."""
        if expr is None:
            return False
        for node in _value_nodes(expr):
            if isinstance(node, ast.Name) and node.id in names:
                return True
        return False

    # -- a tuple bound to one name ---------------------------------------------------
    def _tuples(self, fdef: ast.FunctionDef) -> BlindSpot | None:
        for node in ast.walk(fdef):
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
                continue
            call = node.value
            if not isinstance(call, ast.Call) or not self.reads(call, self.active):
                continue
            if _returns_tuple(_resolve(call.func, self.ns), len(call.args)):
                name = node.targets[0].id
                return BlindSpot(
                    f"`{name}`, a tuple of several results bound to one name, gets no gradient",
                    self.src.where(node),
                    f"unpack the results (`a, b = {ast.unparse(call.func)}(...)`) and use the names",
                )
        return None

    # -- a component of a local vector/matrix overwritten ----------------------------
    def _component_stores(self, fdef: ast.FunctionDef) -> BlindSpot | None:
        """``v.x = ...``, ``v[k] = ...`` or ``v.x *= ...`` on a local vector/matrix whose value
        (``v = x[i]``) carries a gradient: Warp's adjoint passes the component's gradient to its
        old value too (measured on 1.16-1.19: ``d out/d x.x`` 1.4 for 0.4 after ``v.x *= s``).
        A local made from constants (``v = wp.vec3()``) and filled in component by component is
        right, and is not refused."""
        params = {a.arg for a in fdef.args.args}
        whole: dict[str, list[ast.AST]] = {}
        for node in ast.walk(fdef):
            for target, value in _assignments(node):
                if isinstance(target, ast.Name) and value is not None:
                    whole.setdefault(target.id, []).append(value)
        for node in ast.walk(fdef):
            if isinstance(node, ast.Assign):
                targets = list(node.targets)
            elif isinstance(node, ast.AugAssign):
                targets = [node.target]
            else:
                continue
            for t in targets:
                if not (isinstance(t, ast.Attribute) and t.attr in ("x", "y", "z", "w")) and not isinstance(
                    t, ast.Subscript
                ):
                    continue
                base = t.value
                if not isinstance(base, ast.Name):
                    continue
                v = base.id
                values = whole.get(v, [])
                if v in params or v in self.arrays or any(_array_like(r, self.arrays) for r in values):
                    continue  # (an array's element is stored, or a parameter's: not a local value)
                if any(self.reads(r, self.active) for r in values):
                    return BlindSpot(
                        f"a component of local `{v}` is overwritten (`{ast.unparse(t)}`) while `{v}`'s value carries "
                        "a gradient (Warp's adjoint also passes the component's gradient to its old value)",
                        self.src.where(node),
                        f"make the new value as a whole (`{v} = wp.vec3({v}.x * s, {v}.y, {v}.z)`), or build `{v}` "
                        "component by component from constants (`wp.vec3()`)",
                    )
        return None

    # -- locals reassigned inside dynamic loops --------------------------------------
    def _loops(self, fdef: ast.FunctionDef) -> BlindSpot | None:
        bound = {a.arg for a in fdef.args.args}
        return self._block(fdef.body, bound, [])

    def _block(self, body: list[ast.stmt], bound: set[str], rest: list[ast.stmt]) -> BlindSpot | None:
        """Scans ``body``; ``bound``: the locals assigned before it; ``rest``: what runs after it."""
        for k, stmt in enumerate(body):
            after = body[k + 1 :] + rest
            if isinstance(stmt, (ast.For, ast.While)):
                if self._dynamic(stmt):
                    spot = self._dynamic_loop(stmt, after, bound)
                    if spot is not None:
                        return spot
                inner = set(bound)
                if isinstance(stmt, ast.For):
                    inner |= set(_target_names(stmt.target))
                spot = self._block(stmt.body, inner, after)
                if spot is not None:
                    return spot
            elif isinstance(stmt, ast.If):
                for branch in (stmt.body, stmt.orelse):
                    spot = self._block(branch, set(bound), after)
                    if spot is not None:
                        return spot
            for node in ast.walk(stmt):
                for target, _ in _assignments(node):
                    bound.update(_target_names(target))
        return None

    def _dynamic(self, loop: ast.For | ast.While) -> bool:
        """Warp's decision (``Adjoint.get_unroll_range``): unrolled where the range's arguments are
        integer constants and the loop has at most ``max_unroll`` iterations and no ``break`` (or
        calls ``wp.static`` inside)."""
        if isinstance(loop, ast.While):
            return True
        it = loop.iter
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"):
            return True
        if not 1 <= len(it.args) <= 3:
            return True
        found = [self._constant(a) for a in it.args]
        values = [v for v in found if v is not None]
        if len(values) != len(found):
            return True
        try:
            count = len(range(*values))
        except (TypeError, ValueError):
            return True
        if any(self._is_static_call(n) for n in ast.walk(loop) if isinstance(n, ast.Call)):
            return False
        return count > self.max_unroll or _contains_break(loop.body)

    def _constant(self, node: ast.AST) -> int | None:
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, int) and not isinstance(node.value, bool) else None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
            v = node.operand.value
            return -v if isinstance(v, int) else None
        if isinstance(node, ast.Name) and node.id in self.constants:
            return self.constants[node.id]
        if isinstance(node, ast.Name) and node.id in self.hidden:
            return None
        if isinstance(node, ast.Call) and self._is_static_call(node):
            v = _static_value(node, self.ns)
        elif isinstance(node, (ast.Name, ast.Attribute)):
            v = _resolve(node, self.ns)
        else:
            return None
        v = getattr(v, "value", v) if not isinstance(v, int) else v  # a wp.constant
        return int(v) if isinstance(v, int) and not isinstance(v, bool) else None

    def _is_static_call(self, node: ast.Call) -> bool:
        f = _resolve(node.func, self.ns)
        return _is_builtin(f) and f.key == "static"

    def _dynamic_loop(self, loop: ast.For | ast.While, after: list[ast.stmt], bound: set[str]) -> BlindSpot | None:
        assigned: set[str] = set()
        for node in ast.walk(loop):
            for target, _ in _assignments(node):
                assigned.update(_target_names(target))
        loop_var = set(_target_names(loop.target)) if isinstance(loop, ast.For) else set()
        carried = (assigned & bound) - loop_var - self.arrays
        first = assigned - bound - loop_var - self.arrays
        head = "for" if isinstance(loop, ast.For) else "while"
        loop_line = f"the dynamic `{head}` loop at line {self.src.line(loop)[1]}"
        # inside the loop: the carried locals' values are stale in every iteration of the adjoint
        self._guards = {}
        hit = self._walk([loop], set(carried), self._needs_value, header=False)
        if hit is not None:
            name, node = hit
            return BlindSpot(
                f"local `{name}`, reassigned inside {loop_line}, is read there where its value matters "
                "(Warp's adjoint does not replay a dynamic loop's iterations)",
                self.src.where(node),
                "give the loop a static bound (`range(wp.static(N))`, N at most the module's max_unroll), or "
                "keep each iteration's value in an array",
            )
        # after the loop: the adjoint sees the carried locals' values from before it
        gone = first & self.active
        self._guards = {}
        hit = self._walk(after, set(gone), lambda node, names: _stale_load(node, names), header=True)
        if hit is not None:
            name, node = hit
            return BlindSpot(
                f"local `{name}`, first assigned inside {loop_line}, is read after it (Warp's adjoint "
                "passes it no gradient)",
                self.src.where(node),
                f"assign `{name}` before the loop, and accumulate what reads it inside the loop",
            )
        self._guards = {}
        hit = self._walk(after, carried | first, self._needs_value, header=True)
        if hit is not None:
            name, node = hit
            return BlindSpot(
                f"local `{name}`, reassigned inside {loop_line}, is read after the loop where its value "
                "matters (Warp's adjoint uses its value from before the loop)",
                self.src.where(node),
                f"accumulate the product inside the loop (e.g. `acc += w * ...` rather than `w * {name}` after "
                "it), give the loop a static bound (`range(wp.static(N))`), or keep the value in an array",
            )
        return None

    def _walk(self, body: list[ast.stmt], stale: set[str], check, header: bool, report: bool = True):
        """The first read in ``body``, in program order, that ``check(node, stale)`` names, or None.
        ``stale`` follows the code: a local assigned from a stale value becomes stale, one assigned
        anew at the same level is not any more (a loop's body is read twice: what its end makes
        stale is stale at its start). ``header``: a loop's own header is read too."""
        for stmt in body:
            if isinstance(stmt, (ast.For, ast.While, ast.If)):
                hit = self._compound(stmt, stale, check, header, report)
                if hit is not None:
                    return hit
                header = True
                continue
            if report:
                for node in ast.walk(stmt):
                    name = check(node, stale)
                    if name is not None:
                        return name, stmt
            _follow(stmt, stale)
            assigned = {n for t, _ in _assignments(stmt) for n in _target_names(t)}
            for test in [t for t, (names, _) in self._guards.items() if names & assigned]:
                del self._guards[test]  # the condition may have changed
        return None

    def _compound(self, stmt: ast.For | ast.While | ast.If, stale: set[str], check, header: bool, report: bool):
        head = stmt.iter if isinstance(stmt, ast.For) else stmt.test
        if report and header:
            for node in ast.walk(head):
                name = check(node, stale)
                if name is not None:
                    return name, stmt
        loop = not isinstance(stmt, ast.If)
        inner = set(stale)
        if loop:  # the next iteration starts with what this one made stale
            end, guards = set(stale), dict(self._guards)
            self._walk(stmt.body, end, check, True, report=False)
            inner |= end
            self._guards = guards  # what the iteration's end proves does not hold at its start
        test = None if isinstance(stmt, ast.For) else ast.unparse(stmt.test)
        if not loop and test in self._guards:  # `if c: x = fresh` earlier: under the same `c`, x is fresh
            inner -= self._guards[test][1]
        if report and not isinstance(stmt, ast.For) and check == self._needs_value:
            hit = self._control(stmt.test, stmt.body + stmt.orelse, inner, stmt)
            if hit is not None:
                return hit
        before = set(inner)
        hit = self._walk(stmt.body, inner, check, True, report)
        if hit is not None:
            return hit
        other = set(stale)
        hit = self._walk(stmt.orelse, other, check, True, report)
        if hit is not None:
            return hit
        if not loop and not stmt.orelse:
            fresh = (stale - inner) | (before - inner)
            if fresh and isinstance(stmt, ast.If) and test is not None:
                names = _names_in(stmt.test)
                had = self._guards.get(test, (names, set()))[1]
                self._guards[test] = (names, had | fresh)
        stale |= inner | other
        return None

    def _control(self, test: ast.AST, body: list[ast.stmt], stale: set[str], node: ast.AST):
        names = _names_in(test) & stale
        if names and any(self._active_effect(s) for s in body):
            return sorted(names)[0], node
        return None

    def _active_effect(self, stmt: ast.stmt) -> bool:
        for node in ast.walk(stmt):
            for _target, value in _assignments(node):
                if value is not None and self.reads(value, self.active):
                    return True
            if isinstance(node, ast.Call) and self.reads(node, self.active):
                return True
        return False

    def _needs_value(self, node: ast.AST, stale: set[str]) -> str | None:
        active = self.active
        if isinstance(node, (ast.BinOp, ast.AugAssign)):
            left, right = (node.left, node.right) if isinstance(node, ast.BinOp) else (node.target, node.value)
            op = node.op
            if isinstance(op, (ast.Add, ast.Sub)):
                return None
            ls, rs = _stale_in(left, stale), _stale_in(right, stale)
            if isinstance(op, (ast.Mult, ast.MatMult)):
                if ls and self.reads(right, active):
                    return self._coefficient(ls, node, [right])
                if rs and self.reads(left, active):
                    return self._coefficient(rs, node, [left])
                return None
            if isinstance(op, ast.Div):
                if ls and self.reads(right, active):
                    return self._coefficient(ls, node, [right])
                if rs and (self.reads(right, active) or self.reads(left, active)):
                    return rs
                return None
            s = ls or rs
            return s if s and (self.reads(left, active) or self.reads(right, active)) else None
        if isinstance(node, ast.Subscript):
            index = _stale_in(node.slice, stale, values_only=False)
            if index and self.reads(node.value, active):
                return index
            return None
        if isinstance(node, ast.Call):
            return self._call_needs(node, stale)
        return None

    def _call_needs(self, node: ast.Call, stale: set[str]) -> str | None:
        args = list(node.args) + [k.value for k in node.keywords]
        stale_args = [(a, _stale_in(a, stale)) for a in args]
        if not any(s for _, s in stale_args):
            return None
        f = _resolve(node.func, self.ns)
        key = getattr(f, "key", getattr(f, "__name__", "")) or ""
        if f is float or f is int or key in _LINEAR or key.startswith(_CONSTRUCTOR_PREFIXES) or isinstance(f, type):
            return None
        if key in _STORES and node.args:  # linear in the value; the index says where the gradient is
            value = 1 if key.startswith("tile_") else len(node.args) - 1
            index = [s for j, (_, s) in enumerate(stale_args) if s and j not in (0, value)]
            return index[0] if index and self.reads(node.args[0], self.active) else None
        if _is_user_function(f) and not node.keywords:
            names = list(getattr(f, "input_types", None) or {})
            if len(names) == len(node.args):
                stale_params = {n for n, (_, st) in zip(names, stale_args) if st}
                active_params = {n for n, a in zip(names, node.args) if self.reads(a, self.active)}
                callee = _Function(f, self.max_unroll, set())
                if not callee.needs_params(stale_params, active_params):
                    return None
                return next(st for _, st in stale_args if st)
        for k, (_a, s) in enumerate(stale_args):
            if not s:
                continue
            others = [b for j, (b, _) in enumerate(stale_args) if j != k]
            if key in _BILINEAR:
                if any(self.reads(b, self.active) for b in others):
                    return self._coefficient(s, node, others)
            elif any(self.reads(b, self.active) for b in args):
                return s
        return None

    def _coefficient(self, name: str, node: ast.AST, others: Sequence[ast.AST]) -> str | None:
        """A stale ``name`` multiplies ``others``: only their gradients need its value. Where those
        come from float scalar parameters of the kernel alone, the hit is kept aside (an op whose
        scalars are not differentiated is right) and the scan goes on."""
        feeds: set[str] = set()
        for o in others:
            for n in _value_nodes(o):
                if isinstance(n, ast.Name):
                    feeds |= self.deps.get(n.id, set())
        feeds &= self.active
        if feeds and feeds <= self.kernel_scalars:
            self.scalar_hits.append((name, node, feeds))
            return None
        return name

    # -- the functions the body calls ------------------------------------------------
    def _callees(self, fdef: ast.FunctionDef) -> BlindSpot | None:
        for node in ast.walk(fdef):
            if isinstance(node, ast.Call):
                f = _resolve(node.func, self.ns)
                if _is_user_function(f) and id(f) not in self.seen and self.reads(node, self.active):
                    spot = _Function(f, self.max_unroll, self.seen).scan()
                    if spot is not None:
                        return spot
        return None


def _array_like(value: ast.AST, arrays: set[str]) -> bool:
    """Whether a local bound to ``value`` is an array (an array parameter itself) or a tile
    (``wp.tile_*(...)``): a store into it is not a vector component's (not measured: not refused)."""
    if isinstance(value, ast.Name):
        return value.id in arrays
    if isinstance(value, ast.Call):
        f = value.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        return name.startswith("tile")
    return False


def _dependencies(fdef: ast.FunctionDef) -> dict[str, set[str]]:
    """For each name, the parameters its value is computed from (a fixed point over assignments)."""
    deps: dict[str, set[str]] = {a.arg: {a.arg} for a in fdef.args.args}
    changed = True
    while changed:
        changed = False
        for node in ast.walk(fdef):
            for target, value in _assignments(node):
                if value is None:
                    continue
                came: set[str] = set()
                for n in _value_nodes(value):
                    if isinstance(n, ast.Name):
                        came |= deps.get(n.id, set())
                for name in _target_names(target):
                    have = deps.setdefault(name, set())
                    if not came <= have:
                        have |= came
                        changed = True
    return deps


def _float_like(t: Any) -> bool:
    if t is None:
        return False
    if wp.types.is_array(t):
        t = t.dtype
    if t is float or t is Any or not isinstance(t, type) or is_struct(t):  # generic: may be a float
        return True
    scalar = getattr(t, "_wp_scalar_type_", t)
    try:
        return bool(wp.types.type_is_float(scalar))
    except Exception:  # noqa: BLE001 (a generic or struct type: assumed differentiable)
        return t is Any or not isinstance(t, type) or not wp.types.type_is_int(t)


def _assignments(node: ast.AST):
    if isinstance(node, ast.Assign):
        for t in node.targets:
            yield t, node.value
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        yield node.target, node.value


def _target_names(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for e in target.elts for n in _target_names(e)]
    if isinstance(target, (ast.Subscript, ast.Attribute)):  # v[0] = x, s.f = x: the local v, s changes
        base = target.value
        while isinstance(base, (ast.Subscript, ast.Attribute)):
            base = base.value
        return [base.id] if isinstance(base, ast.Name) else []
    return []


def _value_nodes(expr: ast.AST):
    """The nodes of ``expr`` whose values flow into its value (not array indices, not callees)."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.Subscript):
            stack.append(node.value)
            continue
        if isinstance(node, ast.Call):
            stack.extend(node.args)
            stack.extend(k.value for k in node.keywords)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _names_in(expr: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}


def _stale_in(expr: ast.AST, stale: set[str], values_only: bool = True) -> str | None:
    nodes = _value_nodes(expr) if values_only else ast.walk(expr)
    for n in nodes:
        if isinstance(n, ast.Name) and n.id in stale:
            return n.id
    return None


def _follow(stmt: ast.stmt, stale: set[str]) -> None:
    """Updates ``stale`` past a simple statement: what it assigns from a stale value is stale, a
    local it assigns anew from fresh values is not."""
    for target, value in _assignments(stmt):
        names = _target_names(target)
        from_stale = value is not None and _stale_in(value, stale, values_only=False)
        if from_stale or (isinstance(stmt, ast.AugAssign) and set(names) & stale):
            stale.update(names)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and isinstance(target, ast.Name):
            stale.discard(target.id)


def _stale_load(node: ast.AST, names: set[str]) -> str | None:
    if isinstance(node, ast.Name) and node.id in names and isinstance(node.ctx, ast.Load):
        return node.id
    return None


def _literal_locals(fdef: ast.FunctionDef) -> dict[str, int]:
    """Locals every assignment of which is an integer literal: Warp keeps them as constants (a
    ``range`` over them is unrolled)."""
    seen: dict[str, int | None] = {}
    for node in ast.walk(fdef):
        for target, value in _assignments(node):
            for name in _target_names(target):
                literal = (
                    value.value
                    if isinstance(node, ast.Assign) and isinstance(value, ast.Constant) and type(value.value) is int
                    else None
                )
                seen[name] = literal if name not in seen or seen[name] == literal else None
    return {k: v for k, v in seen.items() if v is not None}


def _contains_break(body: list[ast.stmt]) -> bool:
    for stmt in body:
        if isinstance(stmt, ast.Break):
            return True
        if isinstance(stmt, ast.If) and (_contains_break(stmt.body) or _contains_break(stmt.orelse)):
            return True
    return False


def _is_user_function(obj: Any) -> bool:
    return isinstance(obj, warp_function_class()) and not obj.is_builtin()


def _return_arity(fobj: Any, depth: int = 0) -> int:
    """How many values a ``wp.func`` returns (a ``return`` of a tuple, or of a call of a function
    returning several)."""
    try:
        fdef = ast.parse(textwrap.dedent(fobj.adj.source)).body[0]
    except Exception:  # noqa: BLE001 (no source: a native function)
        return 1
    for node in ast.walk(fdef):
        if isinstance(node, ast.Return) and node.value is not None:
            if isinstance(node.value, ast.Tuple):
                return len(node.value.elts)
            if isinstance(node.value, ast.Call) and depth < 8:
                callee = _resolve(node.value.func, _ns_of(fobj.func))
                if _is_user_function(callee) and callee is not fobj and _return_arity(callee, depth + 1) > 1:
                    return _return_arity(callee, depth + 1)
    return 1


def _returns_tuple(f: Any, nargs: int) -> bool:
    if _is_user_function(f):
        return _return_arity(f) > 1
    if not _is_builtin(f):
        return False
    for overload in getattr(f, "overloads", None) or [f]:
        inputs = getattr(overload, "input_types", None) or {}
        if len(inputs) != nargs:
            continue
        vt = getattr(overload, "value_type", None)
        if isinstance(vt, tuple):
            return True
        vf = getattr(overload, "value_func", None)
        if vf is not None:
            try:
                if isinstance(vf(None, None), tuple):
                    return True
            except Exception:  # noqa: BLE001, S112 (a value function that needs the types: not a tuple here)
                continue
    return False
