"""Call parameters may be passed by name, in every framework."""

import importlib.util

import numpy as np
import pytest
import warp as wp

import interop


@wp.kernel
def saxpy_kw(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a * x[i] + y[i]


def _to(fw, a):
    if fw == "numpy":
        return a
    if fw == "warp":
        return wp.array(a, dtype=float, device="cpu")
    return interop.convert(a.copy(), to=fw, copy=True)  # JAX aliases only 64-byte aligned buffers


FRAMEWORKS = [
    f for f in ("numpy", "warp", "torch", "jax", "paddle") if f in ("numpy", "warp") or importlib.util.find_spec(f)
]


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_keyword_arguments_bind_by_parameter_name(fw):
    op = interop.op(saxpy_kw)
    x = np.arange(4, dtype=np.float32)
    y = np.ones(4, np.float32)
    expected = 3.0 * x + y
    for call in (
        lambda: op(_to(fw, x), y=_to(fw, y), a=3.0),
        lambda: op(a=3.0, y=_to(fw, y), x=_to(fw, x)),
    ):
        out = call()
        np.testing.assert_allclose(interop.convert(out, to="numpy", copy=True), expected)


def test_keyword_errors_name_the_parameter():
    op = interop.op(saxpy_kw)
    x = np.ones(3, np.float32)
    with pytest.raises(interop.ArgumentError, match=r"op 'saxpy_kw': parameter 'x' given both by position and by name"):
        op(x, x=x, y=x, a=1.0)
    with pytest.raises(interop.ArgumentError, match=r"missing \['y'\]"):
        op(x, a=1.0)
