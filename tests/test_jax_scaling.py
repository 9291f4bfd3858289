"""JAX at scale: shard_map, sharded vmap batches, row-partitioned ops, and jax.export round trips.

Sharding runs in a subprocess with four CPU host devices (the device count is fixed when JAX
starts). Each case is checked on the compiled HLO (which collectives XLA inserted), on the
output's sharding, and on values against the unsharded call and a NumPy reference.
"""

from __future__ import annotations

import os
import textwrap

import numpy as np
import pytest
from _devices import jax_device
from _subprocess import run_for_results

pytest.importorskip("jax")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

KERNELS = textwrap.dedent(
    """
    import warp as wp
    wp.config.quiet = True
    import interop

    @wp.kernel
    def scale_square(a: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = s * a[i] * a[i]

    @wp.kernel
    def weighted(a: wp.array(dtype=float), w: wp.array(dtype=float), out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = w[0] * a[i] + w[1] * a[i] * a[i]

    @wp.kernel
    def row_norm(v: wp.array(dtype=wp.vec3), s: float, out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = s * wp.dot(v[i], v[i])

    @wp.kernel
    def by_column(a: wp.array2d(dtype=float), out: wp.array2d(dtype=float)):
        i, j = wp.tid()
        out[i, j] = a[i, j] * a[i, j] * float(j + 1)

    @wp.kernel
    def cube_2d(a: wp.array2d(dtype=float), out: wp.array2d(dtype=float)):
        # each thread touches only its own element, whatever its index (elementwise)
        i, j = wp.tid()
        out[i, j] = a[i, j] * a[i, j] * a[i, j]
    """
)

