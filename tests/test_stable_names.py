"""Op names (and so PyTorch operators and JAX FFI targets) are derived from the description only:
the same kernel described in another process gets the same name; ``partition`` is part of it."""

from __future__ import annotations

import textwrap

import pytest
import warp as wp
from _subprocess import run_for_results

import interop

KERNEL = textwrap.dedent(
    """
    import warp as wp
    wp.config.quiet = True

    @wp.kernel
    def cube(x: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = s * x[i] * x[i] * x[i]
    """
)

NAMES = textwrap.dedent(
    """
    import json, interop
    from kernel_mod import cube
    print("RESULTS " + json.dumps([interop.op(cube).name, interop.op(cube, partition="rows").name,
                                   interop.op(cube, vmap_method="fold").name]))
    """
)

TORCH_EXPORT = textwrap.dedent(
    """
    import sys, json
    import torch, interop
    from kernel_mod import cube
    op = interop.op(cube)

    class M(torch.nn.Module):
        def forward(self, x):
            return op(x, 2.0) + 1.0

    x = torch.linspace(-1, 1, 6, device="cpu")
    if sys.argv[1] == "save":
        torch.export.save(torch.export.export(M(), (x,)), sys.argv[2])
    ep = torch.export.load(sys.argv[2])  # in the second process: after describing the op again
    print("RESULTS " + json.dumps([op.name, ep.module()(x).tolist()]))
    """
)


def _run(script: str, *argv: str):
    return run_for_results(script, *argv, timeout=300, modules={"kernel_mod": KERNEL})


def test_names_are_the_same_in_every_process():
    first = _run(NAMES)
    second = _run(NAMES)
    assert first == second
    assert len(set(first)) == 3  # options are part of the name
    assert all(n.startswith("interop::cube_") for n in first)


def _make_kernel():
    @wp.kernel
    def twin(x: wp.array(dtype=float), out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = x[i] * 2.0

    return twin


def test_two_kernel_objects_with_one_source_get_distinct_names():
    a, b = _make_kernel(), _make_kernel()
    assert a is not b
    na, nb = interop.op(a).name, interop.op(b).name
    assert na != nb and nb == na + "_1"
    assert interop.op(a).name == na  # the same function keeps its name


def test_partition_is_validated_and_part_of_the_identity():
    k = _make_kernel()
    assert interop.op(k, partition="rows").description != interop.op(k).description
    assert interop.op(k, partition="rows").description.partition == "rows"
    rows, elem = interop.op(k, partition="rows"), interop.op(k, partition="elementwise")
    assert elem.description.partition == "elementwise" and elem.description != rows.description
    assert elem.name != rows.name  # each declaration names its own operators
    with pytest.raises(
        interop.ArgumentError, match=r"partition must be None or one of \('rows', 'elementwise'\), got 'cols'"
    ):
        interop.op(k, partition="cols")

    def pyfn(x: wp.array(dtype=float), out: wp.array(dtype=float)):
        wp.copy(out, x)

    with pytest.raises(interop.ArgumentError, match="partition='rows' applies to kernels only"):
        interop.op(pyfn, partition="rows")


def test_torch_export_round_trip_in_a_fresh_process(tmp_path):
    pytest.importorskip("torch")
    path = str(tmp_path / "m.pt2")
    first = _run(TORCH_EXPORT, "save", path)
    second = _run(TORCH_EXPORT, "load", path)
    assert first == second
    x = [-1 + 2 * k / 5 for k in range(6)]
    assert second[1] == pytest.approx([2.0 * v**3 + 1.0 for v in x], rel=1e-6, abs=1e-6)
