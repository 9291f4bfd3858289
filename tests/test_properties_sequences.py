"""Generated sequences of 5-30 calls of one op in which each call's properties change: sizes,
layouts, dtype, scalar kind, requires_grad, grad mode (``torch.no_grad``/``paddle.no_grad``), JAX's
x64 mode, ``jax.jit``/``jax.grad``, per-call ``launch_dims``, an input modified in place between
the forward and the backward, and (where CUDA is present) the device. Layouts and sizes come from small pools so that signatures repeat:
each call is compared with ``wp.launch``/``wp.Tape`` on contiguous copies, so a fast path's cache
that serves a call it should not (a stale hit) fails here.

INTEROP_PROPERTY_EXAMPLES // 4 sequences per framework (about 17 calls each), // 8 more of the
kernels with struct parameters, whose packing (tests/property_calls.py) changes between calls too, and
// 12 more of the tile ops, whose block_dim changes between calls too.
"""

from __future__ import annotations

import pytest
from catalogue import PROPERTY_OPS
from hypothesis import event, given
from hypothesis import strategies as st
from property_calls import (
    CALL_FRAMEWORKS,
    EXAMPLES,
    SEQUENCE_PATHS,
    calls,
    count,
    count_call,
    describe,
    property_settings,
    run_call,
)

pytestmark = pytest.mark.timeout(7200)
SIZES = [(3, 2), (4, 2), (3, 3), (1, 4), (0, 2), (5, 1)]


@pytest.mark.parametrize("fw", CALL_FRAMEWORKS)
@property_settings(max(1, EXAMPLES // 4))
@given(data=st.data())
def test_sequence_of_changing_calls_equals_warp(fw, data):
    _sequence(fw, data, PROPERTY_OPS)


@pytest.mark.parametrize("fw", CALL_FRAMEWORKS)
@property_settings(max(1, EXAMPLES // 8))
@given(data=st.data())
def test_sequence_of_changing_struct_calls_equals_warp(fw, data):
    """The structs' packing changes between calls too: a cache keyed on a signature that ignores
    the packing or a field's layout would serve a stale answer."""
    _sequence(fw, data, [p for p in PROPERTY_OPS if p.structs])


@pytest.mark.parametrize("fw", CALL_FRAMEWORKS)
@property_settings(max(1, EXAMPLES // 12))
@given(data=st.data())
def test_sequence_of_changing_tile_calls_equals_warp(fw, data):
    """A tile op's block_dim (per call), tile grid and array sizes change between calls: a cache keyed
    on a signature that ignores the block size or the grid would serve another launch's answer."""
    _sequence(fw, data, [p for p in PROPERTY_OPS if p.block_dim is not None])


def _sequence(fw, data, ops):
    pop = data.draw(st.sampled_from(ops), label="op")
    seq = data.draw(
        st.lists(calls(fw, pop, paths=SEQUENCE_PATHS[fw], pools=True, sizes=SIZES), min_size=5, max_size=30)
    )
    done = []
    for k, c in enumerate(seq):
        try:
            outcome = run_call(fw, c)
        except AssertionError as e:
            history = "\n".join(f"  #{j}: {describe(d)}" for j, d in enumerate(done))
            raise AssertionError(f"call #{k} of a sequence failed after:\n{history}\n{e}") from None
        done.append(c)
        count_call(fw, c, outcome, "calls in sequences")
    count(fw, "sequences", "run")
    event(f"{len(seq)} calls")
