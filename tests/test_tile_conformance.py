"""Warp's own tile kernels through every framework (issue 40, item 2).

Each kernel below is taken as shipped from Warp's tests (``warp/tests/tile/test_tile.py``,
``test_tile_reduce.py``, ``test_tile_matmul.py`` (mixed precision too), ``test_tile_load.py``,
``test_tile_cholesky.py``, ``test_tile_fft.py``, ``test_tile_sort.py``) or examples
(``examples/tile/example_tile_nbody.py``), with the launch Warp's test gives it: ``wp.launch_tiled(
kernel, dim=grid, block_dim=b)`` or ``wp.launch(kernel, dim=n, block_dim=b)``. The op is described
with that ``block_dim`` and called with ``launch_dims=`` what Warp's launch takes as ``dim`` (the tile
grid, or the thread count), from NumPy, Warp, torch, JAX and Paddle where installed, on each test
device. Values are compared with Warp's own launch on the same device, and reverse gradients (a
random cotangent per output) with ``wp.Tape`` over that launch.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pytest
import warp as wp

import interop

TILE_M = wp.constant(8)
TILE_N = wp.constant(4)
TILE_K = wp.constant(8)
TILE_DIM = 64
TILE_OFFSET = 5


# ---- kernels, as in Warp's tests ------------------------------------------------------------------


@wp.kernel
def tile_copy_1d_kernel(A: wp.array(dtype=float), B: wp.array(dtype=float)):
    i = wp.tid()
    a = wp.tile_load(A, shape=TILE_N, offset=i * TILE_N)
    wp.tile_store(B, a, offset=i * TILE_N)


@wp.kernel
def tile_copy_2d_kernel(A: wp.array2d(dtype=float), B: wp.array2d(dtype=float)):
    i, j = wp.tid()
    a = wp.tile_load(A, shape=(TILE_M, TILE_N), offset=(i * TILE_M, j * TILE_N))
    wp.tile_store(B, a, offset=(i * TILE_M, j * TILE_N))


@wp.func
def unary_func(x: wp.float32):
    return wp.sin(x)


@wp.func
def unary_func(x: wp.float64):  # noqa: F811 (Warp's overload)
    return wp.sin(x)


@wp.kernel
def tile_unary_map_user_func(input: wp.array2d(dtype=Any), output: wp.array2d(dtype=Any)):
    i, j = wp.tid()
    a = wp.tile_load(input, shape=(TILE_M, TILE_N), offset=(i * TILE_M, j * TILE_N))
    sa = wp.tile_map(unary_func, a)
    wp.tile_store(output, sa, offset=(i * TILE_M, j * TILE_N))


@wp.kernel
def tile_unary_map_builtin_func(input: wp.array2d(dtype=Any), output: wp.array2d(dtype=Any)):
    i, j = wp.tid()
    a = wp.tile_load(input, shape=(TILE_M, TILE_N), offset=(i * TILE_M, j * TILE_N))
    sa = wp.tile_map(wp.sin, a)
    wp.tile_store(output, sa, offset=(i * TILE_M, j * TILE_N))


@wp.func
def binary_func(x: wp.float32, y: wp.float32):
    return x + y


@wp.func
def binary_func(x: wp.float64, y: wp.float64):  # noqa: F811 (Warp's overload)
    return x + y


@wp.kernel
def tile_binary_map_user_func(
    input_a: wp.array2d(dtype=Any), input_b: wp.array2d(dtype=Any), output: wp.array2d(dtype=Any)
):
    i, j = wp.tid()
    a = wp.tile_load(input_a, shape=(TILE_M, TILE_N), offset=(i * TILE_M, j * TILE_N))
    b = wp.tile_load(input_b, shape=(TILE_M, TILE_N), offset=(i * TILE_M, j * TILE_N))
    sa = wp.tile_map(binary_func, a, b)
    wp.tile_store(output, sa, offset=(i * TILE_M, j * TILE_N))


@wp.kernel
def tile_binary_map_builtin_func(
    input_a: wp.array2d(dtype=Any), input_b: wp.array2d(dtype=Any), output: wp.array2d(dtype=Any)
):
    i, j = wp.tid()
    a = wp.tile_load(input_a, shape=(TILE_M, TILE_N), offset=(i * TILE_M, j * TILE_N))
    b = wp.tile_load(input_b, shape=(TILE_M, TILE_N), offset=(i * TILE_M, j * TILE_N))
    sa = wp.tile_map(wp.add, a, b)
    wp.tile_store(output, sa, offset=(i * TILE_M, j * TILE_N))


@wp.func
def tile_n_map_func(x: float, y: float, z: float):
    return x + y * z


@wp.kernel
def tile_n_map_kernel(
    x: wp.array(dtype=float), y: wp.array(dtype=float), z: wp.array(dtype=float), out: wp.array(dtype=float)
):
    x_tile = wp.tile_load(x, shape=(TILE_M,))
    y_tile = wp.tile_load(y, shape=(TILE_M,))
    z_tile = wp.tile_load(z, shape=(TILE_M,))
    out_tile = wp.tile_map(tile_n_map_func, x_tile, y_tile, z_tile)
    wp.tile_store(out, out_tile)


@wp.kernel
def tile_operators(input: wp.array3d(dtype=float), output: wp.array3d(dtype=float)):
    i = wp.tid()
    a = wp.tile_load(input[i], shape=(TILE_M, TILE_N))
    b = -a
    c = b * 0.5
    d = 0.5 * c
    e = a + d
    wp.tile_store(output[i], e)


@wp.func
def tile_sum_func(a: wp.tile(dtype=float, shape=(TILE_M, TILE_N))):
    return wp.tile_sum(a) * 0.5


@wp.kernel
def tile_sum_3d_kernel(input: wp.array3d(dtype=float), output: wp.array(dtype=float)):
    i = wp.tid()
    a = wp.tile_load(input[i], shape=(TILE_M, TILE_N))
    s = tile_sum_func(a)
    wp.tile_store(output, s, offset=i)


@wp.kernel
def tile_transpose_kernel(input: wp.array2d(dtype=float), output: wp.array2d(dtype=float)):
    x = wp.tile_load(input, shape=(TILE_M, TILE_N))
    y = wp.tile_transpose(x)
    wp.tile_store(output, y)


@wp.kernel
def tile_broadcast_add_1d_kernel(
    input_a: wp.array(dtype=float), input_b: wp.array(dtype=float), output: wp.array(dtype=float)
):
    a = wp.tile_load(input_a, shape=(10,))
    b = wp.tile_load(input_b, shape=(1,))
    c = wp.tile_broadcast(b, shape=(10,))
    d = a + c
    wp.tile_store(output, d)


@wp.kernel
def tile_broadcast_add_2d_kernel(
    input_a: wp.array2d(dtype=float), input_b: wp.array(dtype=float), output: wp.array2d(dtype=float)
):
    a = wp.tile_load(input_a, shape=(10, 10))
    b = wp.tile_load(input_b, shape=10)
    c = wp.tile_broadcast(b, shape=(10, 10))
    d = a + c
    wp.tile_store(output, d)


@wp.kernel
def tile_broadcast_grad_kernel(a: wp.array(dtype=float), b: wp.array2d(dtype=float)):
    x = wp.tile_load(a, shape=5)
    y = wp.tile_broadcast(x, shape=(5, 5))
    w = wp.tile_ones(dtype=float, shape=(5, 5))
    z = w + y
    wp.tile_store(b, z)


@wp.kernel
def tile_squeeze_kernel(x: wp.array3d(dtype=float), y: wp.array(dtype=float)):
    a = wp.tile_load(x, shape=(1, TILE_M, 1), offset=(0, 0, 0))
    b = wp.tile_squeeze(a, axis=(2,))
    c = wp.tile_squeeze(b)
    wp.tile_store(y, c, offset=(0,))


@wp.kernel
def tile_reshape_kernel(x: wp.array2d(dtype=float), y: wp.array2d(dtype=float)):
    a = wp.tile_load(x, shape=(TILE_M, TILE_N), offset=(0, 0))
    b = wp.tile_reshape(a, shape=(wp.static(TILE_M * TILE_N), 1))
    c = wp.tile_reshape(b, shape=(-1, 1))
    wp.tile_store(y, c, offset=(0, 0))


@wp.kernel
def tile_mul_elementwise_kernel(a: wp.array2d(dtype=float), b: wp.array2d(dtype=float), out: wp.array2d(dtype=float)):
    i, j = wp.tid()
    ta = wp.tile_load(a, shape=(TILE_M, TILE_N), offset=(i * TILE_M, j * TILE_N))
    tb = wp.tile_load(b, shape=(TILE_M, TILE_N), offset=(i * TILE_M, j * TILE_N))
    wp.tile_store(out, ta * tb, offset=(i * TILE_M, j * TILE_N))


@wp.kernel
def tile_div_scalar_kernel(a: wp.array2d(dtype=float), out: wp.array2d(dtype=float)):
    i, j = wp.tid()
    ta = wp.tile_load(a, shape=(TILE_M, TILE_N), offset=(i * TILE_M, j * TILE_N))
    wp.tile_store(out, ta / 2.0, offset=(i * TILE_M, j * TILE_N))


@wp.kernel
def tile_div_elementwise_kernel(a: wp.array2d(dtype=float), b: wp.array2d(dtype=float), out: wp.array2d(dtype=float)):
    i, j = wp.tid()
    ta = wp.tile_load(a, shape=(TILE_M, TILE_N), offset=(i * TILE_M, j * TILE_N))
    tb = wp.tile_load(b, shape=(TILE_M, TILE_N), offset=(i * TILE_M, j * TILE_N))
    wp.tile_store(out, ta / tb, offset=(i * TILE_M, j * TILE_N))


@wp.kernel
def tile_vec_div_scalar_kernel(a: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.vec3)):
    ta = wp.tile_load(a, shape=TILE_M)
    wp.tile_store(out, ta / 2.0)


@wp.kernel
def tile_scalar_mul_tile_vec_kernel(
    scalars: wp.array(dtype=float), vecs: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.vec3)
):
    ts = wp.tile_load(scalars, shape=TILE_M)
    tv = wp.tile_load(vecs, shape=TILE_M)
    wp.tile_store(out, ts * tv)


@wp.kernel
def tile_where_kernel(select: int, x: wp.array(dtype=float), y: wp.array(dtype=float), z: wp.array(dtype=float)):
    x_reg = wp.tile_load(x, shape=(TILE_M,), storage="register")
    y_reg = wp.tile_load(y, shape=(TILE_M,), storage="register")
    x_shared = wp.tile_load(x, shape=(TILE_M,), storage="shared")
    y_shared = wp.tile_load(y, shape=(TILE_M,), storage="shared")
    if select == 0:
        s = x_reg
    elif select == 1:
        s = y_reg
    elif select == 2:
        s = x_shared
    else:
        s = y_shared
    wp.tile_store(z, s)


# test_tile_reduce.py
@wp.kernel
def tile_sum_kernel(input: wp.array2d(dtype=float), output: wp.array(dtype=float)):
    i = wp.tid()
    n = input.shape[1]
    count = int(n / TILE_DIM)
    s = wp.tile_zeros(shape=1, dtype=float)
    for j in range(count):
        a = wp.tile_load(input[i], shape=TILE_DIM, offset=j * TILE_DIM)
        s += wp.tile_sum(a) * 0.5
    wp.tile_store(output, s, offset=i)


@wp.kernel
def tile_sum_to_shared_kernel(input: wp.array2d(dtype=float), output: wp.array(dtype=float)):
    i, _lane = wp.tid()
    a = wp.tile_load(input[i], shape=TILE_DIM)
    s = wp.tile_sum(a)
    v = s[0]  # noqa: F841 (as in Warp's test)
    wp.tile_store(output, s * 0.5, offset=i)


@wp.kernel
def tile_min_kernel(input: wp.array2d(dtype=float), output: wp.array(dtype=float)):
    i = wp.tid()
    a = wp.tile_load(input[i], shape=TILE_DIM)
    m = wp.tile_min(a)
    wp.tile_store(output, m, offset=i)


@wp.kernel
def tile_min_kernel_edge_case(x: wp.array2d(dtype=float), y: wp.array(dtype=float)):
    t = wp.tile_load(x, shape=(3, 3))
    min = wp.tile_min(t)
    wp.tile_store(y, min)


@wp.kernel
def tile_argmin_kernel(input: wp.array2d(dtype=float), output: wp.array(dtype=int)):
    i = wp.tid()
    a = wp.tile_load(input[i], shape=TILE_DIM)
    m = wp.tile_argmin(a)
    wp.tile_store(output, m, offset=i)


@wp.kernel
def tile_max_kernel(input: wp.array2d(dtype=float), output: wp.array(dtype=float)):
    i = wp.tid()
    a = wp.tile_load(input[i], shape=TILE_DIM)
    m = wp.tile_max(a)
    wp.tile_store(output, m, offset=i)


@wp.kernel
def tile_argmax_kernel(input: wp.array2d(dtype=float), output: wp.array(dtype=int)):
    i = wp.tid()
    a = wp.tile_load(input[i], shape=TILE_DIM)
    m = wp.tile_argmax(a)
    wp.tile_store(output, m, offset=i)


@wp.kernel
def tile_reduce_custom_kernel(input: wp.array2d(dtype=float), output: wp.array(dtype=float)):
    i = wp.tid()
    a = wp.tile_load(input[i], shape=TILE_DIM)
    m = wp.tile_reduce(wp.mul, a)
    wp.tile_store(output, m, offset=i)


@wp.kernel
def tile_reduce_1d_kernel(output: wp.array(dtype=int)):
    i = wp.tid()
    t = wp.tile(i)
    s = wp.tile_reduce(wp.add, t)
    wp.tile_store(output, s)


@wp.kernel
def tile_scan_inclusive_kernel(input: wp.array2d(dtype=float), output: wp.array2d(dtype=float)):
    i = wp.tid()
    a = wp.tile_load(input[i], shape=TILE_DIM)
    wp.tile_store(output[i], wp.tile_scan_inclusive(a))


# test_tile_matmul.py
@wp.kernel
def tile_grouped_gemm(A: wp.array3d(dtype=float), B: wp.array3d(dtype=float), C: wp.array3d(dtype=float)):
    i = wp.tid()
    a = wp.tile_load(A[i], shape=(TILE_M, TILE_K))
    b = wp.tile_load(B[i], shape=(TILE_K, TILE_N))
    sum = wp.tile_zeros(shape=(TILE_M, TILE_N), dtype=wp.float32)
    wp.tile_matmul(a, b, sum)
    wp.tile_store(C[i], sum)


@wp.kernel
def tile_gemm(A: wp.array2d(dtype=Any), B: wp.array2d(dtype=Any), C: wp.array2d(dtype=Any)):
    i, j = wp.tid()
    sum = wp.tile_zeros(shape=(TILE_M, TILE_N), dtype=A.dtype)
    K = A.shape[1]
    count = int(K / TILE_K)
    for k in range(0, count):
        a = wp.tile_load(A, shape=(TILE_M, TILE_K), offset=(i * TILE_M, k * TILE_K))
        b = wp.tile_load(B, shape=(TILE_K, TILE_N), offset=(k * TILE_K, j * TILE_N))
        wp.tile_matmul(a, b, sum)
    wp.tile_store(C, sum, offset=(i * TILE_M, j * TILE_N))


# test_tile_load.py (out-of-bounds loads read zero padding)
@wp.kernel
def tile_load_1d_kernel(
    input: wp.array1d(dtype=float),
    out_full: wp.array1d(dtype=float),
    out_padded: wp.array1d(dtype=float),
    out_sliced: wp.array1d(dtype=float),
    out_offset: wp.array1d(dtype=float),
):
    full0 = wp.tile_load(input, TILE_M)
    padded0 = wp.tile_load(input, TILE_M, TILE_OFFSET)
    sliced0 = wp.tile_load(input[::2], TILE_M)
    wp.tile_store(out_full, full0)
    wp.tile_store(out_padded, padded0)
    wp.tile_store(out_sliced, sliced0)
    wp.tile_store(out_offset, full0, offset=(TILE_OFFSET,))


@wp.kernel
def tile_load_2d_kernel(
    input: wp.array2d(dtype=float),
    out_full: wp.array2d(dtype=float),
    out_padded: wp.array2d(dtype=float),
    out_offset: wp.array2d(dtype=float),
):
    full0 = wp.tile_load(input, shape=(TILE_M, TILE_N))
    padded0 = wp.tile_load(input, shape=(TILE_M, TILE_N), offset=(TILE_OFFSET, TILE_OFFSET))
    wp.tile_store(out_full, full0)
    wp.tile_store(out_padded, padded0)
    wp.tile_store(out_offset, full0, offset=(TILE_OFFSET, TILE_OFFSET))


@wp.kernel
def tile_atomic_add_kernel(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    a = wp.tile_load(x, shape=TILE_M, offset=i * TILE_M)
    wp.tile_atomic_add(y, a, offset=(0,))


@wp.kernel
def tile_ones_store_kernel(output: wp.array(dtype=float)):
    tile = wp.tile_ones(dtype=float, shape=16)
    wp.tile_store(output, tile)


# examples/tile/example_tile_nbody.py
NBODY_TILE = wp.constant(64)
NBODY_DT = wp.constant(0.016)


@wp.func
def body_body_interaction(p0: wp.vec3, pi: wp.vec3):
    r = pi - p0
    dist_sq = wp.length_sq(r) + 0.1 * 0.1
    inv_dist = 1.0 / wp.sqrt(dist_sq)
    inv_dist_cubed = inv_dist * inv_dist * inv_dist
    return inv_dist_cubed * r


@wp.kernel
def integrate_bodies_tiled(
    old_position: wp.array(dtype=wp.vec3),
    velocity: wp.array(dtype=wp.vec3),
    new_position: wp.array(dtype=wp.vec3),
    num_bodies: int,
):
    i = wp.tid()
    p0 = old_position[i]
    accel = wp.vec3(0.0, 0.0, 0.0)
    for k in range(num_bodies / NBODY_TILE):
        k_tile = wp.tile_load(old_position, shape=NBODY_TILE, offset=k * NBODY_TILE)
        for idx in range(NBODY_TILE):
            pi = k_tile[idx]
            accel += body_body_interaction(p0, pi)
    new_velocity = velocity[i] + accel * NBODY_DT
    new_position[i] = old_position[i] + NBODY_DT * new_velocity


# test_tile_matmul.py: tile_matmul_mixed_precision_kernel (float16 x float32 into float64, alpha and
# beta). Warp's kernel stores the product back into C; here it goes to D (ops return their outputs)
@wp.kernel
def tile_matmul_mixed_precision(
    A: wp.array2d(dtype=wp.float16),
    B: wp.array2d(dtype=wp.float32),
    C: wp.array2d(dtype=wp.float64),
    D: wp.array2d(dtype=wp.float64),
):
    i, j = wp.tid()
    a = wp.tile_load(A, shape=(TILE_M, TILE_K), offset=(i * TILE_M, j * TILE_K))
    b = wp.tile_load(B, shape=(TILE_K, TILE_N), offset=(i * TILE_K, j * TILE_N))
    c = wp.tile_load(C, shape=(TILE_M, TILE_N), offset=(i * TILE_M, j * TILE_N))
    wp.tile_matmul(a, b, c, alpha=0.5, beta=-1.3)
    wp.tile_store(D, c, offset=(i * TILE_M, j * TILE_N))


# test_tile_cholesky.py: tile_math_cholesky (factor A^T + diag(D), solve L L^T x = y); Warp has no
# backward for it yet ("TODO: implement and test backward pass" in its test)
@wp.kernel
def tile_math_cholesky(
    gA: wp.array2d(dtype=wp.float64),
    gD: wp.array1d(dtype=wp.float64),
    gL: wp.array2d(dtype=wp.float64),
    gy: wp.array1d(dtype=wp.float64),
    gx: wp.array1d(dtype=wp.float64),
):
    a = wp.tile_load(gA, shape=(TILE_M, TILE_M), storage="shared")
    d = wp.tile_load(gD, shape=TILE_M, storage="shared")
    y = wp.tile_load(gy, shape=TILE_M, storage="shared")
    a_t = wp.tile_transpose(a)
    b = wp.tile_diag_add(a_t, d)
    l = wp.tile_cholesky(b)  # noqa: E741 (Warp's name)
    x = wp.tile_cholesky_solve(l, y)
    wp.tile_store(gL, l)
    wp.tile_store(gx, x)


# test_tile_fft.py: tile_fft_kernel_vec2f / tile_ifft_kernel_vec2d (the CPU runs Warp's own FFT)
FFT_SIZE = 64


@wp.kernel
def tile_fft_kernel_vec2f(gx: wp.array2d(dtype=wp.vec2f), gy: wp.array2d(dtype=wp.vec2f)):
    xy = wp.tile_load(gx, shape=(FFT_SIZE, FFT_SIZE))
    wp.tile_fft(xy)
    wp.tile_store(gy, xy)


@wp.kernel
def tile_ifft_kernel_vec2d(gx: wp.array2d(dtype=wp.vec2d), gy: wp.array2d(dtype=wp.vec2d)):
    xy = wp.tile_load(gx, shape=(FFT_SIZE, FFT_SIZE))
    wp.tile_ifft(xy)
    wp.tile_store(gy, xy)


# test_tile_sort.py: create_sort_kernel(wp.float32, 33) (keys and values sorted in place in shared memory)
SORT_LENGTH = wp.constant(33)


@wp.kernel(enable_backward=False)
def tile_sort_kernel(
    input_keys: wp.array(dtype=wp.float32),
    input_values: wp.array(dtype=wp.int32),
    output_keys: wp.array(dtype=wp.float32),
    output_values: wp.array(dtype=wp.int32),
):
    keys = wp.tile_load(input_keys, shape=SORT_LENGTH, storage="shared")
    values = wp.tile_load(input_values, shape=SORT_LENGTH, storage="shared")
    wp.tile_sort(keys, values)
    wp.tile_store(output_keys, keys)
    wp.tile_store(output_values, values)


# ---- the table ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One Warp kernel with the launch Warp's test gives it."""

    name: str
    kernel: Any
    launch: str  # "tiled": wp.launch_tiled(dim=grid); "threads": wp.launch(dim=n)
    dim: tuple
    block_dim: int
    inputs: Callable[[np.random.Generator], list]  # call parameters in order (arrays and scalars)
    outputs: dict  # output name -> (shape, numpy dtype)
    grad: bool = True
    rtol: float = 1e-5
    extra: dict = field(default_factory=dict)


