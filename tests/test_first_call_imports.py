"""Issue 44: a plain eager call imports no framework machinery it does not use, and builds no Warp
module it does not launch; what torch.compile, DTensor or SOT need is set up when they are imported.

Each test runs in a fresh process (``_subprocess.run_for_results``): what a module import costs is
only visible in a process that has not paid it yet. A heavy module the framework's own import
already brings in (some torch builds import ``torch.distributed``) is not ours to avoid: each
child records what the framework's import left and only modules new since then count.
"""

import importlib.util
import re

import pytest
from _subprocess import run_for_results, run_script


def _needs(name: str):
    return pytest.mark.skipif(importlib.util.find_spec(name) is None, reason=f"{name} not installed")


# the child's common part: the framework's import, then the op, then what the calls imported
PRELUDE = """
import json, sys
{imp}
framework_only = set(sys.modules)
import warp as wp
import interop
from guide_kernels import saxpy

op = interop.op(saxpy)
"""

EPILOGUE = """
heavy = {heavy!r}
print("RESULTS " + json.dumps({{
    "imported": sorted(m for m in heavy if m in sys.modules and m not in framework_only),
    "already": sorted(m for m in heavy if m in framework_only),
}}))
"""

# what Warp prints for each module it loads or builds (wp.config.quiet stays False in these children)
MODULE_LOAD = re.compile(r"^Module (\S+) \S+ load on device", re.M)


def _run(imp: str, calls: str, heavy: tuple[str, ...]) -> tuple[dict, list[str]]:
    code = PRELUDE.format(imp=imp) + calls + EPILOGUE.format(heavy=heavy)
    p = run_script(code, env={"WARP_INTEROP_QUIET": "1"})
    import json

    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULTS ")]
    assert lines, p.stdout[-3000:] + p.stderr[-3000:]
    return json.loads(lines[-1][len("RESULTS ") :]), MODULE_LOAD.findall(p.stdout)


TORCH_HEAVY = (
    "torch._dynamo",
    "torch._inductor",
    "torch.distributed.tensor",
    "torch.onnx",
    "torch.export",
    "torch._numpy",
)


@_needs("torch")
def test_plain_eager_torch_call_imports_no_compiler_or_distributed_machinery():
    out, loads = _run(
        "import torch",
        """
x = torch.ones(4, requires_grad=True)
y = torch.ones(4)
op(x, y, 2.0).sum().backward()                          # forward and backward, eager
a = torch.tensor(2.0, requires_grad=True)
op(x, y, a).sum().backward()                            # a scalar's gradient: another operator
with torch.no_grad():
    op(x, y, 3.0)
assert x.grad.tolist() == [4.0] * 4 and float(a.grad) == 4.0
""",
        TORCH_HEAVY,
    )
    assert out["imported"] == [], f"a plain eager torch call imported {out['imported']}"
    # the kernel's own module serves the forward and Warp's adjoint; the scalar's gradient has its own
    assert len(loads) == 2 and "saxpy" not in loads[0], loads
    assert not any("tangent" in m for m in loads), loads


JAX_HEAVY = (
    "jax.export",
    "jax.extend",
    "jax.experimental.shard_map",
    "jax.experimental.custom_partitioning",
    "jax._src.pallas",
)


@_needs("jax")
def test_plain_jax_calls_import_no_export_or_sharding_machinery():
    out, loads = _run(
        "import jax, jax.numpy as jnp",
        """
cpu = jax.devices("cpu")[0]
x = jax.device_put(jnp.ones(4), cpu)
y = jax.device_put(jnp.ones(4), cpu)
r1 = op(x, y, 2.0)                                      # eager
r2 = jax.jit(lambda a, b: op(a, b, 2.0))(x, y)          # jit
g = jax.grad(lambda a: op(a, y, 2.0).sum())(x)          # grad
assert r1.tolist() == r2.tolist() == [3.0] * 4 and g.tolist() == [2.0] * 4
""",
        JAX_HEAVY,
    )
    assert out["imported"] == [], f"plain JAX calls imported {out['imported']}"
    assert not any("tangent" in m for m in loads), loads


PADDLE_HEAVY = ("paddle.jit.sot", "paddle.jit.dy2static.program_translator", "paddle.distributed.auto_parallel")


@_needs("paddle")
def test_plain_eager_paddle_call_imports_no_static_graph_machinery():
    out, loads = _run(
        "import paddle",
        """
x = paddle.ones([4]); x.stop_gradient = False
y = paddle.ones([4])
op(x, y, 2.0).sum().backward()
assert x.grad.numpy().tolist() == [2.0] * 4
""",
        PADDLE_HEAVY,
    )
    assert out["imported"] == [], f"a plain eager Paddle call imported {out['imported']}"
    assert len(loads) == 1, loads


def test_numpy_call_imports_no_masked_arrays():
    out, loads = _run(
        "import numpy as np",
        """
r = op(np.ones(4, np.float32), np.ones(4, np.float32), 2.0)
assert r.tolist() == [3.0] * 4
""",
        ("numpy.ma", "torch", "jax", "paddle"),
    )
    assert out["imported"] == [], out
    assert len(loads) == 1, loads


