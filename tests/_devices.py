"""Named devices for the tests: every array a test makes names where it lives.

On a machine with a GPU, Warp's and JAX's default device is the GPU; a test that made an array without
naming a device and then launched on ``device="cpu"`` crashed there (issue 31). Tests name ``"cpu"`` or
the ``device`` fixture's value; JAX wants a ``jax.Device``, which ``jax_device`` gives for those names.
tests/test_test_devices.py checks that no constructor in tests/ is left to the default device.
"""

from __future__ import annotations

import functools
import os


@functools.cache
def jax_device(name: str = "cpu"):
    """The ``jax.Device`` for a test device name: ``"cpu"``, ``"cuda"``/``"gpu"`` or ``"cuda:N"``."""
    import jax

    platform, _, index = name.partition(":")
    platform = "gpu" if platform in ("cuda", "gpu") else platform
    return jax.devices(platform)[int(index or 0)]


#: the devices the device-dependent tests run on (conftest.py's DEVICES: INTEROP_TEST_DEVICES, default
#: "cpu,cuda"; CUDA ones are skipped where there is none)
TEST_DEVICES = [d for d in os.environ.get("INTEROP_TEST_DEVICES", "cpu,cuda").split(",") if d]


def devices_for(fw: str) -> list[str]:
    """The devices a generated call in framework ``fw`` may be drawn on: the CPU (NumPy's only one; CuPy
    has none), and CUDA where INTEROP_TEST_DEVICES names it and ``fw`` can hold CUDA arrays here."""
    from _cuda import framework_cuda_missing

    out = ["cpu"] if fw != "cupy" else []
    if "cuda" in TEST_DEVICES and fw != "numpy" and framework_cuda_missing(fw) is None:
        out.append("cuda")
    return out
