"""The eager fast path: plain eager calls of an op skip the dispatcher.

The per-signature forward and adjoint it runs are written out by ``torch/eager.py``; this module
decides when a call may take it, remembers validated signatures, and wraps them in cached
``autograd.Function`` classes with the same ``setup_context`` and backward as the operators'.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

import torch

from interop import _cache
from interop._codegen import compile_functions
from interop._op import NOT_EAGER

from .autocast import would_cast
from .autograd import _backward_call, _make_backward, _make_setup_context, refuse_batched_grads
from .binding import _OVERLOADS, _Binding, _current_stream, _Entry, _pointer
from .compat import (
    PLAIN_TENSOR_TYPES,
    any_wrapped,
    autocast_enabled,
    eager_context_source,
    function_apply,
    profiler_enabled,
    profiler_enabled_c,
    tensors_matcher,
)
from .eager import signature_function

# ---------------------------------------------------------------------------------------
# the eager fast path: plain eager calls skip the dispatcher
# ---------------------------------------------------------------------------------------
# A call that nothing traces or intercepts (adapters.torch.compat.plain_eager) runs the
# operator's own implementation (_Binding.run_forward / run_backward: the same plan, launch
# record and backward code) directly, and, when a gradient is needed, through a cached
# autograd.Function with the same setup_context and backward as register_autograd. The
# registered operator stays the op's identity for everything that traces.
_EAGER_DEVICES = frozenset({"cpu", "cuda"})


def _eager_forward(b: _Binding, mask: tuple, kind: str, sargs: list, args: Sequence[Any], e: _Entry | None = None):
    """The forward with no autograd node, as the operator's implementation runs it."""
    b.eager_calls += 1
    if profiler_enabled():
        with torch.autograd.profiler.record_function(b.qualname(mask, "primary" if kind == b.primary_kind() else kind)):
            res = b.run_forward(mask, kind, sargs, e)
    else:
        res = b.run_forward(mask, kind, sargs, e)
    if kind == "mutable":
        # what the dispatcher does for a mutating operator: autograd sees the in-place update
        torch.autograd.graph.increment_version([args[i] for i in b.inout_pos])
    return res


def _eager_apply(b: _Binding, mask: tuple, sargs: list, e: _Entry | None = None):
    """The forward as an autograd node (the functional variant; in-out copies are the caller's).

    ``e``: the entry of this signature when the caller has it (handed to the Function's
    forward through a thread-local, since apply passes only the operator's arguments)."""
    b.eager_calls += 1
    apply = b.functions.get(("eager", mask))
    if apply is None:
        apply = _eager_function_class(b, mask)
    _pending.entry = e
    if profiler_enabled():
        with torch.autograd.profiler.record_function(b.qualname(mask, "functional" if b.inout_pos else "primary")):
            return apply(*sargs)
    return apply(*sargs)


_pending = threading.local()
_PLAIN_NUMBERS = (float, int, bool)


def _signature(args: Sequence[Any]) -> tuple | None:
    """What a call's validation depends on: each plain tensor's shape, strides, dtype, device (and
    whether it requires grad), and the type of each Python number; None when an argument is
    neither (it takes the full path)."""
    key = []
    try:
        for a in args:
            t = type(a)
            if t in PLAIN_TENSOR_TYPES:
                # is_neg(): a lazily negated view (``z.conj().imag``) takes the full path, which sends it
                # through the operator (torch's dispatcher resolves the view before the kernel reads memory)
                key.append((a.shape, a.stride(), a.dtype, a.device, a.requires_grad, a.is_neg()))
            elif t in _PLAIN_NUMBERS:
                key.append(t)
            elif t is tuple and all(type(c) in _PLAIN_NUMBERS for c in a):
                # a vector parameter as a tuple of numbers (a gravity vector): its length and types
                key.append((tuple, tuple(type(c) for c in a)))
            else:
                return None
    except RuntimeError:  # a tensor with no sizes or strides (nested): the full path names it
        return None
    return tuple(key)


