"""The guide's examples, once, through every installed framework (values against NumPy).

One parametrized matrix: the same op and call in NumPy, Warp, PyTorch, JAX and Paddle must
give the same values; in-out arrays are updated in place where the framework is mutable
(the same object comes back) and returned as new arrays in JAX.
"""

import importlib.util

import numpy as np
import pytest
import warp as wp
from catalogue import to_fw, to_np
from guide_kernels import add_kernel as add_int
from guide_kernels import diagonal_kernel as diagonal
from guide_kernels import fill_seeded_kernel as fill_seeded
from guide_kernels import lookup_kernel as lookup
from guide_kernels import matmul_kernel as matmul
from guide_kernels import rowsum_kernel as rowsum
from guide_kernels import vecmat_kernel as vecmat

import interop

FRAMEWORKS = [
    f
    for f in ("numpy", "warp", "torch", "jax", "paddle", "cupy")
    if f in ("numpy", "warp") or importlib.util.find_spec(f)
]


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_add_int(fw, device):
    a, b = np.arange(10, dtype=np.int32), np.ones(10, np.int32)
    out = interop.op(add_int)(to_fw(fw, a, device=device), to_fw(fw, b, device=device))
    np.testing.assert_array_equal(to_np(out), a + b)
    assert to_np(out).dtype == np.int32


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_matmul_with_per_call_launch_dims(fw, device):
    op = interop.op(matmul)
    for n, m, k in ((3, 4, 2), (4, 3, 5)):
        a = np.random.default_rng(0).random((n, k), dtype=np.float32)
        b = np.random.default_rng(1).random((k, m), dtype=np.float32)
        c = op(to_fw(fw, a, device=device), to_fw(fw, b, device=device), launch_dims=(n, m))
        np.testing.assert_allclose(to_np(c), a @ b, rtol=1e-5)


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_vecmat_output_dims_both_conventions(fw, device):
    op = interop.op(vecmat, outputs=3)
    n = 5
    a = np.arange(n, dtype=np.float32)
    b = np.ones((n, 3), np.float32)
    c = np.arange(n * 4, dtype=np.float32).reshape(n, 2, 2)  # not symmetric: a transpose shows
    args = (to_fw(fw, a, device=device), to_fw(fw, b, wp.vec3, device=device), to_fw(fw, c, wp.mat22, device=device))
    for od in (None, n, {"d": n, "e": (n, 3), "f": (n, 2, 2)}):
        d, e, f = op(*args, output_dims=od)
        np.testing.assert_allclose(to_np(d), 2 * a)
        np.testing.assert_allclose(to_np(e).reshape(n, 3), b * a[:, None])
        np.testing.assert_allclose(to_np(f).reshape(n, 2, 2), np.transpose(c, (0, 2, 1)))


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_rowsum_in_out(fw, device):
    op = interop.op(rowsum, in_out=["sums"])
    m = np.arange(12, dtype=np.float32).reshape(3, 4)
    s0 = np.full(3, 10.0, np.float32)
    s = to_fw(fw, s0.copy(), device=device)  # numpy and warp share memory with what they are given
    out = op(to_fw(fw, m, device=device), s)
    np.testing.assert_allclose(to_np(out), s0 + m.sum(axis=1))
    if fw != "jax":
        assert out is s  # updated in place, the same object returned
        np.testing.assert_allclose(to_np(s), s0 + m.sum(axis=1))


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_lookup_launch_dims_from_indices(fw, device):
    op = interop.op(lookup)
    table = np.arange(100, dtype=np.float32) * 0.5
    idx = np.random.default_rng(2).integers(0, 100, 50).astype(np.int32)
    out = op(to_fw(fw, table, device=device), to_fw(fw, idx, device=device), launch_dims=50)
    np.testing.assert_allclose(to_np(out), table[idx])


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_no_input_kernel_with_launch_dims(fw):
    out = interop.op(diagonal)(launch_dims=4, framework=fw)
    assert to_np(out).reshape(4, 3, 3)[2].tolist() == [[1, 0, 0], [0, 2, 0], [0, 0, 3]]


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_scalars_only_call_repeated(fw):
    # no array argument, only scalars (a float and a uint32): the framework comes from
    # framework=; repeated, so that a remembered eager signature (torch, Paddle) is used too
    op = interop.op(fill_seeded, launch_dims=5)
    for value, seed in ((1.5, 2), (-1.0, 3), (0.25, 4)):
        out = op(value, seed, framework=fw)
        np.testing.assert_allclose(to_np(out), value + seed * np.arange(5, dtype=np.float32))
    for _ in range(3):
        assert to_np(interop.op(diagonal)(launch_dims=2, framework=fw)).shape == (2, 3, 3)
