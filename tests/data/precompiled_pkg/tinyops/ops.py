"""tinyops' ops: the kernels, described once."""

import warp as wp

import interop


@wp.kernel
def wave_kernel(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a * wp.sin(x[i]) * y[i] + x[i] * x[i]


wave = interop.op(wave_kernel, name="tinyops::wave")