SHARDING = textwrap.dedent(
    """
    import os, json
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    import numpy as np
    import jax, jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import interop
    from kernels import scale_square, weighted, row_norm, by_column, cube_2d

    assert jax.device_count() == 4, jax.devices()
    mesh = Mesh(np.array(jax.devices()), ("x",))
    mesh2 = Mesh(np.array(jax.devices()).reshape(2, 2), ("a", "b"))
    op = interop.op(scale_square)
    wop = interop.op(weighted)
    rows = interop.op(scale_square, partition="rows")
    rows_vec = interop.op(row_norm, partition="rows")
    rows_2d = interop.op(by_column, partition="rows")
    elem_2d = interop.op(cube_2d, partition="elementwise")
    COLLECTIVES = ("all-gather", "all-to-all", "all-reduce", "collective-permute", "reduce-scatter")
    results = {}

    def put(a, spec, m=mesh):
        return jax.device_put(jnp.asarray(a), NamedSharding(m, spec))

    def spec_of(o):  # the output's PartitionSpec as JSON, trailing replicated dims dropped
        spec = [e if e is None or isinstance(e, str) else list(e) for e in o.sharding.spec]
        while spec and spec[-1] is None:
            spec.pop()
        return spec

    def case(name, f, args, reference):
        compiled = jax.jit(f).lower(*args).compile()
        hlo = compiled.as_text()
        out = compiled(*args)
        outs = out if isinstance(out, tuple) else (out,)
        refs = reference if isinstance(reference, tuple) else (reference,)
        results[name] = {
            "collectives": sorted(c for c in COLLECTIVES if c in hlo),
            "out_specs": [spec_of(o) for o in outs],
            "shards": [sorted(str(s.data.shape) for s in o.addressable_shards) for o in outs],
            "err": max(float(np.max(np.abs(np.asarray(o) - np.asarray(r)))) for o, r in zip(outs, refs)),
        }

    a = np.linspace(-1, 1, 20).astype(np.float32)
    xa = put(a, P("x"))
    w = np.array([0.5, -2.0], np.float32)
    # -- 1. shard_map as users write it (check_vma=True, the default) -----------------------
    sm = jax.shard_map(lambda b: op(b, 2.0), mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    case("shard_map_forward", sm, (xa,), 2.0 * a * a)
    case("shard_map_grad", jax.grad(lambda b: jnp.sum(sm(b))), (xa,), 4.0 * a)
    smw = jax.shard_map(lambda b, v: wop(b, v), mesh=mesh, in_specs=(P("x"), P()), out_specs=P("x"))
    case("shard_map_replicated_forward", smw, (xa, put(w, P())), w[0] * a + w[1] * a * a)
    case(
        "shard_map_replicated_grad",
        jax.grad(lambda b, v: jnp.sum(smw(b, v)), argnums=(0, 1)),
        (xa, put(w, P())),
        (w[0] + 2 * w[1] * a, np.array([a.sum(), (a * a).sum()], np.float32)),
    )
    # -- 2. vmap batch dimension sharded over the mesh --------------------------------------
    B = np.linspace(-2, 2, 8 * 6).astype(np.float32).reshape(8, 6)
    xb = put(B, P("x"))
    vm = jax.vmap(lambda b: op(b, 2.0))
    case("vmap_forward", vm, (xb,), 2.0 * B * B)
    case("vmap_grad", jax.grad(lambda b: jnp.sum(vm(b))), (xb,), 4.0 * B)
    vmw = jax.vmap(lambda b, v: wop(b, v), in_axes=(0, None))
    case("vmap_unbatched_operand_forward", vmw, (xb, put(w, P())), w[0] * B + w[1] * B * B)
    case("vmap_unbatched_operand_grad_x", jax.grad(lambda b, v: jnp.sum(vmw(b, v))), (xb, put(w, P())),
         w[0] + 2 * w[1] * B)
    # -- 3. row-parallel ops under jit --------------------------------------------------------
    case("rows_forward", lambda b: rows(b, 2.0), (xa,), 2.0 * a * a)
    case("rows_grad", jax.grad(lambda b: jnp.sum(rows(b, 2.0))), (xa,), 4.0 * a)
    V = np.linspace(-1, 1, 16 * 3).astype(np.float32).reshape(16, 3)
    xv = put(V, P("x", None))
    case("rows_vec3_forward", lambda v: rows_vec(v, 0.5), (xv,), 0.5 * (V * V).sum(1))
    case("rows_vec3_grad", jax.grad(lambda v: jnp.sum(rows_vec(v, 0.5))), (xv,), V)
    M = np.linspace(-1, 1, 8 * 5).astype(np.float32).reshape(8, 5)
    col = np.arange(1, 6, dtype=np.float32)
    xm = put(M, P(("a", "b"), None), mesh2)
    case("rows_2d_launch_2d_mesh_forward", rows_2d, (xm,), M * M * col)
    case("rows_2d_launch_2d_mesh_grad", jax.grad(lambda m: jnp.sum(rows_2d(m))), (xm,), 2 * M * col)
    case("rows_traced_scalar_forward", lambda b, s: rows(b, s), (xa, put(np.float32(3.0), P())), 3.0 * a * a)
    # -- partition="elementwise": any launch dimension may be split ----------------------------
    E = np.linspace(-1, 1, 8 * 8).astype(np.float32).reshape(8, 8)
    cole = np.arange(1, 9, dtype=np.float32)
    xe = put(E, P(None, "x"))
    case("elementwise_columns_forward", elem_2d, (xe,), E**3)
    case("elementwise_columns_grad", jax.grad(lambda m: jnp.sum(elem_2d(m))), (xe,), 3 * E * E)
    xe2 = put(E, P("a", "b"), mesh2)
    case("elementwise_2d_mesh_forward", elem_2d, (xe2,), E**3)
    case("elementwise_2d_mesh_grad", jax.grad(lambda m: jnp.sum(elem_2d(m))), (xe2,), 3 * E * E)
    # a rows op with its columns sharded: not what it declared, so gathered (and correct)
    case("rows_columns_sharded_forward", rows_2d, (xe,), E * E * cole)
    # -- undeclared: today's behaviour (correct, gathered) ------------------------------------
    case("undeclared_forward", lambda b: op(b, 2.0), (xa,), 2.0 * a * a)
    print("RESULTS " + json.dumps(results))
    """
)

