"""The Warp and JAX internals the JAX adapter cannot avoid, in one place.

Checked against warp-lang 1.19.0 and jax/jaxlib 0.10.2.
"""

from __future__ import annotations

import ctypes

import jax


def is_tracer(x) -> bool:
    """A value being traced by jit/vmap/grad (public: ``jax.core.Tracer``)."""
    return isinstance(x, jax.core.Tracer)


def cuda_memset_async(device, ptr: int, nbytes: int, stream: int) -> None:
    """Zero ``nbytes`` at device pointer ``ptr`` on CUDA stream ``stream`` (XLA's), without a sync.

    Warp's public ``array.zero_()`` uses the device's current stream; the native call takes
    an explicit stream, so XLA's stream order is kept without swapping Warp's current stream.
    """
    from warp._src.context import runtime

    if not runtime.core.wp_memset_device(device.context, ctypes.c_void_p(ptr), 0, nbytes, ctypes.c_void_p(stream)):
        raise RuntimeError(f"memset of {nbytes} bytes on {device} failed")
