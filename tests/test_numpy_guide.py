"""Every example of Warp's interoperability guide that applies to NumPy, through `interop.op` with NumPy arrays.

Values are checked against NumPy formulas. Also: generic (typing.Any) kernels, and the
no-copy guarantees of the NumPy/Warp call path (in-out updated in place, strided inputs read as is).
"""

import math
import typing

import numpy as np
import pytest
import warp as wp
from catalogue import funky_kernel
from guide_kernels import (
    add_kernel,
    diagonal_kernel,
    example_func,
    lookup_kernel,
    matmul_kernel,
    rowsum_kernel,
    saxpy,
    scale_kernel,
    sincos_kernel,
    triple_kernel,
    vecmat_kernel,
)

import interop
from interop._frameworks import data_ptr


# ---- generic kernels ------------------------------------------------------------------------------
@wp.kernel
def generic_scale(a: wp.array(dtype=typing.Any), s: typing.Any, out: wp.array(dtype=typing.Any)):
    i = wp.tid()
    out[i] = a[i] * s


@wp.kernel
def generic_axpy(x: wp.array(dtype=typing.Any), y: wp.array(dtype=typing.Any), out: wp.array(dtype=typing.Any)):
    i = wp.tid()
    out[i] = x[i] + y[i] * y[i]


@wp.kernel
def generic_vec_norm(v: wp.array(dtype=wp.types.vector(length=3, dtype=wp.Float)), out: wp.array(dtype=wp.Float)):
    i = wp.tid()
    out[i] = wp.length(v[i])


@wp.kernel
def generic_vec_scale(
    v: wp.array(dtype=wp.types.vector(length=3, dtype=wp.Float)),
    s: wp.Float,
    out: wp.array(dtype=wp.types.vector(length=3, dtype=wp.Float)),
):
    i = wp.tid()
    out[i] = v[i] * s


@wp.kernel
def generic_any_elem(a: wp.array(dtype=typing.Any), out: wp.array(dtype=typing.Any)):
    # dtype=Any also takes vec/mat elements: the element type comes from the trailing dims
    i = wp.tid()
    out[i] = a[i] + a[i]


# ---- guide examples -------------------------------------------------------------------------------
def test_saxpy_design_example():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(17).astype(np.float32)
    y = rng.standard_normal(17).astype(np.float32)
    op = interop.op(saxpy)
    z = op(x, y, 2.0)
    assert isinstance(z, np.ndarray) and z.dtype == np.float32 and z.shape == (17,)
    np.testing.assert_allclose(z, 2.0 * x + y, rtol=1e-6)
    # a NumPy scalar and a Python int work as the float scalar too
    np.testing.assert_allclose(op(x, y, np.float32(-1.5)), -1.5 * x + y, rtol=1e-6)
    np.testing.assert_allclose(op(x, y, 3), 3 * x + y, rtol=1e-6)


def test_triple():
    x = np.arange(0, 64, dtype=np.float32)
    np.testing.assert_array_equal(interop.op(triple_kernel)(x), 3 * x)


def test_add_int_arrays():
    n = 10
    a = np.arange(n, dtype=np.int32)
    b = np.ones(n, dtype=np.int32)
    out = interop.op(add_kernel)(a, b)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, a + b)


def test_sincos_two_outputs():
    a = np.linspace(0, 2 * math.pi, 32, dtype=np.float32)
    res = interop.op(sincos_kernel, outputs=2)(a)
    assert isinstance(res, tuple) and len(res) == 2
    s, c = res
    np.testing.assert_allclose(s, np.sin(a), atol=1e-6)
    np.testing.assert_allclose(c, np.cos(a), atol=1e-6)


def test_diagonal_launch_dims_no_inputs():
    expected = np.diag([1.0, 2.0, 3.0]).astype(np.float32)
    # per call
    op = interop.op(diagonal_kernel)
    out = op(launch_dims=4)
    assert isinstance(out, np.ndarray) and out.shape == (4, 3, 3) and out.dtype == np.float32
    np.testing.assert_array_equal(out, np.broadcast_to(expected, (4, 3, 3)))
    # at description time, and overridden per call
    op5 = interop.op(diagonal_kernel, launch_dims=5)
    assert op5(launch_dims=(2,)).shape == (2, 3, 3)
    np.testing.assert_array_equal(op5(), np.broadcast_to(expected, (5, 3, 3)))


def test_diagonal_warp_framework():
    out = interop.op(diagonal_kernel)(launch_dims=3, framework="warp")
    assert isinstance(out, wp.array) and out.dtype == wp.mat33 and out.shape == (3,)
    np.testing.assert_array_equal(out.numpy()[1], np.diag([1.0, 2.0, 3.0]))


