"""Ctrl-C at any moment of a JAX call through an op (issue 21, row 2).

Interrupts arrive every 2-3 ms (a SIGALRM handler sends SIGINT, handled by Python's default
handler) over whole loops of eager forward calls, eager ``jax.grad`` calls and the user's own
``jax.jit`` calls. The KeyboardInterrupt lands in the FFI handler running inside XLA or anywhere in
the Python call path. Before the fix one landing at the handler's entry escaped the ctypes callback,
which then returned uninitialised memory to XLA as an error pointer: SIGSEGV or "double free or
corruption" within seconds. Now the process lives, every later call is right, and no exception ever
escapes a callback ("Exception ignored on calling ctypes callback function").
"""

from __future__ import annotations

import json
import os

import pytest
from _subprocess import run_script

pytest.importorskip("jax")

CHILD = """
import json, os, random, signal, sys, time

signal.signal(signal.SIGINT, signal.default_int_handler)  # a shell may have started us ignoring SIGINT

import numpy as np
import warp as wp
import jax
import jax.numpy as jnp

import interop
from adapters.jax import ffi as _jax_ffi

wp.config.quiet = True


@wp.kernel
def saxpy(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a * x[i] + y[i]


op = interop.op(saxpy)
cpu = jax.devices("cpu")[0]
x = jnp.arange(256.0, dtype=jnp.float32, device=cpu)
y = jnp.ones(256, jnp.float32, device=cpu)
grad = jax.grad(lambda x, y: jnp.sum(op(x, y, 2.0) ** 2), argnums=(0, 1))
jitted = jax.jit(lambda x, y: op(x, y, 2.0))
jitted_grad = jax.jit(grad)
steps = {
    "forward": lambda: op(x, y, 2.0),
    "grad": lambda: grad(x, y),
    "jit": lambda: jitted(x, y),
    "jit_grad": lambda: jitted_grad(x, y),
}
expected = {k: [np.asarray(a) for a in jax.tree.leaves(f())] for k, f in steps.items()}
mode, seconds = sys.argv[1], float(sys.argv[2])
step = steps[mode]
deadline = time.monotonic() + seconds
# the storm lasts until at least this many interrupts landed (in a call: raised, or failing it)
landed_at_least = int(sys.argv[4]) if len(sys.argv) > 4 else 0
counts = {"calls": 0, "interrupts": 0, "failed_xla_calls": 0, "failed_jax_calls": 0, "sent": 0, "leaked": 0}
leaked = []  # eager calls that failed with JAX's report of the interrupt instead of raising KeyboardInterrupt


armed = [False]
running = [True]
rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
EAGER = mode in ("forward", "grad")  # the package's own calls: a Ctrl-C must reach the caller as itself


def alarm(signum, frame):
    # the SIGINT is handled, and its KeyboardInterrupt raised, right where this handler runs: only
    # while a call runs (anywhere in it: the op's Python path, JAX, XLA, the FFI handler), never in
    # this harness's own lines, which no try could protect completely. The next alarm comes after a
    # random 1-12 ms, so interrupts land at every phase of a call and some calls still complete
    if not running[0]:
        return
    signal.setitimer(signal.ITIMER_REAL, rng.uniform(0.001, 0.012))
    if armed[0]:
        counts["sent"] += 1
        os.kill(os.getpid(), signal.SIGINT)


def done():
    # at least the given seconds; then on until a call completed and an interrupt landed inside the
    # FFI handler (where the bug was), up to a minute: where they land is chance, not a schedule
    now = time.monotonic()
    if now < deadline:
        return False
    landed = counts["interrupts"] + counts["failed_xla_calls"]
    return now > deadline + 600 or (counts["calls"] > 0 and _jax_ffi.interrupts() > 0 and landed >= landed_at_least)


def loop():
    # interrupts sent up to the last call that completed: one that Python swallowed ("Exception
    # ignored in: _xla_gc_callback", a garbage-collection callback of JAX's) can fail the next call
    # although no new one reached it (the GPU machine's run, 2026-11-28: AssertionError in jax.grad)
    sent = counts["sent"]
    while not done():
        try:
            armed[0] = True
            step()
            armed[0] = False
            counts["calls"] += 1
            sent = counts["sent"]
        except KeyboardInterrupt:
            armed[0] = False
            counts["interrupts"] += 1
        except Exception as e:  # the user's own jax.jit: the interrupted XLA call fails
            armed[0] = False
            # the handler's report of a Ctrl-C (the FFI callback's message), not any message naming
            # KeyboardInterrupt: JAX's own reports of one landing in its code quote its traceback
            if _jax_ffi._INTERRUPTED in str(e):
                counts["failed_xla_calls"] += 1
                if EAGER:  # an eager call must raise KeyboardInterrupt itself (issue 50's regression)
                    counts["leaked"] += 1
                    leaked.append(f"{type(e).__name__}: {str(e)[:200]}")
            elif counts["sent"] > sent:
                # JAX's own Python code, interrupted, may fail otherwise (jax 0.12: ValueError,
                # RuntimeError, AssertionError from its tracing and cache code, plain jnp too; jax
                # 0.10.2: "ValueError: Equality of global cache key led to an exception", the Ctrl-C's
                # traceback in its message, from the user's jnp.sum under jax.grad); a call after a
                # completed one, with no interrupt since, must not fail, and every later call must be
                # right (below)
                counts["failed_jax_calls"] += 1
            else:
                raise


signal.signal(signal.SIGALRM, alarm)
signal.setitimer(signal.ITIMER_REAL, 0.002)
try:
    loop()
finally:  # a failing call is reported as itself, not as the next alarm killing the process
    running[0] = False
    signal.setitimer(signal.ITIMER_REAL, 0)
for k, f in steps.items():  # every path is still right afterwards
    got = [np.asarray(a) for a in jax.tree.leaves(f())]
    for a, b in zip(got, expected[k]):
        np.testing.assert_array_equal(a, b)
counts["in_handlers"] = _jax_ffi.interrupts()  # interrupts that landed inside the FFI handler
counts["leaked_examples"] = leaked[:3]
print("RESULTS " + json.dumps(counts), flush=True)
"""


