"""The guide's kernels (Warp's interoperability guide), defined once for every test that runs them."""

import warp as wp


@wp.kernel
def saxpy(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a * x[i] + y[i]


@wp.kernel
def triple_kernel(input: wp.array(dtype=float), output: wp.array(dtype=float)):
    tid = wp.tid()
    output[tid] = 3.0 * input[tid]


@wp.kernel
def add_kernel(a: wp.array(dtype=int), b: wp.array(dtype=int), output: wp.array(dtype=int)):
    tid = wp.tid()
    output[tid] = a[tid] + b[tid]


@wp.kernel
def add_float_kernel(a: wp.array(dtype=float), b: wp.array(dtype=float), output: wp.array(dtype=float)):
    # the guide's add_kernel on float arrays (its JAX vmap example)
    tid = wp.tid()
    output[tid] = a[tid] + b[tid]


@wp.kernel
def sincos_kernel(angle: wp.array(dtype=float), sin_out: wp.array(dtype=float), cos_out: wp.array(dtype=float)):
    tid = wp.tid()
    sin_out[tid] = wp.sin(angle[tid])
    cos_out[tid] = wp.cos(angle[tid])


@wp.kernel
def diagonal_kernel(output: wp.array(dtype=wp.mat33)):
    tid = wp.tid()
    output[tid] = wp.mat33(1.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 3.0)


@wp.kernel
def fill_seeded_kernel(value: float, seed: wp.uint32, output: wp.array(dtype=float)):
    tid = wp.tid()
    output[tid] = value + float(seed) * float(tid)


@wp.kernel
def scale_kernel(a: wp.array(dtype=float), s: float, output: wp.array(dtype=float)):
    tid = wp.tid()
    output[tid] = a[tid] * s


@wp.kernel
def matmul_kernel(a: wp.array2d(dtype=float), b: wp.array2d(dtype=float), c: wp.array2d(dtype=float)):
    i, j = wp.tid()
    N = a.shape[0]
    K = a.shape[1]
    M = b.shape[1]
    if i < N and j < M:
        s = wp.float32(0)
        for k in range(K):
            s += a[i, k] * b[k, j]
        c[i, j] = s


@wp.kernel
def rowsum_kernel(matrix: wp.array2d(dtype=float), sums: wp.array1d(dtype=float)):
    i, j = wp.tid()
    wp.atomic_add(sums, i, matrix[i, j])


@wp.kernel
def lookup_kernel(table: wp.array(dtype=float), indices: wp.array(dtype=int), output: wp.array(dtype=float)):
    i = wp.tid()
    output[i] = table[indices[i]]


@wp.kernel
def scale_vec_kernel(a: wp.array(dtype=wp.vec2), s: float, output: wp.array(dtype=wp.vec2)):
    tid = wp.tid()
    output[tid] = a[tid] * s


@wp.kernel
def vecmat_kernel(
    a: wp.array(dtype=float),
    b: wp.array(dtype=wp.vec3),
    c: wp.array(dtype=wp.mat22),
    d: wp.array(dtype=float),
    e: wp.array(dtype=wp.vec3),
    f: wp.array(dtype=wp.mat22),
):
    # the guide leaves the body out; each output reads its own input so packing errors show:
    # d = 2 a, e = b a, f = transpose(c)
    i = wp.tid()
    d[i] = 2.0 * a[i]
    e[i] = b[i] * a[i]
    f[i] = wp.transpose(c[i])


@wp.kernel
def scale_sum_square(a: wp.array(dtype=float), b: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
    tid = wp.tid()
    out[tid] = (a[tid] * s + b[tid]) ** 2.0


@wp.kernel
def multi_output(
    a: wp.array(dtype=float), b: wp.array(dtype=float), s: float, c: wp.array(dtype=float), d: wp.array(dtype=float)
):
    tid = wp.tid()
    c[tid] = a[tid] ** 2.0
    d[tid] = a[tid] * b[tid] * s


# the guide's Python-function example: two kernel launches, described as one op
def example_func(
    a: wp.array(dtype=float),
    b: wp.array(dtype=wp.vec2),
    s: float,
    c: wp.array(dtype=float),
    d: wp.array(dtype=wp.vec2),
):
    wp.launch(scale_kernel, dim=a.shape, inputs=[a, s], outputs=[c], device=a.device)
    wp.launch(scale_vec_kernel, dim=b.shape, inputs=[b, s], outputs=[d], device=b.device)
