"""Where two JAX features meet (issue 21): the x64 mode flipped between calls of one op, static
scalars whose values compare equal but differ (``-0.0``/``0.0``), and vector/matrix scalar
parameters given as components that are traced. Every call is compared with ``wp.launch`` on the
same values (or with the kernel's analytic gradient, for linear kernels)."""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from _devices import jax_device  # noqa: E402

import interop  # noqa: E402


@wp.kernel
def scale_by_64bit(x: wp.array(dtype=float), s: wp.float64, n: wp.int64, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = x[i] * float(s) + float(n)


@wp.kernel
def scale_f64(x: wp.array(dtype=float), s: wp.float64, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = x[i] * float(s)


@wp.kernel
def offset_i64(x: wp.array(dtype=float), n: wp.int64, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = x[i] + float(n)


@wp.kernel
def cube64(x: wp.array(dtype=wp.float64), s: wp.float64, out: wp.array(dtype=wp.float64)):
    i = wp.tid()
    out[i] = s * x[i] * x[i] * x[i]


@wp.kernel
def divide(x: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = x[i] / s


@wp.kernel
def vec_affine(x: wp.array(dtype=wp.vec3), v: wp.vec3, s: float, out: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    out[i] = x[i] * s + wp.cw_mul(v, x[i])


@wp.kernel
def mat_apply(x: wp.array(dtype=wp.vec2), m: wp.mat22, out: wp.array(dtype=wp.vec2)):
    i = wp.tid()
    out[i] = m * x[i]


@wp.kernel
def ivec_offset(x: wp.array(dtype=wp.vec3i), v: wp.vec3i, out: wp.array(dtype=wp.vec3i)):
    i = wp.tid()
    out[i] = x[i] + v


def _launch(kernel, n, inputs, out_dtype):
    """The kernel run by ``wp.launch`` on CPU: the reference every call is compared with."""
    out = wp.zeros(n, dtype=out_dtype, device="cpu")
    wp.launch(kernel, dim=n, inputs=inputs, outputs=[out], device="cpu")
    return out.numpy()


# ---- row 3: the x64 mode is part of every cache key ----------------------------------------
# A sequence that flips jax_enable_x64 between calls. Before the fix, the eager fast path keyed a
# Python float by its type only: the x64 call's entry (a float64 operand) was replayed with x64 off,
# where JAX makes that operand float32, and the kernel read 8 bytes of a 4-byte buffer ([0, 0, 0]).
X64_SEQUENCE = (True, False, True, True, False, False, True, False)
PATHS = ("eager", "jit_static", "grad_x", "eager_fresh_op")
# kernel, its scalars for call k (Python numbers), d out / d x
KERNELS = {
    "float64": (scale_f64, lambda k: (3.0 + k,), lambda s: s),
    "int64": (offset_i64, lambda k: (2 + k,), lambda n: 1.0),
    "float64_and_int64": (scale_by_64bit, lambda k: (3.0 + k, 2 + k), lambda s, n: s),
}


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("path", PATHS)
def test_x64_flips_between_calls_with_64_bit_scalars(path, kernel):
    kern, scalars, dx = KERNELS[kernel]
    op = interop.op(kern)
    x_np = np.linspace(-1.0, 1.0, 5, dtype=np.float32)
    w = np.linspace(0.5, 1.5, 5, dtype=np.float32)
    for k, x64 in enumerate(X64_SEQUENCE):
        sc = scalars(k)
        with jax.enable_x64(x64):
            x = jnp.asarray(x_np, device=jax_device("cpu"))
            if path == "eager":
                got = op(x, *sc)
            elif path == "eager_fresh_op":
                got = op(x, *sc) if k % 2 else interop.op(kern)(x, *sc)
            elif path == "jit_static":
                got = jax.jit(lambda x, sc=sc: op(x, *sc))(x)
            else:
                got = jax.grad(lambda x, sc=sc: jnp.sum(jnp.asarray(w, device=jax_device("cpu")) * op(x, *sc)))(x)
            assert got.dtype == jnp.float32
        if path == "grad_x":
            want = w * np.float32(dx(*sc))
        else:
            want = _launch(kern, 5, [wp.array(x_np, device="cpu"), *sc], float)
        np.testing.assert_array_equal(np.asarray(got), want, err_msg=f"call {k}, x64={x64}")


@pytest.mark.parametrize("path", ("eager", "jit", "grad_s"))
def test_x64_flips_traced_64_bit_scalar_is_refused_when_off(path):
    """A traced float64 scalar: computed with x64 on, refused with x64 off (JAX has already made the
    traced Python float a float32), whatever ran before; never a stale launch."""
    op = interop.op(cube64)
    x_np = np.linspace(-1.0, 1.0, 4)
    for k, x64 in enumerate(X64_SEQUENCE):
        s = 1.5 + k
        with jax.enable_x64(x64):
            if path == "eager":
                x = jnp.asarray(x_np, device=jax_device("cpu"))  # float32 when x64 is off: refused by dtype
                fn = lambda: op(x, s)  # noqa: E731
            elif path == "jit":
                x = jnp.asarray(x_np, device=jax_device("cpu"))
                fn = lambda: jax.jit(lambda x, s: op(x, s))(x, s)  # noqa: E731
            else:
                x = jnp.asarray(x_np, device=jax_device("cpu"))
                fn = lambda: jax.grad(lambda s: jnp.sum(op(x, s)))(s)  # noqa: E731
            if not x64:
                with pytest.raises(TypeError, match=r"op 'cube64', parameter '(x|s)'.*64-bit types are disabled"):
                    fn()
                continue
            got = fn()
        if path == "grad_s":
            np.testing.assert_allclose(float(got), np.sum(x_np**3), rtol=1e-14)
        else:
            assert got.dtype == jnp.float64
            want = _launch(cube64, 4, [wp.array(x_np, dtype=wp.float64, device="cpu"), s], wp.float64)
            np.testing.assert_array_equal(np.asarray(got), want, err_msg=f"call {k}")


def test_float64_array_made_with_x64_then_called_with_x64_off_matches_a_fresh_call():
    """A float64 array made under x64 and passed after x64 is turned off: the answer (here, the
    refusal) does not depend on whether the same signature ran before with x64 on."""
    x_np = np.linspace(-1.0, 1.0, 4)
    with jax.enable_x64(True):
        x = jnp.asarray(x_np, device=jax_device("cpu"))
        warm = interop.op(cube64, name="seams::cube64_warm")
        np.testing.assert_array_equal(
            np.asarray(warm(x, 2.0)),
            _launch(cube64, 4, [wp.array(x_np, dtype=wp.float64, device="cpu"), 2.0], wp.float64),
        )
    fresh = interop.op(cube64, name="seams::cube64_fresh")
    with jax.enable_x64(False):
        with pytest.raises(TypeError, match=r"op 'seams::cube64_fresh', output 'out'.*64-bit types are disabled"):
            fresh(x, 2.0)
        with pytest.raises(TypeError, match=r"op 'seams::cube64_warm', output 'out'.*64-bit types are disabled"):
            warm(x, 2.0)


def test_numpy_float64_operand_when_x64_is_off_is_refused_not_read_as_8_bytes():
    """The JAX-bound op given a 0-d NumPy float64 for a float64 scalar: with x64 off, XLA hands the
    launch a float32 buffer; before the fix the kernel read 8 bytes of it ([0, 0, 0])."""
    described = interop.op(scale_by_64bit)  # (a binding lives as long as its op: keep the op)
    op = described.bound("jax")
    x = jnp.ones(3, jnp.float32, device=jax_device("cpu"))
    with jax.enable_x64(True):
        np.testing.assert_array_equal(np.asarray(op(x, np.asarray(3.0), 1)), [4.0, 4.0, 4.0])
    with jax.enable_x64(False):
        for f in (lambda: op(x, np.asarray(3.0), 1), lambda: jax.jit(lambda x: op(x, np.asarray(3.0), 1))(x)):
            with pytest.raises(TypeError, match=r"op 'scale_by_64bit', parameter 's'.*got .*float32"):
                f()
        # a float32 NumPy array for it is refused too, and never converted by a fast path
        with pytest.raises(TypeError, match=r"op 'scale_by_64bit', parameter 's'.*got .*float32"):
            op(x, np.asarray(3.0, np.float32), 1)


# ---- static scalars are keyed by their exact value -----------------------------------------
@pytest.mark.parametrize("make", (float, np.float32), ids=("python_float", "numpy_float32"))
def test_static_negative_zero_is_not_served_the_launch_of_zero(make):
    op = interop.op(divide)
    x = jnp.ones(2, jnp.float32, device=jax_device("cpu"))
    for s in (0.0, -0.0, 0.0, -0.0):
        value = make(s)
        got = jax.jit(lambda x, value=value: op(x, value))(x)
        want = _launch(divide, 2, [wp.array(np.ones(2, np.float32), device="cpu"), float(s)], float)
        np.testing.assert_array_equal(np.asarray(got), want)  # +inf for 0.0, -inf for -0.0


# ---- row 9: vector/matrix scalars given as components that are traced ----------------------
X3 = np.arange(12, dtype=np.float32).reshape(4, 3) / 4.0 - 1.0
W3 = np.linspace(0.5, 2.0, 12, dtype=np.float32).reshape(4, 3)
V = (1.0, -2.0, 0.5)

VEC_FORMS = {
    # how the user passes v = V inside the traced function, from the traced components c (three 0-d)
    "tuple_of_tracers": lambda c: (c[0], c[1], c[2]),
    "list_of_tracers": lambda c: [c[0], c[1], c[2]],
    "tuple_tracer_and_numbers": lambda c: (c[0], -2.0, 0.5),
    "traced_array": lambda c: jnp.stack(c),
}


def _vec_reference(x, v, s):
    return _launch(vec_affine, x.shape[0], [wp.array(x, dtype=wp.vec3, device="cpu"), wp.vec3(*v), s], wp.vec3)


@pytest.mark.parametrize("form", VEC_FORMS)
def test_traced_vec3_scalar_under_jit(form):
    op = interop.op(vec_affine)
    f = jax.jit(lambda x, a, b, c: op(x, VEC_FORMS[form]((a, b, c)), 2.0))
    for v in (V, (0.0, 1.0, 3.0)):
        if form == "tuple_tracer_and_numbers":
            v = (v[0], -2.0, 0.5)
        got = f(jnp.asarray(X3, device=jax_device("cpu")), *v)
        np.testing.assert_array_equal(np.asarray(got), _vec_reference(X3, v, 2.0))
    assert f._cache_size() == 1  # traced components: one trace for every value


@pytest.mark.parametrize("form", VEC_FORMS)
def test_traced_vec3_scalar_gradient(form):
    """d/dv sum(w * out) = sum_i w_i * x_i (the kernel is linear in v); eager and under jit."""
    op = interop.op(vec_affine)

    def loss(a, b, c, x):
        return jnp.sum(jnp.asarray(W3, device=jax_device("cpu")) * op(x, VEC_FORMS[form]((a, b, c)), 2.0))

    want = np.sum(W3 * X3, axis=0)
    for g in (jax.grad, lambda f, argnums: jax.jit(jax.grad(f, argnums=argnums))):
        ga, gb, gc, gx = g(loss, argnums=(0, 1, 2, 3))(*V, jnp.asarray(X3, device=jax_device("cpu")))
        got = [float(ga), float(gb), float(gc)]
        if form == "tuple_tracer_and_numbers":
            np.testing.assert_allclose(got, [want[0], 0.0, 0.0], rtol=1e-6)  # b, c do not reach the op
        else:
            np.testing.assert_allclose(got, want, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(gx), W3 * (2.0 + np.asarray(V, np.float32)), rtol=1e-6)


@pytest.mark.parametrize("form", VEC_FORMS)
def test_traced_vec3_scalar_under_vmap(form):
    op = interop.op(vec_affine)
    vs = np.asarray([V, (0.0, 1.0, 3.0), (2.0, 2.0, -1.0)], np.float32)
    if form == "tuple_tracer_and_numbers":
        vs[:, 1:] = (-2.0, 0.5)
    got = jax.vmap(lambda a, b, c: op(jnp.asarray(X3, device=jax_device("cpu")), VEC_FORMS[form]((a, b, c)), 2.0))(
        *vs.T
    )
    for k, v in enumerate(vs):
        np.testing.assert_array_equal(np.asarray(got[k]), _vec_reference(X3, tuple(v), 2.0))


def test_vec3_components_that_are_concrete_jax_scalars_in_an_eager_call():
    op = interop.op(vec_affine)
    for v in (V, (3.0, 1.0, -1.0)):
        got = op(
            jnp.asarray(X3, device=jax_device("cpu")),
            (
                jnp.asarray(v[0], jnp.float32, device=jax_device("cpu")),
                v[1],
                jnp.asarray(v[2], jnp.float32, device=jax_device("cpu")),
            ),
            2.0,
        )
        np.testing.assert_array_equal(np.asarray(got), _vec_reference(X3, v, 2.0))


def test_traced_mat22_scalar_as_nested_tuple_and_its_gradient():
    op = interop.op(mat_apply)
    x = np.asarray([[1.0, 2.0], [-1.0, 0.5], [3.0, -2.0]], np.float32)
    w = np.asarray([[1.0, 0.5], [2.0, -1.0], [0.25, 1.5]], np.float32)
    m = np.asarray([[1.0, 2.0], [3.0, 4.0]], np.float32)

    def f(a, b, c, d):
        return op(jnp.asarray(x, device=jax_device("cpu")), ((a, b), (c, d)))

    got = jax.jit(f)(*m.ravel())
    want = _launch(mat_apply, 3, [wp.array(x, dtype=wp.vec2, device="cpu"), wp.mat22(*m.ravel())], wp.vec2)
    np.testing.assert_array_equal(np.asarray(got), want)
    g = jax.grad(lambda *c: jnp.sum(jnp.asarray(w, device=jax_device("cpu")) * f(*c)), argnums=(0, 1, 2, 3))(*m.ravel())
    np.testing.assert_allclose(np.asarray(g, np.float32), (w.T @ x).ravel(), rtol=1e-6)  # d/dm = sum_i w_i x_i^T


def test_traced_integer_vector_components():
    op = interop.op(ivec_offset)
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    got = jax.jit(lambda x, a, b: op(x, (a, b, 7)))(jnp.asarray(x, device=jax_device("cpu")), 1, -2)
    np.testing.assert_array_equal(np.asarray(got), x + [1, -2, 7])
    with pytest.raises(interop.ArgumentError, match=r"op 'ivec_offset', parameter 'v'.*got float"):
        jax.jit(lambda x, a: op(x, (a, 1, 2)))(jnp.asarray(x, device=jax_device("cpu")), 1.5)


def test_traced_vector_components_errors_name_op_and_parameter():
    op = interop.op(vec_affine)
    x = jnp.asarray(X3, device=jax_device("cpu"))
    with pytest.raises(interop.ArgumentError, match=r"op 'vec_affine', parameter 'v'.*3 numbers.*got 2 component"):
        jax.jit(lambda x, a: op(x, (a, a), 2.0))(x, 1.0)
    with pytest.raises(
        interop.ArgumentError, match=r"op 'vec_affine', parameter 'v'.*components of dtype float32, got component 0"
    ):
        jax.jit(lambda x, a: op(x, (a, 1.0, 2.0), 2.0))(x, jnp.asarray(1, jnp.int32, device=jax_device("cpu")))
    with pytest.raises(interop.ArgumentError, match=r"op 'vec_affine', parameter 'v'.*got component 1 of type"):
        jax.jit(lambda x, a: op(x, (a, "1", 2.0), 2.0))(x, 1.0)
    with pytest.raises(interop.ArgumentError, match=r"op 'vec_affine', parameter 'v'.*float32 value.*become inf"):
        jax.jit(lambda x, a: op(x, (a, 1e40, 2.0), 2.0))(x, 1.0)
    with pytest.raises(TypeError, match=r"op 'vec_affine', parameter 's'.*unhashable"):
        op(x, V, {"s": 2.0})


# ---- launch_dims / output_dims are keyed with their types ----------------------------------
@pytest.mark.parametrize("jit", (False, True), ids=("eager", "jit"))
@pytest.mark.parametrize(("good", "bad", "what"), ((1, True, "bool"), (2, 2.0, "float 2.0")))
def test_launch_dims_equal_to_a_cached_value_are_checked_like_a_fresh_call(jit, good, bad, what):
    """``True == 1`` and ``2.0 == 2``: a call with the refused value was served the entry of the
    accepted one it equals, once that had run (and refused in a fresh process)."""
    op = interop.op(divide)
    x = jnp.ones(4, jnp.float32, device=jax_device("cpu"))

    def call(ld):
        return jax.jit(lambda x: op(x, 2.0, launch_dims=ld))(x) if jit else op(x, 2.0, launch_dims=ld)

    np.testing.assert_array_equal(np.asarray(call(good)), [0.5] * good)
    with pytest.raises(interop.ArgumentError, match=rf"op 'divide': launch_dims must be an int .*got {what}"):
        call(bad)
    with pytest.raises(interop.ArgumentError, match=r"op 'divide': launch_dims must be an int .*got \(2.5,\)"):
        call(np.asarray([2.5]))  # an array of floats is refused, not truncated
    np.testing.assert_array_equal(np.asarray(call(np.asarray([good]))), [0.5] * good)


@pytest.mark.parametrize("form", VEC_FORMS)
def test_traced_vec3_scalar_with_x64_weak_float64_components(form):
    """With x64 on, traced Python floats are weakly typed float64: like a top-level traced scalar,
    they take the parameter's float32 (a strongly typed float64 array stays refused)."""
    op = interop.op(vec_affine)
    v = V if form != "tuple_tracer_and_numbers" else (V[0], -2.0, 0.5)
    with jax.enable_x64(True):
        x = jnp.asarray(X3, device=jax_device("cpu"))
        got = jax.jit(lambda x, a, b, c: op(x, VEC_FORMS[form]((a, b, c)), 2.0))(x, *v)
        assert got.dtype == jnp.float32
        np.testing.assert_array_equal(np.asarray(got), _vec_reference(X3, v, 2.0))
        ga = jax.grad(
            lambda a: jnp.sum(jnp.asarray(W3, device=jax_device("cpu")) * op(x, VEC_FORMS[form]((a, v[1], v[2])), 2.0))
        )(v[0])
        np.testing.assert_allclose(float(ga), np.sum(W3[:, 0] * X3[:, 0]), rtol=1e-6)
        with pytest.raises(interop.ArgumentError, match=r"op 'vec_affine', parameter 'v'.*dtype float64"):
            op(x, jnp.asarray(v, jnp.float64, device=jax_device("cpu")), 2.0)


# ---- row 7: a dropped anonymous op is freed; XLA keeps only its targets' names ---------------
def _dropped_op(name: str | None = None):
    @wp.kernel(module="unique")
    def halve(x: wp.array(dtype=float), out: wp.array(dtype=float)):
        out[wp.tid()] = x[wp.tid()] * 0.5

    return interop.op(halve, name=name)


def test_exported_call_after_its_op_was_dropped_names_the_op_and_describing_it_again_serves_it():
    """XLA cannot unregister an FFI target: its callback stays, and reaches the op weakly. A
    deserialized module run after an anonymous op was freed gets an error naming the op (before:
    the op was never freed); describing it again fills the target in, as in a new process (a
    named op is never freed: tests/test_named_ops.py)."""
    import gc
    import weakref

    from adapters import jax as interop_jax

    x = jnp.arange(4.0, dtype=jnp.float32, device=jax_device("cpu"))
    op = _dropped_op()
    exported = jax.export.export(
        jax.jit(lambda a: op(a)), platforms=["cpu"], disabled_checks=interop_jax.disabled_checks(op)
    )(x)
    exp = jax.export.deserialize(exported.serialize())
    np.testing.assert_array_equal(np.asarray(exp.call(x)), np.asarray(x) * 0.5)
    ref = weakref.ref(op)
    del op, exported
    gc.collect()
    assert ref() is None
    with pytest.raises(
        Exception, match=r"op '_dropped_op__locals__halve': its XLA FFI target .* was called after the op was dropped"
    ):
        exp.call(x)
    op = _dropped_op()
    np.testing.assert_array_equal(np.asarray(exp.call(x)), np.asarray(x) * 0.5)
    np.testing.assert_array_equal(np.asarray(jax.grad(lambda a: op(a).sum())(x)), np.full(4, 0.5, np.float32))


def test_op_described_again_under_a_named_kernels_name_is_refused():
    """A named op lives for the process (its XLA FFI targets too, registered as capturable into
    CUDA graphs): a Python-function op described later under the same name (after the user
    dropped the kernel op) is refused, naming the name, instead of taking the kernel's targets."""
    import gc

    op = _dropped_op("seams::kernel_then_function")
    del op
    gc.collect()

    def halve(x: wp.array(dtype=float), out: wp.array(dtype=float)):
        out.assign(x)

    with pytest.raises(
        ValueError, match=r"op name 'seams::kernel_then_function' is already used by .*pick another name="
    ):
        interop.op(halve, name="seams::kernel_then_function")