# How many interrupts an eager storm lands at least. Issue 50's regression let about 1% of them
# (5 of ~480) surface as JAX's ValueError instead of KeyboardInterrupt: a storm of n interrupts misses
# a failure rate p with probability (1 - p)^n, so 460 catch 1% with 99% probability (0.99^460 < 0.01).
# The soak session (INTEROP_SOAK_FULL=1, `nox -s soak`) lands 5,000: a rate of 0.1% is then caught with
# 99.3% probability (0.999^5000 < 0.007).
EAGER_LANDED = 5000 if os.environ.get("INTEROP_SOAK_FULL") == "1" else 460


@pytest.mark.parametrize("mode", ["forward", "grad", "jit", "jit_grad"])
def test_interrupts_over_whole_call_loops_leave_the_process_alive_and_right(mode):
    eager = mode in ("forward", "grad")
    landed = EAGER_LANDED if eager else 100
    r = run_script(CHILD, mode, "6" if not eager else "1", "0", str(landed), timeout=900)
    counts = json.loads([ln for ln in r.stdout.splitlines() if ln.startswith("RESULTS ")][-1][len("RESULTS ") :])
    assert "on calling ctypes callback" not in r.stderr, r.stderr[-3000:]
    assert counts["calls"] > 0, counts  # (an eager jax.grad takes longer than the interval: few complete)
    assert counts["interrupts"] + counts["failed_xla_calls"] >= landed, counts  # interrupts did land, many times
    assert counts["in_handlers"] > 0, counts  # some inside XLA's call of the handler
    # an eager call (the package's own) raises KeyboardInterrupt, never JAX's report of it
    assert counts["leaked"] == 0, counts


