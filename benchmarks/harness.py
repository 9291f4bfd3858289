"""Timing helpers shared by every benchmark module: median of many calls after warm-up, ratios printed."""

from __future__ import annotations

import gc
import statistics
import time
from typing import Callable

SIZES = (1024, 1_000_000)

#: every block printed by :func:`report` in this process: (title, [(label, us, ratio)], baseline)
RECORDED: list[tuple[str, list[tuple[str, float, float]], str]] = []


def per_call(fn: Callable[[], object], *, warmup: int = 20, min_time: float = 0.2, repeat: int = 7, sync=None) -> float:
    """Median seconds per call of ``fn``: ``repeat`` batches, each at least ``min_time`` long."""
    for _ in range(warmup):
        fn()
    if sync:
        sync()
    # size one batch
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        if sync:
            sync()
        dt = time.perf_counter() - t0
        if dt >= min_time / 4 or n >= 1 << 20:
            break
        n *= 2
    n = max(1, int(n * (min_time / 4) / max(dt, 1e-9)))
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
