"""The Warp and JAX internals the JAX adapter cannot avoid, in one place.

Checked against jax/jaxlib 0.9.0 (the floor in pyproject.toml), 0.10.2 and 0.12.0.1
(nox sessions jax_oldest, tests, jax_newest).
"""

from __future__ import annotations

import jax

from interop import _warp_compat


def is_tracer(x) -> bool:
    """A value being traced by jit/vmap/grad (public: ``jax.core.Tracer``)."""
    return isinstance(x, jax.core.Tracer)


def cuda_memset_async(device, ptr: int, nbytes: int, stream: int) -> None:
    """Zero ``nbytes`` at device pointer ``ptr`` on CUDA stream ``stream`` (XLA's), without a sync.

    Warp's part lives in ``interop._warp_compat`` (the one module that touches Warp internals).
    """
    _warp_compat.cuda_memset_async(device, ptr, nbytes, stream)