ENTRY = """
import ctypes, ctypes.util, os, signal, sys, time

from adapters.jax.ffi import _enter_without_signal_check

signal.signal(signal.SIGINT, signal.default_int_handler)
libc = ctypes.CDLL(ctypes.util.find_library("c"))
compar = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
counts = {"in_callback": 0, "after": 0}


def cb(a, b):
    try:
        len("x")  # a call: pending signals are handled after it, inside the try
        return 0
    except KeyboardInterrupt:
        counts["in_callback"] += 1
        return 0


if sys.argv[1] == "patched":
    cb = _enter_without_signal_check(cb)
c = compar(cb)
arr = (ctypes.c_int * 2)(1, 2)
armed = [False]
deadline = time.monotonic() + 2


def alarm(signum, frame):
    if armed[0]:  # the SIGINT lands where this handler runs: inside the try below, or in the callback
        os.kill(os.getpid(), signal.SIGINT)


signal.signal(signal.SIGALRM, alarm)
signal.setitimer(signal.ITIMER_REAL, 0.0005, 0.0005)
while time.monotonic() < deadline:
    try:
        armed[0] = True
        libc.qsort(arr, 2, 4, c)  # C calls the Python callback back
        armed[0] = False
    except KeyboardInterrupt:
        armed[0] = False
        counts["after"] += 1
signal.setitimer(signal.ITIMER_REAL, 0)
print("RESULTS", counts["in_callback"] + counts["after"])
"""


def test_callback_entered_with_a_pending_interrupt_keeps_it_inside():
    """The mechanism alone (no JAX): a Ctrl-C that arrives while C code runs is handled at the next
    Python callback's entry; unmarked, that KeyboardInterrupt escapes the callback ("Exception ignored
    on calling ctypes callback function", the C caller reads garbage); marked by
    ``_enter_without_signal_check``, it is raised inside the callback's try or after it returns."""
    plain = run_script(ENTRY, "plain", timeout=120)
    patched = run_script(ENTRY, "patched", timeout=120)
    assert "on calling ctypes callback" in plain.stderr  # the window is real, and this test reaches it
    assert "on calling ctypes callback" not in patched.stderr, patched.stderr[-3000:]
    assert int(patched.stdout.split("RESULTS")[-1]) > 100  # and interrupts did land


def test_eager_grad_backward_handler_interrupt_is_keyboard_interrupt():
    """The regression of issue 50, made certain: a Ctrl-C handled inside the *adjoint* launch's handler
    of an eager ``jax.grad`` (the handler raises KeyboardInterrupt there) reaches the caller as
    KeyboardInterrupt, not as JAX's ``ValueError: UNKNOWN: KeyboardInterrupt: ...``; an exception the
    handler raises reaches it as itself. (The storms above land there only now and then.)"""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import warp as wp
    from _devices import jax_device

    import interop
    from adapters.jax import ffi as _jax_ffi

    @wp.kernel(module="unique")
    def square_bwd_probe(x: wp.array(dtype=float), out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = x[i] * x[i]

    op = interop.op(square_bwd_probe)
    x = jax.device_put(np.arange(4, dtype=np.float32), jax_device("cpu"))
    grad = jax.grad(lambda a: jnp.sum(op(a)))
    np.testing.assert_array_equal(np.asarray(grad(x)), 2 * np.arange(4))  # warm: the adjoint target exists
    slot = _jax_ffi._slots[f"interop.{op.name.replace('::', '.')}.bwd"][0]
    original = slot.ref

    def fail_with(exc):
        def handler(p, platform):
            raise exc

        return handler

    try:
        slot.ref = lambda: fail_with(KeyboardInterrupt())
        with pytest.raises(KeyboardInterrupt):
            grad(x)
        slot.ref = lambda: fail_with(ZeroDivisionError("from the adjoint handler"))
        with pytest.raises(ZeroDivisionError, match="from the adjoint handler"):
            grad(x)
    finally:
        slot.ref = original
    np.testing.assert_array_equal(np.asarray(grad(x)), 2 * np.arange(4))  # and right again
