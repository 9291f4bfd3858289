"""Forward mode through struct values and default arguments (issue 42, row 2).

A ``@wp.struct`` of values (floats, vectors, ints) built in the code, filled field by field or
returned by a ``wp.func``, and handed to ``wp.func``s: its tangent is a struct of the same type
holding the float fields' tangents. A ``wp.func`` called without its defaulted arguments gets
them written out. Each checked as every generated tangent kernel is (``tests/test_tangent_kernels.py``'s
:func:`check_tangent`): central differences and ``J t`` from Warp's reverse mode, float64, on the CPU or
``INTEROP_TANGENT_DEVICE``; second order through the op in JAX. A struct whose fields hold arrays
stays refused, naming it.
"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp
from test_tangent_kernels import Case, check_tangent

import interop
from interop import _tangent

F64 = wp.float64
N = 4


@wp.struct
class Shape:
    kind: int
    scale: wp.vec3d
    r: F64


@wp.func
def make_shape(k: int, s: wp.vec3d, r: F64) -> Shape:
    out = Shape()
    out.kind = k
    out.scale = s * r
    out.r = r * r
    return out


@wp.func
def support(g: Shape, d: wp.vec3d) -> F64:
    if g.kind == 0:
        return wp.dot(g.scale, d) + g.r
    return wp.length(g.scale) * g.r


@wp.kernel
def struct_values(x: wp.array(dtype=wp.vec3d), r: wp.array(dtype=F64), y: wp.array(dtype=F64)):
    i = wp.tid()
    g = make_shape(i % 2, x[i], r[i])  # a struct returned by a wp.func
    h = Shape()  # built field by field
    h.kind = 0
    h.scale = x[i] * F64(2.0)
    h.r = F64(1.0)
    y[i] = support(g, x[i]) + support(h, wp.vec3d(F64(1.0), F64(0.5), F64(0.25)))


@wp.func
def soft(x: F64, eps: F64 = F64(1.0e-3), k: int = 2):  # noqa: B008 (a Warp default, typed)
    return wp.sqrt(x * x + eps) * F64(k)


@wp.kernel
def defaults(x: wp.array(dtype=F64), y: wp.array(dtype=F64)):
    i = wp.tid()
    y[i] = soft(x[i]) + soft(x[i], F64(0.5)) + soft(x[i], k=3)


@wp.struct
class Holder:
    values: wp.array(dtype=F64)
    w: F64


@wp.func
def read(h: Holder, i: int) -> F64:
    return h.values[i] * h.w


@wp.kernel
def struct_with_array(x: wp.array(dtype=F64), y: wp.array(dtype=F64)):
    i = wp.tid()
    h = Holder()
    h.values = x
    h.w = x[i]
    y[i] = read(h, i)


def test_struct_values_handed_to_and_returned_by_funcs():
    rng = np.random.default_rng(1)
    case = Case(struct_values, N, {"x": (-1, 1), "r": (0.5, 2)}, {"x": (N, 3), "r": (N,), "y": (N,)}, ("y",))
    inputs = {"x": rng.normal(size=(N, 3)), "r": rng.uniform(0.5, 2, N)}
    check_tangent(case, inputs, {"x": rng.normal(size=(N, 3)), "r": rng.normal(size=N)})


def test_default_arguments_written_out():
    rng = np.random.default_rng(2)
    case = Case(defaults, N, {"x": (-2, 2)}, {"x": (N,), "y": (N,)}, ("y",))
    check_tangent(case, {"x": rng.uniform(-2, 2, N)}, {"x": rng.normal(size=N)})


def test_a_struct_holding_arrays_is_refused_naming_its_fields():
    with pytest.raises(interop.UnsupportedError, match=r"struct Holder .*field\(s\) values hold arrays"):
        _tangent.tangent_kernel(struct_with_array, {"x": True, "y": True}, "struct_with_array")


def test_second_order_through_struct_values_in_jax():
    """The tangent kernel's adjoint (Warp's, through the struct tangents): the Hessian-vector product
    of sum(y) against central differences of jax.grad."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    with jax.enable_x64(True):  # this test's arrays are float64; the setting goes back after it
        op = interop.op(struct_values)
        cpu = jax.devices("cpu")[0]
        rng = np.random.default_rng(3)
        x = jax.device_put(jnp.asarray(rng.normal(size=(N, 3))), cpu)
        r = jax.device_put(jnp.asarray(rng.uniform(0.5, 2, N)), cpu)
        vx = jax.device_put(jnp.asarray(rng.normal(size=(N, 3))), cpu)
        vr = jax.device_put(jnp.asarray(rng.normal(size=N)), cpu)

        def f(a, b):
            return jnp.sum(op(a, b) ** 2)

        g = jax.grad(f, argnums=(0, 1))
        hv = jax.jvp(g, (x, r), (vx, vr))[1]
        eps = 1e-6
        hi, lo = g(x + eps * vx, r + eps * vr), g(x - eps * vx, r - eps * vr)
        for got, a, b in zip(hv, hi, lo):
            np.testing.assert_allclose(
                np.asarray(got), (np.asarray(a) - np.asarray(b)) / (2 * eps), rtol=1e-5, atol=1e-7
            )


# ---- a wp.func returning a flag or a key beside floats (newton's sm_90 sweep found these) --------
@wp.func
def flag_and_key(x: F64):
    if x > F64(0.0):
        return True, wp.uint64(7)
    return False, wp.uint64(3)


@wp.func
def is_big(x: F64):
    return x > F64(1.0)


@wp.kernel
def flags(x: wp.array(dtype=F64), y: wp.array(dtype=F64)):
    i = wp.tid()
    f, key = flag_and_key(x[i])
    b = is_big(x[i] * x[i])
    if f and b:
        y[i] = x[i] * x[i] * F64(float(key))
    else:
        y[i] = wp.sin(x[i])


def test_funcs_returning_bools_and_unsigned_keys():
    """Their results get a zero tangent of their own type (Warp has no bool() nor uint64() without an
    argument: the tangent function failed to build before)."""
    rng = np.random.default_rng(4)
    case = Case(flags, 6, {"x": (-2, 2)}, {"x": (6,), "y": (6,)}, ("y",))
    check_tangent(case, {"x": rng.uniform(-2, 2, 6)}, {"x": rng.normal(size=6)})