EXPORT = textwrap.dedent(
    """
    import sys, json
    import numpy as np
    import jax, jax.numpy as jnp
    import interop
    from adapters import jax as interop_jax
    from kernels import scale_square, weighted

    op = interop.op(scale_square)
    wop = interop.op(weighted)
    with jax.default_device(jax.devices("cpu")[0]):  # uncommitted: the shard_map case shards `a`
        a = jnp.linspace(-1, 1, 12, dtype=jnp.float32)
        w = jnp.array([0.5, -2.0], jnp.float32)
        B = jnp.linspace(-2, 2, 3 * 4, dtype=jnp.float32).reshape(3, 4)
    functions = {
        "forward": (lambda x: op(x, 2.5), (a,)),
        "grad": (jax.grad(lambda x, v: jnp.sum(wop(x, v) ** 2), argnums=(0, 1)), (a, w)),
        "vmap": (jax.vmap(lambda x: op(x, 1.5)), (B,)),
        "vmap_grad": (jax.grad(lambda x: jnp.sum(jax.vmap(lambda r: op(r, 1.5))(x))), (B,)),
    }
    # a sharded function exports through shard_map (four devices in both processes)
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    mesh = Mesh(np.array(jax.devices()), ("x",))
    xs = jax.device_put(a, NamedSharding(mesh, P("x")))
    sm = jax.shard_map(lambda x: op(x, 2.5), mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    functions["shard_map"] = (sm, (xs,))
    functions["shard_map_grad"] = (jax.grad(lambda x: jnp.sum(sm(x))), (xs,))
    mode, folder = sys.argv[1], sys.argv[2]
    out = {"names": [op.name, wop.name], "targets": interop_jax.targets(op, wop), "values": {}}
    for key, (f, args) in functions.items():
        path = f"{folder}/{key}.bin"
        if mode == "export":
            exp = jax.export.export(jax.jit(f), disabled_checks=interop_jax.disabled_checks(op, wop))(*args)
            # "forward" and "vmap" are serialized with their VJP: differentiable once loaded
            open(path, "wb").write(exp.serialize(vjp_order=int(key in ("forward", "vmap"))))
            out.setdefault("module_targets", []).extend(
                sorted({l.split("custom_call @")[1].split("(")[0] for l in exp.mlir_module().splitlines()
                        if "custom_call @" in l}))
        else:
            exp = jax.export.deserialize(bytearray(open(path, "rb").read()))
        res = exp.call(*args)
        res = res if isinstance(res, tuple) else (res,)
        direct = jax.jit(f)(*args)
        direct = direct if isinstance(direct, tuple) else (direct,)
        out["values"][key] = [np.asarray(r).tolist() for r in res]
        assert all(np.array_equal(np.asarray(r), np.asarray(d)) for r, d in zip(res, direct)), key
        if key in ("forward", "vmap"):  # jax.grad of the deserialized function
            ct = jax.grad(lambda *xs: jnp.sum(exp.call(*xs) ** 2))(*args)
            direct_ct = jax.grad(lambda *xs: jnp.sum(f(*xs) ** 2))(*args)
            assert np.array_equal(np.asarray(ct), np.asarray(direct_ct)), key
            out["values"][key + "_call_grad"] = np.asarray(ct).tolist()
    print("RESULTS " + json.dumps(out))
    """
)


def _run(tmp_path, script: str, *argv: str, devices: int = 1, platform: str | None = "cpu") -> dict:
    env = {"XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    if platform:
        env["JAX_PLATFORMS"] = platform
    return run_for_results(script, *argv, env=env, cwd=tmp_path, modules={"kernels": KERNELS})


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("sharding"), SHARDING, devices=4)


NO_GATHER = ("all-gather", "all-to-all")

