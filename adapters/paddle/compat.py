"""The Paddle internals the Paddle adapter needs (STYLE.md rule 11), in one place.

Checked against Paddle 3.3.1 (CPU build) and 3.2.0; each private name below is tested at import,
with a public fallback: the eager hook's comparison of a call with the last signature it used
(``SHAPE_TEMPLATE``/``SAME_SHAPE``: the private ``core.eager.Tensor`` constructor and
``Tensor.is_same_shape``; ``SAME_DTYPE``), the PyLayer context's fields (``CONTEXT_DIRECT``) and
the dynamic-mode test (``DYNAMIC``: ``framework.global_var``). ``grad_enabled_c`` gives ``paddle.base.core._has_grad``,
the C function ``paddle.is_grad_enabled`` returns. ``paddle.zeros``/``paddle.empty`` go through
several Python layers (argument decorators, ``fill_constant``) that cost about as much as
a whole Warp launch on small arrays; the adapter allocates outputs and gradients with the
C operators they end in, ``paddle._C_ops.full`` and ``paddle._C_ops.empty`` (falling back to
``paddle.zeros``/``paddle.empty``). Measured per call at n=1024 (process CPU time):
``_C_ops.full`` 2.1 us, ``_C_ops.empty`` 1.8 us, ``paddle.zeros`` 8.5 us, ``paddle.empty_like`` 6.2 us.

A PyLayer node runs once through ``Tensor.backward``/``paddle.autograd.backward``: Paddle
(``GradNodePyLayer::operator()``; 3.2.0 and 3.3.1 checked) drops the node's reference to its
context after its backward whatever ``retain_graph`` says, and a second backward reaching the
node dereferences the null pointer: a segmentation fault, for any PyLayer. ``paddle.grad`` runs
copies of the nodes (each holding the context too) and leaves the original intact (but copying
a released node crashes too: ``paddle.grad`` after a ``Tensor.backward`` through the node,
which no Python code can intercept). The node's gradient hooks run before the dereference, so
the adapter registers one holding a weak reference to the context: nothing else holds the
context, so it is gone exactly when ``Tensor.backward`` has released the node.
"""

from __future__ import annotations

from typing import Any

import paddle

_ops = getattr(paddle, "_C_ops", None)
_full = getattr(_ops, "full", None)
_empty = getattr(_ops, "empty", None)


def zeros(shape: list, dtype, place):
    """A new zero-filled tensor of ``shape`` and ``dtype`` on ``place`` (stop_gradient=True)."""
    if _full is not None:
        return _full(shape, 0.0, dtype, place)
    return paddle.zeros(shape, dtype=dtype, device=place)


def empty(shape: list, dtype, place):
    """A new uninitialized tensor of ``shape`` and ``dtype`` on ``place`` (stop_gradient=True)."""
    if _empty is not None:
        return _empty(shape, dtype, place)
    return paddle.empty(shape, dtype=dtype, device=place)


def allocation(shape: list, dtype, place, zero: bool) -> tuple:
    """``(fn, args)``: ``fn(*args)`` allocates like :func:`zeros` (``zero``) or :func:`empty`, with
    no Python layer in between (for the adapter's remembered call signatures)."""
    if zero:
        return (_full, (shape, 0.0, dtype, place)) if _full is not None else (zeros, (shape, dtype, place))
    return (_empty, (shape, dtype, place)) if _empty is not None else (empty, (shape, dtype, place))


_full_like = getattr(_ops, "full_like", None)
_empty_like = getattr(_ops, "empty_like", None)


def allocation_like(dtype, place, zero: bool) -> tuple | None:
    """``(fn, args)``: ``fn(t, *args)`` allocates like :func:`allocation` a contiguous tensor of
    ``t``'s shape (whatever ``t``'s layout) and ``dtype``: ``_C_ops.full_like``/``empty_like``,
    which read the shape from ``t`` (no list to convert: 0.15 us less than ``full``/``empty``
    per call at n=1024). None where Paddle has no such operator."""
    if zero:
        return (_full_like, (0.0, dtype, place)) if _full_like is not None else None
    return (_empty_like, (dtype, place)) if _empty_like is not None else None