class _Signature:
    """One validated plain-eager call signature of an op: its entry and its autograd.Function."""

    __slots__ = ("e", "tensor_pos", "scalar_pos", "can", "grad", "apply", "match", "half")

    def __init__(self, b: _Binding, args: Sequence[Any]):
        self.e = b.entry(b.base_mask, "functional", args, None, (None,) * len(b.outputs))
        self.tensor_pos = tuple(i for i, a in enumerate(args) if isinstance(a, torch.Tensor))
        self.scalar_pos = tuple(i for i, a in enumerate(args) if not isinstance(a, torch.Tensor))
        # which arguments can have a gradient: differentiable floating-point tensors
        self.can = tuple(
            d and isinstance(a, torch.Tensor) and a.is_floating_point() for d, a in zip(b.differentiable, args)
        )
        self.grad = any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)
        # a hand-written backward runs through the general eager Function (_eager_apply)
        self.apply = None if b.backward_op is not None else signature_function(b, self, f"{b.base}_eager", helpers(b))
        self.match = _matcher(args)
        # half-precision tensors torch.autocast would cast (a generic kernel's bfloat16 call): under
        # autocast the hook leaves such a call to the full path, which casts it
        self.half = b.autocast and would_cast(b, args)


def _matcher(args: Sequence[Any]) -> Any:
    """``match(args) -> bool``: whether a call's arguments have this signature: what
    :func:`_signature` keys them by, compared without building and hashing a key (the hook checks
    the op's last signature so). The tensors are compared in C++ where this torch can
    (``_torch_compat.tensors_matcher``: Python type, dispatch keys, dtype, device, requires_grad,
    sizes, strides), else field by field in straight-line Python; the numbers by type."""
    env: dict[str, Any] = {"PLAIN": PLAIN_TENSOR_TYPES}
    tensors = [i for i, a in enumerate(args) if type(a) in PLAIN_TENSOR_TYPES]
    check = tensors_matcher([args[i] for i in tensors])
    terms = []
    for i, a in enumerate(args):
        if i not in tensors and type(a) is tuple:
            env[f"N{i}"] = tuple(type(c) for c in a)
            terms.append(f"type(a{i}) is tuple and tuple(map(type, a{i})) == N{i}")
        elif i not in tensors:
            env[f"N{i}"] = type(a)
            terms.append(f"type(a{i}) is N{i}")
        elif check is None:
            env[f"S{i}"], env[f"T{i}"], env[f"D{i}"] = a.shape, a.stride(), a.dtype
            terms += [f"type(a{i}) in PLAIN", f"a{i}.dtype is D{i}", f"a{i}.shape == S{i}", f"a{i}.stride() == T{i}"]
            if a.device.type == "cpu":
                terms.append(f"a{i}.is_cpu")
            else:
                env[f"V{i}"] = a.device
                terms.append(f"a{i}.device == V{i}")
            terms += [f"a{i}.requires_grad is {a.requires_grad}", f"not a{i}.is_neg()"]
    if check is not None:
        # a nested tensor never reaches TensorGuards (torch 2.13 aborts the process reading its strides)
        terms += [f"type(a{i}) in PLAIN and not a{i}.is_nested" for i in tensors]
        env["check"] = check
        terms.append(f"check({', '.join(f'a{i}' for i in tensors)})")
    names = "".join(f"a{i}, " for i in range(len(args)))
    if not args:  # an op without call arguments (a generator: every output sized by the op)
        return lambda args: len(args) == 0
    lines = [
        "def match(args):",
        f"    if len(args) != {len(args)}:",
        "        return False",
        f"    {names}= args",
        "    try:",
        f"        return {' and '.join(terms)}",
        "    except (RuntimeError, AttributeError):  # a tensor with no sizes or strides (nested)",
        "        return False",
    ]
    return compile_functions("\n".join(lines) + "\n", env, ("match",), "<interop torch signature match>")[0]


def _remember_signature(b: _Binding, args: Sequence[Any]) -> None:
    """After a validated eager call: later calls with the same signature skip the validation."""
    runs = b.eager_runs
    key = _signature(args)
    if key is None or key in runs or len(runs) >= _cache.FAST_PATHS_PER_OP or not b.returned:
        return
    runs[key] = b.eager_last = _Signature(b, args)


