"""Kernels whose names hide this module's globals (tests/test_blind_spots.py): a parameter ``n`` and
a local ``count`` used as loop bounds are dynamic for Warp whatever the module's ``n`` and ``count``
hold; the blind-spot check read the globals and let the loops pass as unrolled (Warp's adjoint gave
``w`` a zero gradient). Also an in-out array read through a local alias of it."""

import warp as wp

n = 4  # a module-level size, never read by the kernels below
count = 3


@wp.kernel
def parameter_bound(x: wp.array(dtype=float), w: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
    i = wp.tid()
    acc = float(0.0)  # noqa: UP018 - a Warp variable the loop mutates
    for j in range(n):
        acc += x[j] * x[j]
    out[i] = w[i] * acc


@wp.kernel
def local_bound(x: wp.array(dtype=float), w: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    count = x.shape[0]
    acc = float(0.0)  # noqa: UP018 - a Warp variable the loop mutates
    for j in range(count):
        acc += x[j] * x[j]
    out[i] = w[i] * acc


@wp.kernel
def in_out_read_through_alias(x: wp.array(dtype=float), acc: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    a = acc
    out[i] = a[i] * x[i]
    wp.atomic_add(acc, i, x[i])


@wp.struct
class Material:
    gain: float
    w: wp.array(dtype=float)


@wp.kernel
def struct_loop_after(x: wp.array(dtype=float), m: Material, out: wp.array(dtype=float)):
    i = wp.tid()
    acc = float(0.0)  # noqa: UP018 - a Warp variable the loop mutates
    for j in range(x.shape[0]):
        acc = acc * m.gain + m.w[j]
    out[i] = acc * x[i]
