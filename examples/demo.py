"""Demo: one Warp kernel, described once, run through every installed framework.

Prints each framework's outputs (and gradients where the framework has autograd)
side by side with a NumPy reference, and whether they agree.

    python examples/demo.py
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

import numpy as np
import warp as wp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import interop  # noqa: E402

wp.config.quiet = True
wp.config.log_level = wp.LOG_WARNING  # no per-module load messages


@wp.kernel
def wave(
    x: wp.array(dtype=float), v: wp.array(dtype=wp.vec3), a: float, y: wp.array(dtype=float), w: wp.array(dtype=wp.vec3)
):
    i = wp.tid()
    y[i] = a * wp.sin(x[i]) + wp.dot(v[i], v[i])
    w[i] = v[i] * x[i]


OP = interop.op(wave, outputs=2, name="demo::wave")
N = 5
rng = np.random.default_rng(0)
INPUTS = (rng.uniform(-1, 1, N).astype(np.float32), rng.uniform(-1, 1, (N, 3)).astype(np.float32), 2.0)


def reference(x, v, a):
    y = a * np.sin(x) + np.sum(v * v, axis=1)
    w = v * x[:, None]
    # gradients of loss = sum(y) + sum(w)
    gx = a * np.cos(x) + np.sum(v, axis=1)
    gv = 2 * v + x[:, None] * np.ones_like(v)
    return {"outputs": [y, w], "grads": [gx, gv]}


FRAMEWORKS = ("numpy", "warp", "torch", "jax", "paddle", "cupy")


def main() -> int:
    ref = reference(*INPUTS)
    print(f"kernel: wave(x, v, a) -> (y, w); loss for gradients: sum(y) + sum(w); n={N}\n")
    print(f"{'reference':10s} y={np.round(ref['outputs'][0], 4)}")
    print(f"{'':10s} dloss/dx={np.round(ref['grads'][0], 4)}\n")
    all_ok = True
    for fw in FRAMEWORKS:
        if fw not in ("numpy", "warp") and importlib.util.find_spec(fw) is None:
            print(f"{fw:10s} not installed")
            continue
        if importlib.util.find_spec(f"demo_{fw}") is None:
            print(f"{fw:10s} installed, but this demo has no runner for it")
            continue
        mod = importlib.import_module(f"demo_{fw}")
        try:
            res = mod.run(OP, INPUTS)
        except mod.Unavailable as e:  # e.g. CuPy without a GPU
            print(f"{fw:10s} skipped: {e}")
            continue
        ok = all(np.allclose(o, r, rtol=1e-4, atol=1e-5) for o, r in zip(res["outputs"], ref["outputs"]))
        line = f"{fw:10s} y={np.round(res['outputs'][0], 4)}  outputs agree: {ok}"
        if res.get("grads") is not None:
            gok = all(np.allclose(g, r, rtol=1e-4, atol=1e-5) for g, r in zip(res["grads"], ref["grads"]))
            line += f"\n{'':10s} dloss/dx={np.round(res['grads'][0], 4)}  gradients agree: {gok}"
            ok = ok and gok
        else:
            line += "  (no autograd in this framework)"
        print(line)
        all_ok = all_ok and ok
    print("\nall frameworks agree" if all_ok else "\nMISMATCH")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
