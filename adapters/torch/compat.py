"""The PyTorch internals the torch adapter needs (STYLE.md rule 11), in one place, and the supported versions.

Checked against torch 2.11.0, 2.12.1, 2.14.1, 2.15.0 (PyPI's CUDA builds, on the CPU) and 2.13.0
(CPU build); where a version needs its own branch, the branch names the versions it was checked on.

- ``torch._C._are_functorch_transforms_active`` says whether a ``torch.func`` transform
  (grad, vjp, vmap, jacrev...) is being traced. The autograd.Function that
  ``torch.library.custom_op`` generates for ``register_autograd`` has no ``setup_context``
  staticmethod, which ``torch.func`` requires; under those transforms the adapter applies
  an equivalent autograd.Function of its own around the same registered operators.
- The eager fast path (see ``adapters/torch/eager_path.py``) is taken only for plain eager work;
  :func:`plain_eager` decides it from ``torch._C._len_torch_dispatch_stack`` (any
  TorchDispatchMode, FakeTensorMode, proxy/functionalization modes included),
  ``torch._C._is_torch_function_mode_enabled`` (any TorchFunctionMode, ``with
  torch.device(...)`` included), ``torch._C._is_tracing`` (``torch.jit.trace``) and the
  functorch check above, after the public ``torch.compiler.is_compiling()``.
- ``torch.autograd.forward_ad._current_level`` (a module global, -1 when no level is open)
  says whether forward-mode AD is running: ``torch.autograd.forward_ad.dual_level`` and
  ``torch.func.jvp``/``jacfwd``/``hessian`` (which open such a level) alike. The operator
  that ``custom_op`` + ``register_autograd`` makes drops tangents silently (its autograd
  kernel runs the forward without the autograd.Function when no input requires grad), so the
  adapter routes such calls through its own autograd.Function, whose ``jvp`` runs the op's tangent
  op (``adapters/torch/forward_mode.py``). ``torch._C._is_fwd_grad_enabled`` is off while torch
  runs such a ``jvp`` rule (the tangent op's calls inside it take the operator, not the
  Function); Dynamo cannot trace it, so under ``torch.compile`` a forward-mode call leaves the
  graph (:func:`leave_graph`).
- ``torch._C._functorch.get_interpreter_stack`` and ``TransformType`` count the active
  ``torch.func`` transforms by kind: :func:`functorch_jvp_levels` (two forward-mode levels: the
  outer one would get a zero from a jvp rule, refused) and :func:`functorch_grad_levels` (a
  ``vmap`` inside ``grad``/``jacrev`` hides ``requires_grad``).
- ``torch._C._cuda_getCurrentRawStream(index)`` is torch's current CUDA stream on device
  ``index`` as a raw handle (what ``torch.cuda.current_stream(index).cuda_stream`` reads after
  building a ``torch.cuda.Stream`` object per call): :func:`current_raw_stream`, with that public
  spelling where it is missing.
- ``torch._C._autograd._profiler_enabled`` says whether a profiler (``torch.profiler``,
  ``torch.autograd.profiler``) is recording, so the fast path pays for a
  ``record_function`` label only then.
- :func:`function_apply` gives the C ``apply`` of an autograd.Function
  (``torch._C._FunctionBase.apply``), which ``torch.autograd.Function.apply`` calls after
  work that only torch.func needs (unwrapping dead functorch wrappers); the fast path
  never runs under torch.func.
- :func:`unwrap_dead` is ``torch._functorch.utils.unwrap_dead_wrappers``: a tensor a
  ``torch.func`` transform saved for backward is still its wrapper (with no storage) once the
  transform's level has exited, as in the function ``torch.func.vjp`` returns; the dispatcher
  unwraps such "dead" wrappers itself, the fast path (which reads data pointers) must be handed
  the tensors inside.
- :func:`tensors_matcher` is ``torch._C._dynamo.guards.TensorGuards`` (what Dynamo's tensor
  guards were built on): made from example tensors with their sizes and strides given as static
  (``dynamic_dims_sizes``/``dynamic_dims_strides``: one list of ints per tensor), its ``check(*tensors)``
  compares each tensor's Python type, dispatch keys (device type, a lazily negated or conjugated
  view, inference tensors), dtype, device index, ``requires_grad``, sizes and strides in C++:
  the eager fast path's test that a call repeats the op's last signature (about 0.15 us for two
  tensors, against 1 us for the same comparisons in Python). Where it is missing or refuses the
  examples, the fast path compares in Python. Its ``check`` must never see a nested tensor: reading
  one's strides raises in C++ where nothing catches it, and the process aborts (torch 2.13; sparse,
  mkldnn, quantized and jagged tensors are answered False): the caller tests ``is_nested`` first.
- ``FunctionCtx.save_for_backward(*tensors)`` is ``self.to_save = tensors`` and
  ``mark_non_differentiable(*args)`` is ``self.non_differentiable = args`` (``to_save`` and
  ``non_differentiable`` are the C attributes of ``torch._C._FunctionBase`` that ``apply`` reads
  after the forward): :func:`ctx_statements` writes those assignments into generated forwards
  (inside autograd a Python method call costs a couple of microseconds), where a check at import
  finds the methods are still just that; otherwise the generated code calls the methods.
- :func:`direct_autograd_kernel` replaces the Autograd kernel that ``torch.library.custom_op``
  registers for an operator (``torch._library.autograd.make_autograd_impl(cdef._opoverload, cdef)``,
  registered with ``cdef._lib.impl(name, kernel, "Autograd", with_keyset=True)``, as
  ``CustomOpDef._register_autograd_dispatcher_impl`` does) by one that, when no autograd node is
  needed (grad mode off or no input requiring grad: where torch's kernel takes ``forward_no_grad``)
  and the highest key left below Autograd but ``ADInplaceOrView`` is the dense ``CPU``/``CUDA`` kernel
  (every other key ranks above it: no Python key, so no FakeTensor, subclass or dispatch mode; no
  Functionalize, sparse, nested; a Meta or other device's tensor ranks above too), calls the
  implementation directly; every other call goes to torch's own kernel, rebuilt by the same
  function. torch's kernel redispatches below Autograd to ``CustomOpDef``'s backend wrapper
  (``_AutoDispatchBelowAutograd``, a second boxing of every argument, ``torch._disable_dynamo``,
  an aliasing check of the results): about 10 us a call that an operator inside a compiled graph
  (AOTAutograd runs its forward and backward with grad mode off) pays on every call.
  ``torch._C._after_autograd_keyset``, ``DispatchKeySet.highestPriorityTypeId`` and
  ``torch._C._any_requires_grad`` are what torch's kernel reads; the answer for a key set is kept
  by its ``raw_repr()`` (the set's 64 bits).
- :func:`dynamo_never_traces` marks the direct kernel's code object with Dynamo's recursive skip
  (``torch._C._dynamo.eval_frame.set_code_exec_strategy``, ``_FrameExecStrategy``,
  ``_FrameAction.SKIP``; torch 2.11-2.14) in place of ``torch._disable_dynamo``'s Python wrapper.
- :func:`unregister` removes a ``torch.library.custom_op``'s registrations when its op was
  dropped: ``torch._library.custom_ops.OPDEF_TO_LIB`` (qualified name -> the
  ``torch.library.Library`` holding them; ``custom_op`` itself destroys the previous one when a
  name is defined again) and ``Library._destroy`` (what that overwrite calls: the dispatcher
  registrations, fake implementation and ``torch.ops`` cache entry go). ``CustomOpDef._lib`` and
  ``_qualname`` name the library and the operator. ``torch._library.simple_registry.singleton``
  (its ``_data``: qualified name -> the entry holding the fake implementation) keeps an entry per
  name that ``_destroy`` leaves: the adapter removes it too.
"""