@_needs("paddle")
def test_op_called_eagerly_before_sot_loads_is_a_graph_break_under_to_static():
    """The SOT registration waits for SOT's import: an op described and called before any
    ``to_static`` still runs eagerly between compiled segments, gradients included."""
    out = run_for_results(
        """
        import json, sys
        import paddle
        import warp as wp
        import interop
        from guide_kernels import saxpy

        op = interop.op(saxpy)
        x = paddle.ones([3]); x.stop_gradient = False
        op(x, paddle.ones([3]), 2.0)
        before = "paddle.jit.sot" in sys.modules

        @paddle.jit.to_static(full_graph=False)
        def f(a, b):
            return op(a, b, 2.0) * 2

        y = f(x, paddle.ones([3]))
        y.sum().backward()
        print("RESULTS " + json.dumps({"before": before, "y": y.numpy().tolist(), "g": x.grad.numpy().tolist()}))
        """
    )
    assert out == {"before": False, "y": [6.0] * 3, "g": [4.0] * 3}


@_needs("torch")
def test_torch_compile_after_eager_calls_traces_the_same_op_fullgraph():
    """The order a plain eager call makes possible: the op registered (and called, forward and
    backward) before Dynamo was ever imported, then ``torch.compile(fullgraph=True)`` of the same op:
    the markers Dynamo needs are set when Dynamo is imported. Values and gradients match the eager
    ones; one graph, no break; a new scalar signature first met while tracing registers there too;
    forward-mode AD under torch.compile leaves the graph as it does when Dynamo came first."""
    out = run_for_results(
        """
        import json, sys
        import torch
        import warp as wp
        import interop
        from guide_kernels import saxpy

        op = interop.op(saxpy)
        named = interop.op(saxpy, name="firstcall::saxpy")
        x = torch.arange(4.0, requires_grad=True, device="cpu")
        y = torch.ones(4, device="cpu")
        eager = op(x, y, 2.0)
        eager.sum().backward()
        g_eager = x.grad.clone()
        named(x, y, 2.0)
        dynamo_before = "torch._dynamo" in sys.modules

        def f(a, b):
            return op(a, b, 2.0) * 3 + named(a, b, 0.5)

        import torch._dynamo
        ex = torch._dynamo.explain(f)(x, y)
        x.grad = None
        c = torch.compile(f, fullgraph=True)(x, y)
        c.sum().backward()
        g_compiled = x.grad.clone()

        # a 0-d tensor scalar: an operator signature registered while Dynamo traces
        a = torch.tensor(2.0, requires_grad=True, device="cpu")
        x.grad = None
        t = torch.compile(lambda u, v, s: op(u, v, s), fullgraph=True)(x, y, a)
        t.sum().backward()

        # forward mode under torch.compile: the call leaves the graph (torch.compiler.disable)
        tangent = torch.ones(4, device="cpu")
        _, jvp = torch.compile(lambda u: torch.func.jvp(lambda w: op(w, y, 2.0), (u,), (tangent,)))(x.detach())

        print("RESULTS " + json.dumps({
            "dynamo_before": dynamo_before,
            "eager": eager.tolist(),
            "compiled": c.tolist(),
            "graphs": [ex.graph_count, ex.graph_break_count],
            "g_eager": g_eager.tolist(),
            "g_compiled": g_compiled.tolist(),
            "scalar_tensor": [t.tolist(), float(a.grad), x.grad.tolist()],
            "jvp": jvp.tolist(),
        }))
        """
    )
    assert out["dynamo_before"] is False
    assert out["graphs"] == [1, 0]
    assert out["compiled"] == [3 * v + (0.5 * i + 1) for i, v in enumerate(out["eager"])]
    assert out["eager"] == [1.0, 3.0, 5.0, 7.0]
    assert out["g_eager"] == [2.0] * 4
    assert out["g_compiled"] == [3 * 2.0 + 0.5] * 4
    assert out["scalar_tensor"] == [[1.0, 3.0, 5.0, 7.0], 6.0, [2.0] * 4]
    assert out["jvp"] == [2.0] * 4


def test_first_call_benchmark_rows_are_scripts_and_print_a_table():
    """``python -m benchmarks --first-call`` (benchmarks/first_call.py): each row's child is valid
    Python and the table names every row with its difference from the NumPy op's first call."""
    import ast

    from benchmarks import first_call

    for row in ("wp.launch", *first_call.FRAMEWORKS):
        ast.parse(first_call.child_code(row))
    times = {"import": 1.0, "own op": 0.0, "warp+interop": 0.5, "first call": 0.03}
    results = [
        {"row": "wp.launch", "cache": "warm", "times": times, "heavy": []},
        {"row": "numpy", "cache": "warm", "times": times, "heavy": []},
        {"row": "torch", "cache": "warm", "times": dict(times, **{"first call": 0.1}), "heavy": ["torch._dynamo"]},
    ]
    text = first_call.table(results)
    assert "| torch op | warm |" in text and "+0.070" in text and "torch._dynamo" in text
    assert "| raw `wp.launch` | warm |" in text
