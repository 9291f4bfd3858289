"""``interop.check_gradients``: an op's reverse mode checked against its forward mode."""

from __future__ import annotations

import importlib
import math
from typing import Any

import numpy as np
import warp as wp

from ._convert import convert
from ._errors import InteropError, UnsupportedError
from ._frameworks import framework_of


class GradientCheckError(InteropError, AssertionError):
    """``check_gradients`` with ``raise_on=``: an input whose reverse and forward modes disagree
    (an ``AssertionError``, so a test suite reports it as a failed check)."""


class GradientReport(dict):
    """The relative disagreement per differentiable input name (a ``dict``); ``how`` says, per name,
    what the reverse mode was compared with (``"forward mode"`` or ``"finite differences"``), or why
    there was nothing to compare (the reverse mode's refusal: the disagreement is then ``inf``)."""

    def __init__(self) -> None:
        super().__init__()
        self.how: dict[str, str] = {}


def check_gradients(op: Any, *args: Any, raise_on: float | None = None, seed: int = 0, **kwargs: Any) -> GradientReport:
    """Compare the op's reverse mode with its forward mode at one point, for every differentiable input.

    For random directions ``t`` (one input at a time) and ``v`` (on every returned array), the
    dot-product identity ``v . (J t) == (J^T v) . t`` holds for a right gradient: ``J t`` comes from
    the op's forward mode (its generated tangent kernel; central finite differences where forward
    mode is refused), ``J^T v`` from the reverse mode of the framework the arrays belong to
    (``torch.autograd``, ``jax.vjp``, ``paddle.grad``; ``wp.Tape`` for Warp, NumPy and CuPy
    arrays). Costs one reverse pass and one forward-mode call per input.

    Args:
        op: an ``interop.Op``.
        *args: the op's call arguments, as for a call (arrays of one framework, scalars).
        raise_on: a tolerance: raise ``GradientCheckError`` naming every input past it.
        seed: seeds the random directions.
        **kwargs: call arguments by name, and ``launch_dims=`` / ``output_dims=``.

    Returns:
        a ``dict`` (with ``.how``: per name, ``"forward mode"``, ``"finite differences"`` or the
        reverse mode's refusal) ``{input name: |a - b| / max(|a|, |b|)}`` with ``a = v . (J t)``
        and ``b = (J^T v) . t`` (0 where both vanish; ``inf`` where the reverse mode is refused, as
        for a kernel in one of Warp's blind spots). Float array inputs are checked; scalars and
        in-out arrays are not. Around 1e-6 (float32) or 1e-14 (float64) for a right gradient
        compared with forward mode; around the square root of that with finite differences.

    Raises:
        AssertionError: (an ``interop.InteropError`` too) with ``raise_on``, naming the inputs
            whose disagreement is past it.

    Example:
        >>> import numpy as np, warp as wp, interop
        >>> @wp.kernel(module="unique")
        ... def cube(x: wp.array(dtype=wp.float64), out: wp.array(dtype=wp.float64)):
        ...     i = wp.tid()
        ...     out[i] = x[i] * x[i] * x[i]
        >>> report = interop.check_gradients(interop.op(cube), np.array([1.0, 2.0]), raise_on=1e-9)
        >>> report["x"] < 1e-9
        True
    """
    desc = op.description
    dims = {k: kwargs.pop(k) for k in ("launch_dims", "output_dims") if k in kwargs}
    if kwargs:
        args = op._bind_keywords(args, kwargs)
    params = desc.call_params
    fw: str = next((f for f in map(framework_of, args) if f is not None), "numpy")
    diff = [k for k, p in enumerate(params) if p.role == "input" and p.is_array and p.differentiable]
    rng = np.random.default_rng(seed)
    results = _tuple(op(*args, **dims))
    ts = {k: _random_like(args[k], fw, rng) for k in diff}
    vs = [_random_like(r, fw, rng) for r in results]
    report = GradientReport()
    try:
        grads = importlib.import_module("adapters._vjp").vjp(
            fw, lambda *a: op(*a, **dims), list(args), diff, [v for _, v in vs]
        )
    except Exception as e:  # noqa: BLE001 (Paddle wraps a backward's error in OSError)
        if not isinstance(e, (UnsupportedError, OSError)):
            raise
        why = str(e)
        at = why.find(f"op {desc.label!r}")  # Paddle's OSError keeps the original message inside its own
        why = why[at:].splitlines()[0] if at >= 0 else why
        for k in diff:
            report[params[k].name] = math.inf
            report.how[params[k].name] = f"reverse mode refused: {why}"
        return _finish(report, desc.label, raise_on)
    for k, g in zip(diff, grads):
        t_np, t = ts[k]
        b = 0.0 if g is None else float(np.dot(_host(g).ravel(), t_np.ravel()))
        a, how = _forward(op, args, dims, diff, k, t, t_np, [v for v, _ in vs], rng)
        report[params[k].name] = abs(a - b) / max(abs(a), abs(b)) if max(abs(a), abs(b)) > 0 else 0.0
        report.how[params[k].name] = how
    return _finish(report, desc.label, raise_on)


