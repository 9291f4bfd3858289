"""Straight-line Python for the Paddle adapter's remembered call signatures.

The Paddle counterpart of ``adapters/torch/eager.py``. A remembered signature (``_Signature``
of ``adapters/paddle/__init__.py``: one plan, Paddle tensors and Python numbers in fixed positions,
no in-out parameter) gets its call written out, one line per parameter, and compiled once:

:func:`signature_code` writes ``forward(a0, ...) -> result(s)`` (outputs allocated by Paddle's
C operators, one launch) and the signature's ``paddle.autograd.PyLayer``, whose forward is that
body inlined and whose backward runs the adjoint launch. :func:`hook_code` writes the op's eager
hook and signature key for its parameters. On the CPU each launch fills a launch record of the
calling thread's own field by field and calls the compiled kernel
(``interop._launch.direct_lines``); on CUDA, or while that record is busy (a re-entrant call),
it calls the plan's shared recorded launch (on Paddle's current stream).

The hook's call without a gradient runs ``forward``, and so does ``_Signature.run`` (the
general node's remembered-signature branch, for ops with a hand-written backward).
"""

from __future__ import annotations

from typing import Any, Callable
from weakref import ref as _weakref

from paddle.autograd import PyLayer

from adapters._common import keep_tape
from interop._codegen import adj_tuple_text, compile_functions, tuple_text
from interop._launch import direct_env, direct_lines

from .compat import (
    CONTEXT_DIRECT,
    DTYPE_KEY,
    DYNAMIC,
    GLOBAL_VAR,
    SAME_DTYPE,
    SAME_SHAPE,
    SHAPE_TEMPLATE,
    dtype_token,
    grad_enabled_c,
)


def _compile_fn(source: str, env: dict[str, Any], names: tuple[str, ...]) -> tuple[Callable, ...]:
    return compile_functions(source, env, names, "<interop paddle signature>")


def signature_code(
    sig, nargs: int, name: str, current_stream: Callable, recorded: Callable | None, general: Callable | None = None
):
    """``(forward, apply)`` of one remembered signature, written out and compiled in one namespace
    (launch records per direction and thread, made on first use).

    - ``forward(a0, ...) -> result(s)``: outputs allocated by Paddle's C operators, one launch;
    - ``apply(*args)`` of the signature's ``PyLayer`` (None without ``recorded``): its forward is
      the body above, inlined; it saves the tensor arguments and detached aliases of the outputs
      that Warp's adjoint reads (``sig.kept``; a PyLayer that saves its own output is never freed
      when no backward runs, see ``adapters/paddle/__init__.py``) with the Python numbers (first in the
      saved tuple, or attributes of ``ctx``: ``_paddle_compat.CONTEXT_DIRECT``), and returns the
      outputs, then a weak reference to ``ctx`` (not a tensor: no gradient), which the op's hook
      gives the gradient hook that refuses a second ``Tensor.backward``. Its backward takes the
      upstream gradients in the outputs' order, allocates the zero-filled gradients of the
      tensor arguments that need one and runs the adjoint launch, or hands a recorded backward
      (``create_graph=True``) to ``recorded(args, saved, grads)``, the adapter's node that
      refuses a second derivative.

    Args:
        sig: the ``_Signature`` (plan, device, array and scalar positions, strides, output and
            gradient allocations, upstream-gradient order).
        nargs: how many call arguments.
        name: the PyLayer's class name.
        current_stream: the adapter's ``_current_stream(device)`` (CUDA only).
        recorded: the recorded backward, or None for no PyLayer.
        general: ``general(args, saved, grads)``, the adjoint over saved tensors in another layout
            than the forward's (saved-tensor hooks: ``_Signature.same_saved_layout``).
    """
    w = _SignatureWriter(sig, nargs, current_stream, recorded)
    w.env["general"] = general
    fwd, results = w.forward_body()
    lines = [f"def forward({', '.join(w.args)}):", *fwd, f"    return {results}"]
    names: tuple[str, ...] = ("forward",)
    if recorded is not None:
        adj_body, gradients = w.adjoint_body()
        if w.plan.desc.kind == "function":
            fwd, adj_body = keep_tape(w.runner, w.device, w.env, fwd, adj_body)
        lines += w.layer_forward(fwd)
        lines += w.layer_backward(adj_body, gradients)
        names += ("layer_forward", "layer_backward")
    funcs = _compile_fn("\n".join(lines) + "\n", w.env, names)
    if recorded is None:
        return funcs[0], None
    cls: Any = type(name, (PyLayer,), {"forward": staticmethod(funcs[1]), "backward": staticmethod(funcs[2])})
    return funcs[0], cls.apply


