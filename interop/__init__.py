"""warp-interop: describe a Warp kernel once, call it from NumPy, Warp, PyTorch, JAX, Paddle and CuPy.

Public names:

- :func:`op` describes a ``wp.kernel`` (or an annotated Python function) as an :class:`Op`;
- :class:`Op` is called with any framework's arrays and returns that framework's arrays;
- :func:`indexed` passes a view of an array through index arrays to a ``wp.indexedarray`` parameter;
- :func:`convert` exchanges an array between frameworks without copying;
- :func:`scalar_of` says which dtype a generic output takes;
- :func:`check_gradients` checks an op's reverse mode against its forward mode;
- :func:`backward` hands over a hand-written backward kernel in its author's parameter order;
- :func:`precompile` builds ops' Warp modules into a folder a library ships, and
  :func:`use_precompiled` loads them from there at first use (:class:`PrecompiledWarning` says
  when one cannot be used and is compiled instead).

Importing this package imports Warp and NumPy only; each framework adapter is loaded
the first time one of its arrays is seen.
"""

from ._backward import backward
from ._check_gradients import check_gradients
from ._convert import convert
from ._description import OpDescription, Param
from ._errors import ArgumentError, BoundsError, InteropError, UnsupportedError
from ._indexed import indexed
from ._op import Op, op, scalar_of
from ._precompile import precompile
from ._precompiled import PrecompiledWarning, use_precompiled

__all__ = [
    "op",
    "Op",
    "convert",
    "indexed",
    "backward",
    "scalar_of",
    "precompile",
    "use_precompiled",
    "PrecompiledWarning",
    "OpDescription",
    "Param",
    "InteropError",
    "ArgumentError",
    "UnsupportedError",
    "check_gradients",
    "BoundsError",
]
__version__ = "0.1.0"
