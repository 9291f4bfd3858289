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
- a training rollout (a 32x32 cloth, 3,906 springs, T=100 steps of two kernels: a gather and
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

import numpy as np
import warp as wp

import interop

N_SIDE = 32
T = 100
DT = 1.0 / 120.0
KE, KD = 200.0, 0.5
GRAVITY = (0.0, -9.8, 0.0)


@wp.kernel
def saxpy(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a * x[i] + y[i]


@wp.kernel
def eval_springs(
    x: wp.array(dtype=wp.vec3),
    v: wp.array(dtype=wp.vec3),
    ij: wp.array(dtype=int),
    rest: wp.array(dtype=float),
    ke: float,
    kd: float,
    f: wp.array(dtype=wp.vec3),
):
    s = wp.tid()
    i = ij[2 * s]
    j = ij[2 * s + 1]
    d = x[i] - x[j]
    length = wp.length(d)
    n = d / length
    fs = n * (ke * (length - rest[s]) + kd * wp.dot(n, v[i] - v[j]))
    wp.atomic_sub(f, i, fs)
    wp.atomic_add(f, j, fs)


@wp.kernel
def integrate(
    x: wp.array(dtype=wp.vec3),
    v: wp.array(dtype=wp.vec3),
    f: wp.array(dtype=wp.vec3),
    g: wp.vec3,
    dt: float,
    x_out: wp.array(dtype=wp.vec3),
    v_out: wp.array(dtype=wp.vec3),
):
    i = wp.tid()
    v1 = v[i] + (f[i] + g) * dt
    x1 = x[i] + v1 * dt
    if x1[1] < 0.0:  # ground contact: stop on the plane y = 0
        x1 = wp.vec3(x1[0], 0.0, x1[2])
        v1 = wp.vec3(v1[0], 0.0, v1[2])
    x_out[i] = x1
    v_out[i] = v1


@wp.kernel
def loss_kernel(x: wp.array(dtype=wp.vec3), target: wp.array(dtype=wp.vec3), scale: float, loss: wp.array(dtype=float)):
    i = wp.tid()
    d = x[i] - target[i]
    wp.atomic_add(loss, 0, wp.dot(d, d) * scale)


def cloth(n: int = N_SIDE):
    """Positions (n*n, 3), spring index pairs (2*S,), rest lengths (S,) and a target (n*n, 3)."""
    g = np.stack(np.meshgrid(np.arange(n), np.arange(n), indexing="ij"), -1).reshape(-1, 2)
    x0 = np.zeros((n * n, 3), np.float32)
    x0[:, 0], x0[:, 2], x0[:, 1] = g[:, 0] * 0.1, g[:, 1] * 0.1, 1.0
    k = np.arange(n * n).reshape(n, n)
    pairs = [(k[:, :-1], k[:, 1:]), (k[:-1, :], k[1:, :]), (k[:-1, :-1], k[1:, 1:]), (k[1:, :-1], k[:-1, 1:])]
    ij = np.concatenate([np.stack([a.ravel(), b.ravel()], -1) for a, b in pairs]).astype(np.int32)
    rest = np.linalg.norm(x0[ij[:, 0]] - x0[ij[:, 1]], axis=1).astype(np.float32)
    target = x0 + np.array([0.3, -0.5, 0.2], np.float32)
    return x0, ij.ravel(), rest, target


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


# -- a training rollout -------------------------------------------------------------------------


class TapeLoop:
    """Warp's own loop, as Warp's examples write it: arrays allocated once, ``wp.launch`` under
    ``wp.Tape``, ``tape.backward``, ``tape.reset()``."""

    def __init__(self, x0, ij, rest, target, v0):
        d = "cpu"
        n = len(x0)
        self.xs = [wp.array(x0, dtype=wp.vec3, device=d, requires_grad=True) for _ in range(T + 1)]
        self.vs = [wp.array(v0, dtype=wp.vec3, device=d, requires_grad=True) for _ in range(T + 1)]
        self.fs = [wp.zeros(n, dtype=wp.vec3, device=d, requires_grad=True) for _ in range(T)]
        self.ij = wp.array(ij, dtype=int, device=d)
        self.rest = wp.array(rest, dtype=float, device=d)
        self.target = wp.array(target, dtype=wp.vec3, device=d)
        self.loss = wp.zeros(1, dtype=float, device=d, requires_grad=True)
        self.tape = wp.Tape()

    def step(self, lr: float) -> float:
        n, s = len(self.xs[0]), len(self.rest)
        for f in self.fs:  # (outside the tape: a zero_() recorded on it zeroes the adjoint chain)
            f.zero_()
        self.loss.zero_()
        with self.tape:
            for t in range(T):
                x, v, f = self.xs[t], self.vs[t], self.fs[t]
                wp.launch(eval_springs, s, inputs=[x, v, self.ij, self.rest, KE, KD], outputs=[f], device="cpu")
                wp.launch(
                    integrate,
                    n,
                    inputs=[x, v, f, wp.vec3(*GRAVITY), DT],
                    outputs=[self.xs[t + 1], self.vs[t + 1]],
                    device="cpu",
                )
            wp.launch(loss_kernel, n, inputs=[self.xs[T], self.target, 1.0 / n], outputs=[self.loss], device="cpu")
        self.tape.backward(self.loss)
        grad = self.vs[0].grad.numpy().copy()  # (a view of the gradient, which tape.zero() clears)
        loss = float(self.loss.numpy()[0])
        self.tape.reset()  # the recorded launches cleared, the gradients zeroed
        v0 = self.vs[0].numpy() - lr * grad
        self.vs[0].assign(v0)
        self.last_grad = grad
        return loss


def jax_paths():
    """``{name: make(x0, ij, rest, target) -> value_and_grad(v0)}`` for each JAX training path."""
    import jax
    import jax.numpy as jnp

    springs = interop.op(eval_springs, outputs=["f"])
    step_op = interop.op(integrate, outputs=["x_out", "v_out"])

    def step(x, v, ij, rest):
        f = springs(x, v, ij, rest, KE, KD, launch_dims=len(rest), output_dims={"f": x.shape[0]})
        return step_op(x, v, f, GRAVITY, DT)

    def loss(x, target):
        return jnp.mean(jnp.sum((x - target) ** 2, axis=-1))

    def loop(x0, ij, rest, target):
        def f(v0):
            x, v = x0, v0
            for _ in range(T):
                x, v = step(x, v, ij, rest)
            return loss(x, target)

        return jax.jit(jax.value_and_grad(f))

    def scan(checkpoint: bool):
        def make(x0, ij, rest, target):
            def body(c, _):
                return step(*c, ij, rest), None

            b = jax.checkpoint(body) if checkpoint else body

            def f(v0):
                (x, _), _ = jax.lax.scan(b, (x0, v0), None, length=T)
                return loss(x, target)

            return jax.jit(jax.value_and_grad(f))

        return make

    return {
        "jit(value_and_grad) of a Python loop": (loop, 1.2),
        "jit(value_and_grad) of lax.scan": (scan(False), 1.2),
        "lax.scan(jax.checkpoint(body))": (scan(True), 1.4),
    }


def rollout(quick: bool = False) -> dict[str, float]:
    """Per-iteration ratios of the JAX training paths to Warp's Tape loop (same process)."""
    import jax

    x0, ij, rest, target = cloth()
    v0 = np.zeros_like(x0)
    lr = 0.5
    tape = TapeLoop(x0, ij, rest, target, v0)
    tape.step(0.0)
    ref_grad = tape.last_grad
    cpu = jax.devices("cpu")[0]
    jx0, jij, jrest, jtarget = (jax.device_put(a, cpu) for a in (x0, ij, rest, target))
    rows: list[tuple[str, object, float]] = []
    agree: dict[str, float] = {}
    for name, (make, bar) in jax_paths().items():
        vg = make(jx0, jij, jrest, jtarget)
        state = {"v": jax.device_put(v0, cpu)}
        _, g = vg(state["v"])
        agree[name] = float(np.abs(np.asarray(g) - ref_grad).max() / max(np.abs(ref_grad).max(), 1e-30))

        def it(vg=vg, state=state):
            value, g = vg(state["v"])
            state["v"] = state["v"] - lr * g
            return float(value)  # waits: what a training loop that logs its loss does

        rows.append((name, it, bar))
    tape_loop = TapeLoop(x0, ij, rest, target, v0)
    samples: dict[str, list[float]] = {"Warp wp.Tape loop": []}
    samples.update({name: [] for name, _, _ in rows})
    iters = 2 if quick else 5
    for fn in [lambda: tape_loop.step(lr)] + [it for _, it, _ in rows]:
        fn()  # warm
    for _ in range(3 if quick else 7):  # round-robin: load changes hit all rows alike
        for name, fn in [("Warp wp.Tape loop", lambda: tape_loop.step(lr))] + [(n, f) for n, f, _ in rows]:
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            samples[name].append((time.perf_counter() - t0) / iters)
    base = statistics.median(samples["Warp wp.Tape loop"])
    out = {"tape_ms": base * 1e3, "gradient_rel": max(agree.values())}
    print(f"\nTraining rollout on the CPU: {N_SIDE}x{N_SIDE} cloth, {len(rest)} springs, T={T}, per iteration")
    print(f"  {'Warp wp.Tape loop':40s} {base * 1e3:8.2f} ms   1.00x")
    for (name, _, bar), key in zip(rows, ("loop", "scan", "scan_checkpoint")):
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
