"""Straight-line Python for the torch adapter's calls of one validated signature.

An eager call costs what its Python costs: at n=1024 on a CPU a recorded Warp launch takes
about 4 us, and each loop over parameters, attribute lookup or helper call between the user's
``op(x, y, 2.0)`` and that launch adds a fraction of a microsecond that, inside autograd's
backward, counts several times over. So for each validated signature (an ``_Entry`` of
``adapters/torch.py``: one plan, one recorded launch, fixed argument kinds and layouts) the
adapter writes the body of the call out, one line per parameter, and compiles it once:

- :func:`entry_functions`: ``forward(a0, ..., stream) -> results`` and ``adjoint(a0, ...,
  r0, ..., g0, ..., n0, ..., stream) -> [gradients]``, the forward and backward operator's
  implementation for that entry. The registered operators and the eager fast path both call
  them: there is one implementation of the semantics, written out per signature.
- :func:`signature_function`: the ``torch.autograd.Function`` of one remembered plain-eager
  signature, whose forward and backward call the functions above with the arguments as
  positional parameters (no ``*args`` repacking, no per-call loops).

The generated text depends only on the signature's structure (which parameters are arrays,
strided, scalars, outputs); shapes, dtypes and launchers are bound as names, so compiled code
objects are shared between signatures of the same structure (a bounded cache).
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import torch

from interop import _cache
from interop._description import IN_OUT

_CODE: dict[str, Any] = {}  # generated source -> compiled code object
_CODE_LIMIT = 1024
_code_lock = threading.Lock()


def _compile(source: str, env: dict[str, Any], names: tuple[str, ...]) -> tuple[Callable, ...]:
    code = _CODE.get(source)
    if code is None:
        code = compile(source, "<interop torch signature>", "exec")
        with _code_lock:
            _cache.put(_CODE, source, code, _CODE_LIMIT)
    exec(code, env)
    return tuple(env[n] for n in names)


def _tuple(items: list[str]) -> str:
    return "(" + "".join(f"{x}, " for x in items) + ")" if items else "()"


def entry_functions(b, e, kind: str, pointer: Callable) -> tuple[Callable, Callable]:
    """``(forward, adjoint)`` of one entry: the operator implementations, written out.

    Args:
        b: the op's ``_Binding`` (parameters, returned parameters, which gradients to copy).
        e: the ``_Entry`` (plan, array/scalar positions and strides, outputs, launchers).
        kind: ``"functional"`` (in-out values returned as new tensors), ``"mutable"`` (in-out
            tensors updated in place) or ``"backward"`` (only the adjoint is used).
        pointer: the adapter's result-pointer helper (a result's layout may vary per call).
    """
    n = b.ncall
    nparams = len(b.desc.params)
    env: dict[str, Any] = {
        "zeros": torch.zeros,
        "empty": torch.empty,
        "zeros_like": torch.zeros_like,
        "empty_like": torch.empty_like,
        "contiguous": torch.contiguous_format,
        "tdev": e.tdev,
        "pointer": pointer,
        "desc": b.desc,
        "go": e.launcher(False) if kind != "backward" else None,
    }

    def go_adj(values, adj, stream):
        # the adjoint's record is built on the first backward; from then on the generated code
        # calls it directly (this function replaces itself in the code's globals)
        g = env["go_adj"] = e.launcher(True)
        return g(values, adj, stream)

    env["go_adj"] = go_adj
    arrays = {idx: (pos, strides) for idx, pos, strides in e.arrays}
    scalars = {idx: (pos, conv) for idx, pos, conv in e.scalars}
    args = [f"a{i}" for i in range(n)]

    def value(idx: int) -> str:
        if idx in arrays:
            pos, strides = arrays[idx]
            if strides is None:
                return f"(a{pos}.data_ptr(), None)"
            env[f"S{idx}"] = strides
            return f"(a{pos}.data_ptr(), S{idx})"
        if idx in scalars:
            pos, conv = scalars[idx]
            if conv is None:
                return f"a{pos}"
            env[f"C{idx}"] = conv
            return f"C{idx}(a{pos})"
        return "None"

    def packed(pos: int) -> str:
        # *_like keeps a contiguous argument's layout: name the format only for a strided one
        return "" if pos in e.contiguous_args else ", memory_format=contiguous"

    # ---- forward
    like_args = [(pos, shape) for pos, shape in e.like.items()]
    lines = [f"def forward({', '.join(args + ['stream'])}):"]
    values = {idx: value(idx) for idx in range(nparams)}
    results = []
    for j, (idx, shape, dtype, role, zero) in enumerate(e.outs):
        if role == IN_OUT and kind == "mutable":
            continue
        env[f"shape{j}"], env[f"dtype{j}"] = shape, dtype
        if role == IN_OUT:
            # functional twin: the new value starts as a copy of the old one
            pos = b._pos_of_index(idx)
            lines.append(f"    r{j} = empty(shape{j}, dtype=dtype{j}, device=tdev)")
            lines.append(f"    r{j}.copy_(a{pos})")
        else:
            like = next((pos for pos, s in like_args if s == (shape, dtype)), None)
            if like is not None:  # the cheapest allocation: like a tensor argument of this shape and dtype
                alloc = "zeros_like" if zero else "empty_like"
                lines.append(f"    r{j} = {alloc}(a{like}{packed(like)})")
            else:
                alloc = "zeros" if zero else "empty"
                lines.append(f"    r{j} = {alloc}(shape{j}, dtype=dtype{j}, device=tdev)")
        values[idx] = f"(r{j}.data_ptr(), None)"
        results.append(f"r{j}")
    lines.append(f"    go([{', '.join(values[i] for i in range(nparams))}], None, stream)")
    if len(results) == 1:
        lines.append(f"    return {results[0]}")
    elif results:
        lines.append(f"    return {_tuple(results)}")
    else:
        lines.append("    return None")

    # ---- adjoint: arguments, results, upstream gradients, which gradients are needed
    k = len(b.returned)
    rs = [f"r{j}" for j in range(k)]
    gs = [f"g{j}" for j in range(k)]
    ns = [f"n{i}" for i in range(n)]
    lines.append(f"def adjoint({', '.join(args + rs + gs + ns + ['stream'])}):")
    values = {idx: value(idx) for idx in range(nparams)}
    adj = dict.fromkeys(range(nparams), "None")
    for j, (p, clone) in enumerate(zip(b.returned, b.clone_grads)):
        env[f"P{j}"] = p
        env[f"CS{j}"] = e.contiguous_outer[p.index]
        values[p.index] = f"(r{j}.data_ptr(), None) if r{j}.is_contiguous() else pointer(desc, P{j}, r{j}, CS{j})"
        if clone:
            # the adjoint may accumulate into it (the kernel reads this output): a private copy
            lines.append(f"    g{j} = g{j}.clone(memory_format=contiguous)")
            adj[p.index] = f"(g{j}.data_ptr(), None)"
            continue
        # a strided (even stride-0, expanded) upstream gradient is read through its strides by
        # Warp, but 1.5-2.5x slower than a packed copy costs (measured at n=1024 and 1e6)
        lines.append(f"    if not g{j}.is_contiguous():")
        lines.append(f"        g{j} = g{j}.contiguous()")
        lines.append(f"    q{j} = (g{j}.data_ptr(), None)")
        adj[p.index] = f"q{j}"
    grads = []
    for i, p in enumerate(b.call_params):
        if p.index in arrays:  # a Python number has no gradient
            lines.append(f"    t{i} = zeros_like(a{i}{packed(i)}) if n{i} else None")
            adj[p.index] = f"(t{i}.data_ptr(), None) if n{i} else {adj[p.index]}"
            grads.append(f"t{i}")
        else:
            grads.append("None")
    lines.append(
        f"    go_adj([{', '.join(values[i] for i in range(nparams))}], [{', '.join(adj[i] for i in range(nparams))}], stream)"
    )
    lines.append(f"    return {_tuple(grads)}")
    forward, adjoint = _compile("\n".join(lines) + "\n", env, ("forward", "adjoint"))
    return forward, adjoint


def signature_function(b, sig, name: str, helpers: dict[str, Any]) -> Callable:
    """``apply(*args)`` of the autograd.Function of one remembered plain-eager signature.

    Forward: the entry's forward; saves the tensor arguments and the results with
    ``save_for_backward`` and keeps the scalar arguments on ``ctx``. Backward: the entry's
    adjoint when the backward is plain eager work (no grad mode, plain tensors, no profiler),
    else ``helpers["slow"]``: the backward operator, as the operator's autograd rule calls it.
    """
    e = sig.e
    n = b.ncall
    k = len(b.returned)
    args = [f"a{i}" for i in range(n)]
    tensors = [f"a{i}" for i in sig.tensor_pos]
    scalars = [f"a{i}" for i in sig.scalar_pos]
    rs = [f"r{j}" for j in range(k)]
    gs = [f"g{j}" for j in range(k)]
    env: dict[str, Any] = dict(helpers)
    env.update(fwd=e.forward, adj=e.adjoint, cuda=e.cuda, tdev=e.tdev)
    stream = "stream_of(tdev)" if e.cuda else "None"
    nondiff = [f"r{j}" for j, p in enumerate(b.returned) if not p.differentiable]
    lines = [f"def forward(ctx, {', '.join(args)}):"]
    if k == 1:
        lines.append(f"    r0 = fwd({', '.join(args)}, {stream})")
    else:
        lines.append(f"    {', '.join(rs)}, = fwd({', '.join(args)}, {stream})")
    lines.append(f"    ctx.save_for_backward({', '.join(tensors + rs)})")
    for a in scalars:
        lines.append(f"    ctx.{a} = {a}")
    if nondiff:
        lines.append(f"    ctx.mark_non_differentiable({', '.join(nondiff)})")
    lines.append(f"    return {rs[0] if k == 1 else _tuple(rs)}")

    lines.append(f"def backward(ctx, {', '.join(gs)}):")
    lines.append(f"    {''.join(t + ', ' for t in tensors + rs)}= ctx.saved_tensors")
    for a in scalars:
        lines.append(f"    {a} = ctx.{a}")
    ws = [f"w{i}" for i in range(n)]
    lines.append(f"    {''.join(w + ', ' for w in ws)}= ctx.needs_input_grad")
    ns = []
    for i, can in enumerate(sig.can):
        ns.append(f"n{i}")
        lines.append(f"    n{i} = w{i}" if can else f"    n{i} = False")
    none = _tuple(["None"] * n)
    lines.append(f"    if not ({' or '.join(ns)}):")
    lines.append(f"        return {none}")
    call = f"{', '.join(args + rs + gs + ns)}"
    plain = " and ".join([f"type({g}) in PLAIN" for g in gs] + ["eager()"])
    lines.append(f"    if grad_enabled() or not ({plain}):")
    lines.append(f"        it = iter(slow({_tuple(args)}, {_tuple(rs)}, {_tuple(gs)}, [{', '.join(ns)}]))")
    lines.append(f"        return {_tuple([f'next(it) if n{i} else None' for i in range(n)])}")
    lines.append("    if profiling():")
    lines.append("        with label(qual):")
    lines.append(f"            return adj({call}, {stream})")
    lines.append(f"    return adj({call}, {stream})")
    forward, backward = _compile("\n".join(lines) + "\n", env, ("forward", "backward"))
    cls = type(name, (torch.autograd.Function,), {"forward": staticmethod(forward), "backward": staticmethod(backward)})
    return helpers["function_apply"](cls)
