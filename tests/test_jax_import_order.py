"""An exported function runs in a process that describes its ops before importing JAX (issue 21,
row 5): a library module describes its ops, the user imports ``jax`` afterwards and deserializes.
Before the fix XLA failed with ``NOT_FOUND: No FFI handler registered for interop.<name>.fwd``: the
targets were registered only when an op was described with JAX already imported, or called."""

from __future__ import annotations

import json

import pytest
from _subprocess import run_script

pytest.importorskip("jax")
pytest.importorskip("flatbuffers", reason="jax.export serialization needs flatbuffers")

LIBRARY = """
import warp as wp
import interop


@wp.kernel
def scale_square(x: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = s * x[i] * x[i]


op = interop.op(scale_square, name="late_jax::scale_square")
"""

EXPORT = """
import sys
import jax, jax.numpy as jnp
from adapters import jax as interop_jax
from library import op

# uncommitted (JAX 0.10 cannot export the VJP of a function whose argument is committed to a device:
# "empty NamedSharding"), on the CPU all the same
with jax.default_device(jax.devices("cpu")[0]):
    x = jnp.linspace(-1, 1, 8, dtype=jnp.float32)
f = jax.jit(lambda x: op(x, 2.5))
exp = jax.export.export(f, disabled_checks=interop_jax.disabled_checks(op))(x)
open(sys.argv[1], "wb").write(exp.serialize(vjp_order=1))
"""

LOAD = """
import json, sys
import numpy as np

if sys.argv[2] == "library first":
    import library  # describes the op; jax is not imported yet
    assert "jax" not in sys.modules
    import jax
else:
    import jax
    import library
import jax.numpy as jnp

exp = jax.export.deserialize(bytearray(open(sys.argv[1], "rb").read()))  # before any call of the op
with jax.default_device(jax.devices("cpu")[0]):
    x = jnp.linspace(-1, 1, 8, dtype=jnp.float32)
y = exp.call(x)
g = jax.grad(lambda x: jnp.sum(exp.call(x)))(x)
print("RESULTS " + json.dumps({"y": np.asarray(y).tolist(), "g": np.asarray(g).tolist()}))
"""


@pytest.mark.parametrize("order", ["library first", "jax first"])
def test_exported_function_runs_whichever_is_imported_first(tmp_path, order):
    env = {"JAX_PLATFORMS": "cpu"}
    path = str(tmp_path / "f.bin")
    run_script(EXPORT, path, env=env, cwd=tmp_path, modules={"library": LIBRARY})
    r = run_script(LOAD, path, order, env=env, cwd=tmp_path, modules={"library": LIBRARY})
    res = json.loads([ln for ln in r.stdout.splitlines() if ln.startswith("RESULTS ")][-1][len("RESULTS ") :])
    import numpy as np

    x = np.linspace(-1, 1, 8, dtype=np.float32)
    np.testing.assert_allclose(res["y"], 2.5 * x * x, rtol=1e-6)
    np.testing.assert_allclose(res["g"], 5.0 * x, rtol=1e-6)


def test_importing_jax_after_ops_exist_starts_no_backend():
    """The adapter loads right after ``import jax``: it must leave JAX's backends unstarted, so the
    user can still configure them (JAX refuses ``jax_num_cpu_devices`` once they started)."""
    r = run_script(
        """
        import sys
        import library
        import jax
        assert "adapters.jax" in sys.modules  # loaded by the import hook
        jax.config.update("jax_num_cpu_devices", 3)
        print("DEVICES", len(jax.devices("cpu")))
        """,
        env={"JAX_PLATFORMS": "cpu"},
        modules={"library": LIBRARY},
    )
    assert "DEVICES 3" in r.stdout, r.stdout
