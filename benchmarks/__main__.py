"""Run the benchmarks: ``python -m benchmarks [numpy torch jax paddle] [--quick] [--chart PATH] [--json PATH]``.

Nothing tracked is written by default: ``--chart PATH`` draws the chart (matplotlib) of this run
to ``PATH``. The README's chart, ``benchmarks/results.png``, is drawn by ``python docs/figures.py
--write`` from the dated measurement ``docs/measurements/bench.json`` (``--json``, below), in the
maintainer's ``nox -s measure``.

``--device cuda`` (or ``cpu``) measures the per-call rows of one device instead (torch, JAX,
CuPy against their own floors, and bandwidth at n=2^26: ``benchmarks/bench_device.py``), the
device named in the output; with ``--check`` they are compared with that device's section of
``baseline.json`` (``"devices"``), with ``--write-baseline`` written there.

``--training`` trains the cloth rollout of ``examples/cloth.py`` through every framework path
against Warp's own Tape loop instead (``benchmarks/training.py``); it writes ``docs/training.png``
unless ``--chart PATH`` or ``--no-chart``. ``--check`` includes its rows (a T=20 rollout).

``--first-call`` measures the time to first result instead, each row a fresh process, warm and
cold Warp kernel cache (``benchmarks/first_call.py``; ``--repeat N``, ``--warm-only``).

``--jax-transitions`` measures a JAX op inside a larger XLA program on the CPU (an op alone, an op
followed by a jnp operation, the jnp operation alone) and a cloth rollout trained through JAX
against Warp's own ``wp.Tape`` loop (``benchmarks/jax_transitions.py``; ``--quick``, ``--no-rollout``,
``--json PATH --label NAME``).

The gate: ``python -m benchmarks --check [--tolerance 0.3]`` measures only n=1024 (full
interleaved rounds, no chart) and compares each framework's ratios (two rows of one interleaved run, never
absolute times) with ``benchmarks/baseline.json``; it exits 1, naming every ratio that is worse
than its baseline by more than the tolerance (default: the file's). ``--write-baseline``
measures the same way three times and writes the median of each ratio to that file (naming the
machine). ``--ratios-json PATH`` measures as the gate does and writes the run's ratios (and Warp's
version) to ``PATH``: ``benchmarks/warp_versions.py`` compares Warp versions with it.

``--json PATH`` writes the run's measurement to ``PATH``: its date, machine, versions, every block
printed (label, microseconds, ratio) and the gate's ratios. ``nox -s measure`` writes
``docs/measurements/bench.json`` so; ``python docs/figures.py --write`` draws the chart and the
performance page's figures from it. ``--machine-note TEXT`` adds to the machine's description
(e.g. ``"shared with 7 other jobs"``).
"""

from __future__ import annotations

import datetime
import importlib
import importlib.util
import json
import os
import platform
import statistics
import sys

ALL = ("numpy", "torch", "jax", "paddle")
WRITE_RUNS = 3  # --write-baseline: runs whose median each ratio's baseline is
BASELINE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "baseline.json")


def _option(argv: list[str], name: str) -> tuple[list[str], str | None]:
    if name not in argv:
        return argv, None
    i = argv.index(name)
    return argv[:i] + argv[i + 2 :], argv[i + 1]


def main(argv: list[str]) -> int:
    if "--first-call" in argv:  # time to first result, each row a fresh process (benchmarks/first_call.py)
        from . import first_call

        return first_call.main([a for a in argv if a != "--first-call"])
    if "--jax-transitions" in argv:  # a JAX op inside a larger XLA program (benchmarks/jax_transitions.py)
        from . import jax_transitions

        return jax_transitions.main([a for a in argv if a != "--jax-transitions"])
    from . import harness

    if "--training" in argv and "--check" not in argv:  # the cloth rollout trained through every path
        return _training(argv)
    check = "--check" in argv
    write = "--write-baseline" in argv
    quick = "--quick" in argv and not (check or write)  # the gate: full rounds, n=1024 only
    argv, chart = _option(argv, "--chart")
    argv, tolerance = _option(argv, "--tolerance")
    argv, device = _option(argv, "--device")
    argv, ratios_json = _option(argv, "--ratios-json")  # this run's gated ratios, for benchmarks/warp_versions.py
    argv, measurement = _option(argv, "--json")  # the dated measurement docs/figures.py draws from
    argv, note = _option(argv, "--machine-note")
    if "--no-chart" in argv or check or write or ratios_json:
        chart = None
    # the per-call size only (n=1024) for the gate and for the measurement the docs show
    harness.SMALL_ONLY = bool(check or write or ratios_json or measurement)
    names = [a for a in argv if not a.startswith("--") and a != "training"] or list(ALL)
    import warp as wp

    wp.config.quiet = True
    wp.config.log_level = wp.LOG_WARNING  # no per-module load messages
    wp.init()
    runs = []
    for _ in range(
        WRITE_RUNS if write else 1
    ):  # a baseline is the median of several runs: one run's noise is not a bar
        harness.GATED.clear()
        if device is not None:
            from . import bench_device

            bench_device.run(device, quick=quick)
            names = []
        for name in names:
            if name != "numpy" and importlib.util.find_spec(name) is None:
                print(f"\n[{name}] not installed: skipped")
                continue
            mod = importlib.import_module(f"benchmarks.bench_{name}")
            mod.run(quick=quick)
        if check and (not [a for a in argv if not a.startswith("--")] or "training" in argv):
            from . import training  # the training rows of the gate: a T=20 rollout per path

            training.run(check=True)
        runs.append({fw: dict(r) for fw, r in harness.GATED.items()})
    if chart:
        from .chart import write_chart

        write_chart(harness.RECORDED, chart)
    if measurement:
        _write_measurement(measurement, runs[-1], note)
    if write:
        _write_baseline(runs, device)
    if ratios_json:
        with open(ratios_json, "w") as f:
            json.dump({"warp": wp.__version__, "ratios": runs[-1]}, f, indent=1, sort_keys=True)
    if check:
        return _check(harness.GATED, None if tolerance is None else float(tolerance), device)
    return 0