from __future__ import annotations

import ctypes
import functools
import inspect
import re
import warnings
import weakref
from typing import Any

import torch
from torch.autograd import forward_ad as _fwad

from interop._errors import UnsupportedError

from .._common import after_import

# ---------------------------------------------------------------------------------------
# Supported torch versions. The floor is pyproject.toml's ``torch`` extra; below it the adapter
# refuses to load (the first torch call raises, naming the version found and the range).
# Verified by the torch tests (nox -s torch_2_11 ... torch_2_15, tests on constraints/ci.txt):
# 2.11.0, 2.12.1, 2.13.0, 2.14.1, 2.15.0. Newer releases are not refused; their tests are not yet run.
# ---------------------------------------------------------------------------------------
TORCH_FLOOR = (2, 11)
TORCH_VERIFIED = ("2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0")


def parse_version(version: str) -> tuple[int, int, int]:
    """``(major, minor, micro)`` of a torch version string ("2.11.0+cu130", "2.12.0a0+git1234", "2.15.0.dev2026")."""
    m = re.match(r"\s*(\d+)\.(\d+)(?:\.(\d+))?", version)
    if m is None:
        raise ValueError(f"not a torch version: {version!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def supported_range() -> str:
    """The supported torch versions, in words."""
    floor = ".".join(map(str, TORCH_FLOOR))
    return f"torch>={floor} (verified on {', '.join(TORCH_VERIFIED)})"


def check_version(version: str) -> None:
    """Raise :class:`~interop.UnsupportedError` when torch ``version`` is below the supported floor.

    A pre-release of the floor (``2.11.0a0+git...``, as NGC containers ship) counts as that release.
    """
    if parse_version(version)[:2] < TORCH_FLOOR:
        floor = ".".join(map(str, TORCH_FLOOR))
        raise UnsupportedError(
            f"warp-interop's PyTorch adapter needs {supported_range()}; this environment has torch {version}. "
            f"Upgrade torch (pip install 'torch>={floor}', the build for your CUDA), or use the ops from "
            "NumPy, JAX, Paddle or Warp arrays without torch"
        )


TORCH_VERSION = parse_version(torch.__version__)
check_version(torch.__version__)  # the adapter imports this module first: its import (first torch call) raises

_C = torch._C
_active = getattr(_C, "_are_functorch_transforms_active", None)
_dispatch_stack_len = getattr(_C, "_len_torch_dispatch_stack", None)
_function_mode_enabled = getattr(_C, "_is_torch_function_mode_enabled", None)
_is_tracing = getattr(_C, "_is_tracing", None)
# forward grad mode: off while torch runs an autograd.Function's jvp (checked on torch 2.11-2.15)
_fwd_grad_enabled = getattr(_C, "_is_fwd_grad_enabled", lambda: True)
_profiler_enabled = getattr(getattr(_C, "_autograd", None), "_profiler_enabled", None)
_is_compiling = torch.compiler.is_compiling
try:
    from torch._C._dynamo.guards import TensorGuards as _TensorGuards
except ImportError:  # pragma: no cover - a torch build without Dynamo: the fast path compares in Python
    _TensorGuards = None  # type: ignore[assignment,misc]

# Tensor types that run the fast path: exactly these, never a subclass (FakeTensor,
# FunctionalTensor, DTensor, ... must reach the registered operator). nn.Parameter is a
# plain tensor with no dispatch or function override of its own.
PLAIN_TENSOR_TYPES = frozenset({torch.Tensor, torch.nn.Parameter})

# without the internals there is no safe way to tell plain eager work: always take the operator
_CAN_TELL = None not in (_active, _dispatch_stack_len, _function_mode_enabled, _is_tracing) and hasattr(
    _fwad, "_current_level"
)


def functorch_transforms_active() -> bool:
    """True inside ``torch.func.grad``/``vjp``/``vmap``/``jacrev``... (False if torch cannot say)."""
    return bool(_active()) if _active is not None else False


def forward_ad_active() -> bool:
    """True while forward-mode AD runs (a ``dual_level``, ``torch.func.jvp``/``jacfwd``/``hessian``) and
    tangents propagate (not inside an autograd.Function's jvp, which torch runs with forward grad off)."""
    # Dynamo cannot trace the forward grad mode (a torch.* call returning a bool): compiling, it is on
    return getattr(_fwad, "_current_level", -1) >= 0 and (_is_compiling() or _fwd_grad_enabled())


# torch.func's stack of transforms (torch._C._functorch.get_interpreter_stack, TransformType.Jvp: checked
# on torch 2.11-2.15): an autograd.Function's jvp runs with forward grad off, so under two forward-mode
# transforms (jacfwd(jacfwd(f))) the outer one's tangent of the jvp's result would be silently zero in
# torch: the jvp then runs its tangent op below the current transform (below_current_jvp)
_functorch_c = getattr(_C, "_functorch", None)
_interpreter_stack = getattr(_functorch_c, "get_interpreter_stack", None)
_JVP_TRANSFORM = getattr(getattr(_functorch_c, "TransformType", None), "Jvp", None)
_GRAD_TRANSFORM = getattr(getattr(_functorch_c, "TransformType", None), "Grad", None)


def _transforms(kind: Any) -> int:
    if _interpreter_stack is None or kind is None:
        return 0
    return sum(1 for ci in _interpreter_stack() or () if ci.key() == kind)


def functorch_jvp_levels() -> int:
    """How many torch.func forward-mode transforms (``jvp``, ``jacfwd``) are active now (0 where torch
    cannot say)."""
    return _transforms(_JVP_TRANSFORM)


def below_current_jvp(fn, args: list, tangents: list) -> list:
    """``fn(args, tangents)`` run from inside an autograd.Function's jvp rule under an outer torch.func
    forward-mode transform (``jacfwd(jacfwd(f))``), so that the outer transforms see it: the tensors
    unwrapped from the current (inner) transform's level, forward grad back on (torch runs a jvp rule
    with it off), the transforms below the current one active (functorch's ``interpreter.lower()``,
    as its own generated autograd.Function runs ``forward``); the results (a list, None kept) wrapped
    back for the current level. torch._functorch internals: checked on torch 2.11-2.15."""
    from torch._C._functorch import _unwrap_for_grad, _wrap_for_grad
    from torch._functorch.pyfunctorch import retrieve_current_functorch_interpreter

    interpreter = retrieve_current_functorch_interpreter()
    level = interpreter.level()

    def unwrap(t: Any) -> Any:
        return _unwrap_for_grad(t, level) if isinstance(t, torch.Tensor) else t

    with _fwad._set_fwd_grad_enabled(True), interpreter.lower():
        outs = fn([unwrap(a) for a in args], [unwrap(t) for t in tangents])
    return [None if o is None else _wrap_for_grad(o, level) for o in outs]


def functorch_grad_levels() -> int:
    """How many torch.func reverse-mode transforms (``grad``, ``vjp``, ``jacrev``) are active now (0 where
    torch cannot say). Under a ``vmap`` inside one, a tensor that the transform tracks says
    ``requires_grad=False``."""
    return _transforms(_GRAD_TRANSFORM)


# ---------------------------------------------------------------------------------------
# Machinery set up when it is imported, never by a plain eager call (DESIGN.md: pay only for
# what is used): Dynamo's markers here, DTensor's strategies in torch/sharding.py
# ---------------------------------------------------------------------------------------
_DYNAMO_MODULE = "torch._dynamo"


def leave_graph(fn, reason: str):
    """``fn`` wrapped with ``torch.compiler.disable``: a call from a traced function is a graph break
    that runs it eagerly (``reason`` in Dynamo's message where this torch takes one: 2.13 and newer).

    ``torch.compiler.disable`` imports Dynamo (seconds): it is applied when Dynamo is imported
    (:func:`after_import`), before anything can trace a call; until then the call runs ``fn``."""
    slot = [fn]

    def install() -> None:
        if TORCH_VERSION >= (2, 13):
            slot[0] = torch.compiler.disable(fn, reason=reason)
        else:
            slot[0] = torch.compiler.disable(fn)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        return slot[0](*args, **kwargs)

    after_import(_DYNAMO_MODULE, install)
    return call


def plain_eager(tensors) -> bool:
    """Whether a call with these arguments is plain eager work that may skip the dispatcher.

    True when nothing traces or intercepts it: not compiling (Dynamo/export), no
    ``torch.func`` transform, no TorchDispatchMode or TorchFunctionMode, not
    ``torch.jit.trace``, and every tensor among ``tensors`` is an ordinary ``torch.Tensor``
    (or ``nn.Parameter``), not a subclass.
    """
    if not eager_context():
        return False
    plain = PLAIN_TENSOR_TYPES
    for a in tensors:
        if isinstance(a, torch.Tensor) and type(a) not in plain:
            return False
    return True


def tls_keys() -> tuple:
    """The thread's dispatch key sets that :func:`tensors_matcher`'s check reads with each tensor's own
    (``torch._C._dispatch_tls_local_include_set``/``exclude_set``, as their raw bits): a matcher made
    under other sets answers False."""
    return (_tls_include().raw_repr(), _tls_exclude().raw_repr())


_tls_include = torch._C._dispatch_tls_local_include_set
_tls_exclude = torch._C._dispatch_tls_local_exclude_set


def tensors_matcher(tensors) -> Any:
    """``check(*tensors) -> bool``: whether tensors match ``tensors`` (the examples) in Python type,
    dispatch keys, dtype, device, requires_grad, sizes and strides, checked in C++; None where this
    torch cannot (see the module's docstring)."""
    if _TensorGuards is None:
        return None
    try:
        guards = _TensorGuards(
            *tensors,
            dynamic_dims_sizes=[[int(s) for s in t.shape] for t in tensors],  # type: ignore[misc]
            dynamic_dims_strides=[[int(s) for s in t.stride()] for t in tensors],  # type: ignore[misc]
        )
        if guards.check(*tensors) is not True:  # not what was checked on: compare in Python
            return None
    except Exception:  # another signature in another torch version
        return None
    return guards.check


def _ctx_methods_are_assignments() -> bool:
    try:
        from torch.autograd.function import FunctionCtx

        fn = getattr(torch.autograd.function, "BackwardCFunction", None)
        if fn is None or not all(hasattr(_C._FunctionBase, a) for a in ("to_save", "non_differentiable")):
            return False
        if fn.save_for_backward is not FunctionCtx.save_for_backward:
            return False
        if fn.mark_non_differentiable is not FunctionCtx.mark_non_differentiable:
            return False
        ctx = FunctionCtx()
        t = torch.empty(0)
        ctx.save_for_backward(t, None)  # type: ignore[arg-type]
        ctx.mark_non_differentiable(t)
        return vars(ctx) == {"to_save": (t, None), "non_differentiable": (t,)}
    except Exception:  # pragma: no cover - another torch: call the methods
        return False


_CTX_ASSIGN = _ctx_methods_are_assignments()


def ctx_statements(save: list[str], non_differentiable: list[str], indent: str = "    ") -> list[str]:
    """The lines of a generated autograd.Function forward that save ``save`` for backward and mark
    ``non_differentiable`` (names of its locals), as ``ctx.save_for_backward`` /
    ``ctx.mark_non_differentiable`` do (assignments where those methods are just that)."""
    lines = []
    if _CTX_ASSIGN:
        lines.append(f"{indent}ctx.to_save = ({''.join(t + ', ' for t in save)})")
        if non_differentiable:
            lines.append(f"{indent}ctx.non_differentiable = ({''.join(t + ', ' for t in non_differentiable)})")
    else:
        lines.append(f"{indent}ctx.save_for_backward({', '.join(save)})")
        if non_differentiable:
            lines.append(f"{indent}ctx.mark_non_differentiable({', '.join(non_differentiable)})")
    return lines


# Whether nothing traces or intercepts calls now, as one expression: the eager hook and the
# generated backward inline it (a call costs several times more inside autograd's backward than
# alone), and eager_context() is the same expression in a function. Compiling comes first: Dynamo
# folds it to True and reads nothing after it. Forward-mode AD: the adapter's autograd.Function
# refuses tangents.
_EAGER_EXPR = (
    "not (_ec_compiling() or _ec_fwad._current_level >= 0 or _ec_dispatch() or _ec_fmode() "
    "or _ec_functorch() or _ec_tracing())"
)
_EAGER_ENV = {
    "_ec_compiling": _is_compiling,
    "_ec_fwad": _fwad,
    "_ec_dispatch": _dispatch_stack_len,
    "_ec_fmode": _function_mode_enabled,
    "_ec_functorch": _active,
    "_ec_tracing": _is_tracing,
}


def eager_context_source() -> tuple[str, dict[str, Any]]:
    """:func:`eager_context` as a Python expression for generated code, with the globals it reads
    ("False" where this torch cannot tell)."""
    if not _CAN_TELL:
        return "False", {}
    return _EAGER_EXPR, dict(_EAGER_ENV)


def _eager_context_function() -> Any:
    expr, env = eager_context_source()
    exec(f"def eager_context():\n    return {expr}\n", env)
    fn = env["eager_context"]
    fn.__doc__ = ":func:`plain_eager` without the tensor types: nothing traces or intercepts calls now."
    return fn


eager_context = _eager_context_function()


#: whether any torch.autocast region is active (any device type): one C call, which Dynamo traces
#: (and guards); autocast_on(device_type) then tells the device
autocast_enabled = getattr(_C, "_is_any_autocast_enabled", None) or (
    lambda: any(torch.is_autocast_enabled(d) for d in ("cpu", "cuda"))
)
_autocast_available = getattr(_C, "_is_autocast_available", None)


def autocast_available(device_type: str) -> bool:
    """Whether torch has autocast for ``device_type`` (this build may still lack the device)."""
    return device_type in ("cpu", "cuda") if _autocast_available is None else bool(_autocast_available(device_type))


def autocast_on(device_type: str) -> bool:
    """Whether autocast is enabled for ``device_type`` (False for a device type without autocast,
    "meta" say, where ``torch.is_autocast_enabled`` raises)."""
    if device_type in ("cpu", "cuda"):
        # every build has these; torch 2.11's Dynamo cannot trace _is_autocast_available
        return torch.is_autocast_enabled(device_type)
    return (
        _autocast_available is not None and _autocast_available(device_type) and torch.is_autocast_enabled(device_type)
    )


def profiler_enabled() -> bool:
    """Whether a torch profiler is recording now."""
    return bool(_profiler_enabled()) if _profiler_enabled is not None else True


def profiler_enabled_c():
    """:func:`profiler_enabled` as the C function itself where torch has it (no Python frame for
    generated code to enter), else :func:`profiler_enabled`."""
    return _profiler_enabled if _profiler_enabled is not None else profiler_enabled


# ---------------------------------------------------------------------------------------
# Dynamo: a function whose result is a constant of the trace, called with an object
# ---------------------------------------------------------------------------------------
# torch.compiler.assume_constant_result runs the function at trace time and stores its result as a
# constant. Its arguments must be constants of the trace:
# - torch 2.12.1, 2.13.0, 2.14.1, 2.15.0: a user-defined object (an interop.Op) is passed as itself, guarded
#   by identity (ID_MATCH).
# - torch 2.11.0: every argument goes through as_python_constant, which a user-defined object
#   lacks (InternalTorchDynamoError: AsPythonConstantNotImplementedError: UserDefinedObjectVariable(Op)
#   is not a constant). Its id() is one, guarded by identity (ID_MATCH) as above: the object travels
#   as its id, and is found again in a weak table that the function's eager calls fill (the torch
#   adapter resolves every op eagerly when it is described or when the adapter loads), else (an
#   object never called eagerly: a wp.vec3 value a compiled first call gets) by its id itself, which
#   names a live object there (see assume_constant_result_of).
_DYNAMO_PASSES_OBJECTS = TORCH_VERSION >= (2, 12)
# the weak table of those objects, one for every such function: filled by their eager calls and by
# remember() (the adapter remembers every op it registers, so a call of a function that an op's
# first call never made eagerly, a per-call block_dim's variant, is found too)
_LIVE: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def remember(obj: Any) -> None:
    """Make ``obj`` findable by its id in a trace on a torch that passes objects as ids (2.11)."""
    if not _DYNAMO_PASSES_OBJECTS:
        _LIVE[id(obj)] = obj


def assume_constant_result_of(fn):
    """``fn(obj, *constants)`` marked with ``torch.compiler.assume_constant_result``, where ``obj`` is any
    object (passed by identity) and the other arguments are constants (str, int, bool, tuples, None).

    ``torch.compiler.assume_constant_result`` imports Dynamo (seconds) and marks the function it is
    given, returning that same function (its documented contract): the mark is made when Dynamo is
    imported (:func:`after_import`), before anything can trace a call."""
    if _DYNAMO_PASSES_OBJECTS:
        after_import(_DYNAMO_MODULE, lambda: torch.compiler.assume_constant_result(fn))
        return fn
    live = _LIVE

    def by_id(key: int, *args):
        obj = live.get(key)
        if obj is None:
            # an object never called eagerly (a Warp value a compiled first call gets). ``key`` is
            # the id of a live object: by_id runs only from wrapper's compiling branch below, at
            # Dynamo's trace time on the id of the value it traces (held by the traced frame and
            # by Dynamo's variable for it while the trace runs), or called by another tracer with
            # wrapper's own argument; the result is a constant of the trace, never computed again
            obj = ctypes.cast(key, ctypes.py_object).value
        return fn(obj, *args)

    by_id.__name__ = by_id.__qualname__ = f"{fn.__name__}_by_id"
    after_import(_DYNAMO_MODULE, lambda: torch.compiler.assume_constant_result(by_id))

    def wrapper(obj, *args):
        if _is_compiling():  # Dynamo folds this to True and traces only this branch
            return by_id(id(obj), *args)
        live[id(obj)] = obj
        return fn(obj, *args)

    return functools.wraps(fn)(wrapper)


def _grad_transforms_at_trace_time() -> bool:
    return functorch_grad_levels() > 0


# run by Dynamo at trace time, its answer a constant of the trace: torch.func's interpreter stack is
# not traceable, but while Dynamo traces a transform (torch.func.grad(f) compiled) it runs the
# transform's levels for real (the traced tensors are GradTrackingTensors), and Dynamo guards a
# compiled frame on the stack of transforms it ran under (checked on torch 2.11, 2.13, 2.14)
after_import(_DYNAMO_MODULE, lambda: torch.compiler.assume_constant_result(_grad_transforms_at_trace_time))


def grad_transforms_traced() -> bool:
    """While Dynamo traces: whether a torch.func reverse-mode transform (``grad``, ``vjp``, ``jacrev``)
    is active around the call (:func:`functorch_grad_levels`, which Dynamo cannot trace itself).
    Always False on torch < 2.13: there the call's graph break inside ``jacrev`` gave a zero
    Jacobian (torch 2.11), where torch's own refusal of the traced operator is the better answer."""
    return TORCH_VERSION >= (2, 13) and _grad_transforms_at_trace_time()


try:
    from torch._library.custom_ops import OPDEF_TO_LIB as _OPDEF_TO_LIB
except ImportError:  # pragma: no cover - another torch version: operators stay registered
    _OPDEF_TO_LIB = None  # type: ignore[assignment]
try:
    from torch._library.simple_registry import singleton as _SIMPLE_REGISTRY
except ImportError:  # pragma: no cover - another torch version: its per-name entries stay
    _SIMPLE_REGISTRY = None  # type: ignore[assignment]


try:
    from torch._library.autograd import make_autograd_impl as _make_autograd_impl

    _AFTER_AUTOGRAD = _C._after_autograd_keyset
    _AD_INPLACE = _C.DispatchKey.ADInplaceOrView
    _DIRECT_BACKENDS = (_C.DispatchKey.CPU, _C.DispatchKey.CUDA)
    _any_requires_grad = _C._any_requires_grad
except (ImportError, AttributeError):  # pragma: no cover - another torch: its own kernel stays
    _make_autograd_impl = None  # type: ignore[assignment]


def _is_direct(keyset) -> bool:
    # the highest key left below Autograd is the dense CPU/CUDA kernel: every other key (Python,
    # Fake, Functionalize, Sparse, Nested, Meta...) ranks above it, a Meta or other device among the
    # tensors too
    return (keyset & _AFTER_AUTOGRAD).remove(_AD_INPLACE).highestPriorityTypeId() in _DIRECT_BACKENDS


# a call's dispatch key set (its raw bits) -> whether the direct kernel may run it: a few sets
# in a process (about 0.2 us a call against 1.3 us for the three set operations)
_direct_keysets: dict[int, bool] = {}


# torch 2.11's Library.impl refuses (RuntimeError) a second Python kernel for a key unless told
# allow_override=True (its default from 2.12 on); every op registration failed there
_OVERRIDE = (
    {"allow_override": True} if "allow_override" in inspect.signature(torch.library.Library.impl).parameters else {}
)


def _autograd_kernel(cdef, make) -> bool:
    """Register for ``cdef`` (a ``CustomOpDef``) the Autograd kernel ``make(torch_kernel, is_mutable)``
    returns (None: none), around torch's own (``torch_kernel``). Returns whether it did."""
    lib, opoverload, name = (
        getattr(cdef, "_lib", None),
        getattr(cdef, "_opoverload", None),
        getattr(cdef, "_name", None),
    )
    if _make_autograd_impl is None or lib is None or opoverload is None or name is None:
        return False
    kernel = make(_make_autograd_impl(opoverload, cdef), opoverload._schema.is_mutable)
    if kernel is None:
        return False
    with warnings.catch_warnings():  # torch warns (once) that a registered kernel is overridden: ours is meant to
        warnings.simplefilter("ignore", UserWarning)
        lib.impl(name, dynamo_never_traces(kernel), "Autograd", with_keyset=True, **_OVERRIDE)
    return True


def refusing_autograd_kernel(cdef, refuse) -> bool:
    """Register for ``cdef`` (a mutating ``CustomOpDef``, which has no autograd) an Autograd kernel
    that calls ``refuse()`` where a tensor argument wants a gradient (torch's own kernel would drop
    it without a word), torch's kernel otherwise. Returns whether it did."""
    grad_enabled = _C.is_grad_enabled

    def make(torch_kernel, mutable):
        def kernel(keyset, *args, **kwargs):
            if grad_enabled() and _any_requires_grad(*args, *kwargs.values()):
                refuse()
            return torch_kernel(keyset, *args, **kwargs)

        return kernel

    return _autograd_kernel(cdef, make)


def direct_autograd_kernel(cdef, impl) -> bool:
    """Register for ``cdef`` (a functional ``CustomOpDef``) an Autograd kernel that runs ``impl``
    directly when no autograd node is needed and nothing but the CPU/CUDA kernel is left to dispatch
    to, torch's own kernel otherwise (see the module's docstring). Returns whether it did."""
    grad_enabled = _C.is_grad_enabled
    direct = _direct_keysets

    def make(torch_kernel, mutable):
        if mutable:  # ADInplaceOrView bumps the version of a mutated tensor
            return None

        def kernel(keyset, *args, **kwargs):
            if not kwargs and not (grad_enabled() and _any_requires_grad(*args)):
                raw = keyset.raw_repr()
                d = direct.get(raw)
                if d is None:
                    d = direct[raw] = _is_direct(keyset)
                if d:
                    return impl(*args)
            return torch_kernel(keyset, *args, **kwargs)

        return kernel

    return _autograd_kernel(cdef, make)


try:
    from torch._C._dynamo.eval_frame import _FrameAction, _FrameExecStrategy, set_code_exec_strategy

    _SKIP_RECURSIVELY: Any = _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP)
