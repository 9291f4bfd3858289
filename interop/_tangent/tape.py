"""Forward mode of a Python-function op (a function that launches kernels itself): a tangent tape.

The function runs once with its arguments, and each ``wp.launch`` it makes is replaced, in order,
by a launch of that kernel's tangent kernel (:func:`interop._tangent.tangent_kernel`) over the same
arrays and one tangent array per float array: the op's own arrays get the tangents passed in (and
their outputs' tangents are the tangent op's outputs), each array the function makes itself (a
temporary) gets a zero tangent of its own the first time a launch sees it. The tangent launch
writes the kernel's results too, so the function's later launches and Python code read what they
would have read. Launches of the tangent kernels are ordinary launches: a ``wp.Tape`` around the
function (the reverse mode of Python-function ops) records them, and Warp's adjoint of them gives
the second order.

Refused, with an :class:`UnsupportedError` naming the op and what (raised when the launch is met):
a kernel the generator refuses (its error names the builtin and line), an array that is not a plain
``wp.array`` (indexed, fabric), an array that overlaps another the tape already follows without
being it (a view of a temporary: its tangent would not alias), an adjoint or recorded-command
launch, and a tangent with respect to a float scalar parameter (the function hands scalars to its
launches as Python numbers, which the tape cannot follow; a zero tangent is fine). ``wp.copy`` and
``wp.clone`` copy the tangents too (as ``wp.Tape`` records a copy for the reverse mode). Other work
outside ``wp.launch`` (NumPy, host code, a launch function bound before the call) carries no
tangent.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

import warp as wp

from .._errors import UnsupportedError
from .._warp_compat import active_tape

_state = threading.local()  # .tape: the tangent tape of the function this thread runs, or None
_install_lock = threading.Lock()
_original_launch: list[Callable] = []  # wp.launch as Warp defines it, while the wrapper is installed
_original_copy: list[Callable] = []  # wp.copy and wp.clone as Warp defines them, likewise
_installed = [0]  # how many tangent tapes use the wrapper now


def _launch(kernel: Any, dim: Any, inputs: Sequence[Any] = (), outputs: Sequence[Any] = (), *args: Any, **kw: Any):
    """``wp.launch`` while a tangent tape is installed: this thread's tape takes the launch, any other
    thread's goes to Warp."""
    tape = getattr(_state, "tape", None)
    if tape is None or args:
        return _original_launch[0](kernel, dim, inputs, outputs, *args, **kw)
    return tape.launch(kernel, dim, list(inputs), list(outputs), kw)


def _copy(dest: Any, src: Any, *args: Any, **kw: Any) -> Any:
    """``wp.copy`` while a tangent tape is installed: the tangents copied too (this thread's tape)."""
    tape = getattr(_state, "tape", None)
    if tape is None:
        return _original_copy[0](dest, src, *args, **kw)
    return tape.copy(dest, src, *args, **kw)


def _clone(src: Any, *args: Any, **kw: Any) -> Any:
    """``wp.clone`` while a tangent tape is installed: the clone's tangent a clone of the source's."""
    tape = getattr(_state, "tape", None)
    if tape is None:
        return _original_copy[1](src, *args, **kw)
    return tape.clone(src, *args, **kw)


class _Named:
    key = "wp.copy"


