"""Promises checked against the kernel's source (:mod:`interop._promises`): ``vmap_method="fold"``
is refused, naming the line, for a kernel that reads an array's shape or another row; with
``partition="rows"`` the arrays that shard are those the first thread index walks, never those
whose length happens to equal the launch's (issue 54: a per-feature ``gamma`` when B == F)."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
import warp as wp
from _devices import jax_device
from _subprocess import run_for_results

import interop

KERNELS = textwrap.dedent(
    """
    import warp as wp
    wp.config.quiet = True

    @wp.kernel
    def scale_features(x: wp.array2d(dtype=float), gamma: wp.array(dtype=float), out: wp.array2d(dtype=float)):
        b, f = wp.tid()
        out[b, f] = gamma[f] * x[b, f] * x[b, f]

    @wp.kernel
    def interaction(pos: wp.array(dtype=float), out: wp.array(dtype=float)):
        i = wp.tid()
        n = pos.shape[0]
        acc = float(0.0)
        for j in range(n):
            acc += wp.exp(-(pos[i] - pos[j]) * (pos[i] - pos[j]))
        out[i] = acc

    @wp.kernel
    def neighbour(a: wp.array(dtype=float), out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = a[i] * a[(i + 1) % 4]

    @wp.kernel
    def square(a: wp.array(dtype=float), out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = a[i] * a[i]
    """
)


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    """The kernels above as a module of their own (Warp reads a kernel's source from its file)."""
    import importlib.util

    folder = tmp_path_factory.mktemp("promises")
    path = folder / "promise_kernels.py"
    path.write_text(KERNELS)
    spec = importlib.util.spec_from_file_location("promise_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_rows_follow_the_thread_index_not_the_lengths(kernels):
    assert interop.op(kernels.scale_features, partition="rows").description.row_arrays == {
        "x": True,
        "gamma": False,
        "out": True,
    }
    # reads the shape and other rows of `pos`: nothing proved, the call runs unpartitioned
    assert interop.op(kernels.interaction, partition="rows").description.row_arrays is None
    assert interop.op(kernels.neighbour, partition="rows").description.row_arrays is None


def test_fold_refused_naming_the_line(kernels):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    batch = jnp.asarray(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), device=jax_device("cpu"))
    interaction = interop.op(kernels.interaction, vmap_method="fold")
    with pytest.raises(
        interop.UnsupportedError,
        match=r"op 'interaction': vmap_method='fold' .* reads the shape of array 'pos' at .*promise_kernels.py:\d+: "
        r"`n = pos.shape\[0\]`.*vmap_method='loop'",
    ):
        jax.vmap(interaction)(batch)
    with pytest.raises(
        interop.UnsupportedError, match=r"other than by the first thread index array 'a' .*\(i \+ 1\) % 4"
    ):
        jax.vmap(interop.op(kernels.neighbour, vmap_method="fold"))(batch)
    # the same kernels batched with "loop" are right; a row-independent kernel folds
    loop = jax.vmap(interop.op(kernels.interaction))(batch)
    b = np.asarray(batch)
    ref = np.exp(-((b[:, :, None] - b[:, None, :]) ** 2)).sum(-1)
    np.testing.assert_allclose(np.asarray(loop), ref, rtol=1e-5)
    folded = jax.vmap(interop.op(kernels.square, vmap_method="fold"))(batch)
    np.testing.assert_allclose(np.asarray(folded), b * b, rtol=1e-6)


SHARDED = textwrap.dedent(
    """
    import os, json
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    import numpy as np
    import jax, jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import interop
    from promise_kernels import scale_features

    mesh = Mesh(np.array(jax.devices()), ("x",))
    op = interop.op(scale_features, partition="rows")
    results = {}
    for B, F in ((8, 8), (8, 3)):
        x = np.linspace(-1, 1, B * F).astype(np.float32).reshape(B, F)
        g = np.linspace(0.5, 2.0, F).astype(np.float32)
        xs = jax.device_put(jnp.asarray(x), NamedSharding(mesh, P("x")))
        gs = jax.device_put(jnp.asarray(g), NamedSharding(mesh, P()))
        fwd = jax.jit(op).lower(xs, gs).compile()
        out = fwd(xs, gs)
        grad = jax.jit(jax.grad(lambda a, b: jnp.sum(op(a, b)), argnums=(0, 1)))(xs, gs)
        results[f"{B}x{F}"] = {
            "gathers": "all-gather" in fwd.as_text(),
            "out_spec": [e for e in out.sharding.spec if e is not None],
            "err": float(np.abs(np.asarray(out) - g * x * x).max()),
            "grad_err": max(float(np.abs(np.asarray(grad[0]) - 2 * g * x).max()),
                            float(np.abs(np.asarray(grad[1]) - (x * x).sum(0)).max())),
        }
    print("RESULTS " + json.dumps(results))
    """
)


def test_rows_with_a_parameter_as_long_as_the_batch_under_sharded_jit(tmp_path):
    pytest.importorskip("jax")
    r = run_for_results(
        SHARDED,
        env={"XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"},
        cwd=tmp_path,
        modules={"promise_kernels": KERNELS},
    )
    for shape in ("8x8", "8x3"):  # B == F and B != F alike: x's rows sharded, gamma replicated
        assert r[shape]["err"] < 1e-5 and r[shape]["grad_err"] < 1e-4, r
        assert r[shape]["out_spec"] == ["x"] and not r[shape]["gathers"], r


def test_rows_of_a_kernel_handing_an_array_to_a_function_are_not_guessed():
    @wp.func
    def _first(a: wp.array(dtype=float), i: int):
        return a[i]

    @wp.kernel
    def through_func(a: wp.array(dtype=float), out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = _first(a, i)

    assert interop.op(through_func, partition="rows").description.row_arrays is None


@pytest.mark.parametrize("features", [8, 3], ids=["B==F", "B!=F"])
def test_dtensor_rows_strategy_replicates_what_the_rows_do_not_walk(kernels, features):
    """DTensor: the sharded strategy of a rows op shards x (and the output) and replicates gamma,
    also when gamma is as long as the batch; in the backward gamma's gradient is a partial sum."""
    torch = pytest.importorskip("torch")
    from adapters.torch.registration import _binding
    from adapters.torch.sharding import strategies

    op = interop.op(kernels.scale_features, partition="rows")
    b = _binding(op)
    x = torch.zeros(8, features, device="cpu")
    g = torch.zeros(features, device="cpu")
    is_tensor = lambda a: isinstance(a, torch.Tensor)  # noqa: E731
    fwd = strategies(b, "functional", (x, g), {}, is_tensor)
    assert fwd[1] == ([("S", 0)], [("S", 0), "R"] + [None] * (len(fwd[1][1]) - 2))
    out = torch.zeros(8, features, device="cpu")
    bwd = strategies(b, "backward", (x, g, out, out), {"needs": [True, True]}, is_tensor)
    assert bwd[1][0] == [("S", 0), "P"]
    assert bwd[1][1][:4] == [("S", 0), "R", ("S", 0), ("S", 0)]