class _SignatureWriter:
    """Writes :func:`signature_code`'s functions for one signature: the names, pointers and
    globals (set up once), the forward body, the adjoint body, and the PyLayer's forward (what
    it saves) and backward (what it restores, then the adjoint or the recorded backward)."""

    def __init__(self, sig, nargs: int, current_stream: Callable, recorded: Callable | None):
        self.sig = sig
        plan = sig.plan
        self.plan, self.runner, self.device = plan, plan.runner, sig.device
        self.nparams = len(plan.desc.params)
        runner, device = self.runner, self.device
        env: dict[str, Any] = {
            "go": runner.launcher(device, False),
            "current_stream": current_stream,
            "DEVICE": device,
            "grad_enabled": grad_enabled_c(),
            "recorded": recorded,
            "wref": _weakref,
        }
        self.env = env
        strided = {idx: strides for _, idx, strides in sig.arrays if strides is not None}

        def go_adj(values, adj, stream):
            # the adjoint's record is built on the first backward (replaces itself in the globals)
            g = env["go_adj"] = runner.launcher(device, True)
            return g(values, adj, stream)

        env["go_adj"] = go_adj
        direct_env(runner, device, strided, env)
        self.stream = "current_stream(DEVICE)" if sig.cuda else "None"
        self.args = [f"a{i}" for i in range(nargs)]
        self.tensors = [f"a{pos}" for pos, _, _ in sig.arrays]
        self.scalars = [f"a{pos}" for pos, _ in sig.scalars]
        self.ptrs = dict.fromkeys(range(self.nparams), "0")
        self.values = dict.fromkeys(range(self.nparams), "None")
        for pos, idx, strides in sig.arrays:
            self.ptrs[idx] = f"a{pos}.data_ptr()"
            if strides is None:
                self.values[idx] = f"(a{pos}.data_ptr(), None)"
            else:
                env[f"S{idx}"] = strides
                self.values[idx] = f"(a{pos}.data_ptr(), S{idx})"
        for pos, idx in sig.scalars:
            self.ptrs[idx] = self.values[idx] = f"a{pos}"
        self.rs: list[str] = []

    def forward_body(self) -> tuple[list[str], str]:
        """Allocate the outputs, one launch; the lines and the results expression."""
        sig, ptrs, values, nparams = self.sig, self.ptrs, self.values, self.nparams
        fwd = []
        for j, (idx, alloc, how, like) in enumerate(sig.outs):
            self.env[f"A{j}"], self.env[f"H{j}"] = alloc, how
            fwd.append(f"    r{j} = A{j}(*H{j})" if like is None else f"    r{j} = A{j}(a{like}, *H{j})")
            ptrs[idx] = f"r{j}.data_ptr()"
            values[idx] = f"(r{j}.data_ptr(), None)"
            self.rs.append(f"r{j}")
        fallback = f"go([{', '.join(values[i] for i in range(nparams))}], None, {self.stream})"
        fwd += direct_lines(self.runner, self.device, "DF", ptrs, None, fallback)
        return fwd, self.rs[0] if len(self.rs) == 1 else tuple_text(self.rs)

    def adjoint_body(self) -> tuple[list[str], str]:
        """Arguments, results, upstream gradients (outputs' order) -> gradients: the lines and the
        gradients expression."""
        sig, ptrs, values, nparams, env = self.sig, self.ptrs, self.values, self.nparams, self.env
        adj_body = []
        adj = dict.fromkeys(range(nparams), "0")
        # an output the adjoint never reads is not kept (sig.kept): its launch pointer is its upstream
        # gradient's (same shape and dtype; 0 when there is none), never dereferenced
        for j, (idx, _, _, _) in enumerate(sig.outs):
            if j not in sig.kept:
                up = next(k for k, (gidx, _, _) in enumerate(sig.grad_order) if gidx == idx)
                ptrs[idx] = f"q{up}"
                values[idx] = f"(q{up}, None)"
        for j, (idx, _, copy) in enumerate(sig.grad_order):
            # no upstream gradient (an unused output of several): no pointer; a copy when the
            # adjoint may accumulate into it; a strided one packed (Warp reads strided arrays slower)
            if len(sig.outs) > 1:
                adj_body.append(f"    if g{j} is None:")
                adj_body.append(f"        q{j} = 0")
                adj_body.append("    else:")
                ind = "        "
            else:  # one output: Paddle materializes its gradient
                ind = "    "
            if copy:
                adj_body.append(f"{ind}g{j} = g{j}.clone()")
            adj_body.append(f"{ind}if not g{j}.is_contiguous():")
            adj_body.append(f"{ind}    g{j} = g{j}.contiguous()")
            adj_body.append(f"{ind}q{j} = g{j}.data_ptr()")
            adj[idx] = f"q{j}"
        grads = []
        for k, ((pos, idx, _), ga) in enumerate(zip(sig.arrays, sig.grad_allocs)):
            if ga is None:
                grads.append("None")
                continue
            env[f"GA{k}"], env[f"GH{k}"], like = ga
            call = f"GA{k}(a{pos}, *GH{k})" if like else f"GA{k}(*GH{k})"
            adj_body.append(f"    t{k} = {call}  # zero-filled: the adjoint accumulates into it")
            adj[idx] = f"t{k}.data_ptr()"
            grads.append(f"t{k}")
        runner = self.runner
        adj_arrays = {i: adj[i] for i in range(nparams) if self.plan.desc.params[i].is_array or i in runner.ref_idx}
        # the shared launcher's gradients: (pointer, strides) per array, None for a Python number
        adj_tuples = ", ".join(adj_tuple_text(adj[i]) if i in adj_arrays else "None" for i in range(nparams))
        slow = f"go_adj([{', '.join(values[i] for i in range(nparams))}], [{adj_tuples}], {self.stream})"
        adj_body += direct_lines(runner, self.device, "DA", ptrs, adj_arrays, slow)
        return adj_body, grads[0] if len(grads) == 1 else tuple_text(grads)

    def _saved(self) -> tuple[list[str], list[str], list[str]]:
        """``(what the PyLayer saves, the in-place version names, the numbers saved first)``."""
        kept = [self.rs[j] for j in self.sig.kept]
        saved = self.tensors + [f"{r}.detach()" for r in kept]
        # Paddle checks no version of what a PyLayer saves: the node records the in-place version
        # of each tensor it keeps (a detached alias shares its tensor's counter), and its backward
        # refuses one modified in place since (plain Paddle's and torch's rule: the gradient would
        # silently use the new values). Only where the context's fields are set directly
        # (CONTEXT_DIRECT) and no saved-tensor hooks are active: there the backward gets the
        # very tensors the forward saved (a hook may hand back copies, with counters of their own)
        vers = [f"v{k}" for k in range(len(saved))] if CONTEXT_DIRECT else []
        return saved, vers, vers + self.scalars

    def layer_forward(self, fwd: list[str]) -> list[str]:
        """The PyLayer's forward: the forward body inlined, then what the backward needs saved."""
        sig, env, rs, scalars = self.sig, self.env, self.rs, self.scalars
        kept = [rs[j] for j in sig.kept]
        saved, vers, numbers = self._saved()
        env["modified"] = modified_in_place_error
        params = self.plan.desc.params
        env["LABEL"] = self.plan.desc.label
        env["SAVED_NAMES"] = tuple(
            [f"parameter {params[idx].name!r}" for _, idx, _ in sig.arrays]
            + [f"output {params[sig.outs[j][0]].name!r}" for j in sig.kept]
        )
        lines = [f"def layer_forward(ctx, {', '.join(self.args)}):", *fwd]
        lines += [f"    {v} = {t}._inplace_version()" for v, t in zip(vers, self.tensors + kept)]
        if not CONTEXT_DIRECT:  # the context's methods, the numbers its attributes
            if len(rs) > 1:  # an unused output's upstream gradient stays None (no pointer passed)
                lines.append("    ctx.set_materialize_grads(False)")
            lines.append(f"    ctx.save_for_backward({', '.join(saved)})")
            lines += [f"    ctx.{a} = {a}" for a in scalars]
            if sig.nondiff:
                lines.append(f"    ctx.mark_non_differentiable({', '.join(rs[j] for j in sig.nondiff)})")
        else:  # the fields those methods set (_paddle_compat.CONTEXT_DIRECT)
            if len(rs) > 1:
                lines.append("    ctx.materialize_grads = False")
            if numbers:  # the numbers first in the saved tuple, or (saved-tensor hooks) attributes
                lines += [
                    "    try:",
                    f"        ctx.container = {tuple_text(numbers + saved)}",
                    "    except ValueError:",
                ]
                lines += [f"        ctx.container = {tuple_text(saved)}", *(f"        ctx.{a} = {a}" for a in scalars)]
            else:
                lines.append(f"    ctx.container = {tuple_text(saved)}")
            if sig.nondiff:
                lines.append(f"    ctx.non_differentiable = {tuple_text([rs[j] for j in sig.nondiff])}")
        # after the outputs (no gradient: not a tensor), a weak reference to the node's context
        # for the gradient hook the op's call registers (second_backward_guard, adapters/paddle/__init__.py)
        lines.append(f"    return {tuple_text(rs + ['wref(ctx)'])}")
        return lines

    def layer_backward(self, adj_body: list[str], gradients: str) -> list[str]:
        """The PyLayer's backward: what the forward saved restored (refusing a saved tensor modified
        in place since), then the recorded backward under grad mode, else the adjoint body."""
        sig, scalars, args = self.sig, self.scalars, self.args
        kept = [self.rs[j] for j in sig.kept]
        gs = [f"g{j}" for j in range(len(sig.grad_order))]
        saved, vers, numbers = self._saved()
        tensors = self.tensors
        lines = [f"def layer_backward(ctx, {', '.join(gs)}):"]
        unpack = "".join(t + ", " for t in tensors + kept)
        if not CONTEXT_DIRECT:
            lines.append(f"    {unpack}= ctx.saved_tensor()")
            lines += [f"    {a} = ctx.{a}" for a in scalars]
        elif numbers:
            lines += ["    s = ctx.container", f"    if len(s) == {len(numbers) + len(saved)}:"]
            lines += [f"        {''.join(a + ', ' for a in numbers)}{unpack}= s"]
            if vers:
                now = [f"{t}._inplace_version() != {v}" for v, t in zip(vers, tensors + kept)]
                lines += [f"        if {' or '.join(now)}:"]
                lines += [
                    f"            raise modified(LABEL, SAVED_NAMES, {tuple_text(tensors + kept)}, {tuple_text(vers)})"
                ]
            lines += ["    else:", f"        {unpack}= s", *(f"        {a} = ctx.{a}" for a in scalars)]
        else:
            lines.append(f"    {unpack}= ctx.container")
        lines.append("    if grad_enabled():")
        lines.append(f"        return recorded({tuple_text(args)}, {tuple_text(tensors + kept)}, {tuple_text(gs)})")
        # the saved tensors in the layout the adjoint was written for (saved-tensor hooks may hand
        # the backward others: _Signature.same_saved_layout), else the general adjoint over them
        layout = []
        for k, (t, (shape, strides, dtype)) in enumerate(zip(tensors + kept, sig.saved_layout)):
            self.env[f"LS{k}"], self.env[f"LH{k}"], self.env[f"LT{k}"] = strides, shape, dtype
            layout.append(f"{t}.strides == LS{k} and {t}.shape == LH{k} and ({t}.dtype is LT{k} or {t}.dtype == LT{k})")
        if layout:
            lines.append(f"    if not ({' and '.join(layout)}):")
            lines.append(f"        return general({tuple_text(args)}, {tuple_text(tensors + kept)}, {tuple_text(gs)})")
        lines += adj_body
        lines.append(f"    return {gradients}")
        return lines


