"""tinyops: one Warp kernel shipped to NumPy, PyTorch and JAX users with its modules precompiled."""

from pathlib import Path

import interop

_WARP_MODULES = Path(__file__).parent / "_warp_modules"
if _WARP_MODULES.is_dir():  # absent in a source checkout: there the ops compile at first use
    interop.use_precompiled(_WARP_MODULES)

from .ops import wave  # noqa: E402 (after the folder is registered; it would work before too)

__all__ = ["wave"]
