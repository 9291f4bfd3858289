"""A Python-function op's temporaries: ``wp.zeros``/``wp.empty`` inside its function (issue 49).

While a function op's function runs, its ``wp.zeros``/``wp.empty`` calls with a shape of ints, a
dtype, a device and ``requires_grad`` make the first array of each signature through Warp and
copy its fields for the next ones (``interop._fast_launch.Records.allocate``,
``_warp_compat.owned_array_maker``). A copy that shared memory with another call's temporary, or
missed a field, would be a silent wrong answer: these tests compare the copies with Warp's own
arrays field by field, and run sequences of calls (sizes changing, several forwards kept before
one backward) in torch and JAX against Warp's own ``wp.Tape``.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import warp as wp
from _devices import jax_device

import interop
from interop import _launch_hook
from interop._fast_launch import Records

#: (args, kwargs) of wp.zeros/wp.empty calls the copies take
TAKEN = [
    ((5,), {"dtype": wp.vec3, "device": "cpu", "requires_grad": True}),
    ((), {"shape": (2, 3), "dtype": float, "device": "cpu"}),
    (((4, 2), wp.mat22, "cpu", True), {}),
    ((7, wp.int32), {"device": "cpu"}),
    ((3,), {"dtype": wp.float64, "device": "cpu", "requires_grad": False}),
]

#: calls they leave to Warp (its own wp.zeros/wp.empty runs)
LEFT = [
    ((5,), {"dtype": float, "device": "cpu", "pinned": False}),
    (([2, 3],), {"dtype": float, "device": "cpu"}),
    ((np.int64(4),), {"dtype": float, "device": "cpu"}),
    ((5,), {"dtype": float, "device": "cpu", "requires_grad": 1}),
    ((5,), {"dtype": float, "device": "cpu", "retain_grad": False}),
    ((0,), {"dtype": float, "device": "cpu"}),  # empty: no memory to copy (Warp's, through the copy slot)
]

_IDENTITY = {"ptr", "_grad"}


def _fields(a) -> dict:
    return {k: v for k, v in a.__dict__.items() if k not in _IDENTITY}


@pytest.mark.parametrize("zero", [True, False], ids=["zeros", "empty"])
@pytest.mark.parametrize("call", TAKEN, ids=[str(i) for i in range(len(TAKEN))])
def test_copies_are_warps_arrays(call, zero):
    """The second and third call of a signature are copies: the fields of Warp's own array of that
    call, memory of their own (zero-filled for wp.zeros), a gradient of their own, zero-filled."""
    args, kw = call
    warp_fn = wp.zeros if zero else wp.empty
    rec = Records()
    first = rec.allocate(args, kw, zero)
    second, third = rec.allocate(args, kw, zero), rec.allocate(args, kw, zero)
    ref = warp_fn(*args, **kw)
    for a in (first, second, third):
        assert type(a) is wp.array
        assert _fields(a) == _fields(ref)
        assert (a.grad is None) == (ref.grad is None)
        if a.grad is not None:
            assert _fields(a.grad) == _fields(ref.grad)
            assert not np.any(a.grad.numpy())
        if zero:
            assert not np.any(a.numpy())
    ptrs = [a.ptr for a in (first, second, third, ref)]
    ptrs += [a.grad.ptr for a in (first, second, third, ref) if a.grad is not None]
    assert len(set(ptrs)) == len(ptrs)  # no two arrays share memory
    # each owns its memory: writing one leaves the others as they were
    second.fill_(3)
    if second.grad is not None:
        second.grad.fill_(2)
    if zero:
        assert not np.any(first.numpy()) and not np.any(third.numpy())
    for a in (first, third):
        if a.grad is not None:
            assert not np.any(a.grad.numpy())
    assert rec._allocs  # the copy slot is there (its maker)
    assert all(m is not None for m in rec._allocs.values())
    del first, second, third  # (freed through Warp's deleter, as any array)


@pytest.mark.parametrize("call", LEFT, ids=[str(i) for i in range(len(LEFT))])
def test_other_calls_are_warps_own(call):
    args, kw = call
    rec = Records()
    for _ in range(2):
        got = rec.allocate(args, kw, True)
        if got is not None:  # (made by Warp, and no copy made of it)
            assert type(got) is wp.array
            assert _fields(got) == _fields(wp.zeros(*args, **kw))  # default-device: every LEFT call names cpu
    assert all(m is None for m in rec._allocs.values())


@pytest.mark.parametrize("zero", [True, False], ids=["zeros_like", "empty_like"])
@pytest.mark.parametrize(
    "kw",
    [{}, {"requires_grad": True}, {"requires_grad": False}, {"device": "cpu"}, {"pinned": False}],
    ids=["plain", "grad", "no-grad", "device", "unpinned"],
)
@pytest.mark.parametrize("src_grad", [False, True], ids=["src", "src-with-grad"])
def test_like_copies_are_warps_arrays(kw, zero, src_grad):
    """``wp.zeros_like``/``wp.empty_like`` take the source's shape, dtype, device and gradient
    where not given, as Warp's do: their copies have the fields of Warp's own."""
    src = wp.array(np.ones((3, 2), np.float32), dtype=wp.vec2, device="cpu", requires_grad=src_grad)
    warp_fn = wp.zeros_like if zero else wp.empty_like
    rec = Records()
    made = [rec.allocate_like((src,), kw, zero) for _ in range(3)]
    ref = warp_fn(src, **kw)
    for a in made:
        assert _fields(a) == _fields(ref)
        assert (a.grad is None) == (ref.grad is None)
        if zero:
            assert not np.any(a.numpy())
    assert len({a.ptr for a in made} | {src.ptr, ref.ptr}) == 5
    assert all(m is not None for m in rec._allocs.values())


def test_like_calls_warp_keeps():
    src = wp.zeros(4, dtype=float, device="cpu", requires_grad=True)
    rec = Records()
    assert rec.allocate_like((src,), {"retain_grad": True}, True) is None
    assert rec.allocate_like((src,), {"pinned": True}, True) is None
    strided = src.reshape((2, 2)).transpose()  # a strided source: a new contiguous array, as Warp's
    for _ in range(2):
        got = rec.allocate_like((strided,), {}, True)
        assert _fields(got) == _fields(wp.zeros_like(strided)) and got.is_contiguous
    idx = wp.indexedarray(src, [wp.array([0, 2], dtype=wp.int32, device="cpu")])
    assert rec.allocate_like((idx,), {}, True) is None
    assert rec.allocate_like((np.zeros(3),), {}, True) is None


@wp.kernel
def _spread(x: wp.array(dtype=wp.vec3), k: float, f: wp.array(dtype=wp.vec3), s: wp.array(dtype=float)):
    i = wp.tid()
    j = (i + 1) % x.shape[0]
    d = x[j] - x[i]
    wp.atomic_add(f, i, k * d * wp.length(d))
    s[i] = wp.length(x[i]) * k


@wp.kernel
def _combine(
    x: wp.array(dtype=wp.vec3), f: wp.array(dtype=wp.vec3), s: wp.array(dtype=float), y: wp.array(dtype=wp.vec3)
):
    i = wp.tid()
    y[i] = x[i] + f[i] * s[i] + wp.vec3(wp.sin(x[i][1]), 0.0, 0.0)


def two_temporaries(x: wp.array(dtype=wp.vec3), k: float, y: wp.array(dtype=wp.vec3)):
    """Two temporaries a call: forces (zero-filled, with a gradient) and a scale written in full
    (``wp.empty``, with a gradient)."""
    f = wp.zeros(x.shape[0], dtype=wp.vec3, device=x.device, requires_grad=True)
    s = wp.empty(shape=x.shape[0], dtype=float, device=x.device, requires_grad=True)
    wp.launch(_spread, dim=x.shape[0], inputs=[x, k], outputs=[f, s], device=x.device)
    wp.launch(_combine, dim=x.shape[0], inputs=[x, f, s], outputs=[y], device=x.device)


def two_temporaries_like(x: wp.array(dtype=wp.vec3), k: float, y: wp.array(dtype=wp.vec3)):
    """The same, the forces made like the positions (``wp.zeros_like``)."""
    f = wp.zeros_like(x, requires_grad=True)
    s = wp.empty(shape=x.shape[0], dtype=float, device=x.device, requires_grad=True)
    wp.launch(_spread, dim=x.shape[0], inputs=[x, k], outputs=[f, s], device=x.device)
    wp.launch(_combine, dim=x.shape[0], inputs=[x, f, s], outputs=[y], device=x.device)


OP = interop.op(two_temporaries)
OP_LIKE = interop.op(two_temporaries_like)

SIZES = [5, 5, 8, 5, 8, 8, 3]


def _x(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1.0, 1.0, (n, 3)).astype(np.float32)


def _w(n: int) -> np.ndarray:
    return np.arange(1, 3 * n + 1, dtype=np.float32).reshape(n, 3) / (3 * n)


def _reference(x: np.ndarray, k: float) -> tuple[np.ndarray, np.ndarray]:
    """Warp's own tape over the function: ``y`` and d sum(y * w) / dx."""
    wx = wp.array(x, dtype=wp.vec3, device="cpu", requires_grad=True)
    wy = wp.zeros(x.shape[0], dtype=wp.vec3, device="cpu", requires_grad=True)
    tape = wp.Tape()
    with tape:
        two_temporaries(wx, k, wy)
    wy.grad = wp.array(_w(x.shape[0]), dtype=wp.vec3, device="cpu")
    tape.backward()
    return wy.numpy(), wx.grad.numpy()


