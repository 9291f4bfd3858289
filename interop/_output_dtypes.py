"""A generic output's dtype rule (``interop.op(..., output_dtypes=...)``): the dtype of a call
parameter (:class:`DtypeOf`, made by :func:`interop.scalar_of`) or a concrete Warp type, checked
when the op is described (:func:`check_output_dtypes`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from . import _dtypes
from ._errors import ArgumentError
from ._options import OUTPUT


@dataclass(frozen=True)
class DtypeOf:
    """The dtype of a generic output: the scalar type a call parameter resolves to in each call
    (``float32`` of a ``vec3f``), with the vec/mat shape ``inner`` (see :func:`interop.scalar_of`).

    Attributes:
        param: the input (or in-out) parameter whose type is read.
        inner: the vec/mat shape of the output's elements (``()``: scalars, or the output's own
            annotation where it is a generic vec/mat).
    """

    param: str
    inner: tuple[int, ...] = ()

    def __repr__(self) -> str:
        return f"scalar_of({self.param!r}" + (f", inner={self.inner}" if self.inner else "") + ")"


def rule_text(rule: Any) -> str:
    """A stable text of an output dtype rule (part of the op's derived name)."""
    return repr(rule) if isinstance(rule, DtypeOf) else _dtypes.type_name(rule)


def check_output_dtypes(value: Any, params: Sequence[Any], opname: str) -> tuple:
    """``output_dtypes`` as sorted ``(output name, rule)`` pairs, each rule checked, or an error."""
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise ArgumentError(
            f"op {opname!r}: output_dtypes must be a dict from output names to interop.scalar_of(...), "
            f"or a Warp type, got {type(value).__name__}"
        )
    by_name = {p.name: p for p in params}
    out = []
    for name, rule in value.items():
        p = by_name.get(name)
        if p is None or p.role != OUTPUT:
            outs = [q.name for q in params if q.role == OUTPUT]
            raise ArgumentError(
                f"op {opname!r}: output_dtypes names {name!r}, which is not an output; outputs are {outs} "
                "(an in-out array has the dtype of the array passed)"
            )
        if not p.generic:
            raise ArgumentError(
                f"op {opname!r}: output_dtypes[{name!r}]: the output is annotated {p.expected_text()}, a "
                "concrete dtype; output_dtypes applies to generic outputs (dtype=typing.Any, wp.Float...)"
            )
        if isinstance(rule, DtypeOf):
            src = by_name.get(rule.param)
            if src is None or src.role == OUTPUT:
                ins = [q.name for q in params if q.role != OUTPUT]
                raise ArgumentError(
                    f"op {opname!r}: output_dtypes[{name!r}] = {rule!r} names {rule.param!r}, which is not an "
                    f"input or in-out parameter; those are {ins}"
                )
            if p.inner and rule.inner and rule.inner != p.inner:
                raise ArgumentError(
                    f"op {opname!r}: output_dtypes[{name!r}] = {rule!r} has inner shape {rule.inner}, but the "
                    f"output is annotated {p.expected_text()}"
                )
        else:
            t = _dtypes.normalize(rule)
            scalar, inner = _dtypes.split(t) if isinstance(t, type) else (None, ())
            if _dtypes.is_generic(t) or (not inner and scalar not in _dtypes._WP_TO_NP):
                raise ArgumentError(
                    f"op {opname!r}: output_dtypes[{name!r}] must be interop.scalar_of(<parameter>), "
                    f"or a concrete Warp scalar, vector or matrix type, got {rule!r}"
                )
            rule = t
        out.append((name, rule))
    return tuple(sorted(out, key=lambda nr: nr[0]))
