"""Where one call's time goes on a device: ``python -m benchmarks.profile_calls [--device cuda]``.

A companion of ``python -m benchmarks --device cuda`` for the next change, not a gate: for torch
forward+backward, a JAX op under ``jit`` and a CuPy call, the per-call time split into its parts
and the top functions of a ``cProfile`` run (own time per call, in microseconds); on CUDA also what
the GPU runs for one JAX call at n = 2^26 (kernels, fills, copies and their GPU times, from torch's
profiler), against jnp and a raw launch: where the JAX path's bandwidth goes. The torch
backward runs on the calling thread here (``torch.autograd.set_multithreading_enabled(False)``),
so the profile sees it; the split is measured both ways.
"""

from __future__ import annotations

import cProfile
import importlib.util
import pstats
import sys
import time
import traceback
from typing import Any, Callable

import numpy as np
import warp as wp

import interop

from .bench_device import BIG, N, empty_function, saxpy

CALLS = 2000


def _per_call(fn: Callable[[], Any], sync: Callable[[], Any], calls: int = CALLS) -> float:
    for _ in range(50):
        fn()
    sync()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls // 5):
            fn()
        sync()
        best = min(best, (time.perf_counter() - t0) / (calls // 5))
    return best * 1e6


def _profile(title: str, fn: Callable[[], Any], sync: Callable[[], Any], calls: int = CALLS, top: int = 22) -> None:
    for _ in range(50):
        fn()
    sync()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    sync()
    prof.disable()
    stats = pstats.Stats(prof)
    rows = []
    for (file, line, name), (_cc, nc, tt, ct, _) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append((tt / calls * 1e6, ct / calls * 1e6, nc / calls, f"{file.rsplit('/', 2)[-1]}:{line}({name})"))
    rows.sort(reverse=True)
    print(f"\n{title}: cProfile, per call (us own, us cumulative, calls per call)")
    for own, cum, n, where in rows[:top]:
        print(f"  {own:8.2f} {cum:9.2f} {n:6.2f}  {where[:110]}")


def _torch(device: str) -> None:
    import torch

    dev = torch.device(device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    op = interop.op(saxpy)

    Empty = empty_function()
    x = torch.rand(N, device=dev, requires_grad=True)
    y = torch.rand(N, device=dev, requires_grad=True)

    def fwd(f):
        return lambda: f(x, y, 2.0)

    def fb(f):
        def step():
            x.grad = y.grad = None
            f(x, y, 2.0).sum().backward()

        return step

    def fwd_sum(f):
        return lambda: f(x, y, 2.0).sum()

    print(f"\n== torch on {device}, n={N}: per call, us (best of 5 batches)")
    for threads in (True, False):
        torch.autograd.set_multithreading_enabled(threads)
        row = {
            "empty fwd (grad)": _per_call(fwd(Empty.apply), sync),
            "empty fwd+sum": _per_call(fwd_sum(Empty.apply), sync),
            "empty fwd+bwd": _per_call(fb(Empty.apply), sync),
            "op fwd (grad)": _per_call(fwd(op), sync),
            "op fwd+sum": _per_call(fwd_sum(op), sync),
            "op fwd+bwd": _per_call(fb(op), sync),
        }
        with torch.no_grad():
            row["op fwd (no grad)"] = _per_call(fwd(op), sync)
        print(f"  autograd multithreading={threads}: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items()))
        print(
            f"    backward alone: op {row['op fwd+bwd'] - row['op fwd+sum']:.1f}, "
            f"empty {row['empty fwd+bwd'] - row['empty fwd+sum']:.1f}"
        )
    torch.autograd.set_multithreading_enabled(False)
    try:
        _profile(f"torch op fwd+bwd on {device}", fb(op), sync)
        _profile(f"torch empty Function fwd+bwd on {device}", fb(Empty.apply), sync, top=10)
    finally:
        torch.autograd.set_multithreading_enabled(True)


def _jax(device: str) -> None:
    import jax
    import jax.numpy as jnp

    from adapters.jax import launch as _jax_launch

    platform = "gpu" if device.startswith("cuda") else "cpu"
    dev = jax.devices(platform)[0]
    op = interop.op(saxpy)
    x = jax.device_put(np.random.default_rng(0).random(N, dtype=np.float32), dev)
    y = jax.device_put(np.ones(N, np.float32), dev)
    f = jax.jit(lambda x, y: op(x, y, 2.0))
    g = jax.jit(jax.grad(lambda x, y: jnp.sum(op(x, y, 2.0)), argnums=(0, 1)))
    plain = jax.jit(lambda x, y: 2.0 * x + y)
    empty = jax.jit(lambda x, y: x)
    out: dict = {}

    def sync():
        jax.block_until_ready(out.get("r"))

    def call(fn):
        def run():
            out["r"] = fn(x, y)

        return run

    # time spent inside the handler, per call (wrapping its entry points)
    spent = {"cuda": 0.0, "cpu": 0.0, "n_cuda": 0, "n_cpu": 0}
    H = _jax_launch._Handler
    orig_cuda = H.cuda

    def timed_cuda(self, p):
        t0 = time.perf_counter()
        try:
            return orig_cuda(self, p)
        finally:
            spent["cuda"] += time.perf_counter() - t0
            spent["n_cuda"] += 1

    print(f"\n== JAX on {device}, n={N}: per call, us (best of 5 batches)")
    row = {
        "plain jnp jit": _per_call(call(plain), sync),
        "identity jit": _per_call(call(empty), sync),
        "op jit": _per_call(call(f), sync),
        "op jit(grad)": _per_call(call(g), sync),
    }
    print("  " + ", ".join(f"{k} {v:.1f}" for k, v in row.items()))
    H.cuda = timed_cuda
    try:
        n = _per_call(call(f), sync)
        if spent["n_cuda"]:
            print(
                f"  op jit {n:.1f} us of which inside the CUDA handler {spent['cuda'] / spent['n_cuda'] * 1e6:.1f} us"
            )
    finally:
        H.cuda = orig_cuda
    _profile(f"JAX op under jit on {device}", call(f), sync)


def _gpu_activities(title: str, fn: Callable[[], Any], sync: Callable[[], Any]) -> None:
    """The CUDA activities (kernels, fills, copies) of one call of ``fn`` with their GPU times, from
    torch's profiler (CUPTI: every library's activities in the process); needs torch's CUDA build."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        print(f"\n{title}: (torch is not installed: no CUDA activity trace)")
        return
    if not torch.cuda.is_available():
        print(f"\n{title}: (torch has no CUDA: no CUDA activity trace)")
        return
    for _ in range(3):
        fn()
    sync()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        sync()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    print(f"\n{title}: CUDA activities of one call (GPU us)")
    for e in events:
        print(f"  {e.device_time:10.1f}  {e.name[:100]}")
    print(f"  {sum(e.device_time for e in events):10.1f}  total")


def _jax_big(device: str) -> None:
    """n = 2^26: what the GPU runs for the JAX op under jit, for jnp and for a raw launch."""
    import jax

    dev = jax.devices("gpu")[0]
    op = interop.op(saxpy)
    xb = jax.device_put(np.random.default_rng(1).random(BIG, dtype=np.float32), dev)
    yb = jax.device_put(np.ones(BIG, np.float32), dev)
    wxb, wyb = wp.from_jax(xb), wp.from_jax(yb)
    wob = wp.empty(BIG, dtype=float, device=wxb.device)
    plain_b, ours_b = jax.jit(lambda x, y: 2.0 * x + y), jax.jit(lambda x, y: op(x, y, 2.0))
    out: dict = {}

    def sync():
        jax.block_until_ready(out.get("r"))
        wp.synchronize_device(wxb.device)

    def run(f):
        def go():
            out["r"] = f(xb, yb)

        return go

    # what XLA runs around the op (a copy or a fill beside the custom call would show here)
    hlo = ours_b.lower(xb, yb).compile().as_text()
    print(f"\nJAX op under jit on {device}, n=2^26: optimized HLO, entry computation")
    entry = hlo[hlo.find("ENTRY") :]
    for line in entry.splitlines()[:12]:
        print("  " + line[:160])
    _gpu_activities(f"JAX op under jit on {device}, n=2^26", run(ours_b), sync)
    _gpu_activities(f"jnp 2*x+y under jit on {device}, n=2^26", run(plain_b), sync)
    # host time inside the op's CUDA handler at this size, beside the blocking per-call time
    from adapters.jax import launch as _jax_launch

    H, spent = _jax_launch._Handler, [0.0, 0]
    orig = H.cuda

    def timed(self, p):
        t0 = time.perf_counter()
        try:
            return orig(self, p)
        finally:
            spent[0] += time.perf_counter() - t0
            spent[1] += 1

    H.cuda = timed
    try:
        per = _per_call(run(ours_b), sync, calls=200)
    finally:
        H.cuda = orig
    inside = spent[0] / spent[1] * 1e6 if spent[1] else float("nan")
    print(f"\nJAX op under jit on {device}, n=2^26: {per:.1f} us per blocking call, {inside:.1f} us inside the handler")
    _gpu_activities(
        f"raw wp.launch on {device}, n=2^26",
        lambda: wp.launch(saxpy, dim=BIG, inputs=[wxb, wyb, 2.0], outputs=[wob], device=wxb.device),
        sync,
    )


def _cupy(device: str) -> None:
    import cupy as cp

    op = interop.op(saxpy)
    x = cp.random.random(N, dtype=cp.float32)
    y = cp.random.random(N, dtype=cp.float32)
    sync = cp.cuda.get_current_stream().synchronize
    print(f"\n== CuPy on {device}, n={N}: per call, us")
    print(
        f"  2*x+y {_per_call(lambda: 2.0 * x + y, sync):.1f}, op {_per_call(lambda: op(x, y, 2.0), sync):.1f}, "
        f"cp.empty {_per_call(lambda: cp.empty(N, cp.float32), sync):.1f}"
    )
    _profile(f"CuPy op call on {device}", lambda: op(x, y, 2.0), sync)


def main(argv: list[str]) -> int:
    device = argv[argv.index("--device") + 1] if "--device" in argv else "cuda"
    wp.config.quiet = True
    wp.init()
    print(f"profile on {device}: {wp.get_device(device).name}, warp {wp.config.version}")
    for name, fn in (("torch", _torch), ("jax", _jax), ("jax", _jax_big), ("cupy", _cupy)):
        if importlib.util.find_spec(name) is None or (name == "cupy" or fn is _jax_big) and device == "cpu":
            continue
        try:
            fn(device)
        except Exception:
            traceback.print_exc()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
