"""Timing helpers shared by every benchmark module: median of many calls after warm-up, ratios printed."""

from __future__ import annotations

import gc
import os
import statistics
import sys
import time
from typing import Callable

import warp as wp

SIZES = (1024, 1_000_000)

#: every block printed by :func:`report` in this process: (title, [(label, us, ratio)], baseline)
RECORDED: list[tuple[str, list[tuple[str, float, float]], str]] = []

#: the ratios the benchmark gate compares with benchmarks/baseline.json, by framework then name
GATED: dict[str, dict[str, float]] = {}

#: set by ``python -m benchmarks --check``: only the per-call size (n=1024), where the gate looks
SMALL_ONLY = False


def sizes() -> tuple[int, ...]:
    """The array sizes to measure: both, or only n=1024 for the gate."""
    return SIZES[:1] if SMALL_ONLY else SIZES


def gate(framework: str, name: str, ratio: float) -> None:
    """Record ``ratio`` (two rows of one interleaved run) for the benchmark gate."""
    GATED.setdefault(framework, {})[name] = ratio


def _batch_size(fn: Callable[[], object], target: float, sync=None) -> int:
    """Calls of ``fn`` that take about ``target`` seconds (found by doubling from one call)."""
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        if sync:
            sync()
        dt = time.perf_counter() - t0
        if dt >= target / 4 or n >= 1 << 20:
            break
        n *= 2
    return max(1, int(n * target / max(dt, 1e-9)))


def per_call(fn: Callable[[], object], *, warmup: int = 20, min_time: float = 0.2, repeat: int = 7, sync=None) -> float:
    """Median seconds per call of ``fn``: ``repeat`` batches, each at least ``min_time`` long."""
    for _ in range(warmup):
        fn()
    if sync:
        sync()
    n = _batch_size(fn, min_time / 4, sync)
    samples = []
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            if sync:
                sync()
            samples.append((time.perf_counter() - t0) / n)
    finally:
        if gc_was:
            gc.enable()
    return statistics.median(samples)


def report(title: str, rows: list[tuple[str, float]], baseline: str) -> list[tuple[str, float, float]]:
    """Print rows as microseconds and as ratios to the ``baseline`` row; return (label, us, ratio)."""
    base = dict(rows)[baseline]
    print(f"\n{title}")
    print(f"  {'':58s} {'per call':>12s} {'ratio':>8s}")
    out = []
    for label, sec in rows:
        ratio = sec / base
        out.append((label, sec * 1e6, ratio))
        mark = "  (baseline)" if label == baseline else ""
        print(f"  {label:58s} {sec * 1e6:10.1f} us {ratio:7.2f}x{mark}")
    RECORDED.append((title, out, baseline))
    return out


def clock() -> tuple[str, Callable[[], float]]:
    """The clock of :func:`interleaved`: wall time, or with ``BENCH_CLOCK=cpu`` this process's CPU
    time (steadier on a shared, overloaded machine; it adds up the CPU time of all threads)."""
    if os.environ.get("BENCH_CLOCK", "wall") == "cpu":
        return "process CPU time", time.process_time
    return "wall time", time.perf_counter


def interleaved(rows: list[tuple[str, Callable[[], object]]], *, rounds: int = 15, batch_time: float = 0.02, sync=None):
    """Median seconds per call of every row, measured round-robin: each round times one batch of
    every row in turn, so a change in machine load hits all rows alike. Returns (label, seconds)."""
    _, now = clock()
    sizes = []
    for _, fn in rows:
        for _ in range(10):
            fn()
        sizes.append(_batch_size(fn, batch_time, sync))
    samples: list[list[float]] = [[] for _ in rows]
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(rounds):
            for k, ((_, fn), n) in enumerate(zip(rows, sizes)):
                t0 = now()
                for _ in range(n):
                    fn()
                if sync:
                    sync()
                samples[k].append((now() - t0) / n)
    finally:
        if gc_was:
            gc.enable()
    return [(label, statistics.median(s)) for (label, _), s in zip(rows, samples)]


def ratios(title: str, results: list[tuple[str, float, float]], pairs: list[tuple[str, str]]) -> dict[str, float]:
    """Print ``a / b`` for each (a, b) pair of row labels; return them by ``"a / b"``."""
    us = {label: u for label, u, _ in results}
    out = {}
    print(f"  {title}")
    for a, b in pairs:
        r = us[a] / us[b]
        out[f"{a} / {b}"] = r
        print(f"    {a}  /  {b}: {r:.2f}x")
    return out


def raw_saxpy_forward_adjoint(saxpy, n: int, wx, wy, wout, gx, gy, gout, allocate=None) -> Callable[[], None]:
    """The floor of forward+backward: a raw forward launch, zeroed gradients, a raw adjoint launch
    (prebuilt Warp arrays, CPU). With ``allocate``, each call also makes the framework tensors an
    op call must return (a new output and zero-filled gradients), dropped afterwards: what a
    fresh allocation costs (at n=1e6 mostly page faults) with no other work."""

    def run() -> None:
        if allocate is not None:
            allocate()
        wp.launch(saxpy, dim=n, inputs=[wx, wy, 2.0], outputs=[wout], device="cpu")
        gx.zero_()
        gy.zero_()
        wp.launch(
            saxpy,
            dim=n,
            inputs=[wx, wy, 2.0],
            outputs=[wout],
            adj_inputs=[gx, gy, 0.0],
            adj_outputs=[gout],
            adjoint=True,
            device="cpu",
        )

    return run


def by_hand_saxpy_forward_backward(
    saxpy, n: int, x_ptr: int, y_ptr: int, empty, zeros, ones, ptr
) -> Callable[[], None]:
    """The floor of an op call that returns new tensors, by hand: what the op's forward+backward
    allocates, allocated by the framework (a new output, the upstream gradient of ``.sum()``
    materialized, two zero-filled gradients) and held together as an autograd pass holds them,
    with raw ``wp.launch`` forward and adjoint launches reading and writing that memory. At
    n=1e6 this is what a fresh 4 MB buffer costs where the framework's CPU allocator returns
    freed memory to the system (page faults on first touch: glibc trims its heap when more
    than about twice the largest freed block is free at its top)."""

    def arr(p: int):
        return wp.array(ptr=p, dtype=float, shape=(n,), device="cpu")

    wx, wy = arr(x_ptr), arr(y_ptr)

    def run() -> None:
        out = empty()
        wout = arr(ptr(out))
        wp.launch(saxpy, dim=n, inputs=[wx, wy, 2.0], outputs=[wout], device="cpu")
        g, gx, gy = ones(), zeros(), zeros()
        wp.launch(
            saxpy,
            dim=n,
            inputs=[wx, wy, 2.0],
            outputs=[wout],
            adj_inputs=[arr(ptr(gx)), arr(ptr(gy)), 0.0],
            adj_outputs=[arr(ptr(g))],
            adjoint=True,
            device="cpu",
        )

    return run


def faults_per_call(rows: list[tuple[str, Callable[[], object]]], labels: list[str], calls: int = 20) -> None:
    """Print the minor page faults per call of the rows named in ``labels`` (Linux: getrusage)."""
    if not sys.platform.startswith("linux"):
        return
    import resource

    fns = dict(rows)
    print("  page faults per call (minor, first touch of memory new to the process)")
    for label in labels:
        fn = fns[label]
        fn()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(calls):
            fn()
        per = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / calls
        print(f"    {label:58s} {per:8.0f}")
