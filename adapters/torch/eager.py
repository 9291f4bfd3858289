"""Straight-line Python for the torch adapter's calls of one validated signature.

An eager call costs what its Python costs: at n=1024 on a CPU a recorded Warp launch takes
about 4 us, and each loop over parameters, attribute lookup or helper call between the user's
``op(x, y, 2.0)`` and that launch adds a fraction of a microsecond that, inside autograd's
backward, counts several times over. So for each validated signature (an ``_Entry`` of
``adapters/torch/__init__.py``: one plan, one recorded launch, fixed argument kinds and layouts) the
adapter writes the body of the call out, one line per parameter, and compiles it once:

- :func:`entry_functions`: ``forward(a0, ..., stream) -> results`` and ``adjoint(a0, ...,
  r0, ..., g0, ..., n0, ..., stream) -> [gradients]``, the forward and backward operator's
  implementation for that entry.
- :func:`signature_function`: the ``torch.autograd.Function`` of one remembered plain-eager
  signature, whose forward and backward are the same bodies (:func:`_bodies`), inlined, with
  the arguments as positional parameters (no ``*args`` repacking, no per-call loops).

The registered operators and the eager fast path both run those bodies: one implementation of
the semantics, written out per signature. On the CPU a launch fills a launch record of the
calling thread's own field by field and calls the compiled kernel
(``interop._launch.direct_lines``); the code objects are shared between signatures of the same
structure (``interop._codegen``).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from adapters._common import keep_tape
from interop._codegen import adj_tuple_text, compile_functions, tuple_text
from interop._description import IN_OUT
from interop._launch import direct_env, direct_lines
from interop._plan import refuse_overlaps

from .compat import ctx_statements, eager_context_source, legacy_batched_check

#: an expanded-scalar upstream gradient of at most this many elements is not copied (see _bodies)
_READ_EXPANDED_UP_TO = 2048


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _compile_fn(source: str, env: dict[str, Any], names: tuple[str, ...]) -> tuple[Callable, ...]:
    return compile_functions(source, env, names, "<interop torch signature>")


def entry_functions(b, e, kind: str, pointer: Callable) -> tuple[Callable, Callable]:
    """``(forward, adjoint)`` of one entry: the operator implementations, written out.

    Args:
        b: the op's ``_Binding`` (parameters, returned parameters, which gradients to copy).
        e: the ``_Entry`` (plan, array/scalar positions and strides, outputs, launchers).
        kind: ``"functional"`` (in-out values returned as new tensors), ``"mutable"`` (in-out
            tensors updated in place) or ``"backward"`` (only the adjoint is used).
        pointer: the adapter's result-pointer helper (a result's layout may vary per call).

    ``forward(a0, ..., stream) -> results`` and ``adjoint(a0, ..., r0, ..., g0, ..., n0, ...,
    stream) -> gradients``: the bodies of :func:`_bodies`.
    """
    env: dict[str, Any] = {}
    # the "backward" entries are the registered backward operator's: no shared gradient buffer there
    fwd, results, adj, grads = _bodies(b, e, kind, pointer, env, share_zeros=kind != "backward")
    n, k = b.ncall, len(b.returned)
    args = [f"a{i}" for i in range(n)]
    rs = [f"r{j}" for j in range(k)]
    gs = [f"g{j}" for j in range(k)]
    ns = [f"n{i}" for i in range(n)]
    lines = [f"def forward({', '.join(args + ['stream'])}):", *fwd, f"    return {results}"]
    lines += [f"def adjoint({', '.join(args + rs + gs + ns + ['stream'])}):", *adj, f"    return {grads}"]
    forward, adjoint = _compile_fn("\n".join(lines) + "\n", env, ("forward", "adjoint"))
    return forward, adjoint


def _bodies(
    b, e, kind: str, pointer: Callable, env: dict[str, Any], share_zeros: bool = False
) -> tuple[list[str], str, list[str], str]:
    """The forward's and the adjoint's bodies of one entry, as lines (4-space indented) that use
    the names ``a<i>`` (call arguments), ``stream`` and, in the adjoint, ``r<j>`` (results),
    ``g<j>`` (upstream gradients) and ``n<i>`` (which gradients are needed); ``env`` receives
    the globals they read. Returns ``(forward lines, results expression, adjoint lines,
    gradients expression)``.

    ``share_zeros``: gradients of one dtype may be views of one zero-filled buffer (on the
    devices of ``SHARED_ZEROS_ON``). Only where autograd receives them (an autograd.Function's
    backward, the operator's autograd rule run eagerly): the registered backward operator's
    outputs must not alias one another (torch checks it; ``torch.func``'s ``jacrev``, ``jacfwd``,
    ``hessian`` and double backward call that operator).

    On the CPU each launch sets the fields of a launch record of its own (one per ``env``,
    made on first use) line by line and calls the compiled kernel
    (``interop._launch.direct_lines``); on CUDA, or while that record is busy in another
    thread, it calls the plan's shared recorded launch (``go``).
    """
    w = _BodyWriter(b, e, kind, pointer, env)
    fwd_lines, results_expr = w.forward()
    adj_lines, grads = w.adjoint(share_zeros)
    return fwd_lines, results_expr, adj_lines, grads


class _BodyWriter:
    """Writes :func:`_bodies`' lines for one entry: the names, pointers and globals both bodies use
    (set up once), then the forward (:meth:`forward`) and the adjoint (:meth:`adjoint`: upstream
    gradients, gradient buffers, the launch)."""

    def __init__(self, b, e, kind: str, pointer: Callable, env: dict[str, Any]):
        self.b, self.e, self.kind, self.env = b, e, kind, env
        self.nparams = len(b.desc.params)
        self.runner, self.wdev = e.runner, e.wdev
        self.arrays = {idx: (pos, strides) for idx, pos, strides in e.arrays}
        self.scalars = {idx: (pos, conv) for idx, pos, conv in e.scalars}
        self.raw: dict[int, str] = {}  # vector parameters: the call's value, before ptr()'s conversion
        strided = {idx: strides for idx, (pos, strides) in self.arrays.items() if strides is not None}
        # a launch reads a returned parameter from its result tensor, which is contiguous, never from
        # the caller's (perhaps strided) in-out: the functional forward writes a fresh copy (the
        # mutable forward alone writes the caller's tensor), and the adjoint reads the results
        returned = {p.index for p in b.returned}
        fwd_strided = strided if kind == "mutable" else {i: s for i, s in strided.items() if i not in returned}
        adj_strided = {i: s for i, s in strided.items() if i not in returned}
        env.update(
            {
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
        )

        def go_adj(values, adj, stream):
            # the adjoint's record is built on the first backward; from then on the generated code
            # calls it directly (this function replaces itself in the code's globals)
            g = env["go_adj"] = e.launcher(True)
            return g(values, adj, stream)

        env["go_adj"] = go_adj
        direct_env(self.runner, self.wdev, fwd_strided, env, adj_strided)

    def ptr(self, idx: int) -> str:
        """Expression of parameter ``idx``'s data pointer (arrays) or value (scalars)."""
        if idx in self.arrays:
            return f"a{self.arrays[idx][0]}.data_ptr()"
        if idx in self.scalars:
            pos, conv = self.scalars[idx]
            if conv is None:
                return f"a{pos}"
            self.env[f"C{idx}"] = conv
            self.raw[idx] = f"a{pos}"  # (a vector: direct_lines may write a list's floats as they are)
            return f"C{idx}(a{pos})"
        return "0"

    def tup(self, idx: int, p: str) -> str:
        """The (pointer, strides) pair of the shared launcher ``go`` (or the scalar's value)."""
        if idx in self.arrays:
            strides = self.arrays[idx][1]
            if strides is None:
                return f"({p}, None)"
            self.env[f"S{idx}"] = strides
            return f"({p}, S{idx})"
        return p

    def packed(self, pos: int) -> str:
        # *_like keeps a contiguous argument's layout: name the format only for a strided one
        return "" if pos in self.e.contiguous_args else ", memory_format=contiguous"

    def forward(self) -> tuple[list[str], str]:
        """The forward's lines (allocate the results, launch) and its results expression."""
        b, e, env, kind, nparams = self.b, self.e, self.env, self.kind, self.nparams
        like_args = [(pos, shape) for pos, shape in e.like.items()]
        lines: list[str] = []
        ptrs = {idx: self.ptr(idx) for idx in range(nparams)}
        values = {idx: self.tup(idx, ptrs[idx]) for idx in range(nparams)}
        if kind == "mutable" and b.desc.has_in_out:
            # an in-out tensor written in place must not share memory with another argument
            regions = []
            for idx, (pos, _) in self.arrays.items():
                env[f"RP{idx}"], env[f"RS{idx}"] = b.desc.params[idx], e.spans[pos]
                regions.append(f"(RP{idx}, {ptrs[idx]}, RS{idx})")
            env["refuse_overlaps"] = refuse_overlaps
            lines.append(f"    refuse_overlaps(desc, ({', '.join(regions)},))")
        results = []
        for j, (idx, shape, dtype, role, zfill) in enumerate(e.outs):
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
                    alloc = "zeros_like" if zfill else "empty_like"
                    lines.append(f"    r{j} = {alloc}(a{like}{self.packed(like)})")
                else:
                    alloc = "zeros" if zfill else "empty"
                    lines.append(f"    r{j} = {alloc}(shape{j}, dtype=dtype{j}, device=tdev)")
            ptrs[idx] = f"r{j}.data_ptr()"
            values[idx] = f"(r{j}.data_ptr(), None)"
            results.append(f"r{j}")
        fallback = f"go([{', '.join(values[i] for i in range(nparams))}], None, stream)"
        if kind != "backward":
            lines += direct_lines(self.runner, self.wdev, "DF", ptrs, None, fallback, vectors=self.raw)
        else:
            lines.append(f"    {fallback}")
        return lines, (results[0] if len(results) == 1 else tuple_text(results) if results else "None")

    def adjoint(self, share_zeros: bool) -> tuple[list[str], str]:
        """The adjoint's lines (upstream gradients packed or read in place, zero-filled gradient
        buffers, the launch) and its gradients expression."""
        nparams = self.nparams
        lines: list[str] = []
        ptrs = {idx: self.ptr(idx) for idx in range(nparams)}
        values = {idx: self.tup(idx, ptrs[idx]) for idx in range(nparams)}
        general = dict(values)  # results of any layout (the backward operator may be given any)
        adj = dict.fromkeys(range(nparams), "0")
        zero: dict[int, str] = {}  # upstream gradients that may be expanded scalars: their flag
        zstride = dict.fromkeys(range(nparams), "None")  # their strides for the shared launcher
        unread = self.runner.unread_outputs  # outputs Warp's adjoint never reads: their gradient stands in
        for j, (p, clone) in enumerate(zip(self.b.returned, self.b.clone_grads)):
            self.env[f"P{j}"] = p
            self.env[f"CS{j}"] = self.e.contiguous_outer[p.index]
            if p.index in unread:
                ptrs[p.index] = f"q{j}"
                values[p.index] = general[p.index] = f"(q{j}, None)"
            else:
                ptrs[p.index] = f"r{j}.data_ptr()"
                values[p.index] = f"(r{j}.data_ptr(), None)"
                general[p.index] = (
                    f"(r{j}.data_ptr(), None) if r{j}.is_contiguous() else pointer(desc, P{j}, r{j}, CS{j})"
                )
            adj[p.index] = self._upstream_gradient(j, p, clone, lines, zero, zstride)
        grads = self._gradient_buffers(share_zeros, lines, adj)
        lines += self._launch(ptrs, general, adj, zero, zstride)
        return lines, tuple_text(grads)

    def _upstream_gradient(self, j: int, p, clone: bool, lines: list, zero: dict, zstride: dict) -> str:
        """Lines that make upstream gradient ``g<j>`` readable by the adjoint; its pointer's expression."""
        if clone:
            # the adjoint may accumulate into it (the kernel reads this output): a private copy
            lines.append(f"    g{j} = g{j}.clone(memory_format=contiguous)")
            return f"g{j}.data_ptr()"
        # A strided upstream gradient is copied packed: Warp's adjoint reads a strided array
        # slower than a copy costs. Except an expanded scalar (the gradient of .sum()): on the
        # CPU, up to _READ_EXPANDED_UP_TO elements, the direct launch fills the record's packed
        # buffer with its one element (only when it changed; DirectLaunch.packed_buffer), cheaper
        # inside autograd's backward than a torch copy; on CUDA (any size) and in the shared
        # launcher (the CPU's fallback) the adjoint reads it in place with strides 0: no copy
        # kernel, no new memory.
        e = self.e
        shape = e.outs[j][1]
        scalar_dtype = len(e.contiguous_outer[p.index]) == len(shape)  # no vector/matrix inner dims
        if scalar_dtype and 0 < _numel(shape) and (e.cuda or _numel(shape) <= _READ_EXPANDED_UP_TO):
            self.env[f"Z{j}"] = (0,) * len(shape)
            lines.append(f"    if g{j}.is_contiguous():")
            lines.append(f"        z{j} = False")
            lines.append(f"    elif g{j}.stride() == Z{j}:")
            lines.append(f"        z{j} = True")
            lines.append("    else:")
            lines.append(f"        g{j} = g{j}.contiguous()")
            lines.append(f"        z{j} = False")
            zero[p.index] = f"z{j}"
            zstride[p.index] = f"Z{j} if z{j} else None"
        else:
            lines.append(f"    if not g{j}.is_contiguous():")
            lines.append(f"        g{j} = g{j}.contiguous()")
        lines.append(f"    q{j} = g{j}.data_ptr()")
        return f"q{j}"

    def _gradient_buffers(self, share_zeros: bool, lines: list, adj: dict) -> list[str]:
        """Lines that allocate the zero-filled gradient ``t<i>`` of each array argument that needs
        one (views of one buffer where ``share_zeros`` applies); the gradients' expressions."""
        b, e, env, arrays = self.b, self.e, self.env, self.arrays
        shared = _shared_zeros(b, e, arrays) if share_zeros and e.tdev.type in SHARED_ZEROS_ON else None
        if shared is not None:
            # on CUDA every launch costs the host microseconds: gradients of one dtype needed together
            # are views of one zero-filled buffer (one fill instead of one per gradient)
            total, offsets = shared
            env["ZTOTAL"] = total
            first = next(iter(offsets))
            # one split (a C++ call making every piece) rather than a slice and a view per gradient:
            # each tensor-method call costs the host microseconds on CUDA (the GPU run's profile)
            sizes, pos, at = [], {}, 0
            for i, (off, numel, _) in offsets.items():
                if off > at:
                    sizes.append(off - at)  # alignment padding
                pos[i] = len(sizes)
                sizes.append(numel)
                at = off + numel
            if total > at:
                sizes.append(total - at)
            env["ZSIZES"] = tuple(sizes)
            lines.append(f"    if {' and '.join(f'n{i}' for i in offsets)}:")
            lines.append(f"        _p = zeros(ZTOTAL, dtype=a{first}.dtype, device=tdev).split(ZSIZES)")
            for i, (_off, _size, shape) in offsets.items():
                if len(shape) == 1:
                    lines.append(f"        t{i} = _p[{pos[i]}]")
                else:
                    env[f"ZS{i}"] = shape
                    lines.append(f"        t{i} = _p[{pos[i]}].view(ZS{i})")
            lines.append("    else:")
            for i in offsets:
                lines.append(f"        t{i} = zeros_like(a{i}{self.packed(i)}) if n{i} else None")
        grads = []
        for i, p in enumerate(b.call_params):
            if p.index in arrays:  # a Python number has no gradient
                if shared is None or i not in shared[1]:
                    lines.append(f"    t{i} = zeros_like(a{i}{self.packed(i)}) if n{i} else None")
                lines.append(f"    u{i} = t{i}.data_ptr() if n{i} else {adj[p.index]}")
                adj[p.index] = f"u{i}"
                grads.append(f"t{i}")
            else:
                grads.append("None")
        return grads

    def _launch(self, ptrs: dict, general: dict, adj: dict, zero: dict, zstride: dict) -> list[str]:
        """The adjoint launch's lines: the direct launch where the results are contiguous, else the
        shared launcher (``go_adj``)."""
        nparams, runner, wdev = self.nparams, self.runner, self.wdev
        array_adj = {i: adj[i] for i in range(nparams) if i in self.arrays or self.b.desc.params[i].is_array}
        # the shared launcher's gradients: (pointer, strides) per array, None for a Python number
        adj_tuples = ", ".join(adj_tuple_text(adj[i], zstride[i]) if i in array_adj else "None" for i in range(nparams))
        slow = f"go_adj([{', '.join(general[i] for i in range(nparams))}], [{adj_tuples}], stream)"
        read = [f"r{j}" for j, p in enumerate(self.b.returned) if p.index not in runner.unread_outputs]
        if read and runner.can_direct(wdev):
            lines = [f"    if {' and '.join(f'{r}.is_contiguous()' for r in read)}:"]
            lines += direct_lines(
                runner, wdev, "DA", ptrs, array_adj, slow, indent="        ", zero=zero, vectors=self.raw
            )
            lines.append("    else:")
            lines.append(f"        {slow}")
            return lines
        return direct_lines(runner, wdev, "DA", ptrs, array_adj, slow, zero=zero, vectors=self.raw)


#: device types whose gradients of one dtype share one zero-filled buffer (see _bodies); on the CPU a
#: fill costs no launch, and separate buffers keep the CPU gate's numbers (tests add "cpu" to run
#: the shared code where no GPU is)
SHARED_ZEROS_ON = frozenset({"cuda"})
#: offsets of gradients sharing one buffer are rounded up to this many bytes (CUDA's allocation alignment)
_SHARED_ALIGN = 256


def _shared_zeros(b, e, arrays: dict) -> tuple[int, dict[int, tuple[int, int, tuple]]] | None:
    """``(elements, {argument position: (offset, elements, shape)})`` of the gradients that can
    share one zero-filled buffer: the differentiable floating-point tensor arguments, all of one
    dtype, at least two; None otherwise."""
    picked: dict[int, tuple[int, int, tuple]] = {}
    dtype = None
    total = 0
    for i, p in enumerate(b.call_params):
        if p.index not in arrays or not b.differentiable[i] or i not in e.like:
            continue
        shape, dt = e.like[i]
        if not dt.is_floating_point or (dtype is not None and dt != dtype):
            return None
        dtype = dt
        numel = _numel(shape)
        if numel == 0:
            return None
        align = max(1, _SHARED_ALIGN // dt.itemsize)
        total = -(-total // align) * align
        picked[i] = (total, numel, tuple(shape))
        total += numel
    return (total, picked) if len(picked) >= 2 else None


def _saved_layout_terms(e, env: dict[str, Any]) -> str:
    """`` and <checks>``: the saved tensors in the layout, dtype and device the adjoint was written
    for. Saved-tensor hooks may hand the backward others (see ``_Entry.same_saved_layout``), which
    the backward operator takes then."""
    terms = []
    for pos, shape, strides, dtype, device in e.saved_layout:
        env[f"LS{pos}"], env[f"LH{pos}"], env[f"LT{pos}"] = strides, shape, dtype
        terms.append(f" and a{pos}.stride() == LS{pos} and a{pos}.shape == LH{pos} and a{pos}.dtype is LT{pos}")
        terms.append(f" and a{pos}.get_device() == {int(device)}")
    return "".join(terms)


def signature_function(b, sig, name: str, helpers: dict[str, Any]) -> Callable:
    """``apply(*args)`` of the autograd.Function of one remembered plain-eager signature.

    Forward: the entry's forward body (:func:`_bodies`, inlined: each Python call inside
    autograd costs several times what it costs alone); saves the tensor arguments and the
    results with ``save_for_backward`` and keeps the scalar arguments on ``ctx``. Backward: the
    entry's adjoint body when the backward is plain eager work (no grad mode, plain tensors),
    else ``helpers["slow"]``: the backward operator, as the operator's autograd rule calls it.
    A profiler sees the backward under the op's name (``helpers["label"]``). The Function's code
    has launch records of its own (its ``env``), made on first use.
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
    fwd, results, adj, grads = _bodies(b, e, "functional", helpers["pointer"], env, share_zeros=True)
    env.update(adj=e.adjoint, cuda=e.cuda)
    stream = "    stream = stream_of(tdev)" if e.cuda else "    stream = None"
    nondiff = [f"r{j}" for j, p in enumerate(b.returned) if not p.differentiable]
    # the results Warp's adjoint reads are saved (as the operator's setup_context saves them); for
    # the others (Runner.unread_outputs) the upstream gradient stands in, as in the operator's backward
    kept = [f"r{j}" for j, p in enumerate(b.returned) if p.index not in e.runner.unread_outputs]
    standins = [f"    r{j} = g{j}" for j, p in enumerate(b.returned) if p.index in e.runner.unread_outputs]
    if b.desc.kind == "function":
        fwd, adj = keep_tape(e.runner, e.wdev, env, fwd, adj)
    lines = [f"def forward(ctx, {', '.join(args)}):", stream, *fwd]
    lines += ctx_statements(tensors + kept, nondiff)
    for a in scalars:
        lines.append(f"    ctx.{a} = {a}")
    lines.append(f"    return {results}")

    lines.append(f"def backward(ctx, {', '.join(gs)}):")
    if tensors + kept:
        lines.append(f"    {''.join(t + ', ' for t in tensors + kept)}= ctx.saved_tensors")
    lines += standins
    for a in scalars:
        lines.append(f"    {a} = ctx.{a}")
    ws = [f"w{i}" for i in range(n)]
    if ws:
        lines.append(f"    {''.join(w + ', ' for w in ws)}= ctx.needs_input_grad")
    ns = []
    for i, can in enumerate(sig.can):
        ns.append(f"n{i}")
        lines.append(f"    n{i} = w{i}" if can else f"    n{i} = False")
    none = tuple_text(["None"] * n)
    lines.append(f"    if not ({' or '.join(ns)}):")
    lines.append(f"        return {none}")
    call = f"{', '.join(args + rs + gs + ns)}"
    eager, eager_env = eager_context_source()  # inlined: _torch_compat.eager_context, no frame
    env.update(eager_env)
    # (legacy-vmap batched gradients, is_grads_batched=True, have no storage: slow() refuses them)
    env["LB"] = legacy_batched_check()
    plain = " and ".join([f"type({g}) in PLAIN and not LB({g})" for g in gs] + [f"({eager})"])
    plain += _saved_layout_terms(e, env)
    lines.append(f"    if grad_enabled() or not ({plain}):")
    lines.append(f"        it = iter(slow({tuple_text(args)}, {tuple_text(rs)}, {tuple_text(gs)}, [{', '.join(ns)}]))")
    lines.append(f"        return {tuple_text([f'next(it) if n{i} else None' for i in range(n)])}")
    lines.append("    if profiling():")
    lines.append("        with label(qual):")
    lines.append(f"            return adj({call}, {'stream_of(tdev)' if e.cuda else 'None'})")
    lines.append(stream)
    lines += adj
    lines.append(f"    return {grads}")
    forward, backward = _compile_fn("\n".join(lines) + "\n", env, ("forward", "backward"))
    cls = type(name, (torch.autograd.Function,), {"forward": staticmethod(forward), "backward": staticmethod(backward)})
    return helpers["function_apply"](cls)