def test_scale_with_scalar():
    a = np.arange(10, dtype=np.float32)
    op = interop.op(scale_kernel)
    np.testing.assert_array_equal(op(a, 2.0), a * 2.0)
    np.testing.assert_array_equal(op(a, -0.5), a * -0.5)  # a new scalar value, same cached launch


def test_matmul_launch_dims_per_call():
    op = interop.op(matmul_kernel)
    N1, M1, K1 = 3, 4, 2
    a1 = np.full((N1, K1), 2, dtype=np.float32)
    b1 = np.full((K1, M1), 3, dtype=np.float32)
    r1 = op(a1, b1, launch_dims=(N1, M1))
    N2, M2, K2 = 4, 3, 2
    rng = np.random.default_rng(1)
    a2 = rng.standard_normal((N2, K2)).astype(np.float32)
    b2 = rng.standard_normal((K2, M2)).astype(np.float32)
    r2 = op(a2, b2, launch_dims=(N2, M2))
    assert r1.shape == (3, 4) and r2.shape == (4, 3)
    np.testing.assert_allclose(r1, a1 @ b1)
    np.testing.assert_allclose(r2, a2 @ b2, rtol=1e-5, atol=1e-6)
    # launch dims as a list work too
    np.testing.assert_allclose(op(a1, b1, launch_dims=[N1, M1]), a1 @ b1)


def _funky_ref(a, k, n, m):
    b = np.zeros(n, np.float32)
    c = np.zeros(m, np.float32)
    for i in range(k):
        if i < n:
            b[i] = a[i % len(a)] + 1.0
        if i < m:
            c[i] = 2.0 * a[i % len(a)]
    return b, c


def test_funky_output_dims():
    op = interop.op(funky_kernel, outputs=2)
    a = np.arange(6, dtype=np.float32) * 10
    # default: launch dims = outputs' shape = a.shape
    b, c = op(a)
    np.testing.assert_array_equal(b, _funky_ref(a, 6, 6, 6)[0])
    # output_dims as an int for all outputs (launch dims stay a.shape)
    b, c = op(a, output_dims=4)
    assert b.shape == c.shape == (4,)
    np.testing.assert_array_equal((b, c), _funky_ref(a, 6, 4, 4))
    # dict by name
    b, c = op(a, output_dims={"b": 3, "c": 5})
    assert b.shape == (3,) and c.shape == (5,)
    np.testing.assert_array_equal(b, _funky_ref(a, 6, 3, 5)[0])
    np.testing.assert_array_equal(c, _funky_ref(a, 6, 3, 5)[1])
    # launch_dims and output_dims together
    b, c = op(a, launch_dims=9, output_dims={"b": 8, "c": 2})
    rb, rc = _funky_ref(a, 9, 8, 2)
    np.testing.assert_array_equal(b, rb)
    np.testing.assert_array_equal(c, rc)
    # a dict naming only one output: the other follows the launch dims
    b, c = op(a, launch_dims=7, output_dims={"c": 2})
    assert b.shape == (7,) and c.shape == (2,)
    # output_dims at description time, overridden per call
    op2 = interop.op(funky_kernel, outputs=2, output_dims={"b": 2, "c": 3})
    b, c = op2(a)
    assert b.shape == (2,) and c.shape == (3,)
    b, c = op2(a, output_dims=1)
    assert b.shape == c.shape == (1,)


def _vecmat_inputs(n):
    rng = np.random.default_rng(2)
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal((n, 3)).astype(np.float32)
    c = rng.standard_normal((n, 2, 2)).astype(np.float32)
    return a, b, c


def test_vecmat_packing():
    n = 10
    a, b, c = _vecmat_inputs(n)
    op = interop.op(vecmat_kernel, outputs=3)
    expected = (2 * a, b * a[:, None], np.transpose(c, (0, 2, 1)))
    variants = [
        op(a, b, c),
        op(a, b, c, output_dims=n),
        op(a, b, c, output_dims=(n,)),
        op(a, b, c, output_dims={"d": n, "e": n, "f": n}),
        op(a, b, c, output_dims={"d": n, "e": (n, 3), "f": (n, 2, 2)}),
        op(a, b, c, output_dims={"d": a.shape, "e": b.shape, "f": c.shape}),
    ]
    for d, e, f in variants:
        assert d.shape == (n,) and e.shape == (n, 3) and f.shape == (n, 2, 2)
        assert d.dtype == e.dtype == f.dtype == np.float32
        np.testing.assert_allclose(d, expected[0], rtol=1e-6)
        np.testing.assert_allclose(e, expected[1], rtol=1e-6)
        np.testing.assert_allclose(f, expected[2], rtol=1e-6)