def grad_enabled_c():
    """``paddle.is_grad_enabled`` without its Python frame: the C function it returns
    (``paddle.base.core._has_grad``), for the hook and generated code; else the public one."""
    core = getattr(getattr(paddle, "base", None), "core", None)
    f = getattr(core, "_has_grad", None)
    return f if callable(f) else paddle.is_grad_enabled


def cpu_only() -> bool:
    """Whether this Paddle build has no device but the CPU (no CUDA, XPU or custom device):
    every tensor is then on the CPU and a call signature need not read places."""
    try:
        return not (
            paddle.is_compiled_with_cuda()
            or paddle.is_compiled_with_xpu()
            or paddle.device.get_all_custom_device_type()
        )
    except Exception:  # pragma: no cover - another Paddle version: read places
        return False


def place_key(x) -> str:
    """A cheap, hashable name of a tensor's place ("Place(cpu)", "Place(gpu:0)"...): the private
    ``Tensor._place_str`` (a str; ``Tensor.place`` is a new pybind object per read, slow to hash
    and compare), else ``str(place)``."""
    s = getattr(x, "_place_str", None)
    return s if isinstance(s, str) else str(x.place)


def _dtypes_are_singletons() -> bool:
    a, b = paddle.zeros([1]), paddle.zeros([1])
    return a.dtype is b.dtype


# How a remembered call signature keys a tensor's dtype: ``id(t.dtype)`` where Paddle hands out one
# object per dtype (3.3.1: 140 ns), else the dtype's number (3.2.0 makes a new object on every
# read, whose id is then reused by other dtypes: 410 ns)
_SINGLETONS = _dtypes_are_singletons()
DTYPE_KEY = "id({}.dtype)" if _SINGLETONS else "{}.dtype.value"
# ... and how the eager hook compares a tensor's dtype with the last signature's (dtype_token)
SAME_DTYPE = "{}.dtype is {}" if _SINGLETONS else "{}.dtype.value == {}"


def dtype_token(dtype):
    """What ``SAME_DTYPE`` compares a tensor's dtype with: the dtype itself, or its number."""
    return dtype if _SINGLETONS else dtype.value


def _shape_template_maker():
    """``(make, same)``: ``make(shape)`` a tensor of ``shape`` that holds no memory (the private
    ``core.eager.Tensor`` constructor: dtype, dims, name, type, persistable), and ``same`` the
    generated comparison of a tensor ``{}`` with it: ``Tensor.is_same_shape``, one C call that
    makes no shape list (checked on 3.2.0 and 3.3.1). Elsewhere: the shape as a list, compared
    with ``Tensor.shape``."""
    try:
        core = paddle.base.core
        kind = core.VarDesc.VarType

        def make(shape):
            return core.eager.Tensor(kind.FP32, list(shape), "interop_shape", kind.DENSE_TENSOR, False)

        t = make((2, 3))
        if (
            not t._is_initialized()
            and paddle.ones([2, 3]).is_same_shape(t)
            and not paddle.ones([3, 2]).is_same_shape(t)
            and not paddle.ones([6]).is_same_shape(t)
            and paddle.to_tensor(1.0).is_same_shape(make(()))
        ):
            return make, "{}.is_same_shape({})"
    except Exception:  # pragma: no cover - another Paddle version
        pass
    return list, "{}.shape == {}"  # pragma: no cover


# A remembered call signature's shapes for the eager hook's comparison with the last one used
# (adapters/paddle/eager.py): SHAPE_TEMPLATE(shape) is what SAME_SHAPE.format(tensor, it) compares with
SHAPE_TEMPLATE, SAME_SHAPE = _shape_template_maker()


