"""The options of ``interop.op`` and of a call that are plain values: launch and output dims,
``vmap_method``, ``checked``: each normalized to the hashable form the description keeps, or a
clear error naming the op and what came. Split out of :mod:`interop._description` (what reads the
kernel), which re-exports these names."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ._errors import ArgumentError

# a parameter's role (interop._description.Param.role)
INPUT = "input"
IN_OUT = "in_out"
OUTPUT = "output"

# JAX batching rules (see adapters/jax/launch.py): "loop" (default, correct for every kernel),
# "sequential" (lax.map), "fold" (opt-in: batch folded into the first launch dim)
VMAP_METHODS = ("loop", "sequential", "fold")


def normalize_dims(value: Any, what: str, opname: str) -> tuple[int, ...]:
    """An int or a sequence of ints as a tuple of non-negative ints, else a clear error."""
    if isinstance(value, bool):
        raise ArgumentError(f"op {opname!r}: {what} must be an int or a tuple of ints, got bool")
    if isinstance(value, int) or (hasattr(value, "__index__") and not hasattr(value, "__len__")):
        dims: tuple[int, ...] = (int(value.__index__() if hasattr(value, "__index__") else value),)
    elif isinstance(value, (tuple, list)):
        try:
            dims = tuple(operator_index(v) for v in value)
        except TypeError:
            raise ArgumentError(f"op {opname!r}: {what} must be an int or a tuple of ints, got {value!r}") from None
    else:
        raise ArgumentError(
            f"op {opname!r}: {what} must be an int or a tuple of ints, got {type(value).__name__} {value!r}"
        )
    if not dims or len(dims) > 4:
        raise ArgumentError(f"op {opname!r}: {what} must have 1 to 4 dimensions, got {dims}")
    if any(d < 0 for d in dims):
        raise ArgumentError(f"op {opname!r}: {what} must be non-negative, got {dims}")
    return dims


def operator_index(v: Any) -> int:
    if isinstance(v, bool):
        raise ArgumentError("bool is not a dimension")
    try:
        return int(v.__index__())
    except AttributeError:
        raise ArgumentError(f"{v!r} is not an integer") from None


def normalize_output_dims(value: Any, outputs: Sequence[Any], opname: str) -> tuple | None:
    if value is None:
        return None
    if isinstance(value, Mapping):
        names = {p.name for p in outputs}
        items = []
        for k, v in value.items():
            if k not in names:
                raise ArgumentError(
                    f"op {opname!r}: output_dims names {k!r}, which is not an output; "
                    f"outputs are {sorted(names) or 'none'} (in-out arrays take the shape of the array passed)"
                )
            items.append((k, normalize_dims(v, f"output_dims[{k!r}]", opname)))
        return ("by_name", tuple(sorted(items)))
    return ("all", normalize_dims(value, "output_dims", opname))


def _check_vmap_method(value: Any, opname: str) -> str | None:
    if value is None:
        return None
    if value not in VMAP_METHODS:
        raise ArgumentError(f"op {opname!r}: vmap_method must be one of {VMAP_METHODS}, got {value!r}")
    return value


def _checked_option(checked: Any, opname: str) -> bool:
    """``checked=`` given, else ``INTEROP_CHECKED`` from the environment, read now (when described)."""
    if checked is None:
        from ._checked import from_environment

        return from_environment()
    if not isinstance(checked, bool):
        raise ArgumentError(f"op {opname!r}: checked must be a bool (or None: INTEROP_CHECKED), got {checked!r}")
    return checked
