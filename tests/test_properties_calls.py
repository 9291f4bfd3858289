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
call's device; it is also run once per framework and device whatever the draws (below). The tile ops
(tile_rows: wp.launch_tiled; tile_threads: wp.launch + block_dim as Warp's n-body example; tile_matmul)
are drawn on their own too, with a per-call block_dim, and each new one is run whatever the draws.

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
TILE_OPS = [p for p in PROPERTY_OPS if p.block_dim is not None]


@pytest.mark.parametrize("fw", CALL_FRAMEWORKS)
@property_settings(max(1, EXAMPLES // 5))
@given(data=st.data())
def test_generated_tile_call_equals_warp(fw, data):
    """The tile ops (a wp.launch_tiled kernel, a wp.launch + block_dim kernel as Warp's n-body
    example, a tile_matmul) drawn more often than among all ops: every path, a per-call block_dim
    (a launch that is not whole blocks refused), forward mode refused while tiles have no tangent
    rules; values and gradients equal wp.launch / wp.launch_tiled and wp.Tape on the call's device."""
    pop = data.draw(st.sampled_from(TILE_OPS), label="op")
    c = data.draw(calls(fw, pop), label="call")
    outcome = run_call(fw, c)
    count_call(fw, c, outcome, "tile calls")
    event(f"{pop.id} {c.path}: {outcome}")


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


@pytest.mark.parametrize(
    "fw, device",
    [
        pytest.param(fw, d, marks=[pytest.mark.cuda] if d != "cpu" else [])
        for fw in CALL_FRAMEWORKS
        for d in devices_for(fw)
    ],
)
@pytest.mark.parametrize("op_id", ["tile_threads", "tile_matmul"])
def test_generated_tile_ops_whatever_the_draws(fw, device, op_id):
    """The wp.launch-form tile op (thread i indexes the arrays; Warp's n-body example) and the
    tile_matmul op, whatever the draws: values and gradients equal Warp's launch on the same device,
    with the op's block_dim and another one per call; a wp.launch-form call whose threads are not
    whole blocks is refused (launch_dims, or a block_dim that does not divide them)."""
    pop = next(p for p in TILE_OPS if p.id == op_id)
    path = GRAD_PATHS.get(fw, "eager")
    grad = fw in GRAD_PATHS
    nd = len(pop.array_ndims)
    c = Call(pop, 2, 3, np.float32, (CONTIGUOUS,) * nd, (grad,) * nd, path=path, device=device)
    want = "values and gradients" if grad else "values"
    assert run_call(fw, c) == want
    assert run_call(fw, replace(c, block_dim=4)) == want
    if op_id == "tile_threads":  # 16 threads: not whole blocks of 32, nor is launch_dims=15 of 8
        assert run_call(fw, replace(c, block_dim=32)) == "refused (must run whole blocks)"
        assert run_call(fw, replace(c, launch=(15,))) == "refused (must run whole blocks)"
    else:  # a smaller tile grid than the arrays hold
        assert run_call(fw, replace(c, launch=(1, 3), block_dim=32)) == want


def test_per_call_block_dim_first_used_under_torch_compile():
    """op(x, block_dim=b) inside torch.compile(fullgraph=True), b used nowhere before in the process,
    gives Warp's values (found by the tile generators: block_dim drawn per call under compile)."""
    torch = pytest.importorskip("torch")
    from catalogue import tile_kernel

    import interop

    op = interop.op(tile_kernel, block_dim=16, name="test_properties_calls::tile_bd_compile")
    x = torch.rand(3, 8, dtype=torch.float32, device="cpu")
    torch.compiler.reset()
    got = torch.compile(lambda a: op(a, block_dim=24), backend="aot_eager", fullgraph=True)(x)
    np.testing.assert_allclose(got.numpy(), (x.numpy() ** 2).sum(1), rtol=1e-5)
