"""A kernel whose module has a global named like the kernel's thread index (tests/test_checked.py):
Warp 1.19 resolved the checks' generic index arguments against it, and the checked kernel failed to
build ("Failed to determine type code for argument 'i0'")."""

import numpy as np
import warp as wp

i = np.array([3, 2, 1], np.int32)  # a module-level array called like the kernel's index


@wp.kernel
def gather(x: wp.array(dtype=float), idx: wp.array(dtype=wp.int32), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = x[idx[i]]
