"""A generic kernel that Warp cannot build for some argument types fails clearly, and only that call.

Warp records a failed build against the whole module; the core drops the bad overload so
every other kernel of the module (and the good overloads) keep working.
"""

import typing

import numpy as np
import pytest
import warp as wp

import interop


@wp.kernel
def gadd(a: wp.array(dtype=typing.Any), b: wp.array(dtype=typing.Any), out: wp.array(dtype=typing.Any)):
    i = wp.tid()
    out[i] = a[i] + b[i]


@wp.kernel
def twice(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a[i] * 2.0


def test_failed_generic_build_names_op_and_types_and_spares_the_module():
    g, t = interop.op(gadd), interop.op(twice)
    np.testing.assert_array_equal(t(np.ones(3, np.float32)), [2, 2, 2])
    with pytest.raises(interop.ArgumentError, match=r"op 'gadd'.*a: float32, b: float64"):
        g(np.ones(3, np.float32), np.ones(3, np.float64))
    np.testing.assert_array_equal(t(np.full(3, 2, np.float32)), [4, 4, 4])
    np.testing.assert_array_equal(g(np.ones(3, np.float64), np.ones(3, np.float64)), [2, 2, 2])
