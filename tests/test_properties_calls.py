"""Generated calls: every array argument (inputs *and* in-out arrays) in a generated layout
(contiguous, strided, offset, broadcast, transposed, flipped, a user subclass), crossed with
requires_grad / stop_gradient, the scalar's kind and every path of each framework (eager,
``torch.no_grad``, ``torch.compile`` (backend "aot_eager"), ``torch.func.vmap``/``grad``,
``jax.jit``/``vmap``/``grad``, ``paddle.no_grad``), each compared with ``wp.launch``/``wp.Tape``
on contiguous copies (tests/property_calls.py). Kernels with struct parameters get calls of their
own: the same dimensions apply to the structs' fields, and each call packs its structs one way (a
Warp struct instance, a dict, a dataclass, a NamedTuple, a registered JAX pytree).

Each call is drawn on a device (the CPU; CUDA too where INTEROP_TEST_DEVICES names it and the
framework has it, tests/_devices.py), and its reference runs there; CuPy joins on CUDA. One of the
ops is a tile kernel (catalogue.py ``tile_kernel``), whose reference is ``wp.launch_tiled`` on the
call's device; it is also run once per framework and device whatever the draws (below).

INTEROP_PROPERTY_EXAMPLES calls per framework (CI default small; ``nox -s properties`` full size).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from _devices import devices_for
from catalogue import PROPERTY_OPS
from hypothesis import event, given
from hypothesis import strategies as st
from property_calls import (
    CALL_FRAMEWORKS,
    CONTIGUOUS,
    EXAMPLES,
    GRAD_LAYOUT,
    Call,
    Layout,
    calls,
    count_call,
    property_settings,
    run_call,
)

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


TILE_OP = next(p for p in PROPERTY_OPS if p.block_dim is not None)
#: the path of each framework on which a call's gradients are asked for
GRAD_PATHS = {"torch": "eager", "paddle": "eager", "jax": "grad"}


@pytest.mark.parametrize(
    "fw, device",
    [
        pytest.param(fw, d, marks=[pytest.mark.cuda] if d != "cpu" else [])
        for fw in CALL_FRAMEWORKS
        for d in devices_for(fw)
    ],
)
def test_generated_tile_call_equals_launch_tiled(fw, device):
    """The generators' tile kernel, whatever the draws: values (and gradients) equal
    ``wp.launch_tiled``'s on the same device, contiguous and with strided columns (each tile read
    from strided memory), the tile grid given as launch_dims too; a gradient of the strided input
    is refused at the backward where the framework hands the op its own strided view (torch, Paddle:
    Warp's tile adjoint writes through the array's gradient pointer)."""
    path = GRAD_PATHS.get(fw, "eager")
    grad = fw in GRAD_PATHS
    c = Call(TILE_OP, 5, 1, np.float32, (CONTIGUOUS,), (grad,), path=path, device=device)
    want = "values and gradients" if grad else "values"
    assert run_call(fw, c) == want
    assert run_call(fw, replace(c, launch=(4,))) == want  # the tile grid as launch_dims: 4 of the 5 rows
    columns = Layout((0, 1), (1, 2), (0, 1), (False, False))  # every other column, from the second
    assert run_call(fw, replace(c, layouts=(columns,), grads=(False,))) == "values"
    refused = fw in ("torch", "paddle")
    assert run_call(fw, replace(c, layouts=(columns,))) == (
        f"refused ({GRAD_LAYOUT}, at the backward)" if refused else want
    )