except (ImportError, AttributeError):  # pragma: no cover - another torch: torch._disable_dynamo's wrapper
    _SKIP_RECURSIVELY = None


def dynamo_never_traces(fn):
    """``fn``, which the dispatcher calls (an operator's kernel), such that Dynamo never traces it
    nor anything it calls: a kernel runs while Dynamo's frame callback is set wherever an operator is
    called outside a compiled graph inside a compiled function's frame (a graph break, a skipped
    frame), and Dynamo would compile the kernel and every function below it frame by frame.

    ``torch._disable_dynamo``, what ``custom_op``'s own kernels are wrapped in, costs a Python
    wrapper and two callback swaps a call (about 2 us, paid by every operator call inside a compiled
    graph too); instead the kernel's code object gets Dynamo's recursive skip
    (``set_code_exec_strategy(code, FrameExecStrategy(SKIP, SKIP))``, what ``torch._dynamo`` sets for
    the frames it must not enter): checked by Dynamo's frame hook in C, and only while a callback is
    set. The mark is per code object (every closure of a kernel factory shares it) and survives
    ``torch._dynamo.reset()``; checked on torch 2.11-2.14."""
    if _SKIP_RECURSIVELY is None:
        return torch._disable_dynamo(fn)
    set_code_exec_strategy(fn.__code__, _SKIP_RECURSIVELY)
    return fn


