"""CUDA: stream order of the work the package itself enqueues, Warp's deterministic mode, module
loading before graph capture, ``convert`` with copies, and the skip conditions of CUDA tests.

Each CUDA test makes the ordering it checks observable: the work it must come after is slow
(``_cuda.spin_fill``, milliseconds per thread), so an op that did not wait would read old values.
What can run without a GPU runs here on the CPU (the same code with streams absent, XLA's API
errors, XLA's instantiate stage, ``convert``'s copy routing, the skip conditions).
"""

from __future__ import annotations

import gc
import importlib.util

import numpy as np
import pytest
import warp as wp
from _cuda import SPINS, framework_cuda_missing, require_cuda, spin_fill, torch_spin_fill
from _devices import jax_device
from catalogue import function_op_fn

import interop
from interop import _launch

HAS = {m: importlib.util.find_spec(m) is not None for m in ("torch", "jax", "paddle", "cupy")}


@wp.kernel
def _slow_copy(src: wp.array(dtype=float), dst: wp.array(dtype=float), spins: int):
    i = wp.tid()
    acc = float(0.0)  # noqa: UP018 - a Warp variable the loop mutates
    for _k in range(spins):
        acc = acc * 0.5 + 1.0
    extra = float(0.0)  # noqa: UP018 - a Warp variable a branch mutates
    if acc < 0.0:
        extra = 1.0
    dst[i] = src[i] + extra


@wp.kernel
def _copy(src: wp.array(dtype=float), dst: wp.array(dtype=float)):
    i = wp.tid()
    dst[i] = src[i]


