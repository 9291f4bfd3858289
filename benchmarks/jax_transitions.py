"""JAX on the CPU: an op inside a larger XLA program (issue 49, item 1).

``python -m benchmarks.jax_transitions [--quick] [--no-rollout]`` (or ``python -m benchmarks
--jax-transitions``) prints

- per call under ``jax.jit`` (n=1024, each call waited for, and pipelined: calls issued back to
  back, one wait at the end): an op alone, two ops chained, an op whose result flows into a jnp
  operation (``jnp.sum(op(...))``, ``op(...) * 2``), the jnp operation alone, and the margin of
  ``op -> jnp`` over the two alone (the target: at most 10 us);
- where the executable ran: XLA's CPU client runs one whose cost analysis counts fewer than 1,000
  flops on the calling thread and any other on a worker thread of its own, where a Python handler
  used to pay for a thread state per call (see ``adapters/jax/ffi.py``);
- the same in plain XLA (a ctypes ``jax.ffi`` handler that does nothing, no op);
- a training rollout (the cloth of ``examples/cloth.py`` and the JAX paths of ``training_paths.py``: 32x32, 3,906 springs, T=100 steps of two kernels: a gather and
  scatter with ``atomic_add`` and a ``vec3`` integrator with ground contact), gradient w.r.t. the
  initial velocities, SGD: Warp's own ``wp.Tape`` loop against ``jax.jit(jax.value_and_grad(...))``
  of a Python loop, of ``lax.scan`` and of ``lax.scan(jax.checkpoint(body))``, each in the same
  process, per-iteration ratios and whether the gradients agree (targets: 1.2x; 1.4x checkpointed).
"""

from __future__ import annotations

import statistics
import sys
import threading
import time

import warp as wp

import interop

N_SIDE = 32
T = 100


