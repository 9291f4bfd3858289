"""The benchmark gate's per-call ratios on each supported Warp, against the newest one's.

``python -m benchmarks.warp_versions PYTHON [PYTHON ...] [--rounds 3] [--json PATH]``: each
``PYTHON`` is an interpreter of an environment holding one Warp version and the frameworks (the
``warp_1_16`` ... ``warp_1_19`` nox sessions' ``.nox/warp_1_XX/bin/python``, or any venv with this
checkout installed). Rounds go through the interpreters in turn (1.16, 1.17, ..., then again), so a
change of the machine's load falls on every version alike; each round runs the gate's measurement
(``python -m benchmarks --ratios-json``) in a fresh process. Per version and ratio the median of the
rounds is kept, and beside it its quotient by the newest version's median: ``1.00`` is as fast as
the newest Warp relative to the same baseline rows, ``1.10`` is 10 % worse. The ratios against Warp's
own launches on the same version (a raw ``wp.launch``, the same launches by hand) measure what the
package adds; the others (against an empty autograd node, plain ``jnp``) move with Warp's kernel
speed too (Warp 1.16-1.18's CPU adjoint kernels are slower than 1.19's).

Written to ``PATH`` (default ``docs/measurements/warp-versions.json``); its figures are in
``docs/install.md``. Ratios are of two rows of one run (the op against a raw ``wp.launch`` on that
same Warp, an empty autograd node, plain framework code), never absolute times, as in the gate;
``BENCH_CLOCK=cpu`` (inherited) measures CPU time instead of wall time on a busy machine.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_JSON = os.path.join(ROOT, "docs", "measurements", "warp-versions.json")


def _one_run(python: str, path: str) -> dict:
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    subprocess.run([python, "-m", "benchmarks", "--ratios-json", path], cwd=ROOT, env=env, check=True)
    with open(path) as f:
        return json.load(f)


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split(".")[:3] if p.isdigit())


def measure(pythons: list[str], rounds: int) -> dict:
    """Per Warp version: the median of each gated ratio over ``rounds`` runs, and its quotient by the
    newest version's."""
    runs: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for i, py in enumerate(pythons):
                print(f"\n=== round {r + 1}/{rounds}: {py}", flush=True)
                got = _one_run(py, os.path.join(tmp, f"{i}-{r}.json"))
                runs.setdefault(got["warp"], []).append(got["ratios"])
    versions = sorted(runs, key=_version_key)
    medians = {
        v: {
            fw: {k: round(statistics.median(run[fw][k] for run in rs if k in run.get(fw, {})), 3) for k in rs[-1][fw]}
            for fw in rs[-1]
        }
        for v, rs in runs.items()
    }
    newest = versions[-1]
    relative = {
        v: {
            fw: {k: round(r / medians[newest][fw][k], 3) for k, r in ratios.items() if k in medians[newest].get(fw, {})}
            for fw, ratios in medians[v].items()
        }
        for v in versions
    }
    worst = {v: max((q for fw in relative[v].values() for q in fw.values()), default=1.0) for v in versions}
    # the ratios whose reference is Warp's own launches on the same Warp (a raw wp.launch, the same
    # launches by hand): what the package adds, with each version's kernel speed divided out
    worst_own = {
        v: max((q for fw in relative[v].values() for k, q in fw.items() if _against_warp(k)), default=1.0)
        for v in versions
    }
    return {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "how": f"python -m benchmarks.warp_versions: {rounds} interleaved rounds of the gate's measurement per "
        f"version, the median per ratio; clock: {os.environ.get('BENCH_CLOCK', 'wall')}",
        "rounds": rounds,
        "newest": newest,
        "versions": versions,
        "ratios": medians,
        "relative_to_newest": relative,
        "worst_relative": worst,
        "worst_relative_against_warp": worst_own,
    }


def _against_warp(ratio: str) -> bool:
    """A ratio whose reference row is Warp's own launches (``... / raw wp.launch ...``, ``... / by hand:
    raw launches ...``): it does not move with a Warp version's kernel speed."""
    return "raw wp.launch" in ratio.split(" / ", 1)[-1] or "raw launches" in ratio.split(" / ", 1)[-1]


def main(argv: list[str]) -> int:
    rounds, path, pythons = 3, DEFAULT_JSON, []
    it = iter(argv)
    for a in it:
        if a == "--rounds":
            rounds = int(next(it))
        elif a == "--json":
            path = next(it)
        else:
            pythons.append(a)
    if not pythons:
        print(__doc__)
        return 2
    data = measure(pythons, rounds)
    with open(path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"\nper-call ratios against Warp {data['newest']}'s (median of {rounds} rounds; 1.10 = 10 % worse):")
    for v in data["versions"]:
        for fw, qs in data["relative_to_newest"][v].items():
            for k, q in qs.items():
                print(f"  {v}  {fw}: {q:.2f}  ({data['ratios'][v][fw][k]:.2f}x)  {k}")
        print(
            f"  {v}  worst: {data['worst_relative'][v]:.2f}; against Warp's own launches: "
            f"{data['worst_relative_against_warp'][v]:.2f}"
        )
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
