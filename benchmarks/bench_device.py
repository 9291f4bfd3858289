"""Per-call cost on one device (``python -m benchmarks --device cuda``): the rows of issue 32, as
ratios against what a user of each framework would write instead, every row measured round-robin
in one process (``harness.interleaved``) with the device synchronized after each batch.

- torch: the op's eager forward against a one-kernel torch op (``torch.add(y, x, alpha=2)``),
  plain ``2*x+y`` and a raw ``wp.launch``; forward+backward against an empty
  ``autograd.Function`` and plain torch.
- JAX: the op under ``jit`` against plain ``jnp`` and Warp's ``wp.jax_kernel``; ``jit(grad)``;
  an eager call; a chain of 10 ops under one ``jit``.
- CuPy (CUDA only): the op against a CuPy elementwise expression.
- bandwidth at n = 2^26 (GB/s read+written): the torch and JAX paths against a raw
  ``wp.launch`` and each framework's own copy / expression.

``--device cpu`` runs the same rows on the CPU (a check of this script where no GPU is).
"""

from __future__ import annotations

import importlib.util
from typing import Any, Callable

import numpy as np
import warp as wp

import interop

from .harness import gate, interleaved, ratios, report

N = 1024
BIG = 1 << 26
CHAIN = 10


@wp.kernel
def saxpy(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a * x[i] + y[i]


def _kw(quick: bool) -> dict:
    return {"rounds": 5, "batch_time": 0.01} if quick else {"rounds": 15, "batch_time": 0.05}


def _gpu_name(device: str) -> str:
    if device == "cpu":
        return "CPU"
    return wp.get_device(device).name


def _record(title: str, rows: list, base: str, pairs: list, sync, quick: bool) -> dict[str, float]:
    table = report(title, interleaved(rows, sync=sync, **_kw(quick)), base)
    return ratios("ratios", table, pairs)


def run(device: str = "cuda", quick: bool = False) -> dict:
    """Measure every installed framework on ``device``; gate ratios are recorded under ``device``."""
    print(f"\n== per-call cost on {device}: {_gpu_name(device)}; warp {wp.config.version}")
    found: dict[str, float] = {}
    for name, fn in (("torch", _torch), ("jax", _jax), ("cupy", _cupy)):
        if importlib.util.find_spec(name) is None:
            print(f"\n[{name}] not installed: skipped")
            continue
        if name == "cupy" and device == "cpu":
            continue
        try:
            found.update({f"{name}: {k}": v for k, v in fn(device, quick).items()})
        except Exception as e:  # one framework's failure must not hide the others' numbers
            import traceback

            traceback.print_exc()
            print(f"\n[{name}] FAILED: {type(e).__name__}: {e}")
    for k, v in found.items():
        gate(device, k, v)
    return found


# ---- torch --------------------------------------------------------------------------------
_EMPTY: list = []


def empty_function() -> Any:
    """An ``autograd.Function`` with nothing inside (the floor of any Python-level autograd node),
    made on first use: torch is imported only when its rows run."""
    if not _EMPTY:
        import torch

        class EmptyFunction(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, y, a):
                return torch.empty_like(x)

            @staticmethod
            def backward(ctx, g):
                return g, g, None

        _EMPTY.append(EmptyFunction)
    return _EMPTY[0]


def _torch(device: str, quick: bool) -> dict[str, float]:
    import torch

    dev = torch.device(device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else None
    op = interop.op(saxpy)

    EmptyFunction = empty_function()
    x = torch.rand(N, device=dev)
    y = torch.rand(N, device=dev)
    xr, yr = x.clone().requires_grad_(True), y.clone().requires_grad_(True)
    out = torch.empty(N, device=dev)
    wx, wy, wout = wp.from_torch(x), wp.from_torch(y), wp.from_torch(out)
    stream = wp.stream_from_torch(torch.cuda.current_stream(dev)) if dev.type == "cuda" else None
    torch.testing.assert_close(op(x, y, 2.0), 2.0 * x + y)

    def fwd_bwd(f):
        def step():
            xr.grad = None
            yr.grad = None
            f(xr, yr, 2.0).sum().backward()

        return step

    fwd_bwd(op)()
    torch.testing.assert_close(xr.grad, torch.full_like(x, 2.0))
    torch.testing.assert_close(yr.grad, torch.ones_like(y))

    OP, OPB = "interop op, eager forward (no grad)", "interop op, eager forward+backward"
    ONE, PLAIN = "one-kernel torch op torch.add(y, x, alpha=2)", "plain torch 2*x+y (two kernels)"
    RAW, EMPTY = "raw wp.launch, prebuilt Warp arrays", "empty autograd.Function, forward+backward"
    PLAINB = "plain torch 2*x+y, forward+backward"
    rows = [
        (ONE, lambda: torch.add(y, x, alpha=2.0)),
        (PLAIN, lambda: 2.0 * x + y),
        (RAW, lambda: wp.launch(saxpy, dim=N, inputs=[wx, wy, 2.0], outputs=[wout], stream=stream, device=wx.device)),
        (OP, lambda: op(x, y, 2.0)),
        (EMPTY, fwd_bwd(EmptyFunction.apply)),
        (PLAINB, fwd_bwd(lambda a, b, s: s * a + b)),
        (OPB, fwd_bwd(op)),
    ]
    pairs = [(OP, ONE), (OP, PLAIN), (OP, RAW), (OPB, EMPTY), (OPB, PLAINB)]
    found = _record(f"PyTorch on {device}, saxpy, n={N}", rows, ONE, pairs, sync, quick)

    # bandwidth at 2^26: 3 arrays of 4 bytes per element (two read, one written)
    xb, yb = torch.rand(BIG, device=dev), torch.rand(BIG, device=dev)
    ob = torch.empty(BIG, device=dev)
    wxb, wyb, wob = wp.from_torch(xb), wp.from_torch(yb), wp.from_torch(ob)
    big_rows = [
        ("torch copy_ (read+write 2 arrays)", lambda: ob.copy_(xb)),
        ("raw wp.launch saxpy", lambda: wp.launch(saxpy, dim=BIG, inputs=[wxb, wyb, 2.0], outputs=[wob], stream=stream, device=wxb.device)),
        ("interop op (torch), saxpy", lambda: op(xb, yb, 2.0)),
    ]  # fmt: skip
    found.update(_bandwidth(f"PyTorch on {device}, n=2^26", big_rows, sync, quick, {"torch copy_": 8}))
    return found


def _bandwidth(title: str, rows: list, sync, quick: bool, bytes_per: dict[str, int]) -> dict[str, float]:
    kw = {"rounds": 3, "batch_time": 0.05} if quick else {"rounds": 7, "batch_time": 0.1}
    measured = interleaved(rows, sync=sync, **kw)
    print(f"\n{title}: GB/s (bytes read + written / time)")
    gbs = {}
    for label, sec in measured:
        per = next((b for k, b in bytes_per.items() if label.startswith(k)), 12)
        gbs[label] = per * BIG / sec / 1e9
        print(f"  {label:58s} {sec * 1e3:9.3f} ms {gbs[label]:9.0f} GB/s")
    own = next(iter(gbs))  # the first row: the framework's own
    raw = next(v for k, v in gbs.items() if k.startswith("raw"))
    ours = next(v for k, v in gbs.items() if k.startswith("interop"))
    print(f"    interop / raw wp.launch bandwidth: {ours / raw:.2f}x")
    print(f"    interop / {own} bandwidth: {ours / gbs[own]:.2f}x")
    # gated as time ratios (higher is worse): the alternative's bandwidth over ours
    return {
        f"{title}: raw wp.launch GB/s / interop GB/s": raw / ours,
        f"{title}: {own} GB/s / interop GB/s": gbs[own] / ours,
    }


# ---- JAX ----------------------------------------------------------------------------------
def _jax(device: str, quick: bool) -> dict[str, float]:
    import jax
    import jax.numpy as jnp

    platform = "gpu" if device.startswith("cuda") else "cpu"
    dev = jax.devices(platform)[0]
    op = interop.op(saxpy)
    jk = wp.jax_kernel(saxpy)
    x = jax.device_put(np.random.default_rng(0).random(N, dtype=np.float32), dev)
    y = jax.device_put(np.ones(N, np.float32), dev)

    ours = jax.jit(lambda x, y: op(x, y, 2.0))
    theirs = jax.jit(lambda x, y: jk(x, y, 2.0)[0])
    plain = jax.jit(lambda x, y: 2.0 * x + y)
    ours_grad = jax.jit(jax.grad(lambda x, y: jnp.sum(op(x, y, 2.0)), argnums=(0, 1)))
    plain_grad = jax.jit(jax.grad(lambda x, y: jnp.sum(2.0 * x + y), argnums=(0, 1)))

    def chain(f):
        def g(x, y):
            for _ in range(CHAIN):
                x = f(x, y)
            return x

        return jax.jit(g)

    ours_chain = chain(lambda x, y: op(x, y, 0.5))
    plain_chain = chain(lambda x, y: 0.5 * x + y)
    np.testing.assert_allclose(np.asarray(ours(x, y)), np.asarray(plain(x, y)), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(ours_grad(x, y)[0]), np.asarray(plain_grad(x, y)[0]), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(ours_chain(x, y)), np.asarray(plain_chain(x, y)), rtol=1e-5)
    for a in (x, y):
        assert a.devices() == {dev}

    def block(f: Callable[[], Any]) -> Callable[[], Any]:
        return lambda: jax.block_until_ready(f())

    JIT, PLAIN, WJK = "interop op inside jit", "plain jnp inside jit", "wp.jax_kernel inside jit"
    GRAD, PGRAD = "interop op jit(grad)", "plain jnp jit(grad)"
    EAGER, CH, PCH = "interop op, eager call", f"interop chain of {CHAIN} ops in one jit", f"plain jnp chain of {CHAIN}"
    rows = [
        (PLAIN, block(lambda: plain(x, y))),
        (WJK, block(lambda: theirs(x, y))),
        (JIT, block(lambda: ours(x, y))),
        (EAGER, block(lambda: op(x, y, 2.0))),
        (PGRAD, block(lambda: plain_grad(x, y))),
        (GRAD, block(lambda: ours_grad(x, y))),
        (PCH, block(lambda: plain_chain(x, y))),
        (CH, block(lambda: ours_chain(x, y))),
    ]
    pairs = [(JIT, PLAIN), (JIT, WJK), (GRAD, PGRAD), (EAGER, JIT), (CH, PCH)]
    found = _record(f"JAX on {device} ({dev}), saxpy, n={N}", rows, PLAIN, pairs, None, quick)

    xb = jax.device_put(np.random.default_rng(1).random(BIG, dtype=np.float32), dev)
    yb = jax.device_put(np.ones(BIG, np.float32), dev)
    wxb, wyb = wp.from_jax(xb), wp.from_jax(yb)
    wob = wp.empty(BIG, dtype=float, device=wxb.device)
    plain_b, ours_b = jax.jit(lambda x, y: 2.0 * x + y), jax.jit(lambda x, y: op(x, y, 2.0))
    sync = (lambda: wp.synchronize_device(wxb.device)) if platform == "gpu" else None
    big_rows = [
        ("jnp 2*x+y inside jit", block(lambda: plain_b(xb, yb))),
        ("raw wp.launch saxpy", lambda: wp.launch(saxpy, dim=BIG, inputs=[wxb, wyb, 2.0], outputs=[wob], device=wxb.device)),
        ("interop op (JAX) inside jit", block(lambda: ours_b(xb, yb))),
    ]  # fmt: skip
    measured = _bandwidth(f"JAX on {device}, n=2^26", big_rows, sync, quick, {})
    found.update(measured)
    if sync is not None:
        # the same calls dispatched back to back (JAX's asynchronous dispatch; one device sync per
        # batch, as the raw launches are timed): the blocking rows above add a host round trip per call
        piped = [
            ("jnp 2*x+y inside jit, back to back", lambda: plain_b(xb, yb)),
            big_rows[1],
            ("interop op (JAX) inside jit, back to back", lambda: ours_b(xb, yb)),
        ]
        # gated too: the measure of the JAX op against a raw launch, both timed back to back
        found.update(_bandwidth(f"JAX on {device}, n=2^26, dispatched back to back", piped, sync, quick, {}))
    return found


# ---- CuPy ---------------------------------------------------------------------------------
def _cupy(device: str, quick: bool) -> dict[str, float]:
    import cupy as cp

    op = interop.op(saxpy)
    with cp.cuda.Device(wp.get_device(device).ordinal):
        x = cp.random.random(N, dtype=cp.float32)
        y = cp.random.random(N, dtype=cp.float32)
        cp.testing.assert_allclose(op(x, y, 2.0), 2.0 * x + y, rtol=1e-6)
        ew = cp.ElementwiseKernel("float32 x, float32 y", "float32 z", "z = 2.0f * x + y", "interop_bench_saxpy")
        OP, EXPR, EW = "interop op (CuPy arrays)", "CuPy 2*x+y (two kernels)", "CuPy ElementwiseKernel (one kernel)"
        rows = [(EXPR, lambda: 2.0 * x + y), (EW, lambda: ew(x, y)), (OP, lambda: op(x, y, 2.0))]
        sync = cp.cuda.get_current_stream().synchronize
        return _record(f"CuPy on {device}, saxpy, n={N}", rows, EXPR, [(OP, EXPR), (OP, EW)], sync, quick)