# case -> (collectives that may appear, the expected spec of each output)
CASES = {
    # 1. shard_map with check_vma=True: per-shard calls, nothing moves
    "shard_map_forward": ((), [["x"]]),
    "shard_map_grad": ((), [["x"]]),
    "shard_map_replicated_forward": ((), [["x"]]),
    # the gradient of a replicated weight is the sum of the per-shard gradients: one all-reduce
    "shard_map_replicated_grad": (("all-reduce",), [["x"], []]),
    # 2. vmap batch sharded: each device runs its slice of the batch
    "vmap_forward": ((), [["x"]]),
    "vmap_grad": ((), [["x"]]),
    "vmap_unbatched_operand_forward": ((), [["x"]]),
    "vmap_unbatched_operand_grad_x": ((), [["x"]]),
    # 3. partition="rows": XLA splits the launch
    "rows_forward": ((), [["x"]]),
    "rows_grad": ((), [["x"]]),
    "rows_vec3_forward": ((), [["x"]]),
    "rows_vec3_grad": ((), [["x"]]),
    "rows_2d_launch_2d_mesh_forward": ((), [[["a", "b"]]]),
    "rows_2d_launch_2d_mesh_grad": ((), [[["a", "b"]]]),
    "rows_traced_scalar_forward": ((), [["x"]]),
    # partition="elementwise": split along any launch dimension, on one or two mesh axes
    "elementwise_columns_forward": ((), [[None, "x"]]),
    "elementwise_columns_grad": ((), [[None, "x"]]),
    "elementwise_2d_mesh_forward": ((), [["a", "b"]]),
    "elementwise_2d_mesh_grad": ((), [["a", "b"]]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_sharded_without_gather(sharded, name):
    allowed, specs = CASES[name]
    r = sharded[name]
    assert r["err"] < 1e-5, r
    assert not set(r["collectives"]) - set(allowed), f"{name}: compiled HLO has {r['collectives']}"
    assert not set(r["collectives"]) & set(NO_GATHER), r
    assert r["out_specs"] == specs, r
    for shapes, spec in zip(r["shards"], specs):
        if spec != []:
            assert len(shapes) == 4 and len(set(shapes)) == 1, shapes  # four equal shards


@pytest.mark.parametrize("name", ["undeclared_forward", "rows_columns_sharded_forward"])
def test_undeclared_split_is_correct_and_gathers(sharded, name):
    """Split along a dimension the op did not declare (no partition=, or a rows op's columns): XLA
    cannot split the call, it gathers the input (documented cost)."""
    r = sharded[name]
    assert r["err"] < 1e-5
    assert "all-gather" in r["collectives"], r
    assert r["out_specs"] == [[]], r


def test_export_round_trip_in_a_fresh_process(tmp_path):
    pytest.importorskip("flatbuffers", reason="jax.export serialization needs flatbuffers")
    first = _run(tmp_path, EXPORT, "export", str(tmp_path), devices=4)
    second = _run(tmp_path, EXPORT, "load", str(tmp_path), devices=4)  # a fresh process describes the ops again
    assert first["names"] == second["names"]
    assert first["targets"] == second["targets"]
    assert set(first["module_targets"]) <= set(first["targets"]), first["module_targets"]
    assert any(t.endswith(".bwd") for t in first["module_targets"])  # the gradient's adjoint launch
    assert first["values"] == second["values"]
    a = np.linspace(-1, 1, 12, dtype=np.float32)
    w = np.array([0.5, -2.0], np.float32)
    np.testing.assert_allclose(second["values"]["forward"][0], 2.5 * a * a, rtol=1e-5, atol=1e-7)
    y = w[0] * a + w[1] * a * a  # d/dx, d/dw of sum(y**2)
    np.testing.assert_allclose(second["values"]["grad"][0], 2 * y * (w[0] + 2 * w[1] * a), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(second["values"]["grad"][1], [np.sum(2 * y * a), np.sum(2 * y * a * a)], rtol=1e-5)
    B = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(second["values"]["vmap"][0], 1.5 * B * B, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(second["values"]["vmap_grad"][0], 3.0 * B, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(second["values"]["shard_map"][0], 2.5 * a * a, rtol=1e-5, atol=1e-7)
    y = 2.5 * a * a  # d/dx sum(y**2) through the loaded function's VJP
    np.testing.assert_allclose(second["values"]["forward_call_grad"], 2 * y * 5.0 * a, rtol=1e-5, atol=1e-6)
    yb = 1.5 * B * B
    np.testing.assert_allclose(second["values"]["vmap_call_grad"], 2 * yb * 3.0 * B, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(second["values"]["shard_map_grad"][0], 5.0 * a, rtol=1e-5, atol=1e-7)


# ---- in process: the configuration attribute is enough to rebuild a launch ---------------
def test_static_values_survive_the_configuration_attribute():
    import warp as wp

    from adapters import jax as interop_jax

    values = [True, 3, -2.5, float("inf"), 1e-300, np.float32(0.1), np.int64(7), (1, 2.5), {"out": (4, 3)}]
    for v in values:
        back = interop_jax._unjson(interop_jax._jsonable(v))
        assert type(back) is type(v) and back == v, (v, back)
    nan = interop_jax._unjson(interop_jax._jsonable(float("nan")))
    assert isinstance(nan, float) and np.isnan(nan)
    assert interop_jax._unjson(interop_jax._jsonable(wp.vec3(1.0, 2.0, 3.0))) == (1.0, 2.0, 3.0)
    with pytest.raises(TypeError, match="cannot record the static value"):
        interop_jax._jsonable(object())


def test_handler_rebuilt_from_the_configuration_alone():
    """What a fresh process does for a deserialized module: no cached entry, no cached handler."""
    import jax
    import jax.numpy as jnp
    import warp as wp

    import interop
    from adapters import jax as interop_jax

    @wp.kernel
    def shift(v: wp.array(dtype=wp.vec3), d: wp.vec3, s: float, out: wp.array(dtype=wp.vec3)):
        i = wp.tid()
        out[i] = s * v[i] + d

    op = interop.op(shift)
    v = jnp.asarray(np.arange(12, dtype=np.float32).reshape(4, 3), device=jax_device("cpu"))
    f = jax.jit(jax.grad(lambda v: jnp.sum(op(v, wp.vec3(1.0, 2.0, 3.0), 0.5) ** 2)))
    expected = f(v)
    jop = op.bound("jax")
    again = jax.jit(jax.grad(lambda v: jnp.sum(op(v, wp.vec3(1.0, 2.0, 3.0), 0.5) ** 2)))
    lowered = again.lower(v).compile()
    for direction in ("fwd", "bwd"):
        interop_jax._targets[interop_jax._target(op.description, direction)].handlers.clear()
    jop._by_config.clear()
    np.testing.assert_array_equal(np.asarray(lowered(v)), np.asarray(expected))
    assert len(jop._by_config) == 1  # rebuilt by the handler from the attribute
    d = np.array([1.0, 2.0, 3.0], np.float32)
    np.testing.assert_allclose(np.asarray(expected), 2 * (0.5 * np.asarray(v) + d) * 0.5, rtol=1e-6)


# ---- CUDA: the kernel targets are command-buffer compatible (XLA captures them in CUDA graphs) ----
CUDA_GRAPHS = textwrap.dedent(
    """
    import os, sys, json
    os.environ["XLA_FLAGS"] = "--xla_gpu_enable_command_buffer=FUSION,CUSTOM_CALL --xla_gpu_graph_min_graph_size=1"
    import numpy as np
    import jax, jax.numpy as jnp
    import interop
    from adapters import jax as interop_jax
    from kernels import scale_square, weighted

    if not any(d.platform == "gpu" for d in jax.devices()):
        print("RESULTS " + json.dumps({"skip": "JAX has no CUDA backend here"}))
        raise SystemExit(0)
    # count the Python handler's runs: a call XLA recorded into a CUDA graph is replayed without it
    runs, run = [0], interop_jax._Handler.cuda

    def counted(self, p):
        runs[0] += 1
        return run(self, p)

    interop_jax._Handler.cuda = counted
    if sys.argv[1:] == ["general"]:  # the general handler path only (no generated per-call code)
        interop_jax._Handler._make_cuda = lambda self, device: None
    op = interop.op(scale_square)
    wop = interop.op(weighted)
    f = jax.jit(lambda x, w: wop(op(x, 2.0) + 1.0, w))
    g = jax.jit(jax.grad(lambda x, w: jnp.sum(wop(op(x, 2.0), w)), argnums=(0, 1)))
    errs = []
    for k in range(4):  # the first run records the graph, the others replay it with new data
        x = np.linspace(-1, 1, 4096).astype(np.float32) * (k + 1)
        w = np.array([0.5, -1.0 + k], np.float32)
        t = 2 * x * x + 1
        errs.append(float(np.max(np.abs(np.asarray(f(x, w)) - (w[0] * t + w[1] * t * t)))))
        gx, gw = g(x, w)
        s = 2 * x * x
        errs.append(float(np.max(np.abs(np.asarray(gx) - (w[0] + 2 * w[1] * s) * 4 * x))))
        errs.append(float(np.max(np.abs(np.asarray(gw) - [s.sum(), (s * s).sum()]) / (1 + np.abs(s * s).sum()))))
    # the same device buffers again: a replayed graph runs the kernels without the handler
    gpu = jax.devices("gpu")[0]
    xd, wd = jax.device_put(x, gpu), jax.device_put(w, gpu)
    jax.block_until_ready(f(xd, wd))
    before = runs[0]
    for _ in range(3):
        y = f(xd, wd)
        errs.append(float(np.max(np.abs(np.asarray(y) - (w[0] * t + w[1] * t * t)))))
        del y
    replayed = runs[0] == before
    hlo = f.lower(xd, wd).compile().as_text()
    target = interop_jax.targets(op)[0]
    in_buffer = any("command_buffer" in block and target in block for block in hlo.split("\\n\\n"))
    seen = [ln.strip()[:200] for ln in hlo.splitlines() if "command_buffer" in ln or "custom-call" in ln][:8]
    print("RESULTS " + json.dumps({"errs": errs, "replayed_without_handler": replayed, "hlo_command_buffer": in_buffer,
                                   "handler_runs": runs[0], "hlo": seen}))
    """
)


@pytest.mark.cuda
def test_cuda_graphs_capture_the_launches(tmp_path):
    """Values stay right when XLA replays its CUDA graph with new data, and XLA did put the call in
    one: the handler did not run on replays with the same buffers (or the optimized HLO shows the
    call inside a command-buffer computation)."""
    r = _run(tmp_path, CUDA_GRAPHS, platform=None)
    if "skip" in r:
        from _cuda import require_cuda

        require_cuda("jax")
    assert max(r["errs"]) < 1e-3, r
    if not (r["replayed_without_handler"] or r["hlo_command_buffer"]):
        # which path lost the graph: the same run with the general handler only
        general = _run(tmp_path, CUDA_GRAPHS, "general", platform=None)
        raise AssertionError(f"no CUDA graph: {r}; with the general handler path: {general}")


CUDA_DESERIALIZED = textwrap.dedent(
    """
    import os, sys, json
    os.environ["XLA_FLAGS"] = "--xla_gpu_enable_command_buffer=FUSION,CUSTOM_CALL --xla_gpu_graph_min_graph_size=1"
    import numpy as np
    import jax, jax.numpy as jnp
    import warp as wp
    import interop
    from adapters import jax as interop_jax
    from interop._warp_compat import module_loaded
    from kernels import scale_square

    if not any(d.platform == "gpu" for d in jax.devices()):
        print("RESULTS " + json.dumps({"skip": "JAX has no CUDA backend here"}))
        raise SystemExit(0)
    op = interop.op(scale_square)
    x = jax.device_put(np.linspace(-1, 1, 4096).astype(np.float32), jax.devices("gpu")[0])
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "export":
        exp = jax.export.export(jax.jit(lambda a: op(a, 2.0)), disabled_checks=interop_jax.disabled_checks(op))(x)
        open(path, "wb").write(exp.serialize())
        print("RESULTS " + json.dumps({}))
        raise SystemExit(0)
    exp = jax.export.deserialize(bytearray(open(path, "rb").read()))
    device = wp.get_device("cuda:0")
    loaded_before = module_loaded(scale_square, device)
    compiled = jax.jit(exp.call).lower(x).compile()  # XLA instantiates the call here
    loaded_at_compile = module_loaded(scale_square, device)
    y = np.asarray(compiled(x))
    err = float(np.max(np.abs(y - 2.0 * np.asarray(x) ** 2)))
    print("RESULTS " + json.dumps({"before": loaded_before, "at_compile": loaded_at_compile, "err": err}))
    """
)


@pytest.mark.cuda
def test_deserialized_call_loads_the_module_before_its_first_run(tmp_path):
    """A process that only deserialized an exported function never traced the op: XLA's instantiate
    stage loads the Warp module, so the first run (which XLA may record into a CUDA graph) loads
    nothing (loading during a capture needs a CUDA 12.3 driver)."""
    pytest.importorskip("flatbuffers", reason="jax.export serialization needs flatbuffers")
    path = str(tmp_path / "f.bin")
    r = _run(tmp_path, CUDA_DESERIALIZED, "export", path, platform=None)
    if "skip" in r:
        from _cuda import require_cuda

        require_cuda("jax")
    r = _run(tmp_path, CUDA_DESERIALIZED, "load", path, platform=None)
    assert r == {"before": False, "at_compile": True, "err": r["err"]} and r["err"] < 1e-5, r


def test_docs_scaling_example_runs(tmp_path):
    import re

    section = open(os.path.join(ROOT, "docs", "scaling.md")).read()
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    code += textwrap.dedent(
        """
        import json
        spec = lambda a: [e for e in a.sharding.spec if e is not None]
        r = np.arange(16.0)
        ok = [np.allclose(y, 2 * r * r), np.allclose(g, 4 * r), np.allclose(yr, 2 * r * r), np.allclose(gr, 4 * r),
              np.allclose(yb, 2 * np.arange(32.0).reshape(4, 8) ** 2), np.allclose(y2, 2 * r * r)]
        print("RESULTS " + json.dumps({"ok": ok, "specs": [spec(yb), spec(yr), spec(gr)]}))
        """
    )
    r = _run(tmp_path, code, devices=4)
    assert all(r["ok"]), r
    assert r["specs"] == [["x"], ["x"], ["x"]], r