def _f(*shape, dtype=np.float32):
    return lambda rng: [rng.standard_normal(shape).astype(dtype)]


def _fs(*shapes, dtype=np.float32):
    return lambda rng: [rng.standard_normal(s).astype(dtype) for s in shapes]


F32, F64, I32 = np.float32, np.float64, np.int32
M, N = 8 * 7, 4 * 5  # Warp's test sizes: TILE_M * 7, TILE_N * 5
GRID2 = (M // 8, N // 4)

CASES = [
    Case("copy_1d", tile_copy_1d_kernel, "tiled", (5,), TILE_DIM, _f(20), {"B": ((20,), F32)}),
    Case("copy_2d", tile_copy_2d_kernel, "tiled", GRID2, TILE_DIM, _f(M, N), {"B": ((M, N), F32)}),
    Case("unary_map_user_f32", tile_unary_map_user_func, "tiled", GRID2, TILE_DIM, _f(M, N), {"output": ((M, N), F32)}),
    Case(
        "unary_map_user_f64",
        tile_unary_map_user_func,
        "tiled",
        GRID2,
        TILE_DIM,
        _f(M, N, dtype=F64),
        {"output": ((M, N), F64)},
    ),
    Case(
        "unary_map_sin_f32", tile_unary_map_builtin_func, "tiled", GRID2, TILE_DIM, _f(M, N), {"output": ((M, N), F32)}
    ),
    Case(
        "unary_map_sin_f64",
        tile_unary_map_builtin_func,
        "tiled",
        GRID2,
        TILE_DIM,
        _f(M, N, dtype=F64),
        {"output": ((M, N), F64)},
    ),
    Case(
        "binary_map_user_f32",
        tile_binary_map_user_func,
        "tiled",
        GRID2,
        TILE_DIM,
        _fs((M, N), (M, N)),
        {"output": ((M, N), F32)},
    ),
    Case(
        "binary_map_user_f64",
        tile_binary_map_user_func,
        "tiled",
        GRID2,
        TILE_DIM,
        _fs((M, N), (M, N), dtype=F64),
        {"output": ((M, N), F64)},
    ),
    Case(
        "binary_map_add",
        tile_binary_map_builtin_func,
        "tiled",
        GRID2,
        TILE_DIM,
        _fs((M, N), (M, N)),
        {"output": ((M, N), F32)},
    ),
    Case("n_map", tile_n_map_kernel, "tiled", (1,), TILE_DIM, _fs(8, 8, 8), {"out": ((8,), F32)}),
    Case("operators", tile_operators, "tiled", (7,), TILE_DIM, _f(7, 8, 4), {"output": ((7, 8, 4), F32)}),
    Case("sum_func", tile_sum_3d_kernel, "tiled", (7,), TILE_DIM, _f(7, 8, 4), {"output": ((7,), F32)}),
    Case("transpose", tile_transpose_kernel, "tiled", (1,), TILE_DIM, _f(8, 4), {"output": ((4, 8), F32)}),
    Case(
        "broadcast_add_1d", tile_broadcast_add_1d_kernel, "tiled", (1,), TILE_DIM, _fs(10, 1), {"output": ((10,), F32)}
    ),
    Case(
        "broadcast_add_2d",
        tile_broadcast_add_2d_kernel,
        "tiled",
        (1,),
        TILE_DIM,
        _fs((10, 10), 10),
        {"output": ((10, 10), F32)},
    ),
    Case("broadcast_grad", tile_broadcast_grad_kernel, "tiled", (1,), TILE_DIM, _f(5), {"b": ((5, 5), F32)}),
    Case("squeeze", tile_squeeze_kernel, "tiled", (1,), TILE_DIM, _f(1, 8, 1), {"y": ((8,), F32)}),
    Case("reshape", tile_reshape_kernel, "tiled", (1,), TILE_DIM, _f(8, 4), {"y": ((32, 1), F32)}),
    Case(
        "mul_elementwise",
        tile_mul_elementwise_kernel,
        "tiled",
        GRID2,
        TILE_DIM,
        _fs((M, N), (M, N)),
        {"out": ((M, N), F32)},
    ),
    Case("div_scalar", tile_div_scalar_kernel, "tiled", GRID2, TILE_DIM, _f(M, N), {"out": ((M, N), F32)}),
    Case(
        "div_elementwise",
        tile_div_elementwise_kernel,
        "tiled",
        GRID2,
        TILE_DIM,
        lambda rng: [rng.standard_normal((M, N)).astype(F32), rng.uniform(1.0, 2.0, (M, N)).astype(F32)],
        {"out": ((M, N), F32)},
    ),
    Case("vec_div_scalar", tile_vec_div_scalar_kernel, "tiled", (1,), TILE_DIM, _f(8, 3), {"out": ((8, 3), F32)}),
    Case(
        "scalar_mul_vec",
        tile_scalar_mul_tile_vec_kernel,
        "tiled",
        (1,),
        TILE_DIM,
        _fs(8, (8, 3)),
        {"out": ((8, 3), F32)},
    ),
    Case("where_register", tile_where_kernel, "tiled", (1,), 32, lambda rng: [0, *_fs(8, 8)(rng)], {"z": ((8,), F32)}),
    Case("where_shared", tile_where_kernel, "tiled", (1,), 32, lambda rng: [3, *_fs(8, 8)(rng)], {"z": ((8,), F32)}),
    Case("reduce_sum", tile_sum_kernel, "tiled", (5,), TILE_DIM, _f(5, 128), {"output": ((5,), F32)}, rtol=1e-4),
    Case(
        "sum_to_shared",
        tile_sum_to_shared_kernel,
        "tiled",
        (5,),
        TILE_DIM,
        _f(5, 64),
        {"output": ((5,), F32)},
        rtol=1e-4,
    ),
    Case("reduce_min", tile_min_kernel, "tiled", (5,), TILE_DIM, _f(5, 64), {"output": ((5,), F32)}),
    Case("reduce_min_edge", tile_min_kernel_edge_case, "tiled", (1,), 64, _f(3, 3), {"y": ((1,), F32)}),
    Case("reduce_argmin", tile_argmin_kernel, "tiled", (5,), TILE_DIM, _f(5, 64), {"output": ((5,), I32)}, grad=False),
    Case("reduce_max", tile_max_kernel, "tiled", (5,), TILE_DIM, _f(5, 64), {"output": ((5,), F32)}),
    Case("reduce_argmax", tile_argmax_kernel, "tiled", (5,), TILE_DIM, _f(5, 64), {"output": ((5,), I32)}, grad=False),
    Case(
        "reduce_custom_mul",
        tile_reduce_custom_kernel,
        "tiled",
        (5,),
        TILE_DIM,
        lambda rng: [rng.uniform(0.9, 1.1, (5, 64)).astype(F32)],
        {"output": ((5,), F32)},
        rtol=1e-4,
    ),
    Case(
        "scan_inclusive",
        tile_scan_inclusive_kernel,
        "tiled",
        (5,),
        TILE_DIM,
        _f(5, 64),
        {"output": ((5, 64), F32)},
        rtol=1e-4,
    ),
    Case(
        "grouped_gemm",
        tile_grouped_gemm,
        "tiled",
        (4,),
        TILE_DIM,
        _fs((4, 8, 8), (4, 8, 4)),
        {"C": ((4, 8, 4), F32)},
        rtol=1e-4,
    ),
    Case("gemm_f32", tile_gemm, "tiled", (2, 3), TILE_DIM, _fs((16, 16), (16, 12)), {"C": ((16, 12), F32)}, rtol=1e-4),
    Case("gemm_f64", tile_gemm, "tiled", (2, 3), TILE_DIM, _fs((16, 16), (16, 12), dtype=F64), {"C": ((16, 12), F64)}),
    Case(
        "load_1d_padding",
        tile_load_1d_kernel,
        "tiled",
        (1,),
        TILE_DIM,
        _f(8),
        {n: ((8,), F32) for n in ("out_full", "out_padded", "out_sliced", "out_offset")},
    ),
    Case(
        "load_2d_padding",
        tile_load_2d_kernel,
        "tiled",
        (1,),
        TILE_DIM,
        _f(8, 4),
        {n: ((8, 4), F32) for n in ("out_full", "out_padded", "out_offset")},
    ),
    Case("atomic_add", tile_atomic_add_kernel, "tiled", (4,), TILE_DIM, _f(32), {"y": ((8,), F32)}, rtol=1e-4),
    Case(
        "ones_no_tid",
        tile_ones_store_kernel,
        "tiled",
        (1,),
        TILE_DIM,
        lambda rng: [],
        {"output": ((16,), F32)},
        grad=False,
    ),
    Case(
        "nbody",
        integrate_bodies_tiled,
        "threads",
        (128,),
        64,
        lambda rng: [*_fs((128, 3), (128, 3))(rng), 128],
        {"new_position": ((128, 3), F32)},
        rtol=1e-4,
    ),
    Case(
        "matmul_mixed_precision",
        tile_matmul_mixed_precision,
        "tiled",
        (1, 1),
        32,
        lambda rng: [
            rng.random((8, 8)).astype(np.float16),
            rng.random((8, 4)).astype(F32),
            rng.random((8, 4)).astype(F64),
        ],
        {"D": ((8, 4), F64)},
        rtol=1e-3,
    ),
    Case(
        "cholesky_solve",
        tile_math_cholesky,
        "tiled",
        (1, 1),
        32,
        lambda rng: [rng.random((8, 8)), 8.0 + rng.random(8), rng.standard_normal(8)],
        {"gL": ((8, 8), F64), "gx": ((8,), F64)},
        grad=False,
        rtol=1e-9,
    ),
    Case(
        "fft_f32", tile_fft_kernel_vec2f, "tiled", (1,), TILE_DIM, _f(64, 64, 2), {"gy": ((64, 64, 2), F32)}, rtol=1e-4
    ),
    Case(
        "ifft_f64",
        tile_ifft_kernel_vec2d,
        "tiled",
        (1,),
        TILE_DIM,
        _f(64, 64, 2, dtype=F64),
        {"gy": ((64, 64, 2), F64)},
        rtol=1e-9,
    ),
    Case(
        "sort_keys_values",
        tile_sort_kernel,
        "tiled",
        (1,),
        32,
        lambda rng: [rng.permutation(33).astype(F32) * 1.5 - 7, np.arange(33, dtype=I32)],
        {"output_keys": ((33,), F32), "output_values": ((33,), I32)},
        grad=False,
    ),
]


# ---- Warp's own launch, the reference -------------------------------------------------------------


def _is_float(a: Any) -> bool:
    return isinstance(a, np.ndarray) and a.dtype.kind == "f"


def _params(case: Case) -> list:
    return [p for p in case.kernel.adj.args]


def _warp_arrays(case: Case, values: list, device: str, requires_grad: bool) -> list:
    """The call values as Warp arrays of the kernel's parameter types, on ``device``."""
    out = []
    for p, v in zip(_params(case), values):
        if isinstance(v, np.ndarray):
            dtype = p.type.dtype if p.type.dtype is not Any else wp.dtype_from_numpy(v.dtype)
            out.append(wp.array(v, dtype=dtype, device=device, requires_grad=requires_grad and _is_float(v)))
        else:
            out.append(v)
    return out


def _reference(case: Case, values: list, seeds: dict, device: str) -> tuple[dict, list]:
    """Outputs and input gradients (cotangent ``seeds``) of Warp's own launch on ``device``."""
    args = _warp_arrays(case, values, device, case.grad)
    outs = {
        n: wp.zeros(
            shape[:-1] if _vec_out(case, n) else shape,
            dtype=_out_type(case, n, dtype),
            device=device,
            requires_grad=case.grad,
        )
        for n, (shape, dtype) in case.outputs.items()
    }
    launch = wp.launch_tiled if case.launch == "tiled" else wp.launch
    tape = wp.Tape()
    with tape:
        given = iter(args)
        ordered = [outs[p.label] if p.label in outs else next(given) for p in _params(case)]
        launch(case.kernel, dim=list(case.dim), inputs=ordered, block_dim=case.block_dim, device=device)
    values_out = {n: a.numpy().reshape(case.outputs[n][0]) for n, a in outs.items()}
    grads = []
    if case.grad:
        tape.backward(grads={a: wp.array(seeds[n], dtype=a.dtype, device=device) for n, a in outs.items()})
        grads = [a.grad.numpy().reshape(v.shape) if _is_float(v) else None for a, v in zip(args, values)]
    return values_out, grads


def _out_param(case: Case, name: str):
    return next(p for p in _params(case) if p.label == name)


def _vec_out(case: Case, name: str) -> bool:
    return wp.types.type_is_vector(_out_param(case, name).type.dtype)


def _out_type(case: Case, name: str, dtype: Any) -> Any:
    t = _out_param(case, name).type.dtype
    return wp.dtype_from_numpy(np.dtype(dtype)) if t is Any else t


def _seeds(case: Case, rng: np.random.Generator) -> dict:
    return {n: rng.standard_normal(shape).astype(dtype) for n, (shape, dtype) in case.outputs.items()}


# ---- the frameworks -------------------------------------------------------------------------------

FRAMEWORKS = ["numpy", "warp", "torch", "jax", "paddle"]


def _need(framework: str) -> None:
    if framework in ("torch", "jax", "paddle") and importlib.util.find_spec(framework) is None:
        pytest.skip(f"{framework} is not installed")


def _op(case: Case) -> interop.Op:
    return interop.op(case.kernel, outputs=list(case.outputs), block_dim=case.block_dim)


def _call(framework: str, case: Case, values: list, seeds: dict, device: str) -> tuple[dict, list | None]:
    """The op called from ``framework`` with Warp's launch dims: its outputs (NumPy) and the gradients
    of sum(seed * output) with respect to the float array inputs (None where the framework has none)."""
    op = _op(case)
    kw = {"launch_dims": case.dim, "output_dims": {n: s for n, (s, _) in case.outputs.items()}}
    names = list(case.outputs)
    if not any(isinstance(v, np.ndarray) for v in values):
        kw["framework"] = framework
    if framework == "numpy":
        if device != "cpu":
            pytest.skip("NumPy arrays live on the CPU")
        res = op(*values, **kw)
        return _as_dict(names, res, np.asarray), None
    if framework == "warp":
        args = _warp_arrays(case, values, device, case.grad)
        if not args:
            kw["framework"] = "warp"
            res = op(**kw)
            return _as_dict(names, res, lambda a: a.numpy()), None
        tape = wp.Tape()
        with tape:
            res = op(*args, **kw)
        out = _as_dict(names, res, lambda a: a.numpy())
        if not case.grad:
            return out, None
        res = res if isinstance(res, tuple) else (res,)
        tape.backward(grads={a: wp.array(seeds[n], dtype=a.dtype, device=device) for n, a in zip(names, res)})
        return out, [a.grad.numpy() if _is_float(v) else None for a, v in zip(args, values)]
    if framework == "torch":
        import torch

        dev = "cpu" if device == "cpu" else "cuda"
        args = [
            torch.tensor(v, device=dev, requires_grad=case.grad and _is_float(v)) if isinstance(v, np.ndarray) else v
            for v in values
        ]
        if not args and device != "cpu":
            pytest.skip("a call without arrays runs where torch puts new tensors: the CPU")
        res = op(*args, **kw)
        out = _as_dict(names, res, lambda a: a.detach().cpu().numpy())
        if not case.grad:
            return out, None
        res = res if isinstance(res, tuple) else (res,)
        total = sum((r * torch.tensor(seeds[n], device=dev)).sum() for n, r in zip(names, res))
        diff = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
        got = iter(torch.autograd.grad(total, diff))
        return out, [next(got).cpu().numpy() if isinstance(a, torch.Tensor) and a.requires_grad else None for a in args]
    if framework == "jax":
        import jax

        if any(isinstance(v, np.ndarray) and v.dtype == F64 for v in values) and not jax.config.jax_enable_x64:
            pytest.skip("JAX has 64-bit types off (jax_enable_x64): float64 arrays become float32")
        jdev = jax.devices("cpu" if device == "cpu" else "gpu")[0]
        arrays = [i for i, v in enumerate(values) if isinstance(v, np.ndarray)]
        floats = [i for i in arrays if _is_float(values[i])]

        def f(*fl):
            vals = [jax.device_put(v, jdev) if isinstance(v, np.ndarray) else v for v in values]
            for i, x in zip(floats, fl):
                vals[i] = x
            r = op(*vals, **kw)
            return r if isinstance(r, tuple) else (r,)

        if not arrays:
            with jax.default_device(jdev):
                res = jax.jit(lambda: op(**kw))()
            return _as_dict(names, res, np.asarray), None
        prim = [jax.device_put(values[i], jdev) for i in floats]
        res, vjp = jax.vjp(f, *prim)
        out = _as_dict(names, res, np.asarray)
        if not case.grad:
            return out, None
        cts = tuple(jax.device_put(seeds[n], jdev) for n in names)
        got = dict(zip(floats, vjp(cts)))
        return out, [np.asarray(got[i]) if i in got else None for i in range(len(values))]
    if framework == "paddle":
        import paddle

        place = "cpu" if device == "cpu" else "gpu"
        paddle.set_device(place)
        args = []
        for v in values:
            if isinstance(v, np.ndarray):
                t = paddle.to_tensor(v, place=place)
                t.stop_gradient = not (case.grad and _is_float(v))
                args.append(t)
            else:
                args.append(v)
        res = op(*args, **kw)
        out = _as_dict(names, res, lambda a: a.numpy())
        if not case.grad:
            return out, None
        res = res if isinstance(res, tuple) else (res,)
        total = sum((r * paddle.to_tensor(seeds[n], place=place)).sum() for n, r in zip(names, res))
        diff = [a for a in args if isinstance(a, paddle.Tensor) and not a.stop_gradient]
        got = iter(paddle.grad(total, diff))
        return out, [next(got).numpy() if isinstance(a, paddle.Tensor) and not a.stop_gradient else None for a in args]
    raise AssertionError(framework)


def _as_dict(names: list, res: Any, to_np: Callable) -> dict:
    res = res if isinstance(res, tuple) else (res,)
    assert len(res) == len(names), f"the op returned {len(res)} arrays for outputs {names}"
    return {n: to_np(r) for n, r in zip(names, res)}


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_warp_tile_kernel_through_framework(case, framework, device):
    _need(framework)
    if framework == "numpy" and device != "cpu":
        pytest.skip("NumPy arrays live on the CPU")
    rng = np.random.default_rng(7)
    values = case.inputs(rng)
    seeds = _seeds(case, rng)
    ref, ref_grads = _reference(case, values, seeds, device)
    got, grads = _call(framework, case, values, seeds, device)
    for n, (shape, dtype) in case.outputs.items():
        assert got[n].shape == shape, f"{case.name}: output {n!r} has shape {got[n].shape}, Warp's {shape}"
        assert got[n].dtype == np.dtype(dtype), f"{case.name}: output {n!r} is {got[n].dtype}, Warp's {dtype}"
        np.testing.assert_allclose(got[n], ref[n], rtol=case.rtol, atol=case.rtol, err_msg=f"{case.name}: {n}")
    if grads is None or not case.grad:
        return
    for k, (g, r) in enumerate(zip(grads, ref_grads)):
        if r is None:
            continue
        assert g is not None, f"{case.name}: no gradient for argument {k}"
        np.testing.assert_allclose(
            np.asarray(g).reshape(r.shape), r, rtol=case.rtol, atol=case.rtol, err_msg=f"{case.name}: grad {k}"
        )


def test_the_suite_holds_forty_of_warps_tile_kernels():
    assert len({c.name for c in CASES}) == len(CASES) >= 40


# ---- traced paths: torch.compile, jax.jit, vmap (a representative subset) -------------------------

#: a launch_tiled kernel over a 2-d grid, a tile_map of a builtin, a reduction, a view of a 3-d array
#: (tile_load(input[i])), broadcasting, a tile_matmul GEMM, and the wp.launch-form n-body kernel
TRACED = ["copy_2d", "unary_map_sin_f32", "reduce_sum", "operators", "broadcast_add_2d", "gemm_f32", "nbody"]
TRACED_CASES = [c for c in CASES if c.name in TRACED]
TRACED_PATHS = ["torch_compile", "torch_vmap", "jax_jit", "jax_vmap", "jax_jit_vmap"]


def _floats_of(values: list) -> list[int]:
    return [i for i, v in enumerate(values) if _is_float(v)]


def _traced_call(path: str, case: Case, values: list, seeds: dict, device: str, batch: list | None):
    """The op called inside ``path`` with Warp's launch dims: outputs (NumPy) and, where the path
    differentiates (torch.compile, jax.jit), the gradients of sum(seed * output) per float input.
    Under vmap ``batch`` holds each float input's batched values (the scalars stay unbatched)."""
    op = _op(case)
    kw = {"launch_dims": case.dim, "output_dims": {n: s for n, (s, _) in case.outputs.items()}}
    names = list(case.outputs)
    floats = _floats_of(values)
    framework = path.split("_")[0]
    _need(framework)

    def call(*fl):
        vals = list(values)
        for i, x in zip(floats, fl):
            vals[i] = x
        r = op(*vals, **kw)
        return r if isinstance(r, tuple) else (r,)

    if framework == "torch":
        import torch

        dev = "cpu" if device == "cpu" else "cuda"
        if path == "torch_vmap":
            res = torch.func.vmap(call)(*[torch.tensor(b, device=dev) for b in batch])
            return _as_dict(names, res, lambda a: a.cpu().numpy()), None
        prim = [torch.tensor(values[i], device=dev, requires_grad=True) for i in floats]
        torch.compiler.reset()
        res = torch.compile(call, backend="aot_eager", fullgraph=True)(*prim)
        total = sum((r * torch.tensor(seeds[n], device=dev)).sum() for n, r in zip(names, res))
        got = dict(zip(floats, torch.autograd.grad(total, prim)))
        return _as_dict(names, res, lambda a: a.detach().cpu().numpy()), [
            got[i].cpu().numpy() if i in got else None for i in range(len(values))
        ]
    import jax
    import jax.numpy as jnp

    jdev = jax.devices("cpu" if device == "cpu" else "gpu")[0]
    if path in ("jax_vmap", "jax_jit_vmap"):
        vm = jax.vmap(call)
        res = (jax.jit(vm) if path == "jax_jit_vmap" else vm)(*[jax.device_put(b, jdev) for b in batch])
        return _as_dict(names, res, np.asarray), None
    prim = [jax.device_put(values[i], jdev) for i in floats]
    cts = [jax.device_put(seeds[n], jdev) for n in names]

    def loss(*fl):
        r = call(*fl)
        return sum(jnp.sum(x * c) for x, c in zip(r, cts)), r

    (_, res), gs = jax.jit(jax.value_and_grad(loss, argnums=tuple(range(len(prim))), has_aux=True))(*prim)
    got = dict(zip(floats, gs))
    return _as_dict(names, res, np.asarray), [np.asarray(got[i]) if i in got else None for i in range(len(values))]


@pytest.mark.parametrize("path", TRACED_PATHS)
@pytest.mark.parametrize("case", TRACED_CASES, ids=[c.name for c in TRACED_CASES])
def test_warp_tile_kernel_traced(case, path, device):
    """Warp's tile kernels inside torch.compile(fullgraph=True) (values and gradients through the
    compiled graph), jax.jit (of value_and_grad), torch.func.vmap, jax.vmap and jit(vmap) (a batch of
    two calls): each equals Warp's own launch (and wp.Tape) on the same device."""
    rng = np.random.default_rng(7)
    values = case.inputs(rng)
    seeds = _seeds(case, rng)
    batch = None
    if "vmap" in path:
        other = case.inputs(np.random.default_rng(8))
        per = [_reference(case, v, seeds, device)[0] for v in (values, other)]
        ref = {n: np.stack([p[n] for p in per]) for n in case.outputs}
        ref_grads = None
        batch = [np.stack([values[i], other[i]]) for i in _floats_of(values)]
    else:
        ref, ref_grads = _reference(case, values, seeds, device)
    got, grads = _traced_call(path, case, values, seeds, device, batch)
    for n in case.outputs:
        assert got[n].shape == ref[n].shape, f"{case.name} {path}: output {n!r} has shape {got[n].shape}"
        np.testing.assert_allclose(got[n], ref[n], rtol=case.rtol, atol=case.rtol, err_msg=f"{case.name} {path}: {n}")
    if grads is None or not case.grad:
        return
    for k, (g, r) in enumerate(zip(grads, ref_grads)):
        if r is not None:
            np.testing.assert_allclose(
                np.asarray(g).reshape(r.shape),
                r,
                rtol=case.rtol,
                atol=case.rtol,
                err_msg=f"{case.name} {path}: grad {k}",
            )