def unregister(cdef) -> bool:
    """Remove the registrations of ``cdef`` (a ``CustomOpDef``) from PyTorch, if they are still the
    ones its name points to (an op described again under the same name replaced them). Returns
    whether it did; False where this torch version has no known way (they then stay)."""
    lib, qual = getattr(cdef, "_lib", None), getattr(cdef, "_qualname", None)
    if _OPDEF_TO_LIB is None or lib is None or qual is None or not hasattr(lib, "_destroy"):
        return False
    if _OPDEF_TO_LIB.get(qual) is not lib:
        return False
    del _OPDEF_TO_LIB[qual]
    lib._destroy()  # type: ignore[union-attr]
    # the per-name entry (fake implementation, torch_dispatch rules) that custom_op made in
    # torch._library.simple_registry: _destroy leaves it (a few KiB per dropped operator)
    data = getattr(_SIMPLE_REGISTRY, "_data", None)
    if isinstance(data, dict):
        data.pop(qual, None)
    # torch 2.13 keeps the autograd kernel it generated for the operator after that (a C++
    # reference: about 17 KiB per operator, torch's own), and through it the CustomOpDef: drop what
    # the definition holds of ours (implementation, fake, autograd and vmap rules), so that only
    # torch's part stays
    for field in ("_init_fn", "_abstract_fn", "_setup_context_fn", "_backward_fn", "_vmap_fn"):
        if hasattr(cdef, field):
            setattr(cdef, field, None)
    for field in ("_backend_fns", "_torch_dispatch_fns"):
        if isinstance(getattr(cdef, field, None), dict):
            getattr(cdef, field).clear()
    return True