def _training(argv: list[str]) -> int:
    import warp as wp

    from . import training

    wp.config.quiet = True
    wp.config.log_level = wp.LOG_WARNING
    wp.init()
    argv, chart = _option(argv, "--chart")
    if chart is None and "--no-chart" not in argv:
        chart = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "training.png")
    training.run(check=False, chart=None if "--no-chart" in argv else chart)
    return 0


def _machine() -> str:
    return f"{platform.node()}: {platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}"


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in ("warp-lang", "numpy", "torch", "jax", "paddlepaddle"):
        try:
            out.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            pass
    return ", ".join(out)


def _write_measurement(path: str, gated: dict, note: str | None) -> None:
    """The run's measurement (``--json``): every block printed and the gate's ratios, dated."""
    from . import harness

    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}, Python {platform.python_version()}"
    data = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{machine} ({note})" if note else machine,
        "versions": _versions(),
        "clock": harness.clock()[0],
        "how": "python -m benchmarks --json PATH: one run, interleaved rounds, medians per call",
        "blocks": [
            {"title": title, "baseline": base, "rows": [[label, round(us, 2), round(r, 3)] for label, us, r in rows]}
            for title, rows, base in harness.RECORDED
        ],
        "ratios": {fw: {k: round(v, 3) for k, v in r.items()} for fw, r in gated.items()},
    }
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    print(f"\nmeasurement written to {path}")


def _write_baseline(runs: list[dict], device: str | None = None) -> None:
    old = {}
    if os.path.exists(BASELINE):
        with open(BASELINE) as f:
            old = json.load(f)
    if device is not None:
        import warp as wp

        ratios = {
            k: round(statistics.median(run[device][k] for run in runs if k in run.get(device, {})), 3)
            for k in runs[-1].get(device, {})
        }
        old.setdefault("devices", {})[device] = {
            "date": datetime.date.today().isoformat(),  # docs/figures.py names it beside the figures
            "machine": f"{wp.get_device(device).name}; {_machine()}",
            "how": f"python -m benchmarks --device {device} --write-baseline: the median of {len(runs)} runs",
            "ratios": ratios,
        }
        with open(BASELINE, "w") as f:
            json.dump(old, f, indent=2, sort_keys=True)
            f.write("\n")
        print(f"\nbaseline for {device} written to {BASELINE}")
        return
    ratios = dict(old.get("ratios", {}))
    for fw in runs[-1]:
        ratios[fw] = {
            k: round(statistics.median(run[fw][k] for run in runs if k in run.get(fw, {})), 3) for k in runs[-1][fw]
        }
    data = {
        **({"devices": old["devices"]} if "devices" in old else {}),
        "date": datetime.date.today().isoformat(),
        "machine": _machine(),
        "how": f"python -m benchmarks --write-baseline: the median of {len(runs)} runs (n=1024, interleaved rounds, "
        "wall time unless BENCH_CLOCK=cpu)",
        "tolerance": old.get("tolerance", 0.3),
        "ratios": ratios,
    }
    with open(BASELINE, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")
    print(f"\nbaseline written to {BASELINE}")


def _check(gated: dict, tolerance: float | None, device: str | None = None) -> int:
    with open(BASELINE) as f:
        base = json.load(f)
    tol = base.get("tolerance", 0.3) if tolerance is None else tolerance
    if device is not None:
        section = base.get("devices", {}).get(device)
        if section is None:
            print(f"\nbenchmark gate: no baseline for {device} in {os.path.basename(BASELINE)} yet; measured:")
            for name, r in gated.get(device, {}).items():
                print(f"  new   {device}: {name}: {r:.2f}x")
            return 0
        base = {"machine": section["machine"], "ratios": {device: section["ratios"]}}
    print(f"\nbenchmark gate: each ratio against {os.path.basename(BASELINE)} (measured on {base['machine']}),")
    print(f"worse when above baseline x {1 + tol:.2f}")
    worse = []
    for fw, ratios in base["ratios"].items():
        got = gated.get(fw)
        if got is None:
            print(f"  [{fw}] not measured (not installed or not selected)")
            continue
        for name, ref in ratios.items():
            now = got.get(name)
            if now is None:
                worse.append(f"{fw}: {name}: not measured any more")
                print(f"  WORSE {fw}: {name}: not measured any more")
                continue
            bad = now > ref * (1 + tol)
            mark = "WORSE" if bad else "ok   "
            print(f"  {mark} {fw}: {name}: {now:.2f}x (baseline {ref:.2f}x, limit {ref * (1 + tol):.2f}x)")
            if bad:
                worse.append(f"{fw}: {name}: {now:.2f}x > {ref * (1 + tol):.2f}x (baseline {ref:.2f}x)")
        for name in sorted(set(got) - set(ratios)):
            print(f"  new   {fw}: {name}: {got[name]:.2f}x (no baseline)")
    if worse:
        print(f"\nbenchmark gate FAILED: {len(worse)} ratio(s) worse than the baseline by more than {tol:.0%}:")
        for w in worse:
            print(f"  {w}")
        return 1
    print("\nbenchmark gate passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