def _context_fields_direct() -> bool:
    """Whether ``PyLayerContext``'s methods only set or read a field of the C context (3.2.0 and
    3.3.1: ``save_for_backward`` sets ``container``, ``saved_tensor`` returns it,
    ``mark_non_differentiable`` sets ``non_differentiable``, ``set_materialize_grads`` sets
    ``materialize_grads``): generated code then sets and reads the fields itself, one Python
    frame less each (0.1-0.3 us inside autograd)."""
    try:
        from paddle.autograd.py_layer import PyLayerContext
    except ImportError:  # pragma: no cover - another Paddle version
        return False
    fields = {
        "save_for_backward": ("container",),
        "saved_tensor": ("container",),
        "mark_non_differentiable": ("non_differentiable",),
        "set_materialize_grads": ("materialize_grads",),
    }
    for name, names in fields.items():
        code = getattr(getattr(PyLayerContext, name, None), "__code__", None)
        if code is None or code.co_names != names:
            return False  # pragma: no cover - another Paddle version: the methods
    return True


# The PyLayer context of generated code (adapters/paddle/eager.py). With CONTEXT_DIRECT, the
# saved tuple also carries the call's Python numbers when no saved-tensor hooks are active
# (``container`` then stores any object; with hooks it takes tensors only and raises ValueError,
# at the first item: the numbers go first, so no pack hook has run) - instead of attributes of
# the context (its __dict__, made per call: 0.6 us inside autograd)
CONTEXT_DIRECT = _context_fields_direct()


def _dynamic_mode_expr() -> tuple[str, object]:
    """``(expr, GV)``: generated code's test of dynamic (eager) mode, what ``paddle.in_dynamic_mode``
    returns, read without its Python frame: ``GV._dygraph_tracer_ is not None`` with ``GV``
    Paddle's ``framework.global_var`` (3.2.0 and 3.3.1: that is the function's whole code), else
    ``dynamic()``."""
    try:
        from paddle.base import framework

        code = framework.in_dygraph_mode.__code__
        if code.co_names == ("global_var", "_dygraph_tracer_") and paddle.in_dynamic_mode is framework.in_dygraph_mode:
            return "GV._dygraph_tracer_ is not None", framework.global_var
    except (ImportError, AttributeError):  # pragma: no cover - another Paddle version
        pass
    return "dynamic()", None  # pragma: no cover


DYNAMIC, GLOBAL_VAR = _dynamic_mode_expr()


# ---- paddle.amp.auto_cast ------------------------------------------------------------------
# Paddle's own amp_guard (auto_cast) keeps its arguments in a module global, ``_g_amp_state_``, None
# outside any auto_cast (checked: 3.2.0, 3.3.1): one attribute read (about 30 ns) answers "no
# autocast" for a plain call, where paddle.amp.is_autocast_enabled() costs 3-4 us (the tracer's
# ``_amp_level`` property). Inside one, the public function tells whether it took effect (Paddle
# enables it on GPU, XPU and custom places only: on the CPU it warns and stays at level O0).
_AMP_MODULE: Any
try:
    import importlib as _importlib

    _AMP_MODULE = _importlib.import_module("paddle.amp.auto_cast")
    _AMP_MODULE._g_amp_state_  # noqa: B018  (present in this Paddle)
except (ImportError, AttributeError):  # pragma: no cover - another Paddle: the public test per call
    _AMP_MODULE = None


def autocast_enabled() -> bool:
    """Whether a ``paddle.amp.auto_cast`` region is active and in effect (level O1 or O2)."""
    if _AMP_MODULE is not None and _AMP_MODULE._g_amp_state_ is None:
        return False
    return bool(paddle.amp.is_autocast_enabled())


def shares_buffer(a: Any, b: Any) -> bool:
    """Whether Paddle tensors ``a`` and ``b`` are views of one allocation (and so share its in-place
    version: writing one marks the other modified). ``Tensor._is_shared_buffer_with`` (3.2.0, 3.3.1);
    without it, the data pointers' allocation ranges compared."""
    method = getattr(a, "_is_shared_buffer_with", None)
    if method is not None:
        try:
            return bool(method(b))
        except (RuntimeError, ValueError):  # pragma: no cover - another Paddle version
            pass
    lo, lo2 = a.data_ptr(), b.data_ptr()  # pragma: no cover - another Paddle version
    return lo < lo2 + max(b._holder_size(), 1) and lo2 < lo + max(a._holder_size(), 1)  # pragma: no cover