try:
    from torch._functorch.utils import unwrap_dead_wrappers as _unwrap_dead_wrappers
except ImportError:  # pragma: no cover - an older torch: its saved tensors are never dead wrappers here
    _unwrap_dead_wrappers = None  # type: ignore[assignment]


_is_wrapped = getattr(getattr(_C, "_functorch", None), "is_functorch_wrapped_tensor", None)


_legacy_batched = getattr(getattr(_C, "_functorch", None), "is_legacy_batchedtensor", None)


def legacy_batched_check() -> Any:
    """``check(tensor) -> bool``: whether a tensor is batched by torch's legacy vmap (see
    :func:`any_legacy_batched`; never, where this torch cannot tell)."""
    return _legacy_batched or (lambda t: False)


def any_legacy_batched(tensors) -> bool:
    """Whether a tensor among ``tensors`` is batched by torch's legacy vmap (the upstream gradients
    of ``torch.autograd.grad(..., is_grads_batched=True)``, ``jacobian(vectorize=True)``): no storage,
    so no data pointer. ``torch._C._functorch.is_legacy_batchedtensor`` (2.11-2.15)."""
    if _legacy_batched is None:
        return False
    return any(isinstance(a, torch.Tensor) and _legacy_batched(a) for a in tensors)


def any_wrapped(args) -> bool:
    """Whether a tensor among ``args`` is a torch.func wrapper (outside every transform: a dead one)."""
    if _is_wrapped is None:
        return False
    return any(isinstance(a, torch.Tensor) and _is_wrapped(a) for a in args)