def test_vecmat_warp_arrays_in_warp_out():
    n = 5
    a, b, c = _vecmat_inputs(n)
    wa = wp.array(a, dtype=float, device="cpu")
    wb = wp.array(b, dtype=wp.vec3, device="cpu")
    wc = wp.array(c, dtype=wp.mat22, device="cpu")
    d, e, f = interop.op(vecmat_kernel, outputs=3)(wa, wb, wc)
    assert all(isinstance(x, wp.array) for x in (d, e, f))
    assert e.dtype == wp.vec3 and f.dtype == wp.mat22 and e.shape == (n,)
    np.testing.assert_allclose(e.numpy(), b * a[:, None], rtol=1e-6)
    np.testing.assert_allclose(f.numpy(), np.transpose(c, (0, 2, 1)), rtol=1e-6)


def test_rowsum_in_out_in_place():
    op = interop.op(rowsum_kernel, in_out=["sums"])
    matrix = np.arange(3 * 4, dtype=np.float32).reshape(3, 4)
    sums = np.zeros(3, dtype=np.float32)
    ptr = data_ptr(sums)
    out = op(matrix, sums)
    assert out is sums
    assert data_ptr(out) == ptr
    np.testing.assert_array_equal(sums, matrix.sum(axis=1))
    # accumulates into the existing values (not zero-filled)
    out2 = op(matrix, sums)
    assert out2 is sums
    np.testing.assert_array_equal(sums, 2 * matrix.sum(axis=1))
    start = np.array([100.0, -1.0, 0.5], np.float32)
    acc = start.copy()
    op(matrix, acc)
    np.testing.assert_array_equal(acc, start + matrix.sum(axis=1))


def test_rowsum_in_out_warp_array_in_place():
    op = interop.op(rowsum_kernel, in_out=["sums"])
    matrix = wp.array(np.ones((2, 5), np.float32), device="cpu")
    sums = wp.array(np.array([1.0, 2.0], np.float32), device="cpu")
    out = op(matrix, sums)
    assert out is sums
    np.testing.assert_array_equal(sums.numpy(), [6.0, 7.0])


def test_lookup_launch_dims_from_indices():
    op = interop.op(lookup_kernel)
    N = 100
    table = np.arange(N, dtype=np.float32) * 0.5
    rng = np.random.default_rng(42)
    indices = rng.integers(0, N, size=50, dtype=np.int32)
    out = op(table, indices, launch_dims=50)
    assert out.shape == (50,)
    np.testing.assert_array_equal(out, table[indices])
    # each row of a batch of indices
    batch = rng.integers(0, N, size=(20, 7), dtype=np.int32)
    for row in batch[:3]:
        np.testing.assert_array_equal(op(table, np.ascontiguousarray(row), launch_dims=len(row)), table[row])
    # default launch dims (table's shape) would be wrong: make sure the override matters
    assert op(table, np.zeros(N, np.int32)).shape == (N,)


def test_multi_kernel_python_function():
    op = interop.op(example_func, outputs=2)
    assert op.description.kind == "function"
    a = np.arange(10, dtype=np.float32)
    b = np.arange(10, dtype=np.float32).reshape((5, 2))
    c, d = op(a, b, 2.0, output_dims={"c": a.shape, "d": b.shape})
    assert c.shape == (10,) and d.shape == (5, 2)
    np.testing.assert_array_equal(c, a * 2.0)
    np.testing.assert_array_equal(d, b * 2.0)
    # Warp-convention dims for the vec2 output are equivalent
    c2, d2 = op(a, b, 3.0, output_dims={"c": 10, "d": 5})
    np.testing.assert_array_equal(d2, b * 3.0)
    np.testing.assert_array_equal(c2, a * 3.0)


def test_function_op_launch_dims_per_call_refused():
    op = interop.op(example_func, outputs=2)
    a = np.arange(4, dtype=np.float32)
    b = np.zeros((2, 2), np.float32)
    with pytest.raises(ValueError, match=r"launch_dims does not apply to a Python-function op"):
        op(a, b, 1.0, launch_dims=4, output_dims={"c": 4, "d": 2})