@wp.kernel
def _scaled_sum(x: wp.array(dtype=float), v: wp.vec3, s: float, total: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(total, 0, s * x[i] * x[i] + v[1])


def two_slow_steps(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    """A Python-function op with a temporary of its own, written and read by slow kernels."""
    tmp = wp.empty_like(a)
    wp.launch(_slow_copy, dim=a.shape, inputs=[a, tmp, SPINS], device=a.device)
    wp.launch(_slow_copy, dim=a.shape, inputs=[tmp, out, SPINS], device=tmp.device)


def on_a_stream_of_its_own(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    """A Python-function op that works on a Warp stream of its own, joined to the current one
    (``wp.ScopedStream`` syncs on entry and exit through Warp's native stream table)."""
    with wp.ScopedStream(wp.Stream(a.device), sync_enter=True, sync_exit=True):
        wp.launch(_copy, dim=a.shape, inputs=[a, out], device=a.device)


# ---- finding 1: a Python-function op's scratch buffers are made on the framework's stream ----
@pytest.mark.cuda
def test_function_op_backward_scratch_is_ordered_after_the_upstream_gradient():
    require_cuda("torch")
    import torch

    op = interop.op(function_op_fn, name="cuda_test::function_op")
    n = 1 << 16
    s = torch.cuda.Stream()  # non-blocking, as torch's side streams are
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        x = torch.rand(n, device="cuda", requires_grad=True)
        y = torch.rand(n, device="cuda")
        out = op(x, y)
        # a strided upstream gradient, written slowly on s: the tape's packed copy of it (and the
        # zeroed scratch outputs) must be made after that, on s's order
        g = torch.empty(2 * n, device="cuda")
        torch_spin_fill(g, 3.0)
        (gx,) = torch.autograd.grad(out, x, g[::2])
        done = torch.cuda.Event()
        done.record(s)
    done.synchronize()
    torch.testing.assert_close(gx, 3.0 * 6.0 * x.detach())


@pytest.mark.cuda
def test_function_op_gradient_under_jax_on_gpu():
    require_cuda("jax")
    import jax
    import jax.numpy as jnp

    op = interop.op(function_op_fn, name="cuda_test::function_op_jax")
    gpu = jax.devices("gpu")[0]
    x = jax.device_put(jnp.linspace(-1.0, 1.0, 1 << 16, dtype=jnp.float32), gpu)
    y = jax.device_put(jnp.ones(1 << 16, jnp.float32), gpu)
    for _ in range(3):
        gx = jax.grad(lambda a: jnp.sum(op(a, y) * 2.0))(x)
        np.testing.assert_allclose(np.asarray(gx), 12.0 * np.asarray(x), rtol=1e-5, atol=1e-6)


# ---- finding 2: temporaries are freed after the work that uses them ---------------------------
@pytest.mark.cuda
def test_function_op_temporaries_are_not_reused_while_the_stream_still_reads_them():
    require_cuda("torch")
    import torch

    op = interop.op(two_slow_steps, name="cuda_test::two_slow_steps")
    n = 1 << 16
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    for k in range(4):
        with torch.cuda.stream(s):
            a = torch.full((n,), float(k + 1), device="cuda")
            out = op(a)
            done = torch.cuda.Event()
            done.record(s)
        # memory freed by the op (its temporary) must not be handed out again before s read it
        junk = [wp.full(n, 99.0, dtype=float, device="cuda:0") for _ in range(4)]
        done.synchronize()
        del junk
        torch.testing.assert_close(out, torch.full((n,), float(k + 1), device="cuda"))


# ---- finding 6: Warp's deterministic mode ------------------------------------------------------
def _deterministic_kernel():
    """``_scaled_sum`` in a module of its own with Warp's deterministic mode on."""
    options = {"deterministic": wp.DeterministicMode.RUN_TO_RUN}
    return wp.kernel(module="unique", module_options=options)(_scaled_sum.func)


@pytest.mark.cuda
def test_deterministic_mode_on_cuda():
    require_cuda("torch")
    import torch

    op = interop.op(_deterministic_kernel(), name="cuda_test::det_sum", output_dims=1)
    x = torch.rand(100_000, device="cuda", requires_grad=True)
    first = op(x, (0.0, 1.0, 0.0), 0.5)
    for _ in range(3):
        again = op(x, (0.0, 1.0, 0.0), 0.5)
        assert torch.equal(again, first)  # bit for bit
    expected = 0.5 * (x.detach().double() ** 2).sum() + x.numel()
    torch.testing.assert_close(first.double()[0], expected, rtol=1e-4, atol=1e-3)
    (gx,) = torch.autograd.grad(first.sum(), x)
    torch.testing.assert_close(gx, x.detach())


@pytest.mark.skipif(not HAS["jax"], reason="runs the adapter that launches through Runner.launcher")
def test_plain_launch_gives_the_recorded_launchs_values_and_gradients(monkeypatch):
    """The launch that deterministic-mode records are replaced by (a plain wp.launch from the slot's
    descriptors), forced on the CPU: forward and adjoint through JAX's handler (which replays
    Runner launchers) against the same op with Warp's record."""
    import jax
    import jax.numpy as jnp

    x = jnp.linspace(-1.0, 1.0, 33, dtype=jnp.float32, device=jax_device("cpu"))

    def run(name):
        op = interop.op(_scaled_sum, name=name, output_dims=1)
        f = jax.jit(lambda a: op(a, (0.0, 2.0, 0.0), 1.5))
        return f(x), jax.grad(lambda a: jnp.sum(f(a)) * 3.0)(x), op

    ref_val, ref_grad, _ = run("cuda_test::recorded_sum")
    monkeypatch.setattr(_launch, "is_deterministic_launch", lambda launch: True)
    # as on CUDA, where deterministic launches exist: no straight-line CPU record (the CPU's own path)
    monkeypatch.setattr(_launch.Runner, "can_direct", lambda self, device: False)
    plain, launch = [], _launch._PlainLaunch.launch

    def counted(self, stream=None):
        plain.append(self.adjoint)
        launch(self, stream)

    monkeypatch.setattr(_launch._PlainLaunch, "launch", counted)
    val, grad, op = run("cuda_test::plain_sum")
    np.testing.assert_allclose(np.asarray(val), np.asarray(ref_val), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(grad), np.asarray(ref_grad), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(grad), 9.0 * np.asarray(x), rtol=1e-5, atol=1e-7)
    assert set(plain) == {False, True}  # the forward and the adjoint ran as plain launches


@pytest.mark.skipif(not HAS["jax"], reason="JAX's FFI targets")
def test_deterministic_kernels_are_not_declared_command_buffer_compatible(monkeypatch):
    """Warp's deterministic mode allocates scratch buffers per launch: XLA must not record such a
    call into a CUDA graph. Their values are those of the plain kernel (on the CPU the mode does
    nothing)."""
    import jax.numpy as jnp

    from adapters.jax import ffi as _jax_ffi

    declared = {}
    register = _jax_ffi.register

    def spy(name, handler, command_buffer=False, **kwargs):
        declared[name] = command_buffer
        register(name, handler, command_buffer=command_buffer, **kwargs)

    monkeypatch.setattr(_jax_ffi, "register", spy)
    det = interop.op(_deterministic_kernel(), name="cuda_test::det_sum_jax", output_dims=1)
    plain = interop.op(_scaled_sum, name="cuda_test::plain_sum_jax", output_dims=1)
    x = jnp.linspace(-1.0, 1.0, 8, dtype=jnp.float32, device=jax_device("cpu"))
    np.testing.assert_array_equal(np.asarray(det(x, (0.0, 1.0, 0.0), 0.5)), np.asarray(plain(x, (0.0, 1.0, 0.0), 0.5)))
    assert declared and {n: v for n, v in declared.items() if "det_sum_jax" in n} == dict.fromkeys(
        [n for n in declared if "det_sum_jax" in n], False
    )
    assert all(v for n, v in declared.items() if "plain_sum_jax" in n)


# ---- finding 7: the stream cache ---------------------------------------------------------------
@pytest.mark.cuda
def test_another_wrapper_of_the_same_stream_does_not_unregister_ours():
    require_cuda("torch")
    import torch

    saxpy = interop.op(_copy, name="cuda_test::copy")
    fn = interop.op(on_a_stream_of_its_own, name="cuda_test::own_stream")
    n = 1 << 16
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        saxpy(torch.ones(n, device="cuda"))  # the package now knows s
        w = wp.stream_from_torch(s)  # the user's own wrapper of s: registers it, and on deletion
        del w  # unregisters it from Warp's native table
        gc.collect()
        a = torch.empty(n, device="cuda")
        torch_spin_fill(a, 5.0)
        out = fn(a)  # its own stream must wait for the current one (the fill)
        done = torch.cuda.Event()
        done.record(s)
    done.synchronize()
    torch.testing.assert_close(out, torch.full((n,), 5.0, device="cuda"))


# ---- finding 9: the module loads before any capture ----------------------------------------------
@pytest.mark.cuda
def test_first_torch_call_loads_the_module_for_the_backward_too():
    require_cuda("torch")
    import torch

    @wp.kernel(module="unique")
    def cube(x: wp.array(dtype=float), out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = x[i] * x[i] * x[i]

    from interop._warp_compat import module_loaded

    op = interop.op(cube, name="cuda_test::cube")
    x = torch.rand(256, device="cuda", requires_grad=True)
    device = wp.get_device("cuda:0")
    assert not module_loaded(cube, device)
    with torch.no_grad():
        op(x)  # a forward-only warm-up
    assert module_loaded(cube, device)
    (plan,) = op._plans.values()
    assert {(device.alias, False), (device.alias, True)} <= set(plan.runner._launchers)
    # so a first backward inside graph capture loads nothing
    g = torch.cuda.CUDAGraph()
    static_x = x.detach().clone().requires_grad_(True)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        (op(static_x) * 1.0).sum().backward()  # torch's warm-up of its own (allocator, autograd)
    torch.cuda.current_stream().wait_stream(s)
    static_x.grad = None
    with torch.cuda.graph(g):
        y = op(static_x)
        (gx,) = torch.autograd.grad(y.sum(), static_x)
    static_x.data.copy_(torch.full_like(static_x, 2.0))
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, torch.full_like(y, 8.0))
    torch.testing.assert_close(gx, torch.full_like(gx, 12.0))


@pytest.mark.skipif(not HAS["jax"], reason="XLA's instantiate stage")
def test_handler_is_built_when_xla_instantiates_the_executable():
    """XLA's instantiate stage builds the handler of a call's configuration (and on CUDA loads the
    Warp module): a process that deserialized an exported function loads nothing at its first run,
    which XLA may record into a CUDA graph. Here: the lowered module compiled after the handlers
    were dropped has them again before it runs."""
    import jax
    import jax.numpy as jnp

    from adapters import jax as interop_jax

    op = interop.op(_scaled_sum, name="cuda_test::instantiated_sum", output_dims=1)
    x = jnp.linspace(-1.0, 1.0, 9, dtype=jnp.float32, device=jax_device("cpu"))
    lowered = jax.jit(jax.value_and_grad(lambda a: jnp.sum(op(a, (0.0, 1.0, 0.0), 2.0)))).lower(x)
    targets = [interop_jax._targets[interop_jax._target(op.description, d)] for d in ("fwd", "bwd")]
    for t in targets:
        assert t.handlers  # made while tracing
        t.handlers.clear()
    op.bound("jax")._by_config.clear()
    compiled = lowered.compile()
    assert all(t.handlers for t in targets), "XLA's instantiate stage did not rebuild the handlers"
    value, grad = compiled(x)
    np.testing.assert_allclose(np.asarray(grad), 4.0 * np.asarray(x), rtol=1e-6)
    np.testing.assert_allclose(float(value), float(jnp.sum(2.0 * x * x) + 9.0), rtol=1e-5)


# ---- finding 8: XLA's API errors ------------------------------------------------------------------
@pytest.mark.skipif(not HAS["jax"], reason="XLA's FFI")
def test_stream_get_error_is_raised_not_dropped():
    """On the CPU, XLA's stream_get returns an error (no GPU context): it must reach the caller,
    not become stream 0."""
    import jax
    import jax.numpy as jnp

    from adapters.jax import ffi as _jax_ffi

    ordinals = []

    def handler(p, platform):
        frame = _jax_ffi.frame(p)  # handlers get the call frame's address
        ordinals.append(_jax_ffi.device_ordinal(frame))  # defined on every platform
        _jax_ffi.cuda_stream(frame)

    _jax_ffi.register("interop_test_stream_get", handler)
    f = jax.ffi.ffi_call("interop_test_stream_get", jax.ShapeDtypeStruct((2,), np.float32))
    with pytest.raises(Exception, match=r"XLA's FFI stream_get failed: .*GPU context"):
        np.asarray(f(jnp.ones(2, jnp.float32, device=jax_device("cpu"))))
    assert ordinals == [0]


# ---- finding 4: Warp -> CuPy keeps stream order ----------------------------------------------------
@pytest.mark.cuda
def test_warp_array_to_cupy_is_ordered_after_warps_pending_work():
    require_cuda("cupy")
    cp = pytest.importorskip("cupy")
    n = 1 << 16
    w = wp.zeros(n, dtype=float, device="cuda:0")
    wp.launch(spin_fill, dim=n, inputs=[w, 4.0, SPINS], device="cuda:0")  # on Warp's stream
    with cp.cuda.Stream(non_blocking=True):
        c = interop.convert(w, to="cupy")
        total = float(c.sum())
    assert total == 4.0 * n


# ---- finding 5: copy=True copies on the array's own device ---------------------------------------
@pytest.mark.cuda
def test_copy_of_cuda_arrays():
    require_cuda("torch")
    import torch

    t = torch.arange(10, dtype=torch.float32, device="cuda")
    host = interop.convert(t, to="numpy", copy=True)
    assert isinstance(host, np.ndarray)
    np.testing.assert_array_equal(host, np.arange(10, dtype=np.float32))
    w = wp.array(np.arange(6, dtype=np.float32), device="cuda:0")
    np.testing.assert_array_equal(interop.convert(w, to="numpy", copy=True), np.arange(6, dtype=np.float32))
    if framework_cuda_missing("jax") is None:
        import jax

        j = interop.convert(t[1:], to="jax", copy=True)  # an offset XLA may refuse to alias
        assert j.devices() == {jax.devices("gpu")[0]}
        np.testing.assert_array_equal(np.asarray(j), np.arange(1, 10, dtype=np.float32))
        back = interop.convert(j, to="torch", copy=True)
        assert back.device.type == "cuda"


@pytest.mark.parametrize("to", [f for f in ("warp", "torch", "jax", "paddle") if f == "warp" or HAS[f]])
def test_copy_lands_in_the_target_framework_on_the_cpu(to):
    """A NumPy view with negative strides cannot be handed over; copy=True gives a copy in ``to``,
    on the CPU like the source, in new memory."""
    from catalogue import to_np

    from interop._frameworks import data_ptr, framework_of

    a = np.arange(12, dtype=np.float32)[::-1]
    with pytest.raises(ValueError, match="pass copy=True"):
        interop.convert(a, to=to)
    out = interop.convert(a, to=to, copy=True)
    assert framework_of(out) == to and _on_cpu(out, to)
    np.testing.assert_array_equal(to_np(out), a)
    assert data_ptr(out) not in (data_ptr(a), data_ptr(a.base))


def _on_cpu(x, fw: str) -> bool:
    if fw == "warp":
        return x.device.is_cpu
    if fw == "torch":
        return x.device.type == "cpu"
    if fw == "jax":
        return {d.platform for d in x.devices()} == {"cpu"}
    return x.place.is_cpu_place()


@pytest.mark.skipif(not HAS["cupy"], reason="CuPy is not installed")
def test_copy_of_a_cpu_array_to_cupy_is_refused():
    with pytest.raises(ValueError, match=r"a numpy array on cpu cannot become a CuPy array"):
        interop.convert(np.arange(3, dtype=np.float32)[::-1], to="cupy", copy=True)


# ---- finding 10: CUDA tests skip where the framework has no CUDA build ------------------------------
@pytest.mark.skipif(not HAS["torch"], reason="torch is not installed")
def test_torch_cuda_tests_skip_on_a_cpu_build_of_torch():
    import torch

    why = framework_cuda_missing("torch")
    assert (why is None) == torch.cuda.is_available()
    if why is not None:
        assert "torch build has no CUDA" in why
    assert framework_cuda_missing("numpy") == "NumPy arrays live on the CPU"
    assert (framework_cuda_missing("warp") is None) == (wp.get_cuda_device_count() > 0)
