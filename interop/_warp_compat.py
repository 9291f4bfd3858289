"""The Warp internals the op description needs (STYLE.md rule 11), in one place.

Checked on warp-lang 1.19.0. What it wraps:

- ``warp._src.types.is_array``: is an annotation any Warp array type (plain, indexed,
  fabric), in either spelling: a ``wp.array(dtype=...)`` instance or one of the 1.19
  subscript annotations (``wp.array[float]``, ``wp.array2d[float]``, and the annotations of
  overload instances made by ``wp.overload`` / ``Kernel.add_overload``), which are
  ``warp._src.types._ArrayAnnotation`` objects rather than ``wp.array`` instances.
- ``warp._src.types.matches_array_class`` / ``_ArrayAnnotationBase._concrete_cls``: which
  array class an annotation stands for, so plain arrays are told from indexed/fabric ones
  whatever the spelling.
- ``warp._src.codegen.Struct``: the type of a ``@wp.struct`` (refused with a clear error).
"""

from __future__ import annotations

from typing import Any

import warp as wp
from warp._src import codegen as _wpc
from warp._src import types as _wpt

__all__ = ["array_class_name", "is_array_annotation", "is_plain_array_annotation", "is_struct"]


def is_array_annotation(ann: Any) -> bool:
    """True for any Warp array annotation (plain, indexed or fabric; either spelling)."""
    return bool(_wpt.is_array(ann))


def is_plain_array_annotation(ann: Any) -> bool:
    """True for a plain ``wp.array`` annotation: ``wp.array(dtype=...)`` or ``wp.array[...]``/``wp.arrayNd[...]``."""
    return bool(_wpt.matches_array_class(ann, wp.array))


def array_class_name(ann: Any) -> str:
    """The user-facing name of the array class an annotation stands for (``indexedarray``, ``fabricarray``...)."""
    cls = getattr(ann, "_concrete_cls", None) or type(ann)
    return cls.__name__


def is_struct(t: Any) -> bool:
    """True for a ``@wp.struct`` type."""
    return isinstance(t, _wpc.Struct)