class TangentTape:
    """The tangents of the arrays one run of a Python-function op's function touches.

    ``seed(array, tangent)`` before the run; ``with tape: fn(*args)`` runs the function with each
    ``wp.launch`` replaced by its tangent launch."""

    def __init__(self, label: str, tangent_kernel: Callable, float_like: Callable):
        self.label = label
        self.tangent_kernel, self.float_like = tangent_kernel, float_like  # the front's (interop._tangent)
        self._previous: TangentTape | None = None
        self.tangents: dict[tuple, Any] = {}  # array key -> its tangent array
        self.spans: list[tuple[int, int, tuple]] = []  # (start, end, key) of every array followed

    @staticmethod
    def _key(a: Any) -> tuple:
        return (a.ptr, tuple(a.shape), tuple(a.strides), a.dtype)

    def _span(self, a: Any) -> tuple[int, int]:
        if a.ptr is None or a.size == 0:
            return (0, 0)
        extent = sum((n - 1) * s for n, s in zip(a.shape, a.strides)) + wp.types.type_size_in_bytes(a.dtype)
        return (a.ptr, a.ptr + extent)

    def seed(self, array: Any, tangent: Any) -> None:
        key = self._key(array)
        self.tangents[key] = tangent
        start, end = self._span(array)
        if end > start:
            self.spans.append((start, end, key))

    def tangent_of(self, a: Any, name: str, kernel: Any) -> Any:
        """The tangent array of ``a`` (a zero one made for an array met the first time)."""
        if type(a) is not wp.array:
            raise UnsupportedError(
                f"op {self.label!r}: forward mode of a Python-function op: the launch of {kernel.key!r} passes "
                f"{type(a).__name__} {name!r}, which the tangent tape cannot follow (plain wp.array only)"
            )
        key = self._key(a)
        t = self.tangents.get(key)
        if t is not None:
            return t
        start, end = self._span(a)
        for s, e, k in self.spans:
            if start < e and s < end:
                raise UnsupportedError(
                    f"op {self.label!r}: forward mode of a Python-function op: the launch of {kernel.key!r} passes "
                    f"{name!r}, a view overlapping another array the function launched with (shape {k[1]} there, "
                    f"{tuple(a.shape)} here): their tangents would not alias; launch with the same array"
                )
        t = wp.zeros(a.shape, dtype=a.dtype, device=a.device, requires_grad=active_tape() is not None)
        self.seed(a, t)
        return t

    def launch(self, kernel: Any, dim: Any, inputs: list, outputs: list, kw: dict) -> None:
        """The tangent launch of ``wp.launch(kernel, dim, inputs, outputs, **kw)``."""
        refused = [k for k in ("adjoint", "adj_inputs", "adj_outputs", "record_cmd") if kw.get(k)]
        if refused or not isinstance(kernel, wp.Kernel):
            what = f"with {', '.join(refused)}" if refused else f"of a {type(kernel).__name__}"
            raise UnsupportedError(
                f"op {self.label!r}: forward mode of a Python-function op: a launch {what} cannot be replayed "
                "by its tangent kernel"
            )
        values = inputs + outputs
        names = [a.label for a in kernel.adj.args]
        if len(values) != len(names):
            _original_launch[0](kernel, dim, inputs, outputs, **kw)  # Warp's own error
            return
        # every float array carries a tangent (a scalar, a Python number here, is a constant)
        # every float array carries a tangent (indexed and fabric arrays are refused by tangent_of); a
        # scalar, a Python value here, is a constant
        diff = {n: wp.types.is_array(v) and self.float_like(v.dtype) for n, v in zip(names, values)}
        tk = self.tangent_kernel(kernel, diff, self.label)
        tangents = [self.tangent_of(v, n, kernel) for n, v in zip(names, values) if diff[n]]
        outer = self._previous
        if outer is not None:  # a tape around this one (forward over forward): it takes this launch
            outer.launch(tk.kernel, dim, [*values, *tangents], [], kw)
        else:
            _original_launch[0](tk.kernel, dim, [*values, *tangents], [], **kw)

    def _follows(self, *arrays: Any) -> bool:
        return all(type(a) is wp.array and self.float_like(a.dtype) for a in arrays)

    def copy(self, dest: Any, src: Any, *args: Any, **kw: Any) -> Any:
        """``wp.copy(dest, src, ...)``, and the same copy of ``src``'s tangent into ``dest``'s."""
        run = self._previous.copy if self._previous is not None else _original_copy[0]
        out = run(dest, src, *args, **kw)
        if self._follows(dest, src):
            run(self.tangent_of(dest, "dest", _Named), self.tangent_of(src, "src", _Named), *args, **kw)
        return out

    def clone(self, src: Any, *args: Any, **kw: Any) -> Any:
        """``wp.clone(src, ...)``, its tangent a clone of ``src``'s."""
        run = self._previous.clone if self._previous is not None else _original_copy[1]
        out = run(src, *args, **kw)
        if self._follows(src, out):
            self.seed(out, run(self.tangent_of(src, "src", _Named), *args, **kw))
        return out

    def __enter__(self) -> TangentTape:
        with _install_lock:
            if _installed[0] == 0:
                _original_launch[:] = [wp.launch]
                _original_copy[:] = [wp.copy, wp.clone]
                wp.launch, wp.copy, wp.clone = _launch, _copy, _clone
            _installed[0] += 1
        self._previous = getattr(_state, "tape", None)
        _state.tape = self
        return self

    def __exit__(self, *exc: Any) -> None:
        _state.tape = self._previous
        with _install_lock:
            _installed[0] -= 1
            if _installed[0] == 0:
                if wp.launch is _launch:
                    wp.launch = _original_launch[0]
                if wp.copy is _copy:
                    wp.copy, wp.clone = _original_copy
                _original_launch.clear()
                _original_copy.clear()


def function_tangent(desc: Any, names: dict[str, str], tangent_kernel: Callable, float_like: Callable) -> Callable:
    """The tangent function of a Python-function op: takes the op's parameters, then one tangent per
    differentiable parameter (named by ``names``), and runs the op's function on a tangent tape (the
    tangent op's function: an annotated Python function, described as an op like the original).
    ``tangent_kernel``, ``float_like``: the front's (:mod:`interop._tangent`)."""
    fn, label = desc.fn, desc.label
    params = list(desc.params)
    diff = [p for p in params if p.differentiable]

    def run(primal: tuple, tangents: tuple) -> None:
        tape = TangentTape(label, tangent_kernel, float_like)
        for p, a, t in zip(diff, [primal[p.index] for p in diff], tangents):
            if p.is_array:
                tape.seed(a, t)
            elif _nonzero(t):
                raise UnsupportedError(
                    f"op {label!r}: forward mode of a Python-function op: a tangent with respect to the scalar "
                    f"parameter {p.name!r} (the function hands it to its launches as a Python number, which the "
                    "tangent tape cannot follow); pass it as a 1-element array parameter instead, or a zero tangent"
                )
        with tape:
            fn(*primal)

    all_names = [p.name for p in params] + [names[p.name] for p in diff]
    fname = f"{getattr(fn, '__name__', 'function')}__tangent"
    text = (
        f"def {fname}({', '.join(all_names)}):\n"
        f"    _run(({''.join(n + ', ' for n in all_names[: len(params)])}), "
        f"({''.join(n + ', ' for n in all_names[len(params) :])}))\n"
    )
    ns: dict[str, Any] = {"_run": run}
    exec(compile(text, f"<interop tangent of {label}>", "exec"), ns)  # noqa: S102 (names from the description)
    f = ns[fname]
    f.__annotations__ = {p.name: p.annotation for p in params}
    f.__annotations__.update({names[p.name]: p.annotation for p in diff})
    f.__module__ = getattr(fn, "__module__", __name__)
    f.__qualname__ = f"{getattr(fn, '__qualname__', fname)}__tangent"
    return f


def _nonzero(t: Any) -> bool:
    try:
        return any(float(c) != 0.0 for c in (t if hasattr(t, "__len__") else (t,)))
    except TypeError:
        return True
