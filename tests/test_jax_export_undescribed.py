"""A ``jax.export``ed function loaded in a process that has not described its op (issue 54): XLA's
own error is ``NOT_FOUND: No FFI handler registered for interop....``; ``adapters.jax.deserialize``
(or ``check_exported``) refuses it first, naming the op by kernel name, and once the op is described
the same bytes load and run."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
from _subprocess import run_for_results

pytest.importorskip("jax")
pytest.importorskip("flatbuffers", reason="jax.export serialization needs flatbuffers")

KERNELS = textwrap.dedent(
    """
    import warp as wp
    wp.config.quiet = True

    @wp.kernel
    def rbf_conv(x: wp.array(dtype=float), out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = wp.exp(-x[i] * x[i])
    """
)

SCRIPT = textwrap.dedent(
    """
    import sys, json
    import numpy as np
    import jax, jax.numpy as jnp
    import interop
    from adapters import jax as interop_jax

    mode, path = sys.argv[1], sys.argv[2]
    x = jnp.asarray(np.linspace(-1, 1, 6, dtype=np.float32), device=jax.devices("cpu")[0])
    out = {}
    if mode == "export":
        from kernels import rbf_conv
        op = interop.op(rbf_conv)
        exp = jax.export.export(jax.jit(op), disabled_checks=interop_jax.disabled_checks(op))(x)
        open(path, "wb").write(exp.serialize())
        out["name"] = op.name
    else:
        blob = bytearray(open(path, "rb").read())
        raw = jax.export.deserialize(blob)
        try:
            raw.call(x)
        except Exception as e:  # XLA's own words
            out["xla"] = str(e)[:300]
        try:
            interop_jax.deserialize(blob)
        except interop.UnsupportedError as e:
            out["ours"] = str(e)
        from kernels import rbf_conv
        op = interop.op(rbf_conv)
        out["missing_after"] = interop_jax.missing_targets(raw)
        out["values"] = np.asarray(interop_jax.deserialize(blob).call(x)).tolist()
    print("RESULTS " + json.dumps(out))
    """
)


def test_loading_before_describing_names_the_kernel(tmp_path):
    env = {"JAX_PLATFORMS": "cpu"}
    path = str(tmp_path / "f.bin")
    first = run_for_results(SCRIPT, "export", path, env=env, cwd=tmp_path, modules={"kernels": KERNELS})
    second = run_for_results(SCRIPT, "load", path, env=env, cwd=tmp_path, modules={"kernels": KERNELS})
    assert "No FFI handler registered" in second["xla"], second
    msg = second["ours"]
    name = first["name"]  # interop::rbf_conv_<hash>_<hash>
    assert f"{name} (kernel 'rbf_conv'" in msg and "interop.op(<kernel>" in msg, msg
    assert second["missing_after"] == []
    x = np.linspace(-1, 1, 6, dtype=np.float32)
    np.testing.assert_allclose(second["values"], np.exp(-x * x), rtol=1e-6)
