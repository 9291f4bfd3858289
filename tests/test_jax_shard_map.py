"""shard_map over four CPU devices, in a subprocess (the device count is fixed when JAX starts)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("jax")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent(
    """
    import os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    import numpy as np
    import jax, jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import warp as wp
    wp.config.quiet = True
    import interop

    @wp.kernel
    def scale_square(a: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = s * a[i] * a[i]

    op = interop.op(scale_square)
    assert jax.device_count() == 4, jax.devices()
    mesh = Mesh(np.array(jax.devices()), ("x",))
    sharding = NamedSharding(mesh, P("x"))
    x = jax.device_put(jnp.arange(20, dtype=jnp.float32), sharding)

    f = jax.jit(jax.shard_map(lambda a: op(a, 2.0), mesh=mesh, in_specs=P("x"), out_specs=P("x")))
    y = f(x)
    assert y.sharding.is_equivalent_to(x.sharding, 1), (y.sharding, x.sharding)
    assert len(y.addressable_shards) == 4
    assert {s.device for s in y.addressable_shards} == set(jax.devices())
    np.testing.assert_allclose(np.asarray(y), 2.0 * np.arange(20) ** 2)

    g = jax.jit(jax.grad(lambda a: jnp.sum(
        jax.shard_map(lambda b: op(b, 2.0), mesh=mesh, in_specs=P("x"), out_specs=P("x"))(a))))(x)
    assert g.sharding.is_equivalent_to(x.sharding, 1), g.sharding
    np.testing.assert_allclose(np.asarray(g), 4.0 * np.arange(20))
    print("SHARD_MAP_OK")
    """
)
# check_vma stays at its default (True): the op's results vary over the mesh axes its operands
# vary over, and gradients are typed like their primal inputs.


def test_shard_map_forward_and_grad_on_four_cpu_devices(tmp_path):
    script = tmp_path / "shard_map_check.py"  # Warp reads kernel source from a file
    script.write_text(SCRIPT)
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    env["JAX_PLATFORMS"] = "cpu"
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "SHARD_MAP_OK" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