# ---- generic dtypes ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", [np.float32, np.float64, np.float16])
def test_generic_float_dtypes(dt):
    op = interop.op(generic_scale)
    a = (np.arange(8) * 0.25).astype(dt)
    out = op(a, 2.0)  # a Python float resolves to the array's float type
    assert out.dtype == dt
    np.testing.assert_allclose(out, a * 2.0, rtol=1e-3 if dt == np.float16 else 1e-7)
    out_int_scalar = op(a, 3)  # an int value in a float parameter is exact
    np.testing.assert_allclose(out_int_scalar, a * 3, rtol=1e-3 if dt == np.float16 else 1e-7)


def test_generic_int_dtype():
    op = interop.op(generic_scale)
    a = np.arange(8, dtype=np.int32)
    out = op(a, 3)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, a * 3)
    a64 = np.arange(8, dtype=np.int64)
    assert op(a64, 2).dtype == np.int64


def test_generic_float64_keeps_precision():
    op = interop.op(generic_axpy)
    x = np.full(4, 1.0, np.float64)
    y = np.full(4, 1e-5, np.float64)
    out = op(x, y)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, x + y * y, rtol=1e-15)  # float32 would lose 1e-10


def test_generic_vec_arrays():
    op = interop.op(generic_vec_norm)
    for dt in (np.float32, np.float64):
        v = np.random.default_rng(3).standard_normal((6, 3)).astype(dt)
        out = op(v)
        assert out.dtype == dt and out.shape == (6,)
        np.testing.assert_allclose(out, np.linalg.norm(v, axis=1), rtol=1e-6)
    sc = interop.op(generic_vec_scale)
    v = np.random.default_rng(4).standard_normal((5, 3))
    out = sc(v, 0.5)
    assert out.dtype == np.float64 and out.shape == (5, 3)
    np.testing.assert_allclose(out, v * 0.5)
    with pytest.raises(TypeError, match=r"parameter 'v'"):
        sc(np.ones((5, 2)), 0.5)  # wrong vec length


@pytest.mark.parametrize("shape", [(4,), (4, 3), (4, 2, 2)])
def test_generic_any_takes_vec_and_mat_elements(shape):
    a = np.random.default_rng(5).standard_normal(shape)
    out = interop.op(generic_any_elem)(a)
    assert out.shape == shape and out.dtype == np.float64
    np.testing.assert_allclose(out, 2 * a)


def test_generic_warp_arrays():
    op = interop.op(generic_scale)
    a = wp.array(np.arange(4, dtype=np.float64), dtype=wp.float64, device="cpu")
    out = op(a, 2.0)
    assert isinstance(out, wp.array) and out.dtype == wp.float64
    np.testing.assert_array_equal(out.numpy(), np.arange(4) * 2.0)


# ---- no copies on the NumPy / Warp path -----------------------------------------------------------
def test_strided_numpy_input_read_without_copy():
    base = np.arange(40, dtype=np.float32)
    x = base[::2]  # stride 8 bytes, not contiguous
    y = np.ones(20, np.float32)[::-1].copy()
    assert not x.flags.c_contiguous
    out = interop.op(saxpy)(x, y, 2.0)
    np.testing.assert_array_equal(out, 2 * x + y)
    # a 2-d transposed view (outer strides only) is read as is
    m = np.arange(12, dtype=np.float32).reshape(3, 4)
    s = interop.op(rowsum_kernel, in_out=["sums"])(m.T, np.zeros(4, np.float32))
    np.testing.assert_array_equal(s, m.T.sum(axis=1))


def test_strided_input_is_not_copied(monkeypatch):
    """The pointer handed to the launch is the caller's own (a copy would show a different address)."""
    from interop import _launch

    seen = []
    orig = _launch.Runner.forward

    def spy(self, device, values, stream=None):
        seen.append(values)
        return orig(self, device, values, stream)

    monkeypatch.setattr(_launch.Runner, "forward", spy)
    base = np.arange(30, dtype=np.float32)
    x = base[1::3]
    y = np.zeros(10, np.float32)
    op = interop.op(saxpy, name="test_numpy_guide::saxpy_spy")  # its own op: no cached fast path yet
    out = op(x, y, 1.0)
    np.testing.assert_array_equal(out, x)
    ptr, strides = seen[-1][0]
    assert ptr == data_ptr(x) == data_ptr(base) + 4
    assert strides == (12,)
    assert seen[-1][1][0] == data_ptr(y)


def test_outputs_are_zero_filled():
    # funky writes only i < len(b): the rest of a larger output stays zero
    op = interop.op(funky_kernel, outputs=2)
    b, c = op(np.ones(2, np.float32), launch_dims=2, output_dims=6)
    np.testing.assert_array_equal(b[2:], 0)
    np.testing.assert_array_equal(c[2:], 0)
