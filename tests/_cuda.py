"""Helpers of the CUDA tests: which framework builds have CUDA, and a slow producer kernel.

A test about stream order must be able to fail: the work it orders after has to still be running
when the op is enqueued. ``spin_fill`` writes its value only after a long dependent loop in every
thread (milliseconds), so an op that read the array without waiting for it would read the old
values.
"""

from __future__ import annotations

import importlib.util
import os

import pytest
import warp as wp

REQUIRE_CUDA = os.environ.get("INTEROP_REQUIRE_CUDA", "") not in ("", "0")
SPINS = 1 << 21


@wp.kernel
def spin_fill(out: wp.array(dtype=float), value: float, spins: int):
    i = wp.tid()
    acc = float(0.0)  # noqa: UP018 - a Warp variable the loop mutates
    for _k in range(spins):
        acc = acc * 0.5 + 1.0
    extra = float(0.0)  # noqa: UP018 - a Warp variable a branch mutates
    if acc < 0.0:  # never (acc stays in [0, 2)); the compiler cannot drop the loop
        extra = 1.0
    out[i] = value + extra


def framework_cuda_missing(fw: str) -> str | None:
    """Why ``fw`` cannot hold CUDA arrays in this environment, or None when it can."""
    if fw in ("numpy",):
        return "NumPy arrays live on the CPU"
    if fw == "warp":
        return None if wp.get_cuda_device_count() > 0 else "Warp finds no CUDA device"
    if importlib.util.find_spec(fw) is None:
        return f"{fw} is not installed"
    if fw == "torch":
        import torch

        return None if torch.cuda.is_available() else "this torch build has no CUDA (nox installs the CPU build)"
    if fw == "jax":
        import jax

        try:
            return None if jax.devices("gpu") else "JAX has no GPU device"
        except RuntimeError:
            return "this jaxlib has no CUDA backend"
    if fw == "paddle":
        import paddle

        return None if paddle.device.is_compiled_with_cuda() else "this Paddle build has no CUDA"
    if fw == "cupy":
        return None
    raise ValueError(f"unknown framework {fw!r}")


def require_cuda(fw: str, device: str = "cuda") -> None:
    """Skip the calling test when ``fw`` cannot hold arrays on ``device`` (fail instead under
    INTEROP_REQUIRE_CUDA=1, except for NumPy, which never can)."""
    if device == "cpu":
        return
    why = framework_cuda_missing(fw)
    if why is None:
        return
    if REQUIRE_CUDA and fw != "numpy":
        pytest.fail(f"INTEROP_REQUIRE_CUDA is set: {why}")
    pytest.skip(why)


def torch_spin_fill(t, value: float, spins: int = SPINS) -> None:
    """Fill CUDA tensor ``t`` (float32, contiguous) with ``value`` on torch's current stream, slowly."""
    import torch

    s = torch.cuda.current_stream(t.device)
    ws = wp.Stream(f"cuda:{t.device.index}", cuda_stream=s.cuda_stream)
    wp.launch(spin_fill, dim=t.numel(), inputs=[wp.from_torch(t.view(-1)), value, spins], stream=ws)
