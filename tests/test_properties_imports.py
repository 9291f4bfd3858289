"""Import orders: the op is described before or after each framework is imported, and then every
feature that registers something is used: torch operators (eager, ``torch.compile(fullgraph=True)``,
``torch.func.vmap``, backward), JAX FFI targets (eager, ``jit``, ``grad``, ``vmap``, an in-process
``jax.export`` round trip), Paddle (eager, backward, ``to_static`` with SOT). And ``jax.export``
across processes: a function exported in one process is deserialized in another in which the op is
described before or after ``import jax``.

Each order runs in a fresh process. CI runs one (the op described first); INTEROP_PROPERTY_EXAMPLES >= 1000 runs all
24 orders of (describe, import torch, import jax, import paddle).
"""

from __future__ import annotations

import importlib.util
import itertools

import pytest
from _subprocess import run_for_results
from property_calls import EXAMPLES, FRAMEWORKS, count

pytestmark = pytest.mark.timeout(3600)
STEPS = ["describe"] + [f for f in FRAMEWORKS if f != "numpy"]
ORDERS = [list(p) for p in itertools.permutations(STEPS)]
if EXAMPLES < 1000:
    ORDERS = [STEPS]  # CI: the op described before every framework is imported
HAS_JAX = importlib.util.find_spec("jax") is not None

KERNEL = r"""
import json, sys
import numpy as np
import warp as wp
wp.config.quiet = True

@wp.kernel
def order_axpy(x: wp.array(dtype=float), y: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = s * x[i] * x[i] + y[i]

x = np.arange(4, dtype=np.float32)
y = np.ones(4, np.float32)
want = (2.0 * x * x + 1.0).tolist()
gx = (4.0 * x).tolist()

def close(a, b):
    return np.allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), atol=1e-5)
"""

ORDER_CHILD = (
    KERNEL
    + r"""
import interop
op = None
for step in sys.argv[1].split(","):
    if step == "describe":
        op = interop.op(order_axpy, name="order::axpy")
    else:
        __import__(step)
res = {}
assert close(op(x, y, 2.0), want)
if "torch" in sys.modules:
    import torch
    res["torch.ops registered"] = hasattr(torch.ops.order, "axpy")
    xt = torch.tensor(x, requires_grad=True, device="cpu")
    out = op(xt, torch.tensor(y, device="cpu"), 2.0)
    out.sum().backward()
    res["torch eager"] = close(out.detach(), want) and close(xt.grad, gx)
    xt.grad = None
    torch.compiler.reset()
    f = torch.compile(lambda a, b: op(a, b, 2.0), backend="aot_eager", fullgraph=True)
    out = f(xt, torch.tensor(y, device="cpu"))
    out.sum().backward()
    res["torch.compile fullgraph"] = close(out.detach(), want) and close(xt.grad, gx)
    xx, yy = torch.tensor(np.stack([x, x]), device="cpu"), torch.tensor(np.stack([y, y]), device="cpu")
    vm = torch.func.vmap(lambda a, b: op(a, b, 2.0))(xx, yy)
    res["torch.func.vmap"] = close(vm, [want, want])
if "jax" in sys.modules:
    import jax, jax.numpy as jnp
    from adapters import jax as ijax
    cpu = jax.devices("cpu")[0]
    a, b = jnp.asarray(x, device=cpu), jnp.asarray(y, device=cpu)
    res["jax eager"] = close(op(a, b, 2.0), want)
    res["jax.jit"] = close(jax.jit(lambda a, b, s: op(a, b, s))(a, b, 2.0), want)
    res["jax.grad"] = close(jax.grad(lambda a: op(a, b, 2.0).sum())(a), gx)
    res["jax.vmap"] = close(jax.vmap(lambda a: op(a, b, 2.0))(jnp.stack([a, a])), [want, want])
    fn = jax.jit(lambda a: op(a, b, 2.0))
    exp = jax.export.export(fn, platforms=["cpu"], disabled_checks=ijax.disabled_checks(op))(a)
    res["jax.export round trip"] = close(jax.export.deserialize(exp.serialize()).call(a), want)
if "paddle" in sys.modules:
    import paddle
    xp = paddle.to_tensor(x, place=paddle.CPUPlace())
    xp.stop_gradient = False
    out = op(xp, paddle.to_tensor(y, place=paddle.CPUPlace()), 2.0)
    out.sum().backward()
    res["paddle eager"] = close(out.numpy(), want) and close(xp.grad.numpy(), gx)
    def g(a, b):
        return op(a, b, 2.0) * 1.0
    st = paddle.jit.to_static(g, full_graph=False)
    xp, yp = paddle.to_tensor(x, place=paddle.CPUPlace()), paddle.to_tensor(y, place=paddle.CPUPlace())
    res["paddle to_static (SOT)"] = close(st(xp, yp).numpy(), want)
print("RESULTS " + json.dumps(res))
"""
)

