"""Generated calls: every array argument (inputs *and* in-out arrays) in a generated layout
(contiguous, strided, offset, broadcast, transposed, flipped, a user subclass), crossed with
requires_grad / stop_gradient, the scalar's kind and every path of each framework (eager,
``torch.no_grad``, ``torch.compile`` (backend "aot_eager"), ``torch.func.vmap``/``grad``,
``jax.jit``/``vmap``/``grad``, ``paddle.no_grad``), each compared with ``wp.launch``/``wp.Tape``
on contiguous copies (tests/property_calls.py). Kernels with struct parameters get calls of their
own: the same dimensions apply to the structs' fields, and each call packs its structs one way (a
Warp struct instance, a dict, a dataclass, a NamedTuple, a registered JAX pytree).

Each call is drawn on a device (the CPU; CUDA too where INTEROP_TEST_DEVICES names it and the
framework has it, tests/_devices.py), and its reference runs there; CuPy joins on CUDA.

INTEROP_PROPERTY_EXAMPLES calls per framework (CI default small; ``nox -s properties`` full size).
"""

from __future__ import annotations

import pytest
from catalogue import PROPERTY_OPS
from hypothesis import event, given
from hypothesis import strategies as st
from property_calls import CALL_FRAMEWORKS, EXAMPLES, calls, count_call, property_settings, run_call

pytestmark = pytest.mark.timeout(7200)


@pytest.mark.parametrize("fw", CALL_FRAMEWORKS)
@property_settings(EXAMPLES)
@given(data=st.data())
def test_generated_call_equals_warp(fw, data):
    c = data.draw(calls(fw), label="call")
    outcome = run_call(fw, c)
    count_call(fw, c, outcome)
    event(f"{c.path}: {outcome}")


STRUCT_OPS = [p for p in PROPERTY_OPS if p.structs]


@pytest.mark.parametrize("fw", CALL_FRAMEWORKS)
@property_settings(EXAMPLES)
@given(data=st.data())
def test_generated_struct_call_equals_warp(fw, data):
    pop = data.draw(st.sampled_from(STRUCT_OPS), label="op")
    c = data.draw(calls(fw, pop), label="call")
    outcome = run_call(fw, c)
    count_call(fw, c, outcome, "struct calls")
    event(f"{c.packing} {c.path}: {outcome}")