def _finish(report: GradientReport, label: str, raise_on: float | None) -> GradientReport:
    if raise_on is not None:
        bad = {n: d for n, d in report.items() if not d <= raise_on}
        if bad:
            detail = "; ".join(f"{n!r}: {d:.3g} ({report.how[n]})" for n, d in bad.items())
            raise GradientCheckError(
                f"op {label!r}: reverse mode disagrees with forward mode past {raise_on:g} for {sorted(bad)}: {detail}"
            )
    return report


def _forward(op, args, dims, diff, k, t, t_np, vs_np, rng) -> tuple[float, str]:
    """``v . (J t)`` for a tangent on input ``k`` alone: forward mode, else finite differences."""
    desc = op.description
    tangents = [None] * len([p for p in desc.call_params if p.differentiable])
    slot = [i for i, p in enumerate(desc.call_params) if p.differentiable].index(k)
    tangents[slot] = t
    try:
        _, touts = op.jvp(*args, tangents=tangents, **dims)
    except UnsupportedError:
        return _finite_differences(op, args, dims, k, t_np, vs_np), "finite differences"
    touts = _tuple(touts)
    return sum(
        float(np.dot(_host(o).ravel(), v.ravel())) for o, v in zip(touts, vs_np) if o is not None
    ), "forward mode"


def _finite_differences(op, args, dims, k, t_np, vs_np) -> float:
    w = convert(args[k], to="warp")
    x = w.numpy().astype(np.float64)
    eps = np.finfo(w.numpy().dtype).eps
    h = math.sqrt(eps) * max(1.0, float(np.abs(x).max())) / max(float(np.abs(t_np).max()), 1e-30)
    fw = framework_of(args[k]) or "numpy"

    def at(step: float) -> tuple:
        moved = list(args)
        moved[k] = _like((x + step * t_np).astype(w.numpy().dtype), w, fw)
        return _tuple(op(*moved, **dims))

    hi, lo = at(h), at(-h)
    return sum(
        float(np.dot((_host(a).astype(np.float64) - _host(b).astype(np.float64)).ravel(), v.ravel())) / (2 * h)
        for a, b, v in zip(hi, lo, vs_np)
    )


def _tuple(r: Any) -> tuple:
    return r if isinstance(r, tuple) else (r,)


def _host(x: Any) -> np.ndarray:
    w = x if isinstance(x, wp.array) else convert(x, to="warp")
    return np.asarray(w.numpy())


def _like(values: np.ndarray, w: wp.array, fw: str) -> Any:
    """``values`` as an array of framework ``fw`` on ``w``'s device with ``w``'s dtype."""
    made: Any = wp.array(values, dtype=w.dtype, shape=w.shape, device=w.device)
    return made if fw == "warp" else convert(made, to=fw, copy=True)


def _random_like(x: Any, fw: str, rng: np.random.Generator) -> tuple[np.ndarray, Any]:
    """A random array shaped as ``x``: (its values on the host, as float64; the array in ``fw``)."""
    w = convert(x, to="warp")
    host = w.numpy()
    values = rng.uniform(-1.0, 1.0, size=host.shape).astype(host.dtype)
    return values.astype(np.float64), _like(values, w, fw)
