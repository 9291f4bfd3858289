"""The kernel of the first-call benchmark (``benchmarks/first_call.py``), alone in its module: Warp
reads a kernel's source from its file, and importing it must cost only Warp's decoration."""

import warp as wp


@wp.kernel
def saxpy(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a * x[i] + y[i]