def modified_in_place_error(label: str, names: tuple, tensors: tuple, versions: tuple) -> RuntimeError:
    """The error of a node's backward whose saved tensor (``names``: ``"parameter 'x'"`` or
    ``"output 'y'"``, in the order of ``tensors``) was modified in place after the call: its
    in-place version is no longer the one the call saw (``versions``)."""
    for name, t, v in zip(names, tensors, versions):
        now = t._inplace_version()
        if now != v:
            return RuntimeError(
                f"op {label!r}, {name}: the tensor was modified in place after the call (its "
                f"in-place version is {now}, the call saw {v}) and the gradient needs the values the call "
                "read; modify a copy (x.clone()) or do the in-place update before the call"
            )
    return RuntimeError(f"op {label!r}: a tensor the gradient needs was modified in place after the call")


def hook_code(desc, env: dict[str, Any], places: bool) -> tuple[Callable, Callable]:
    """``(hook, key_of)`` of one op, written out for its parameters (their number and which are
    arrays are fixed: a remembered signature has a Paddle tensor for each array parameter and a
    Python number for each scalar, anything else takes the full path).

    ``key_of(args)``: what a call's checks depend on, or None: each tensor's shape, dtype (its
    ``id`` where Paddle's dtypes are singletons, else its number: ``DTYPE_KEY``; pybind hashes
    dtypes slowly), place (on a
    Paddle built with devices), ``stop_gradient`` and layout (contiguous, or its strides; False
    for a sparse tensor, whose shape and dtype may be those of a dense one), and each number's
    type. ``hook(args)``: the op's eager hook (``Op.eager_paths``) with that key inlined (no
    loop: each Paddle attribute read costs several times more inside autograd than alone).

    ``env`` holds what the code reads: ``TT`` (tensor types), ``PN`` (number types), ``PK``
    (place key), ``NOT_EAGER``, ``dynamic`` (or ``GV``: ``_paddle_compat.DYNAMIC``), ``grad_enabled``,
    ``signatures`` (a :class:`Remembered`), ``calls``,
    ``general`` (a remembered signature's call through the general node), ``autocast``
    (``compat.autocast_enabled``), ``guard``, ``LABEL``
    (the error of a second ``Tensor.backward`` through a node, which the gradient hook registered
    on its output raises once the node's context is gone: the signature's PyLayer returns a weak
    reference to it after its outputs).
    """
    params = desc.call_params
    n = len(params)
    args = [f"a{i}" for i in range(n)]
    checks = []
    parts = []
    same = []  # the comparison with the last signature used (its fast_entry, F)
    k = 1
    for i, p in enumerate(params):
        a = f"a{i}"
        if p.is_array:
            checks.append(f"type({a}) not in TT")
            place = f"PK({a}), " if places else ""
            dtype = DTYPE_KEY.format(a)
            parts.append(
                f"(tuple({a}.shape), {dtype}, {place}{a}.stop_gradient, "
                f"{a}.is_dense() and ({a}.is_contiguous() or tuple({a}.strides)))"
            )
            same += [SAME_SHAPE.format(a, f"F[{k}]"), SAME_DTYPE.format(a, f"F[{k + 1}]")]
            same.append(f"{a}.stop_gradient is F[{k + 2}]")
            same += [f"{a}.is_dense()", f"{a}.is_contiguous() is F[{k + 3}]"]
            k += 4
            if places:
                same.append(f"PK({a}) == F[{k}]")
                k += 1
        else:
            # a Python number, or (a vector parameter) a tuple of numbers: VK names its types
            checks.append(f"(type({a}) not in PN and VK({a}) is None)")
            parts.append(f"(type({a}) if type({a}) is not tuple else VK({a}))")
            same.append(f"(type({a}) is F[{k}] or (type({a}) is tuple and VK({a}) == F[{k}]))")
            k += 1
    unpack = f"    {''.join(x + ', ' for x in args)}= args" if n else ""
    refuse = " or ".join(checks) if checks else "False"
    key = tuple_text(parts)
    lines = ["def key_of(args):", f"    if len(args) != {n}:", "        return None", unpack]
    lines += [f"    if {refuse}:", "        return None", f"    return {key}"]
    env.setdefault("GV", GLOBAL_VAR)
    env.setdefault("VK", vector_key)
    body = [f"if not ({DYNAMIC}):  # paddle.enable_static(): the full path says what to do instead"]
    body += ["    return NOT_EAGER", f"if len(args) != {n}:", "    return NOT_EAGER", unpack.strip()]
    body += [f"if {refuse}:", "    return NOT_EAGER", "F = signatures.last"]
    # the last signature used, compared field by field (no key built or hashed; is_same_shape
    # makes no shape list), else the key's lookup
    body += [f"if F is not None and {' and '.join(same) if same else 'True'}:", "    sig = F[0]", "else:"]
    body += [f"    sig = signatures.get({key})", "    if sig is None:", "        return NOT_EAGER"]
    body += ["    signatures.last = sig.fast"]
    # a signature with half-precision tensors that paddle.amp.auto_cast casts: the full path casts it
    body += ["if sig.half and autocast():", "    return NOT_EAGER", "calls[0] += 1"]
    body += ["if sig.grad and grad_enabled():", "    layer = sig.layer"]
    body += ["    if layer is None:  # a hand-written backward: the general node"]
    body += ["        return general(sig, args)"]
    if len(desc.output_params) == 1:
        body += ["    out, c = layer(*args)"]
        first = "out"
    else:  # the outputs, then the weak reference
        body += ["    out = layer(*args)", "    c = out[-1]", "    out = out[:-1]"]
        first = "out[0]"
    # second_backward_guard (adapters/paddle/__init__.py) written out: no call to make the hook
    body += ["    def g(grad):", "        if c() is None:", "            raise guard(LABEL)"]
    body += [f"    {first}._register_grad_hook(g)"]
    body += ["    return out", "return sig.forward(*args)"]
    body = [b for b in body if b]
    lines += ["def hook(args):", *("    " + b for b in body)]
    hook, key_of = _compile_fn("\n".join(lines) + "\n", env, ("hook", "key_of"))
    return hook, key_of


