"""Time to first result: ``python -m benchmarks --first-call [numpy torch jax paddle] [--repeat N] [--warm-only]``.

Each row runs in a fresh Python process (``python -c``), so it pays what a script, a notebook
restart or a test worker pays. A row times, in order:

- ``import``: the framework (NumPy for the ``numpy`` and ``wp.launch`` rows);
- ``own op``: the framework's own first operation (``ones(4) + ones(4)``, the result ready);
- ``warp+interop``: ``import warp``, ``import interop`` and the kernel's module (Warp's decoration);
- ``first call``: ``interop.op(saxpy)`` and its first call on the framework's arrays (n = 4), the
  result ready: Warp's initialisation, the module's load or build, the adapter's import and
  registration, the call. The ``wp.launch`` row launches the kernel itself on Warp arrays made
  from NumPy (``wp.init`` and the module's load included), the floor of every other row;
- ``backward``: the first gradient after that (torch ``backward()``, ``jax.grad``, Paddle ``backward()``).

Warm rows use Warp's kernel cache as it is (a warm-up process fills it first); cold rows an
empty one (``WARP_CACHE_PATH`` a fresh folder per process), so every Warp module the call needs
is built. Each row runs ``--repeat`` times (default 3) and its median is printed: the machine is
noisy. Python's bytecode is warm in every row (written under ``PYCACHE`` by the warm-up pass),
as for an installed package. The last column lists the heavy modules (``HEAVY``) the first call
imported beyond what the framework's own import and first op had. The goal (issue 44): on a
warm cache each framework's ``first call`` within 0.1 s of the NumPy op's.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYCACHE = os.path.join(tempfile.gettempdir(), "warp-interop-first-call-pycache")
FRAMEWORKS = ("numpy", "torch", "jax", "paddle")

# what each framework's row runs: its import, its own first op, arrays for the op, ready(), gradient
_FW = {
    "numpy": dict(
        imp="import numpy as np",
        own="r = np.ones(4, np.float32) + np.ones(4, np.float32)",
        args="x = np.ones(4, np.float32); y = np.ones(4, np.float32)",
        ready="r",
        grad=None,
    ),
    "torch": dict(
        imp="import torch",
        own="r = torch.ones(4) + torch.ones(4)",
        args="x = torch.ones(4); y = torch.ones(4)",
        ready="r",
        grad="x.requires_grad_(True); op(x, y, 2.0).sum().backward(); r = x.grad",
    ),
    "jax": dict(
        imp="import jax, jax.numpy as jnp",
        own="r = (jnp.ones(4) + jnp.ones(4)).block_until_ready()",
        args="x = jnp.ones(4); y = jnp.ones(4)",
        ready="r.block_until_ready()",
        grad="r = jax.grad(lambda a: op(a, y, 2.0).sum())(x).block_until_ready()",
    ),
    "paddle": dict(
        imp="import paddle",
        own="r = (paddle.ones([4]) + paddle.ones([4])).numpy()",
        args="x = paddle.ones([4]); y = paddle.ones([4])",
        ready="r.numpy()",
        grad="x.stop_gradient = False; op(x, y, 2.0).sum().backward(); r = x.grad.numpy()",
    ),
}

_CHILD = """
import json, sys, time
_t = [time.perf_counter()]
def _lap():
    _t.append(time.perf_counter())
    return _t[-1] - _t[-2]
out = {{}}
{imp}
out["import"] = _lap()
{own}
out["own op"] = _lap()
framework_only = set(sys.modules)  # what the framework's own import and first op brought in
import warp as wp
wp.config.quiet = True
{interop}
from benchmarks.first_call_kernel import saxpy
out["warp+interop"] = _lap()
{call}
out["first call"] = _lap()
modules = sorted(set(sys.modules) - framework_only)  # what the first call imported (a gradient may need more)
{grad}
print("RESULTS " + json.dumps({{"times": out, "modules": modules}}))
"""


def child_code(row: str) -> str:
    """The script of one row: ``"wp.launch"`` or a framework's name."""
    if row == "wp.launch":
        spec = dict(_FW["numpy"], grad=None)
        call = (
            "wx = wp.array(np.ones(4, np.float32), device='cpu'); wy = wp.array(np.ones(4, np.float32), device='cpu')\n"
            "wo = wp.zeros(4, dtype=float, device='cpu')\n"
            "wp.launch(saxpy, dim=4, inputs=[wx, wy, 2.0], outputs=[wo], device='cpu'); r = wo.numpy()"
        )
        return _CHILD.format(imp=spec["imp"], own=spec["own"], interop="", call=call, grad="")
    spec = _FW[row]
    call = f"{spec['args']}\nop = interop.op(saxpy)\nr = op(x, y, 2.0)\n{spec['ready']}"
    grad = "" if spec["grad"] is None else f"{spec['grad']}\nout['backward'] = _lap()"
    return _CHILD.format(imp=spec["imp"], own=spec["own"], interop="import interop", call=call, grad=grad)