def _same(got, ref) -> None:
    np.testing.assert_allclose(np.asarray(got), ref, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("op", [OP, OP_LIKE], ids=["zeros", "zeros_like"])
def test_torch_forwards_kept_then_one_backward(op):
    """Several forwards, each keeping its tape and temporaries, then one backward through all:
    each call's gradient is its own (temporaries shared between calls would mix them)."""
    torch = pytest.importorskip("torch")
    xs, ys, refs = [], [], []
    for t, n in enumerate(SIZES):
        x_np = _x(n, t)
        k = 0.5 + t
        x = torch.tensor(x_np, device="cpu", requires_grad=True)
        y = op(x, k)
        y_ref, g_ref = _reference(x_np, k)
        _same(y.detach(), y_ref)
        xs.append(x)
        ys.append(y)
        refs.append(g_ref)
        assert wp.zeros is _launch_hook.original_allocator(True)
        assert wp.empty is _launch_hook.original_allocator(False)
    sum((y * torch.tensor(_w(y.shape[0]), device="cpu")).sum() for y in ys).backward()
    for x, g_ref in zip(xs, refs):
        _same(x.grad, g_ref)
    made = [m for plan in op._plans.values() for m in plan.runner.fast_records._allocs.values()]
    assert made and all(m is not None for m in made)  # the temporaries were copies


def test_jax_scan_and_loop_match_warp_tape():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    dev = jax_device("cpu")
    for t, n in enumerate(SIZES[:4]):
        x_np = _x(n, 10 + t)
        k = 1.0 + t
        y_ref, g_ref = _reference(x_np, k)
        x = jax.device_put(jnp.asarray(x_np), dev)
        w = jax.device_put(jnp.asarray(_w(n)), dev)

        def loss(x, k=k, w=w):
            return jnp.sum(OP(x, k) * w)

        def three(x, k=k, w=w):  # three calls in one program: three kept tapes alive at once
            return jnp.sum(OP(x, k) * w) + jnp.sum(OP(x, k) * w) + jnp.sum(OP(x, k) * w)

        _same(OP(x, k), y_ref)
        _same(jax.grad(loss)(x), g_ref)
        _same(jax.jit(jax.grad(three))(x), 3 * g_ref)


def test_another_threads_allocations_are_warps():
    """While one thread's function runs, another thread's wp.zeros is Warp's own: no copy slot
    is made for it in the op's records."""
    torch = pytest.importorskip("torch")
    seen = []

    def other() -> None:
        seen.append(wp.zeros(13, dtype=wp.vec2, device="cpu"))

    def fn(x: wp.array(dtype=float), y: wp.array(dtype=float)):
        t = threading.Thread(target=other)
        t.start()
        t.join()
        tmp = wp.zeros(x.shape[0], dtype=float, device=x.device)
        wp.copy(y, x)
        wp.copy(tmp, x)

    op = interop.op(fn)
    for _ in range(2):
        y = op(torch.arange(4, dtype=torch.float32, device="cpu"))
        assert y.tolist() == [0.0, 1.0, 2.0, 3.0]
    keys = [k for plan in op._plans.values() for k in plan.runner.fast_records._allocs]
    assert keys and all(k[0] == 4 for k in keys)
    assert len(seen) == 2 and not np.any(seen[1].numpy())