_NUMBERS = (float, int, bool)


def vector_key(a: Any) -> str | None:
    """The signature key of a vector parameter given as a tuple of Python numbers (a gravity
    vector ``(0.0, -9.8, 0.0)``): a string naming its components' types (not a tuple: an array's
    key is one, see :func:`fast_entry`); None for anything else (the full path)."""
    global _last_vector
    last = _last_vector
    if a is last[0]:  # (the same tuple as the last call's: a constant, immutable)
        return last[1]
    if type(a) is not tuple or not a or not all(type(c) in _NUMBERS for c in a):
        return None
    key = "tuple:" + ",".join(type(c).__name__ for c in a)
    _last_vector = (a, key)  # (one rebinding: threads read a consistent pair)
    return key


_last_vector: tuple = (object(), None)


class Remembered(dict):
    """An op's remembered signatures by key (``hook_code``'s ``signatures``), and ``last``: the
    :func:`fast_entry` of the one its hook used last (None after any removal)."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        super().__init__()
        self.last = None

    def clear(self) -> None:
        self.last = None
        super().clear()

    def __delitem__(self, key) -> None:
        self.last = None
        super().__delitem__(key)

    def pop(self, *args):
        self.last = None
        return super().pop(*args)

    def popitem(self):
        self.last = None
        return super().popitem()


def fast_entry(key: tuple, sig, places: bool, args) -> tuple:
    """What the hook (``hook_code``) compares a call with to reuse ``sig``, remembered under
    ``key`` from the call ``args``: ``(sig, ...)`` then, per array parameter, its shape
    (``SHAPE_TEMPLATE``), dtype (``dtype_token``), ``stop_gradient``, True where contiguous (else
    None: never the same), place (with ``places``), and per number its type."""
    entry: list = [sig]
    for part, a in zip(key, args):
        if type(part) is tuple:
            shape = part[0]
            stop, layout = part[-2], part[-1]
            entry += [SHAPE_TEMPLATE(shape), dtype_token(a.dtype), stop, True if layout is True else None]
            if places:
                entry.append(part[2])
        else:
            entry.append(part)
    return tuple(entry)
