"""Bounded caches: every per-signature cache the package keeps stays below a documented size.

A cache is a plain ``dict`` (a hit is one ``dict.get``, nothing more on the hot path); a miss
inserts through :func:`put`, which drops the oldest entries once the cache is full. A dropped
entry is rebuilt on its next use (one planning step, one launch record), so a program that
cycles through more signatures than the bound stays correct and only pays that rebuild.
"""

from __future__ import annotations

from typing import Any

#: distinct call signatures (shapes, dtypes, strides, launch/output dims) planned per op
PLANS_PER_OP = 512
#: per-signature fast paths per op and framework (NumPy, CuPy, Warp, torch, JAX eager)
FAST_PATHS_PER_OP = 256


def put(cache: dict, key: Any, value: Any, limit: int) -> Any:
    """Insert ``key: value``, dropping the oldest entries while ``cache`` holds ``limit`` or more."""
    while len(cache) >= limit:
        try:
            del cache[next(iter(cache))]
        except (StopIteration, KeyError, RuntimeError):  # emptied or changed by another thread
            break
    cache[key] = value
    return value
