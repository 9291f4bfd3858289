"""Gradients for the temporaries of a Python-function op's backward (a ``wp.Tape`` over a replay
of the function).

Warp's tape carries a gradient only through arrays that have one (``requires_grad=True``): an
array the function allocates without it (``tmp = wp.zeros(n, dtype=float, device=d)``), written
by one launch and read by a later one on the path from an input to an output, would silently drop
that part of the gradient. After the replay is recorded and before ``tape.backward()``, every
float array of the recorded launches that is not one of the op's own arrays and has no gradient
is given a zero one (the tape reads ``.grad`` when it runs the adjoints), so the gradient flows
through it as through an array allocated with ``requires_grad=True``. Arrays that are the same
memory with the same layout share one gradient.

Refused, with an :class:`UnsupportedError` naming the op, the kernel and the parameter: such an
array that overlaps another array of the replay without being it (a view of a temporary made
before the temporary had a gradient: their gradients would not alias), or that is not contiguous.
Allocating the temporary with ``requires_grad=True`` (its views then share its gradient) is the
fix the message names. Arrays inside a struct argument and indexed arrays are not looked at (the
documented limit: allocate those with ``requires_grad=True``).
"""

from __future__ import annotations

from typing import Any, Sequence

import warp as wp

from . import _dtypes
from ._errors import UnsupportedError
from ._warp_compat import tape_launch_arrays, tape_launch_values


def _key(a: Any) -> tuple:
    return (a.ptr, tuple(a.shape), tuple(a.strides), a.dtype)


def _span(a: Any) -> tuple[int, int]:
    if a.ptr is None or a.size == 0:
        return (0, 0)
    extent = sum((n - 1) * s for n, s in zip(a.shape, a.strides)) + wp.types.type_size_in_bytes(a.dtype)
    return (a.ptr, a.ptr + extent)


def _is_float(a: Any) -> bool:
    return _dtypes.is_float(_dtypes.split(a.dtype)[0])


def _any_gradless(tape: Any, own_ids: set) -> bool:
    """Whether a launch of ``tape`` takes a float array that is not one of ``own_ids`` and has no
    gradient (written out: this runs on every backward of a Python-function op)."""
    array = wp.array
    for values in tape_launch_values(tape):
        for a in values:
            if id(a) not in own_ids and isinstance(a, array) and a.grad is None and _is_float(a):
                return True
    return False


def give_temporaries_grads(tape: Any, own: Sequence[Any], label: str) -> None:
    """Give every gradless float array of ``tape``'s launches that is not in ``own`` (the op's
    arrays, handed to the function) a zero gradient; see the module docstring.

    Raises:
        UnsupportedError: a gradless temporary overlaps another array of the replay, or is strided.
    """
    own_ids = {id(a) for a in own if isinstance(a, wp.array)}
    if not _any_gradless(tape, own_ids):
        return  # (the common case, checked without naming every parameter)
    launches = tape_launch_arrays(tape)
    needs: list[tuple[Any, str, Any]] = []  # (array, parameter, kernel) of gradless temporaries
    for kernel, arrays in launches:
        for name, a in arrays:
            if a.grad is None and id(a) not in own_ids and _is_float(a):
                needs.append((a, name, kernel))
    if not needs:
        return
    seen: dict[tuple, Any] = {}  # key -> the array first met with that key
    for a in own:
        if isinstance(a, wp.array):
            seen.setdefault(_key(a), a)
    for _, arrays in launches:
        for _, a in arrays:
            seen.setdefault(_key(a), a)
    spans = [(s, e, k, a) for k, a in seen.items() for s, e in [_span(a)] if e > s]
    grads: dict[tuple, Any] = {k: a.grad for k, a in seen.items() if a.grad is not None}
    for a, name, kernel in needs:
        key = _key(a)
        view = _view_of_own_grad(a, own)
        if view is not None:  # a view of the op's own array (x[1:], out[: n - 1]): that part of its gradient
            a.grad = grads[key] = view
            continue
        where = f"op {label!r}: the function's launch of {getattr(kernel, 'key', kernel)!r} passes {name!r}"
        fix = "allocate it with requires_grad=True (its views then share its gradient)"
        if not a.is_contiguous:
            raise UnsupportedError(
                f"{where}, a strided array the function made without a gradient, on the path of the op's "
                f"gradient; {fix}"
            )
        start, end = _span(a)
        for s, e, k, other in spans:
            if k != key and start < e and s < end and not (id(other) in own_ids and other.grad is None):
                raise UnsupportedError(
                    f"{where}, an array the function made without a gradient that overlaps another array of its "
                    f"launches (shape {tuple(other.shape)} there, {tuple(a.shape)} here): their gradients would "
                    f"not alias; {fix}"
                )
        g = grads.get(key)
        if g is None:
            g = grads[key] = wp.zeros(a.shape, dtype=a.dtype, device=a.device)
        a.grad = g


def _view_of_own_grad(a: Any, own: Sequence[Any]) -> Any:
    """The same view of an own array's gradient where ``a`` is a view inside one of the op's own
    arrays (the function sliced its input or output: ``x[1:]``) whose gradient has the array's
    layout, else None."""
    start, end = _span(a)
    if end <= start:
        return None
    for o in own:
        if not isinstance(o, wp.array) or o.grad is None or o.dtype != a.dtype:
            continue
        s, e = _span(o)
        g = o.grad
        if s <= start and end <= e and tuple(g.strides) == tuple(o.strides) and g.dtype == o.dtype:
            return wp.array(
                ptr=g.ptr + (a.ptr - o.ptr), shape=a.shape, strides=a.strides, dtype=a.dtype, device=a.device
            )
    return None
