"""The training benchmark (issue 49): the cloth rollout of ``examples/cloth.py`` trained through
every framework path (``benchmarks/training_paths.py``) against Warp's own Tape loop, in one process.

``python -m benchmarks --training``: a 32x32 cloth (N = 1,024 particles, 3,906 springs), T = 100
steps, SGD on the initial velocities; each path starts from the same velocities with the same
learning rate. Per path: its gradient at the first iteration against the Tape's (relative error),
then the time per iteration in interleaved rounds (one iteration of Warp's loop, then one of each
path, per round), the ratio of the medians, and the bar (1.2x; checkpointed paths 1.4x). A path
that fails prints the failure in its row. The chart (``docs/training.png`` unless ``--chart PATH``
or ``--no-chart``): the loss curves of every path and Warp's loop, and the time per iteration.

Under ``--check`` the same paths run on a T = 20 rollout (few rounds; torch.compile with the
``aot_eager`` backend, whose compile takes seconds, not a minute) and their ratios are gated
against ``baseline.json`` as ``training`` rows.
"""

from __future__ import annotations

import importlib.util
import statistics
import time
import traceback

from examples import cloth

from .harness import gate
from .training_floors import FLOORS
from .training_paths import PATHS, grad_rtol

LR = 1000.0  # about half a Newton step for the initial velocities (the loss is a mean over particles)
# torch.compile paths (and the compiled floor): aot_eager under --check
COMPILED = ("make_torch_compile", "make_torch_compile_chunks", "make_torch_compile_floor")


def _failure(e: BaseException) -> str:
    first = (str(e).strip().splitlines() or [""])[0]
    return f"fails: {type(e).__name__}: {first[:160]}"


def run(check: bool = False, chart: str | None = None) -> dict:
    steps, rounds = (20, 9) if check else (100, 12)
    sc = cloth.scene(32, steps)
    lr = 0.0 if check else LR
    print(f"\n[training] cloth 32x32 (N={sc.n}, {len(sc.rest)} springs), T={steps} steps, SGD lr={lr}, CPU")
    ref = cloth.WarpTapeLoop(sc, "cpu", lr)
    losses: dict[str, list[float]] = {"Warp Tape loop": [ref.iteration()]}
    g_ref = ref.gradient()
    rows: list[tuple[str, float, object]] = []  # (name, bar, iteration or failure text)
    errs: dict[str, float] = {}
    rtols = {name: grad_rtol(make) for name, _, _, make in PATHS}
    for name, module, bar, make in PATHS:
        if importlib.util.find_spec(module) is None:
            rows.append((name, bar, f"skipped: {module} not installed"))
            continue
        try:
            kw = {"backend": "aot_eager"} if check and make.__name__ in COMPILED else {}
            it, grad = make(sc, lr, **kw)
            losses[name] = [it()]  # the first call: builds, traces, compiles
            errs[name] = cloth.rel_err(grad(), g_ref)
            rows.append((name, bar, it))
        except Exception as e:  # a path that fails today is reported in its row
            if "--verbose" in __import__("sys").argv:
                traceback.print_exc()
            rows.append((name, bar, _failure(e)))
    floors: list[tuple[str, object]] = []  # (name, iteration or failure text): timed, not gated
    for name, module, make in FLOORS:
        if importlib.util.find_spec(module) is None:
            floors.append((name, f"skipped: {module} not installed"))
            continue
        try:
            kw = {"backend": "aot_eager"} if check and make.__name__ in COMPILED else {}
            it, grad = make(sc, lr, **kw)
            it()
            if grad is not None:
                errs[name], rtols[name] = cloth.rel_err(grad(), g_ref), 1e-4
            floors.append((name, it))
        except Exception as e:
            floors.append((name, _failure(e)))
    times: dict[str, list[float]] = {"Warp Tape loop": []}
    live = [(n, it) for n, _, it in rows if callable(it)] + [(n, it) for n, it in floors if callable(it)]
    for n, _ in live:
        times[n] = []
    for _ in range(rounds):
        for n, it in [("Warp Tape loop", ref.iteration), *live]:
            t0 = time.perf_counter()
            try:
                loss = it()
            except Exception as e:
                rows = [(r[0], r[1], _failure(e)) if r[0] == n else r for r in rows]
                live = [x for x in live if x[0] != n]
                continue
            times[n].append(time.perf_counter() - t0)
            if n in losses:  # (not a floor's)
                losses[n].append(loss)
    warp_s = statistics.median(times["Warp Tape loop"])
    print(f"  Warp's Tape loop: {warp_s * 1e3:.1f} ms per iteration (median of {rounds}, interleaved)")
    print(f"  {'path':58s} {'ms/iter':>8s} {'vs Warp':>8s} {'bar':>5s}  gradient vs Tape")
    ratios: dict[str, float] = {}
    for name, bar, it in rows:
        if not callable(it) or not times.get(name):
            print(f"  {name:58s} {it}")
            continue
        s = statistics.median(times[name])
        r = ratios[name] = s / warp_s
        ok = "within" if r <= bar else "OVER"
        e = errs[name]
        agree = "equal" if e <= rtols[name] else "DIFFERS"
        print(f"  {name:58s} {s * 1e3:8.1f} {r:7.2f}x {bar:4.1f}x  {agree} (rel. err {e:.1e}); {ok} its bar")
        gate("training", f"{name} / Warp Tape loop, T={steps}", r)
    print_floors(floors, times, warp_s, errs, rtols, ratios)
    if chart:
        write_chart(chart, sc, losses, times, rows)
    return {"ratios": ratios, "errors": errs, "losses": losses, "warp_s": warp_s}