def unwrap_dead(args) -> list:
    """``args`` with every dead torch.func wrapper replaced by the tensor inside it."""
    if _unwrap_dead_wrappers is None:
        return list(args)
    return list(_unwrap_dead_wrappers(tuple(args)))


def function_apply(cls):
    """``cls.apply`` without the torch.func preamble of ``torch.autograd.Function.apply``."""
    base = getattr(_C, "_FunctionBase", None)
    if base is None or not hasattr(base, "apply"):
        return cls.apply
    return super(torch.autograd.Function, cls).apply


# ---------------------------------------------------------------------------------------
# DTensor (adapters/torch/sharding.py): registering an operator's sharding strategy
# ---------------------------------------------------------------------------------------
# Checked against torch 2.11.0, 2.12.1, 2.13.0, 2.14.1, 2.15.0. The public ``torch.distributed.tensor.experimental.register_sharding``
# cannot serve: it takes the first int argument as where the cached static arguments start (ours
# are float/SymInt[]/bool[], so a call with other launch dims or other wanted gradients would reuse
# a stale decision), and it refuses a rule for an operator returning ``Tensor[]`` (the backward)
# with one tensor in it. The internals used:
# - ``DTensor._op_dispatcher.sharding_propagator.register_op_strategy(op, fn, RuntimeSchemaInfo)``
#   (what register_sharding calls), with every non-tensor argument hashed (static_argnum=0);
# - ``torch.distributed.tensor._ops.utils.expand_to_full_mesh_op_strategy``: one-mesh-dimension
#   strategies expanded to the mesh, with redistribution costs (what register_sharding returns);
# - ``sharding_propagator.op_to_scalar_shape_adjuster[op]`` (used by torch for group_norm's N/C/HxW):
#   rewrites global launch/output dims to the shard's when a launch runs per shard. Torch 2.13.0,
#   2.14.1, 2.15.0 have it; 2.11.0 and 2.12.1 do not (nor any other hook that rewrites several
#   non-tensor arguments): there ``rewrites_dims`` is False, and a call whose launch or output dims
#   are fixed (by the description or the call) gets the replicated strategy only (correct: DTensor
#   gathers the shards first);
# - ``OpSchema``, ``OpStrategy``, ``DTensorSpec`` and ``compute_local_shape_and_global_offset``.
_DTENSOR_CHECKED = (2, 11)
_dtensor_api: object = None


