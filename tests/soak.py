"""Soak: N forward+backward calls per framework with changing shapes; prints resident memory (MiB).

Run by ``nox -s soak`` (N = 100,000) or ``python tests/soak.py N [framework ...]``. Lengths cycle
through more distinct values than the plan cache holds (interop._cache.PLANS_PER_OP), so plans are
evicted and rebuilt throughout; JAX cycles through fewer (each new shape is an XLA compile, kept by
JAX's own cache and by one registered FFI target: see docs/guarantees.md). Every 1,000th call is
checked against the NumPy reference. Exit status 1 when memory keeps growing over the second half.
"""

from __future__ import annotations

import gc
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _devices import jax_device
from catalogue import case  # noqa: E402

from interop import _cache  # noqa: E402


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def run(fw: str, n: int) -> tuple[float, float, float]:
    c = case("scalar")  # out = sin(x) * s + y * y; d/dx = s cos(x)
    op = c.op
    # JAX: within its bounds (an eager forward and an eager grad of one shape are two traced
    # entries of the 512 an op keeps); past them each call is an XLA compile (docs/guarantees.md)
    distinct = 200 if fw == "jax" else 2 * _cache.PLANS_PER_OP + 1
    if fw == "torch":
        import torch
    elif fw == "jax":
        import jax
        import jax.numpy as jnp

        grad = jax.grad(lambda x, y: op(x, y, 2.0).sum())
    elif fw == "paddle":
        import paddle
    marks = {}
    for k in range(n):
        m = 1 + k % distinct
        x = np.linspace(-1, 1, m, dtype=np.float32)
        y = np.full(m, 0.5, np.float32)
        if fw == "numpy":
            out, g = op(x, y, 2.0), None
        elif fw == "torch":
            xt = torch.tensor(x, requires_grad=True, device="cpu")
            out = op(xt, torch.tensor(y, device="cpu"), 2.0)
            out.sum().backward()
            out, g = out.detach().numpy(), xt.grad.numpy()
        elif fw == "jax":
            xj, yj = jnp.asarray(x, device=jax_device("cpu")), jnp.asarray(y, device=jax_device("cpu"))
            out, g = np.asarray(op(xj, yj, 2.0)), np.asarray(grad(xj, yj))
        else:
            xp = paddle.to_tensor(x, stop_gradient=False, place=paddle.CPUPlace())
            out = op(xp, paddle.to_tensor(y, place=paddle.CPUPlace()), 2.0)
            out.sum().backward()
            out, g = out.numpy(), xp.grad.numpy()
        if k % 1000 == 0:
            assert np.allclose(out, c.reference(x, y, 2.0)[0], atol=1e-5), (fw, k)
            if g is not None:
                assert np.allclose(g, 2.0 * np.cos(x), atol=1e-5), (fw, k)
        if k + 1 in (n // 10, n // 2, n):
            gc.collect()
            marks[k + 1] = rss_mib()
    return marks[n // 10], marks[n // 2], marks[n]


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    fws = sys.argv[2:] or ["numpy", "torch", "jax", "paddle"]
    bad = False
    for fw in fws:
        try:
            __import__(fw)
        except ImportError:
            print(f"{fw}: not installed")
            continue
        r10, r50, r100 = run(fw, n)
        print(
            f"{fw}: {n} calls, resident {r10:.1f} MiB at 10%, {r50:.1f} at 50%, {r100:.1f} at 100%: "
            f"+{r100 - r50:.1f} MiB over the second half"
        )
        bad |= r100 - r50 > 16
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