EXPORT_CHILD = (
    KERNEL
    + r"""
import base64
mode, path = sys.argv[1], sys.argv[2]
if mode == "export":
    import jax, jax.numpy as jnp, interop
    from adapters import jax as ijax
    op = interop.op(order_axpy, name="order::axpy")
    cpu = jax.devices("cpu")[0]
    b = jnp.asarray(y, device=cpu)
    f = jax.jit(lambda a: op(a, b, 2.0))
    g = jax.jit(jax.grad(lambda a: op(a, b, 2.0).sum()))
    checks = ijax.disabled_checks(op)
    a = jnp.asarray(x, device=cpu)
    blobs = [jax.export.export(h, platforms=["cpu"], disabled_checks=checks)(a).serialize() for h in (f, g)]
    with open(path, "w") as fh:
        json.dump([base64.b64encode(bytes(bl)).decode() for bl in blobs], fh)
    print("RESULTS {}")
else:
    res = {}
    for step in mode.split(","):
        if step == "describe":
            import interop
            op = interop.op(order_axpy, name="order::axpy")
        else:
            __import__(step)
    import jax, jax.numpy as jnp
    blobs = [base64.b64decode(s) for s in json.load(open(path))]
    a = jnp.asarray(x, device=jax.devices("cpu")[0])
    for what, blob, expect in zip(("forward", "grad"), blobs, (want, gx)):
        try:
            res[what] = close(jax.export.deserialize(bytearray(blob)).call(a), expect)
        except Exception as e:
            res[what] = f"{type(e).__name__}: {str(e)[:300]}"
    print("RESULTS " + json.dumps(res))
"""
)


@pytest.mark.parametrize("order", ORDERS, ids=["-".join(o) for o in ORDERS])
def test_import_order(order):
    res = run_for_results(ORDER_CHILD, ",".join(order), timeout=900)
    before = {f for f in STEPS if f != "describe" and order.index(f) > order.index("describe")}
    for feature in res:
        fw = feature.split(" ")[0].split(".")[0]
        count(fw, "import order", "op described before import" if fw in before else "op described after import")
    bad = {k: v for k, v in res.items() if v is not True}
    assert not bad, f"order {order}: {bad}"


@pytest.mark.skipif(not HAS_JAX, reason="jax not installed")
@pytest.mark.parametrize("order", [["describe", "jax"], ["jax", "describe"]], ids=["describe-jax", "jax-describe"])
def test_exported_function_deserialized_in_a_new_process(order, tmp_path):
    blob = tmp_path / "exported.json"
    run_for_results(EXPORT_CHILD, "export", str(blob), timeout=900)
    res = run_for_results(EXPORT_CHILD, ",".join(order), str(blob), timeout=900)
    count("jax", "export round trip across processes", "-".join(order))
    assert res == {"forward": True, "grad": True}, f"order {order}: {res}"