def print_floors(floors: list, times: dict, warp_s: float, errs: dict, rtols: dict, ratios: dict) -> None:
    """The floor and the reference (``benchmarks/training_floors.py``) against Warp's loop, and their
    sum beside the compiled one-step path."""
    print("  beside the paths (not gated): the kernels alone (a floor), a compiled step of hand-written custom_ops")
    got: dict[str, float] = {}
    for name, it in floors:
        if not callable(it) or not times.get(name):
            print(f"  {name:58s} {it}")
            continue
        s = statistics.median(times[name])
        got[name] = s / warp_s
        grad = (
            f"  gradient {'equal' if errs[name] <= rtols[name] else 'DIFFERS'} (rel. err {errs[name]:.1e})"
            if name in errs
            else ""
        )
        print(f"  {name:58s} {s * 1e3:8.1f} {got[name]:7.2f}x{grad}")
    step = "torch.compile(fullgraph=True) of a step"
    if len(got) == len(FLOORS) and step in ratios:
        both = sum(got.values())
        print(
            f"  {'the kernels + the no-op custom_op step':58s} {both * warp_s * 1e3:8.1f} {both:7.2f}x"
            f"  (the compiled step: {ratios[step]:.2f}x)"
        )


def write_chart(path: str, sc: cloth.Scene, losses: dict, times: dict, rows: list) -> None:
    """Loss curves (per path, Warp's loop dashed) and median time per iteration against Warp's loop."""
    import datetime

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .__main__ import _machine

    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 5.2))
    for name, ls in losses.items():
        style = dict(color="black", ls="--", lw=2.5) if name == "Warp Tape loop" else dict(lw=1.2, alpha=0.8)
        a.plot(range(len(ls)), ls, label=name, **style)
    a.set_yscale("log")
    a.set_xlabel("iteration (SGD on the initial velocities)")
    a.set_ylabel("loss")
    a.set_title(f"Loss: {sc.n} particles, {sc.steps} steps (curves overlap: equal gradients)")
    a.legend(fontsize=7)
    names = [n for n in times if times[n]]
    ms = [statistics.median(times[n]) * 1e3 for n in names]
    warp = statistics.median(times["Warp Tape loop"]) * 1e3
    colors = ["black" if n == "Warp Tape loop" else "tab:blue" for n in names]
    b.barh(range(len(names)), ms, color=colors)
    for k, m in enumerate(ms):
        b.text(m, k, f" {m / warp:.2f}x", va="center", fontsize=8)
    failed = [n for n, _, it in rows if not callable(it)]
    b.set_yticks(range(len(names)), names, fontsize=7)
    b.invert_yaxis()
    b.set_xscale("log")
    b.set_xlabel("ms per iteration (median, interleaved rounds)")
    b.set_title("Time per iteration vs Warp's Tape loop" + (f" ({len(failed)} path(s) failed)" if failed else ""))
    fig.suptitle(
        f"python -m benchmarks --training, {datetime.date.today().isoformat()}: {_machine()}", fontsize=8, y=0.995
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"  chart written to {path}")