def run_row(row: str, cache: str | None = None) -> dict:
    """Run one row in a fresh process; ``cache``: Warp's kernel cache folder (None: Warp's own)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([ROOT, env.get("PYTHONPATH", "")])
    env["WARP_INTEROP_QUIET"] = "1"
    env.setdefault("JAX_PLATFORMS", "cpu")
    # Python's bytecode as an installed package has it (compiled once, by the warm-up pass), kept out
    # of the checkout and site-packages; PYTHONDONTWRITEBYTECODE would compile every module from source
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = PYCACHE
    if cache is not None:
        env["WARP_CACHE_PATH"] = cache
    p = subprocess.run(
        [sys.executable, "-c", child_code(row)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600
    )
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULTS ")]
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"first-call row {row!r} failed (status {p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULTS ") :])


HEAVY = (
    "torch._dynamo",
    "torch._inductor",
    "torch.distributed.tensor",
    "torch.onnx",
    "jax.export",
    "jax.extend",
    "jax.experimental.shard_map",
    "jax.experimental.custom_partitioning",
    "paddle.jit.sot",
)


def _available(fw: str) -> bool:
    import importlib.util

    return fw == "numpy" or importlib.util.find_spec(fw) is not None


def measure(frameworks, repeat: int = 3, cold: bool = True) -> list[dict]:
    """Every row: ``{"row", "cache", "times": {column: seconds (median)}, "heavy": [modules imported]}``."""
    rows = ["wp.launch"] + [fw for fw in frameworks if _available(fw)]
    for row in rows:  # fills Warp's cache (the warm rows' premise) and every .pyc
        run_row(row)
    results = []
    for row in rows:
        runs = [run_row(row) for _ in range(repeat)]
        times = {k: statistics.median(r["times"][k] for r in runs) for k in runs[0]["times"]}
        heavy = [m for m in HEAVY if m in runs[0]["modules"]]
        results.append({"row": row, "cache": "warm", "times": times, "heavy": heavy})
    if cold:
        for row in rows:
            runs = []
            for _ in range(repeat):
                d = tempfile.mkdtemp(prefix="warp-cold-")
                try:
                    runs.append(run_row(row, cache=d))
                finally:
                    shutil.rmtree(d, ignore_errors=True)
            times = {k: statistics.median(r["times"][k] for r in runs) for k in runs[0]["times"]}
            heavy = [m for m in HEAVY if m in runs[0]["modules"]]
            results.append({"row": row, "cache": "cold", "times": times, "heavy": heavy})
    return results


COLUMNS = ("import", "own op", "warp+interop", "first call", "backward")


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}"


def versions() -> str:
    import importlib.metadata as md

    found = []
    for dist in ("warp-lang", "numpy", "torch", "jax", "paddlepaddle"):
        try:
            found.append(f"{dist} {md.version(dist)}")
        except md.PackageNotFoundError:
            pass
    return ", ".join(found)


def table(results: list[dict]) -> str:
    """The rows as a Markdown table (seconds), with the first call's difference from the NumPy op's."""
    base = {r["cache"]: r["times"]["first call"] for r in results if r["row"] == "numpy"}
    head = (
        "| row | Warp cache | "
        + " | ".join(COLUMNS)
        + " | first call - NumPy op's | heavy modules the first call imported |"
    )
    lines = [head, "|" + "---|" * (len(COLUMNS) + 4)]
    for r in results:
        t = r["times"]
        cells = [f"{t[c]:.3f}" if c in t else "" for c in COLUMNS]
        diff = ""
        if r["row"] not in ("numpy", "wp.launch") and r["cache"] in base:
            diff = f"{t['first call'] - base[r['cache']]:+.3f}"
        name = "raw `wp.launch`" if r["row"] == "wp.launch" else f"{r['row']} op"
        heavy = ", ".join(r["heavy"]) or "none"
        lines.append(f"| {name} | {r['cache']} | " + " | ".join(cells) + f" | {diff} | {heavy} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    repeat = 3
    if "--repeat" in argv:
        i = argv.index("--repeat")
        repeat = int(argv[i + 1])
        argv = argv[:i] + argv[i + 2 :]
    json_path = None
    if "--json" in argv:
        i = argv.index("--json")
        json_path = argv[i + 1]
        argv = argv[:i] + argv[i + 2 :]
    cold = "--warm-only" not in argv
    names = [a for a in argv if not a.startswith("--")] or list(FRAMEWORKS)
    if "numpy" not in names:
        names = ["numpy", *names]  # the reference row
    results = measure(names, repeat=repeat, cold=cold)
    print(f"\nTime to first result, seconds ({datetime.date.today().isoformat()}; {machine()}; {versions()})")
    print(f"median of {repeat} fresh processes per row; cold: each with an empty Warp kernel cache\n")
    print(table(results))
    if json_path:
        # the measurement docs/figures.py writes into docs/performance.md (source "first-call")
        warm = {r["row"]: r["times"] for r in results if r["cache"] == "warm"}
        data = {
            "date": datetime.date.today().isoformat(),
            "machine": machine(),
            "versions": versions(),
            "repeat": repeat,
            "warm": warm,
            "cold": {r["row"]: r["times"] for r in results if r["cache"] == "cold"},
            "first_call_minus_numpy": {
                row: t["first call"] - warm["numpy"]["first call"]
                for row, t in warm.items()
                if row not in ("numpy", "wp.launch")
            },
        }
        if os.path.exists(json_path):  # keep the recorded "before" of the last change it measured
            with open(json_path) as f:
                data.setdefault("before", json.load(f).get("before", {}))
        with open(json_path, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
    return 0
