"""Python-function ops launch through cached launch records (``interop._fast_launch``, issue 49).

A record is made per kernel, device, launch dimensions and argument layout, and replayed with the
call's pointers and values: a stale record would be a silent wrong answer. So each test runs a
*sequence* of calls whose properties change between calls (sizes, scalar values including -0.0 and
NaN, a vector parameter, an input with and without a gradient), in torch (eager and a second
backward, which replays the function) and JAX (eager, ``jit``, ``grad``), and compares every value
and gradient with Warp's own ``wp.Tape`` over the same function on the same device. Launches the
records do not take (a tuple argument, Warp's launch checks switched on, a kernel whose backward
is disabled) give Warp's own results, and ``wp.launch`` is Warp's again after each call.
"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp
from _devices import jax_device

import interop
from interop import _fast_launch


@wp.kernel
def _springs(x: wp.array(dtype=wp.vec3), k: float, f: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    j = (i + 1) % x.shape[0]
    d = x[j] - x[i]
    wp.atomic_add(f, i, k * d * wp.length(d))
    wp.atomic_sub(f, j, k * d * wp.length(d))


@wp.kernel
def _integrate(
    x: wp.array(dtype=wp.vec3), f: wp.array(dtype=wp.vec3), g: wp.vec3, dt: float, y: wp.array(dtype=wp.vec3)
):
    i = wp.tid()
    y[i] = x[i] + (f[i] + g) * dt * dt + wp.vec3(wp.sin(x[i][0]), 0.0, 0.0) * dt


def step(x: wp.array(dtype=wp.vec3), k: float, g: wp.vec3, dt: float, y: wp.array(dtype=wp.vec3)):
    f = wp.zeros(x.shape[0], dtype=wp.vec3, device=x.device, requires_grad=True)
    wp.launch(_springs, dim=x.shape[0], inputs=[x, k], outputs=[f], device=x.device)
    wp.launch(_integrate, dim=x.shape[0], inputs=[x, f, g, dt], outputs=[y], device=x.device)


def step_tuple(x: wp.array(dtype=wp.vec3), k: float, g: wp.vec3, dt: float, y: wp.array(dtype=wp.vec3)):
    """The same with the vector handed to ``wp.launch`` as a tuple (Warp's own launch runs it)."""
    f = wp.zeros(x.shape[0], dtype=wp.vec3, device=x.device, requires_grad=True)
    wp.launch(_springs, dim=x.shape[0], inputs=[x, k], outputs=[f], device=x.device)
    wp.launch(_integrate, dim=x.shape[0], inputs=[x, f, (g[0], g[1], g[2]), dt], outputs=[y], device=x.device)


STEP = interop.op(step)
STEP_TUPLE = interop.op(step_tuple)

#: (rows, k, gravity, dt): sizes, values, -0.0 and a NaN change between consecutive calls
SEQUENCE = [
    (5, 1.0, (0.0, -9.8, 0.0), 0.01),
    (5, 2.0, (0.0, -9.8, 0.0), 0.01),
    (7, 2.0, (1.0, 0.0, -0.0), 0.02),
    (5, 0.0, (0.0, 0.0, 0.0), 0.01),
    (5, -0.0, (0.0, -0.0, 0.0), 0.01),
    (7, 1.5, (0.5, -1.0, 0.25), float("nan")),
    (5, 1.0, (0.0, -9.8, 0.0), 0.01),
]


def _x(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1.0, 1.0, (n, 3)).astype(np.float32)


def _reference(fn, x: np.ndarray, k: float, g, dt: float, device: str) -> tuple[np.ndarray, np.ndarray]:
    """Warp's own tape over ``fn``: ``y`` and d sum(y * w) / dx with ``w`` = 1, 2, 3 ... (flat)."""
    wx = wp.array(x, dtype=wp.vec3, device=device, requires_grad=True)
    wy = wp.zeros(x.shape[0], dtype=wp.vec3, device=device, requires_grad=True)
    tape = wp.Tape()
    with tape:
        fn(wx, k, wp.vec3(*g), dt, wy)
    wy.grad = wp.array(_weights(x.shape[0]), dtype=wp.vec3, device=device)
    tape.backward()
    return wy.numpy(), wx.grad.numpy()


def _weights(n: int) -> np.ndarray:
    return np.arange(1, 3 * n + 1, dtype=np.float32).reshape(n, 3) / (3 * n)


def _same(got, ref) -> None:
    np.testing.assert_allclose(np.asarray(got), ref, rtol=2e-6, atol=1e-7, equal_nan=True)


@pytest.mark.parametrize("op_fn", [(STEP, step), (STEP_TUPLE, step_tuple)], ids=["records", "tuple-argument"])
def test_torch_sequence_matches_warp_tape(op_fn, device):
    torch = pytest.importorskip("torch")
    op, fn = op_fn
    for t, (n, k, g, dt) in enumerate(SEQUENCE):
        x_np = _x(n, t)
        y_ref, gx_ref = _reference(fn, x_np, k, g, dt, device)
        grad = t % 3 != 1  # every third call has no gradient (no tape is kept)
        x = torch.tensor(x_np, device=device, requires_grad=grad)
        y = op(x, k, g, dt)
        _same(y.detach().cpu(), y_ref)
        assert wp.launch is interop._launch_hook.original_launch()
        if grad:
            w = torch.tensor(_weights(n), device=device)
            (y * w).sum().backward(retain_graph=True)
            _same(x.grad.cpu(), gx_ref)
            x.grad = None
            (y * w).sum().backward()  # the kept tape is spent: this one replays the function
            _same(x.grad.cpu(), gx_ref)


def test_jax_sequence_matches_warp_tape():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    dev = jax_device("cpu")
    for t, (n, k, g, dt) in enumerate(SEQUENCE):
        x_np = _x(n, t)
        y_ref, gx_ref = _reference(step, x_np, k, g, dt, "cpu")
        x = jax.device_put(jnp.asarray(x_np), dev)
        w = jax.device_put(jnp.asarray(_weights(n)), dev)

        def loss(x, k=k, g=g, dt=dt, w=w):
            return jnp.sum(STEP(x, k, g, dt) * w)

        _same(STEP(x, k, g, dt), y_ref)
        _same(jax.jit(lambda x, k=k, g=g, dt=dt: STEP(x, k, g, dt))(x), y_ref)
        _same(jax.grad(loss)(x), gx_ref)
        _same(jax.jit(jax.grad(loss))(x), gx_ref)


def test_records_are_made_once_per_layout_and_replayed():
    """Records are made per kernel, size, direction and layout, not per call: a second run of the
    same calls (other data) makes none and gives Warp's tape results."""
    torch = pytest.importorskip("torch")
    op = STEP

    def run(seed: int) -> None:
        for n in (4, 4, 6, 4, 6):
            x_np = _x(n, seed + n)
            x = torch.tensor(x_np, device="cpu", requires_grad=True)
            y = op(x, 1.0, (0.0, -1.0, 0.0), 0.01)
            (y * torch.tensor(_weights(n), device="cpu")).sum().backward()
            y_ref, gx_ref = _reference(step, x_np, 1.0, (0.0, -1.0, 0.0), 0.01, "cpu")
            _same(y.detach(), y_ref)
            _same(x.grad, gx_ref)

    def records() -> list:
        return [r for plan in op._plans.values() for r in plan.runner.fast_records._records.values()]

    run(0)
    made = records()
    # both kernels, both sizes, forward and adjoint, all replayable (none left to Warp's launch)
    assert len({(type(r), id(r)) for r in made}) == len(made) >= 8
    assert all(isinstance(r, _fast_launch._Record) for r in made)
    run(100)
    assert len(records()) == len(made)


@pytest.mark.parametrize("flag", ["verify_fp", "print_launches"])
def test_warp_launch_checks_switch_the_records_off(flag):
    """With one of Warp's launch checks on, the function's launches are Warp's own (no record is
    made or replayed, so the check runs) and give Warp's tape results; off again, records run."""
    torch = pytest.importorskip("torch")
    n = 9 if flag == "verify_fp" else 11  # sizes no other test uses: call plans of their own
    x_np = _x(n, 3)

    def records() -> list:
        return [
            r
            for plan in STEP._plans.values()
            if plan.warp_shapes[0] == (n,)
            for r in plan.runner.fast_records._records.values()
        ]

    before = getattr(wp.config, flag)
    setattr(wp.config, flag, True)
    try:
        x = torch.tensor(x_np, device="cpu", requires_grad=True)
        y = STEP(x, 1.0, (0.0, -1.0, 0.0), 0.01)
        (y * torch.tensor(_weights(n), device="cpu")).sum().backward()
        assert records() == []
    finally:
        setattr(wp.config, flag, before)
    y_ref, gx_ref = _reference(step, x_np, 1.0, (0.0, -1.0, 0.0), 0.01, "cpu")
    _same(y.detach(), y_ref)
    _same(x.grad, gx_ref)
    STEP(torch.tensor(x_np, device="cpu"), 1.0, (0.0, -1.0, 0.0), 0.01)
    assert records()


@wp.kernel(enable_backward=False)
def _no_backward(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = 2.0 * x[i]


def no_backward_fn(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    wp.launch(_no_backward, dim=x.shape[0], inputs=[x], outputs=[y], device=x.device)


def test_kernel_without_backward_is_warps_own_tape():
    """A recorded kernel whose backward is disabled: Warp's own ``Tape.backward`` (it skips it)."""
    torch = pytest.importorskip("torch")
    op = interop.op(no_backward_fn)
    x = torch.ones(3, device="cpu", requires_grad=True)
    y = op(x)
    np.testing.assert_array_equal(y.detach().numpy(), [2.0, 2.0, 2.0])
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0, 0.0])


def _descriptor_cases() -> list:
    base = wp.zeros((4, 6, 2), dtype=float, device="cpu", requires_grad=True)
    retained = wp.zeros(5, dtype=wp.vec3, device="cpu", requires_grad=True, retain_grad=True)
    return [
        wp.zeros(7, dtype=wp.vec3, device="cpu"),
        wp.zeros(7, dtype=float, device="cpu", requires_grad=True),
        base,
        base[1:, ::2],  # strided view (shares the gradient's layout)
        wp.array(ptr=base.ptr, dtype=float, shape=(3, 4), strides=(48, 8), device="cpu"),
        retained,
        wp.empty(0, dtype=float, device="cpu"),
    ]


@pytest.mark.parametrize("k", range(7))
def test_descriptor_written_in_place_is_warps_own(k):
    """The descriptor a record receives is byte for byte what ``wp.array.__ctype__`` builds, for new
    arrays (written field by field) and for arrays whose descriptor Warp has built (copied)."""
    import ctypes

    from interop._warp_compat import array_t, fill_descriptor

    a = _descriptor_cases()[k]
    got = array_t(data=123, grad=456, ndim=4, shape=(9, 9, 9, 9), strides=(9, 9, 9, 9), flags=7)
    fill_descriptor(got, a)  # (a fresh array: no descriptor built yet)
    want = a.__ctype__()
    assert _fields(got) == _fields(want)
    again = array_t()
    fill_descriptor(again, a)  # (now copied from the built one)
    assert ctypes.string_at(ctypes.addressof(again), ctypes.sizeof(array_t)) == ctypes.string_at(
        ctypes.addressof(want), ctypes.sizeof(array_t)
    )


def _fields(at) -> tuple:
    """What a kernel reads of a descriptor: pointers, flags, dimensions, and the shape and strides
    of those dimensions (the slots past ``ndim`` are never read)."""
    n = at.ndim
    return (at.data, at.grad, at.flags, n, tuple(at.shape[:n]), tuple(at.strides[:n]))


GRAVITY = wp.vec3(0.0, -1.0, 0.0)  # changed in place between calls below


def step_global_gravity(x: wp.array(dtype=wp.vec3), k: float, dt: float, y: wp.array(dtype=wp.vec3)):
    """The vector a launch gets is one object the caller changes in place: each launch must pack
    its bytes as they are then (as ``wp.launch`` does), not as the record last saw them."""
    f = wp.zeros(x.shape[0], dtype=wp.vec3, device=x.device, requires_grad=True)
    wp.launch(_springs, dim=x.shape[0], inputs=[x, k], outputs=[f], device=x.device)
    wp.launch(_integrate, dim=x.shape[0], inputs=[x, f, GRAVITY, dt], outputs=[y], device=x.device)


def test_vector_changed_in_place_between_calls():
    op = interop.op(step_global_gravity)
    x_np = _x(4, 9)
    x = wp.array(x_np, dtype=wp.vec3, device="cpu")
    for gy in (-1.0, -2.0, 0.0, -0.0, 3.5):
        GRAVITY[1] = gy
        y = op(x, 1.0, 0.5)
        want, _ = _reference(
            lambda wx, k, g, dt, wy: step_global_gravity(wx, k, dt, wy), x_np, 1.0, (0, 0, 0), 0.5, "cpu"
        )
        _same(y.numpy(), want)