def _eager_hook(b: _Binding):
    """The op's eager hook for torch tensors (interop.Op.eager_paths): ``hook(args)`` runs a
    plain eager call whose signature was validated before (no in-out parameter, no scalar tensor,
    no launch_dims or output_dims), or returns NOT_EAGER.

    Written out once per op, with ``_torch_compat.eager_context`` inlined: its test comes first
    (under Dynamo it folds to "not eager" and no cache below is read, or guarded)."""
    mask = b.base_mask
    eager, env = eager_context_source()
    env.update(
        b=b,
        runs=b.eager_runs,
        mask=mask,
        label=b.qualname(mask, "primary"),
        grad_enabled=torch.is_grad_enabled,
        profiling=profiler_enabled_c(),
        record_function=torch.autograd.profiler.record_function,
        signature=_signature,
        eager_apply=_eager_apply,
        eager_forward=_eager_forward,
        any_wrapped=any_wrapped,
        autocast_enabled=autocast_enabled,
        NOT_EAGER=NOT_EAGER,
    )
    source = f"""def hook(args):
    if not ({eager}):
        return NOT_EAGER
    sig = b.eager_last  # the op's last signature first: most calls repeat it
    if sig is None or not sig.match(args):
        sig = runs.get(signature(args))
        if sig is None:
            return NOT_EAGER
        b.eager_last = sig
    if sig.half and autocast_enabled():
        return NOT_EAGER
    try:
        if sig.grad and grad_enabled():
            apply = sig.apply
            if apply is None:
                return eager_apply(b, mask, args, sig.e)
            b.eager_calls += 1
            if profiling():
                with record_function(label):
                    return apply(*args)
            return apply(*args)
        return eager_forward(b, mask, "functional", args, args, sig.e)
    except RuntimeError:
        if not any_wrapped(args):
            raise
        # a dead torch.func wrapper (no storage: reading its data pointer raised, before any
        # launch): the full path takes the tensor inside it
        return NOT_EAGER
"""
    return compile_functions(source, env, ("hook",), "<interop torch eager hook>")[0]


def _eager_function_class(b: _Binding, mask: tuple):
    """``apply`` of the fast path's autograd.Function: forward runs the functional implementation
    directly, then the same setup_context as ``register_autograd``; same backward.

    The Function is of the classic form (``forward(ctx, ...)``): the form with a separate
    ``setup_context`` costs an ``inspect.signature`` per call, and is only needed by torch.func,
    which never takes this path.
    """
    key = ("eager", mask)
    with b.lock:
        apply = b.functions.get(key)
        if apply is None:
            setup_context = _make_setup_context(b, mask)

            def forward(ctx, *args):
                e = _pending.entry
                if e is None:
                    n = b.ncall
                    ld = args[n] if len(args) > n else None
                    ods = tuple(args[n + 1 + j] if len(args) > n + 1 + j else None for j in range(len(b.outputs)))
                    e = b.entry(mask, "functional", args, ld, ods)
                else:
                    _pending.entry = None
                out = b.run_forward(mask, "functional", args, e)
                setup_context(ctx, args, out)
                ctx.entry = e
                return out

            cls = type(
                f"{b.base}_eager",
                (torch.autograd.Function,),
                {
                    "forward": staticmethod(forward),
                    "backward": staticmethod(_make_backward(b, mask, direct=True)),
                },
            )
            apply = b.functions[key] = function_apply(cls)
    return apply


def helpers(b: _Binding) -> dict[str, Any]:
    """What the generated autograd.Function of a remembered signature calls besides its entry."""
    h = b.__dict__.get("_helpers")
    if h is None:
        mask = b.base_mask
        qual = b.qualname(mask, "backward")
        dims = (None,) * (1 + len(b.outputs))

        def slow(args, results, grads, need):
            # the backward operator, as the operator's own autograd rule calls it
            refuse_batched_grads(b.label, grads)
            if qual not in _OVERLOADS:
                raise RuntimeError(
                    f"op {b.label!r}: this backward (create_graph=True, or a traced backward) needs "
                    "the op's backward operator, which was unregistered when the op was dropped; keep "
                    "the op alive until the backward"
                )
            return _backward_call(b, mask, qual, (*args, *results, *grads, *dims, need))

        h = b._helpers = {
            "slow": slow,
            "qual": qual,
            "grad_enabled": torch.is_grad_enabled,
            "PLAIN": PLAIN_TENSOR_TYPES,
            "profiling": profiler_enabled_c(),
            "pointer": _pointer,
            "label": torch.autograd.profiler.record_function,
            "stream_of": _current_stream,
            "function_apply": function_apply,
        }
    return h
