"""Demo: one Warp kernel, described once, run through every installed framework.

Prints the kernel and the one ``interop.op(...)`` line that wraps it, then every output and
gradient each framework computes next to a NumPy reference (and whether they agree), then one
zero-copy ``interop.convert`` round trip with the data pointers.

    python examples/demo.py
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import os
import sys
import warnings

import numpy as np
import warp as wp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import interop  # noqa: E402

wp.config.log_level = wp.LOG_WARNING  # no per-module load messages
# third-party noise that says nothing about this demo: Paddle's "No ccache found" at import
warnings.filterwarnings("ignore", message="No ccache found", category=UserWarning)


@contextlib.contextmanager
def _quiet_stderr():
    """Silence C-level stderr (Warp's "Could not find or load the NVIDIA CUDA driver" at init)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


with _quiet_stderr():
    wp.init()


@wp.kernel
def wave(
    x: wp.array(dtype=float), v: wp.array(dtype=wp.vec3), a: float, y: wp.array(dtype=float), w: wp.array(dtype=wp.vec3)
):
    i = wp.tid()
    y[i] = a * wp.sin(x[i]) + wp.dot(v[i], v[i])
    w[i] = v[i] * x[i]


OP = interop.op(wave, outputs=2, name="demo::wave")
N = 4
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
NAMES = {"outputs": ["y", "w"], "grads": ["dloss/dx", "dloss/dv"]}


def _fmt(a) -> str:
    return np.array2string(np.asarray(a), precision=4, suppress_small=True, max_line_width=200).replace("\n", "")


def _op_line() -> str:
    with open(os.path.abspath(__file__)) as f:
        return next(line.strip() for line in f if line.startswith("OP = interop.op("))


def _version(fw: str) -> str:
    if fw == "numpy":
        return np.__version__
    if fw == "warp":
        return wp.config.version
    mod = importlib.import_module(fw)
    return getattr(mod, "__version__", "?")


def _compare(kind: str, got, ref) -> bool:
    ok = True
    for name, g, r in zip(NAMES[kind], got, ref):
        g = np.asarray(g)
        agree = g.shape == r.shape and np.allclose(g, r, rtol=1e-4, atol=1e-5)
        diff = float(np.max(np.abs(g - r))) if g.shape == r.shape else float("nan")
        print(f"    {name:9s} = {_fmt(g)}   max |diff| {diff:.1e}  {'agrees' if agree else 'MISMATCH'}")
        ok = ok and agree
    return ok


def convert_round_trip() -> None:
    """torch -> jax -> numpy -> paddle with interop.convert: one buffer, the same pointer throughout."""
    have = [fw for fw in ("torch", "jax", "paddle") if importlib.util.find_spec(fw) is not None]
    print("\nZero-copy round trip with interop.convert (the data pointer never changes):")
    if "torch" not in have:
        print("    needs torch (not installed)")
        return
    import torch

    t = torch.arange(6, dtype=torch.float32)
    print(f"    torch  {t.data_ptr():#x}  t = torch.arange(6.0)")
    x = t
    steps = [fw for fw in ("jax", "numpy", "paddle") if fw == "numpy" or fw in have]
    for fw in steps:
        x = interop.convert(x, to=fw)
        print(f"    {fw:6s} {interop.convert(x, to='numpy').ctypes.data:#x}  interop.convert(..., to={fw!r})")
    back = interop.convert(x, to="torch")
    print(f"    torch  {back.data_ptr():#x}  back to torch; same memory: {back.data_ptr() == t.data_ptr()}")


def main() -> int:
    ref = reference(*INPUTS)
    print("The kernel (written once, in Warp):\n")
    print("    " + inspect.getsource(wave.func).rstrip().replace("\n", "\n    "))
    print("\nThe one line that makes it callable from every framework:\n")
    print(f"    {_op_line()}")
    print(f"\nInputs: x ({N},), v ({N}, 3), a = {INPUTS[2]}; gradients of loss = sum(y) + sum(w)\n")
    print("NumPy reference:")
    for kind, names in NAMES.items():
        for name, r in zip(names, ref[kind]):
            print(f"    {name:9s} = {_fmt(r)}")
    all_ok = True
    ran, left_out = [], {}
    for fw in FRAMEWORKS:
        if fw not in ("numpy", "warp") and importlib.util.find_spec(fw) is None:
            left_out[fw] = _why_not_installed(fw)
            print(f"\n{fw}: {left_out[fw]}")
            continue
        if importlib.util.find_spec(f"demo_{fw}") is None:
            left_out[fw] = "installed, but this demo has no runner for it"
            print(f"\n{fw}: {left_out[fw]}")
            continue
        mod = importlib.import_module(f"demo_{fw}")
        try:
            res = mod.run(OP, INPUTS)
        except mod.Unavailable as e:  # e.g. CuPy without a GPU
            left_out[fw] = f"skipped: {e}"
            print(f"\n{fw}: {left_out[fw]}")
            continue
        ran.append(fw)
        print(f"\n{fw} {_version(fw)}: {(mod.__doc__ or '').split(':', 1)[-1].strip()}")
        ok = _compare("outputs", res["outputs"], ref["outputs"])
        if res.get("grads") is not None:
            ok = _compare("grads", res["grads"], ref["grads"]) and ok
        else:
            print("    (no autograd in this framework)")
        all_ok = all_ok and ok
    convert_round_trip()
    print(f"\nall frameworks run ({', '.join(ran)}) agree with the reference" if all_ok else "\nMISMATCH")
    # the last line: what was not run, so that a framework left out cannot scroll away unseen
    print("left out: " + ("; ".join(f"{fw} ({why})" for fw, why in left_out.items()) or "none"))
    return 0 if all_ok else 1


def _why_not_installed(fw: str) -> str:
    """Why ``fw`` is missing: the reason the installing session gave (``nox -s demo`` sets
    INTEROP_DEMO_LEFT_OUT, a JSON object by framework), else that it is not installed."""
    import json

    try:
        reasons = json.loads(os.environ.get("INTEROP_DEMO_LEFT_OUT") or "{}")
    except ValueError:
        reasons = {}
    why = reasons.get(fw)
    return f"not installed: {why}" if why else "not installed"


if __name__ == "__main__":
    sys.exit(main())