class _DTensorInternals:
    def __init__(self):
        from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
        from torch.distributed.tensor._dtensor_spec import DTensorSpec
        from torch.distributed.tensor._op_schema import OpSchema, OpStrategy, RuntimeSchemaInfo
        from torch.distributed.tensor._ops.utils import expand_to_full_mesh_op_strategy
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        self.DTensor = DTensor
        self.propagator = DTensor._op_dispatcher.sharding_propagator
        if not hasattr(self.propagator, "register_op_strategy"):
            raise ImportError("DTensor's sharding propagator has no register_op_strategy")
        # torch 2.13+ (see above); torch 2.11/2.12: none, per-shard launches only where the local arrays size them
        self.rewrites_dims = isinstance(getattr(self.propagator, "op_to_scalar_shape_adjuster", None), dict)
        self._R, self._S, self._P = Replicate, Shard, Partial
        self._spec, self._schema, self._strategy, self._info = DTensorSpec, OpSchema, OpStrategy, RuntimeSchemaInfo
        self._expand = expand_to_full_mesh_op_strategy
        self._local = compute_local_shape_and_global_offset

    def register(self, overload, strategy_fn, adjuster) -> None:
        # static_argnum=0: every non-tensor argument is part of the cached decision's key
        self.propagator.register_op_strategy(overload, strategy_fn, self._info(static_argnum=0))
        if self.rewrites_dims:
            self.propagator.op_to_scalar_shape_adjuster[overload] = adjuster

    def is_strategy(self, x) -> bool:
        return isinstance(x, self._strategy)

    def is_spec(self, x) -> bool:
        return isinstance(x, self._spec)

    def placement(self, token):
        if token is None:
            return None
        if token == "R":
            return self._R()
        if token == "P":
            return self._P()
        return self._S(token[1])

    def current_placements(self, strategy) -> tuple:
        return tuple(strategy.strategies[0].output_spec.placements)

    def local_shape(self, spec) -> tuple:
        shape, _ = self._local(spec.shape, spec.mesh, spec.placements)
        return tuple(shape)

    def schema_with(self, schema, args: tuple):
        return self._schema(schema.op, args, {})

    def expand(self, op_schema, rows: list, nout: int):
        mesh = op_schema.get_mesh_from_args()
        strategy = self._expand(mesh, op_schema, rows, input_index=nout)
        if op_schema.return_type_list_tensor_like():
            # an operator returning Tensor[] gets a tuple of output specs, also for one tensor
            for s in strategy.strategies:
                if isinstance(s.output_specs, self._spec):
                    s.output_specs = (s.output_specs,)
        return strategy


