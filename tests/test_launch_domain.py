"""The launch a kernel is written for, when the call gives no ``launch_dims`` (issue 23, item 4).

The default comes from the arrays the kernel indexes with its bare thread index anywhere in its
body (README, "Launch dimensions"); values are compared with ``wp.launch`` over the domain the
kernel's author launches it on.
"""

from __future__ import annotations

import catalogue as cat
import numpy as np
import pytest
import warp as wp

import interop
from interop._extent import thread_domain

F = np.float32


def _spring_args(seed: int = 0):
    return cat.spring_args(np.random.default_rng(seed), F)


def _wp_springs(args) -> np.ndarray:
    """Forces as newton computes them: wp.launch over the springs."""
    x, v, idx, rest, ke, kd, f = args
    wf = wp.array(f, dtype=wp.vec3, device="cpu")
    vec = [wp.array(a, dtype=wp.vec3, device="cpu") for a in (x, v)]
    wp.launch(
        cat.eval_springs,
        dim=len(rest),
        inputs=[*vec, *(wp.array(a, device="cpu") for a in (idx, rest, ke, kd)), wf],
        device=wf.device,
    )
    return wf.numpy()


def _to(fw: str, a):
    return cat.to_fw(fw.split(".")[0], a)


def _need(fw: str) -> None:
    """Skip where the framework is not installed (the JAX-only and other version-matrix sessions)."""
    if fw != "numpy":
        pytest.importorskip(fw.split(".")[0])


def _np(x) -> np.ndarray:
    return np.asarray(x.numpy() if hasattr(x, "numpy") and not isinstance(x, np.ndarray) else x)


@pytest.mark.parametrize("fw", ["numpy", "torch", "jax", "jax.jit", "paddle"])
def test_springs_run_one_thread_per_spring_like_wp_launch(fw):
    _need(fw)
    # the first array holds 5 particles, the kernel iterates over 9 springs after a return guard
    args = _spring_args()
    want = _wp_springs(args)
    op = interop.op(cat.eval_springs, in_out=["f"], outputs=0)
    call = op
    if fw == "jax.jit":
        import jax

        call = jax.jit(op)
    got = call(*(_to(fw, a) for a in args))
    np.testing.assert_allclose(_np(got), want, rtol=1e-5, atol=1e-5)
    # the forces of a launch over the 5 particles differ: the old default was wrong
    short = op(*args, launch_dims=len(args[0]))
    assert not np.allclose(short, want, atol=1e-3)


def test_springs_forces_as_an_output_sized_by_output_dims():
    args = _spring_args(1)
    x = args[0]
    op = interop.op(cat.eval_springs, output_dims={"f": (len(x), 3)})
    got = op(*args[:-1])
    zero = list(args)
    zero[-1] = np.zeros_like(args[-1])
    np.testing.assert_allclose(got, _wp_springs(zero), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fw", ["numpy", "torch", "jax", "jax.jit", "paddle"])
def test_indexed_arrays_that_disagree_are_named(fw):
    _need(fw)
    args = list(_spring_args())
    args[4] = args[4][:-1]  # 8 stiffnesses for 9 springs
    op = interop.op(cat.eval_springs, in_out=["f"], outputs=0)
    call = op
    if fw == "jax.jit":
        import jax

        call = jax.jit(op)
    with pytest.raises(interop.ArgumentError) as ei:
        call(*(_to(fw, a) for a in args))
    msg = str(ei.value)
    assert "op 'eval_springs': cannot infer the launch dimensions" in msg
    assert "'spring_rest_lengths' dim 0 has extent 9" in msg and "'spring_stiffness' dim 0 has extent 8" in msg
    assert "launch_dims=" in msg
    # the caller can still say the launch
    np.testing.assert_allclose(op(*args[:4], args[4], args[5][:8], args[6], launch_dims=8).shape, (5, 3))


@wp.kernel
def outer(a: wp.array(dtype=float), b: wp.array(dtype=float), out: wp.array2d(dtype=float)):
    i, j = wp.tid()
    out[i, j] = a[i] * b[j]


def test_each_launch_dimension_from_the_array_its_index_walks():
    a, b = np.arange(3, dtype=F) + 1, np.arange(4, dtype=F) + 1
    np.testing.assert_array_equal(interop.op(outer)(a, b), np.outer(a, b))


@wp.kernel
def ramp(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = x[0] * float(i)


def test_a_kernel_indexing_no_input_by_thread_runs_over_the_first_array_input():
    """Warp's own default (its guide's funky_kernel indexes a[i % a.shape[0]] and relies on it)."""
    op = interop.op(ramp)
    x = np.array([2.0, 5.0, 7.0], F)
    np.testing.assert_array_equal(op(x), [0, 2, 4])
    np.testing.assert_array_equal(op(x, launch_dims=4), [0, 2, 4, 6])


@wp.struct
class Bonds:
    k: wp.array(dtype=float)


@wp.kernel
def bond_energy(x: wp.array(dtype=float), bonds: Bonds, e: wp.array(dtype=float)):
    t = wp.tid()
    e[t] = bonds.k[t] * x[0]


def test_a_struct_field_indexed_by_thread_sets_the_launch():
    k = np.arange(5, dtype=F)
    got = interop.op(bond_energy)(np.array([2.0, 0.0, 0.0], F), {"k": k})
    np.testing.assert_array_equal(got, 2.0 * k)


@wp.kernel
def inline_tid(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    out[wp.tid()] = a[wp.tid()] * 2.0


@wp.func
def sample(a: wp.array(dtype=float), i: int):
    return a[i] * 3.0


@wp.kernel
def via_func(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = sample(a, i)


@pytest.mark.parametrize(
    "kernel, want",
    [
        (inline_tid, [2, 4, 6]),  # a[wp.tid()]
        (cat.shifted_kernel, [2, 3, 0]),  # a[i + 1]: the first array walked by a shifted index
        (via_func, [3, 6, 9]),  # the index goes into a wp.func: the first array, as before
    ],
)
def test_kernels_written_over_their_first_array_keep_its_shape(kernel, want):
    np.testing.assert_array_equal(interop.op(kernel)(np.array([1, 2, 3], F)), want)


@pytest.mark.parametrize(
    "kernel, arrays, domain, escapes",
    [
        (
            cat.eval_springs,
            [
                ("x", 1),
                ("v", 1),
                ("spring_indices", 1),
                ("spring_rest_lengths", 1),
                ("spring_stiffness", 1),
                ("spring_damping", 1),
                ("f", 1),
            ],
            ((("spring_rest_lengths", 0, True), ("spring_stiffness", 0, True), ("spring_damping", 0, True)),),
            False,
        ),
        (
            outer,
            [("a", 1), ("b", 1), ("out", 2)],
            ((("a", 0, True), ("out", 0, True)), (("b", 0, True), ("out", 1, True))),
            False,
        ),
        (cat.shifted_kernel, [("a", 1), ("out", 1)], ((("out", 0, True), ("a", 0, False)),), False),
        (via_func, [("a", 1), ("out", 1)], ((("out", 0, True),),), True),
        (ramp, [("x", 1), ("out", 1)], ((("out", 0, True),),), False),
    ],
)
def test_thread_domain_found(kernel, arrays, domain, escapes):
    assert thread_domain(kernel, "kernel", arrays) == (domain, escapes)