@wp.kernel
def saxpy(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a * x[i] + y[i]


# -- per call: an op inside a larger program ------------------------------------------------------


def _batch(fn, args, block: bool, calls: int) -> float:
    """Seconds per call of ``calls`` calls of ``fn``, each waited for (``block``) or only the last."""
    t0 = time.perf_counter()
    for _ in range(calls):
        r = fn(*args)
        if block:
            r.block_until_ready()
    r.block_until_ready()
    return (time.perf_counter() - t0) / calls


def transitions(quick: bool = False) -> dict[str, float]:
    """Per-call times (us) of an op alone, chained, and flowing into jnp, under ``jax.jit``: every
    row measured round-robin (a change in machine load hits all rows alike), median of the rounds."""
    import jax
    import jax.numpy as jnp

    op = interop.op(saxpy)
    cpu = jax.devices("cpu")[0]
    x = jax.device_put(jnp.linspace(0.0, 1.0, 1024, dtype=jnp.float32), cpu)
    y = jax.device_put(jnp.ones(1024, jnp.float32), cpu)
    rows = {  # key: (label, the jitted function)
        "op": ("op alone", jax.jit(lambda x, y: op(x, y, 2.0))),
        "op_op": ("op -> op", jax.jit(lambda x, y: op(op(x, y, 2.0), y, 2.0))),
        "op_sum": ("op -> jnp.sum", jax.jit(lambda x, y: jnp.sum(op(x, y, 2.0)))),
        "op_times_2": ("op -> * 2", jax.jit(lambda x, y: op(x, y, 2.0) * 2)),
        "sum": ("jnp.sum alone", jax.jit(lambda x, y: jnp.sum(x))),
        "sum_2x_y": ("jnp.sum(2 x + y)", jax.jit(lambda x, y: jnp.sum(2 * x + y))),
    }
    calls, rounds = (100, 5) if quick else (300, 15)
    samples: dict[tuple[str, bool], list[float]] = {(k, b): [] for k in rows for b in (True, False)}
    for _, fn in rows.values():
        for _ in range(50):
            fn(x, y).block_until_ready()
    for _ in range(rounds):
        for (key, block), got in samples.items():
            got.append(_batch(rows[key][1], (x, y), block, calls))
    out: dict[str, dict[str, float]] = {}
    print("\nJAX on the CPU, per call under jax.jit (n=1024), median of round-robin batches")
    print(f"  {'':24s} {'waited':>10s} {'pipelined':>10s}   the op's handler ran on")
    for key, (label, fn) in rows.items():
        waited = statistics.median(samples[(key, True)]) * 1e6
        piped = statistics.median(samples[(key, False)]) * 1e6
        seen = _threads_of(fn, x, y) if key.startswith("op") else set()
        where = ", ".join(sorted(("the caller's thread" if s else "an XLA thread") for s in seen)) or "-"
        out[key] = {"waited": waited, "pipelined": piped, "on_xla_thread": seen == {False}}
        print(f"  {label:24s} {waited:8.1f}us {piped:8.1f}us   {where}")
    out["margin"] = {}
    for mode in ("waited", "pipelined"):
        margin = out["op_sum"][mode] - out["op"][mode] - out["sum"][mode]
        out["margin"][mode] = margin
        print(f"  op -> jnp.sum minus (op alone + jnp.sum alone), {mode}: {margin:+.1f} us (target <= 10 us)")
    return out


def _threads_of(fn, *args) -> set[bool]:
    """For each call of ``fn``: whether the op's handler ran on this (the calling) thread."""
    from adapters.jax import ffi as _jax_ffi

    seen: set[bool] = set()
    main = threading.get_ident()
    slots = list(_jax_ffi._slots.values())
    refs = [(s, s.ref) for s, _, _ in slots]
    try:
        for slot, ref in refs:

            def spy(ref=ref):
                handler = ref()

                def run(p, platform):
                    seen.add(threading.get_ident() == main)
                    return handler(p, platform)

                return run

            slot.ref = spy
        fn(*args).block_until_ready()
    finally:
        for slot, ref in refs:
            slot.ref = ref
    return seen


# -- the same in plain XLA: a ctypes FFI handler that does nothing -----------------------------


_PLAIN_HANDLERS: list = []


def plain_xla(quick: bool = False):
    """A Python handler that does nothing, registered with ``jax.ffi`` through ctypes (no op): alone,
    and followed by ``jnp.sum`` (on an XLA thread: a thread state made and freed per call). Returns
    the figures and ``kept()``, which measures the latter once the handler keeps its thread state:
    call it last, a thread state kept by any callback serves every later callback on its thread."""
    import ctypes

    import jax
    import jax.numpy as jnp

    from adapters.jax import ffi as _jax_ffi

    keep = {"on": False}
    here = threading.local()
    ensure = ctypes.pythonapi.PyGILState_Ensure

    @_jax_ffi._Handler
    def noop(p):
        if _jax_ffi.MEM[(p + _jax_ffi.EXTENSION) >> 3]:  # XLA's metadata query: API version 0.1, no traits
            _jax_ffi._metadata(p, 0)
            return 0
        if keep["on"] and not getattr(here, "kept", False):
            ensure()  # never released: the thread state outlives the call
            here.kept = True
        return 0

    _PLAIN_HANDLERS.append(noop)  # XLA keeps a raw pointer to it
    jax.ffi.register_ffi_target(
        "interop_bench.noop", jax.ffi.pycapsule(ctypes.cast(noop, ctypes.c_void_p).value), platform="cpu"
    )
    cpu = jax.devices("cpu")[0]
    x = jax.device_put(jnp.linspace(0.0, 1.0, 1024, dtype=jnp.float32), cpu)

    def call(x):
        return jax.ffi.ffi_call("interop_bench.noop", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    jk = wp.jax_kernel(saxpy)  # Warp's own: a ctypes callback too
    fns = {
        "noop": jax.jit(call),
        "noop_sum": jax.jit(lambda x: jnp.sum(call(x))),
        "sum": jax.jit(jnp.sum),
        "jax_kernel": jax.jit(lambda x: jk(x, x, 2.0)[0]),
        "jax_kernel_sum": jax.jit(lambda x: jnp.sum(jk(x, x, 2.0)[0])),
    }
    calls, rounds = (100, 5) if quick else (300, 9)

    def measure(keys) -> dict[str, float]:
        got: dict[str, list[float]] = {k: [] for k in keys}
        for k in keys:
            for _ in range(50):
                fns[k](x).block_until_ready()
        for _ in range(rounds):
            for k in keys:
                got[k].append(_batch(fns[k], (x,), True, calls))
        return {k: statistics.median(v) * 1e6 for k, v in got.items()}

    out = measure(["noop", "noop_sum", "sum", "jax_kernel", "jax_kernel_sum"])

    def kept() -> None:
        keep["on"] = True
        again = measure(["noop_sum", "sum", "jax_kernel_sum"])
        out["noop_sum_kept"], out["sum_last"] = again["noop_sum"], again["sum"]
        out["jax_kernel_sum_kept"] = again["jax_kernel_sum"]
        print("\nPlain XLA: a ctypes FFI handler that does nothing, per call under jax.jit (n=1024, waited)")
        print(f"  handler alone (the caller's thread)              {out['noop']:8.1f} us")
        print(f"  handler -> jnp.sum (an XLA thread)               {out['noop_sum']:8.1f} us")
        print(f"  jnp.sum alone                                    {out['sum']:8.1f} us")
        print(f"  (last) handler -> jnp.sum, thread state kept     {out['noop_sum_kept']:8.1f} us")
        print(f"  (last) jnp.sum alone                             {out['sum_last']:8.1f} us")
        print(f"  wp.jax_kernel alone (the caller's thread)        {out['jax_kernel']:8.1f} us")
        print(f"  wp.jax_kernel -> jnp.sum (an XLA thread)         {out['jax_kernel_sum']:8.1f} us")
        print(f"  (last) the same, XLA's threads' states kept      {out['jax_kernel_sum_kept']:8.1f} us")

    return out, kept


# -- a training rollout: the cloth of examples/cloth.py, the JAX paths of training_paths.py -----


def rollout(quick: bool = False) -> dict[str, float]:
    """Per-iteration ratios of the JAX training paths to Warp's Tape loop (same process): the
    training benchmark's cloth (``examples/cloth.py``) and JAX paths (``training_paths.py``)."""
    from examples import cloth as cl

    from . import training_paths as tp

    sc = cl.scene(N_SIDE, T)
    lr = 0.5
    tape_loop = cl.WarpTapeLoop(sc, "cpu", lr)
    tape_loop.iteration()
    ref_grad = tape_loop.gradient()
    paths = (
        ("jit(value_and_grad) of a Python loop", "loop", tp.make_jax_loop, 1.2),
        ("jit(value_and_grad) of lax.scan", "scan", tp.make_jax_scan, 1.2),
        ("lax.scan(jax.checkpoint(body))", "scan_checkpoint", tp.make_jax_scan_checkpoint, 1.4),
    )
    rows: list[tuple[str, str, object, float]] = []
    agree: dict[str, float] = {}
    for name, key, make, bar in paths:
        it, grad = make(sc, lr)
        it()  # the first iteration (traces, compiles) from the same velocities as the Tape loop's
        agree[name] = cl.rel_err(grad(), ref_grad)
        rows.append((name, key, it, bar))
    samples: dict[str, list[float]] = {"Warp wp.Tape loop": []}
    samples.update({name: [] for name, _, _, _ in rows})
    iters = 2 if quick else 5
    for _ in range(3 if quick else 7):  # round-robin: load changes hit all rows alike
        for name, fn in [("Warp wp.Tape loop", tape_loop.iteration)] + [(n, f) for n, _, f, _ in rows]:
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            samples[name].append((time.perf_counter() - t0) / iters)
    base = statistics.median(samples["Warp wp.Tape loop"])
    out = {"tape_ms": base * 1e3, "gradient_rel": max(agree.values())}
    print(f"\nTraining rollout on the CPU: {N_SIDE}x{N_SIDE} cloth, {len(sc.rest)} springs, T={T}, per iteration")
    print(f"  {'Warp wp.Tape loop':40s} {base * 1e3:8.2f} ms   1.00x")
    for name, key, _, bar in rows:
        sec = statistics.median(samples[name])
        out[key] = sec / base
        out[f"{key}_ms"] = sec * 1e3
        ok = "ok" if sec / base <= bar else "OVER"
        print(
            f"  {name:40s} {sec * 1e3:8.2f} ms {sec / base:6.2f}x (bar {bar}x: {ok}); "
            f"gradient vs the Tape's: rel. {agree[name]:.1e}"
        )
    return out


def main(argv: list[str]) -> int:
    """``[--quick] [--no-rollout] [--json PATH --label NAME]``: with ``--json``, this run is added to
    ``PATH``'s runs under ``NAME`` and ``NAME`` holds the median of its runs (other labels kept;
    docs/measurements/jax-transitions.json holds ``before`` and ``after`` the fix, see
    docs/performance.md)."""
    quick = "--quick" in argv
    wp.config.quiet = True
    wp.init()
    plain, plain_kept = plain_xla(quick)  # first: before any callback keeps a thread state
    run: dict = {"plain_xla": plain, "transitions": transitions(quick)}
    if "--no-rollout" not in argv:
        run["rollout"] = rollout(quick)
    plain_kept()  # last: this handler's kept thread states would serve the rows above
    if "--json" in argv:
        _write(argv[argv.index("--json") + 1], argv[argv.index("--label") + 1], run)
    return 0


def _median(runs: list):
    """The runs' median, figure by figure (nested dicts of numbers; a flag: that of the last run)."""
    first = runs[-1]
    if isinstance(first, dict):
        return {k: _median([r[k] for r in runs if k in r]) for k in first}
    if isinstance(first, bool) or not isinstance(first, (int, float)):
        return first
    return statistics.median(runs)


def _write(path: str, label: str, run: dict) -> None:
    """Add ``run`` to ``path``'s runs under ``label``; ``label`` then holds their median."""
    import datetime
    import json
    import os
    import platform

    import jax

    data: dict = {}
    if os.path.exists(path):
        with open(path) as f:
            data = json.load(f)
    runs = data.setdefault("runs", {}).setdefault(label, [])
    runs.append(run)
    data[label] = _median(runs)  # each figure the median over this label's runs (a shared machine's load varies)
    data["date"] = datetime.date.today().isoformat()
    data["machine"] = (
        f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"jax {jax.__version__}, warp-lang {wp.config.version}"
    )
    with open(path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"\nwritten: {path} ({label})")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