def distributed_available() -> bool:
    """Whether this torch build has ``torch.distributed`` (DTensor can exist)."""
    return torch.distributed.is_available()


def dtensor_internals():
    """The DTensor internals the sharding strategies need, or None where this torch lacks them
    (older than checked, no torch.distributed): DTensor then refuses the operators, naming them."""
    global _dtensor_api
    if _dtensor_api is None:
        api = False
        try:
            if TORCH_VERSION[:2] >= _DTENSOR_CHECKED and torch.distributed.is_available():
                api = _DTensorInternals()
        except Exception:
            api = False
        _dtensor_api = api
    return _dtensor_api or None


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def current_raw_stream(index: int) -> int:
    """Torch's current CUDA stream on device ``index``, as a ``cudaStream_t`` int."""
    if _raw_stream is not None:
        return _raw_stream(index)
    return torch.cuda.current_stream(index).cuda_stream


def register_pytree(cls: type, flatten: Any, unflatten: Any) -> None:
    """Make ``cls`` a node of torch's pytrees (``torch.utils._pytree.register_pytree_node``, the
    registry ``torch.vmap`` and ``torch.compile`` flatten arguments with; checked on 2.13)."""
    from torch.utils import _pytree

    try:
        _pytree.register_pytree_node(cls, flatten, unflatten)
    except ValueError:  # already registered (a reloaded adapter)
        pass
