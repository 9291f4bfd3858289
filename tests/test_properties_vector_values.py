"""Generated sequences of calls of an op with a ``wp.vec3`` scalar parameter (a gravity vector), in
every framework, where each call changes how the vector is spelled (a tuple, a list, a Warp value,
the framework's ``(3,)`` array), its value (-0.0, NaN, +-inf, the largest float32, ints), the path
(eager, ``torch.no_grad``, ``torch.compile``, ``jax.jit``, ``jax.grad``) and which input requires a
gradient. Each call's result and the gradient of its array input are compared with Warp's own
``wp.launch``/``wp.Tape`` on the same device, bit for bit; a value a vec3 cannot hold (a float32
overflow, a wrong count) must be refused naming the op and the parameter. Compiled and traced calls
remember signatures and values: a stale hit is a wrong answer here.

INTEROP_PROPERTY_EXAMPLES // 4 sequences per framework.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import warp as wp
from _devices import devices_for, jax_device
from catalogue import vec_shift_kernel
from hypothesis import given
from hypothesis import strategies as st
from property_calls import EXAMPLES, property_settings

import interop

pytestmark = pytest.mark.timeout(3600)

OP = interop.op(vec_shift_kernel, outputs=["y"])
N = 5
F32_MAX = float(np.finfo(np.float32).max)
FRAMEWORKS = [f for f in ("numpy", "torch", "jax", "paddle") if f == "numpy" or importlib.util.find_spec(f)]


def _torch_at_least(major: int, minor: int) -> bool:
    import torch

    return tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) >= (major, minor)


#: compiled_func_grad: torch.compile of torch.func.grad (torch 2.13+, docs/limitations.md)
PATHS = {
    "numpy": ["eager"],
    "torch": ["eager", "no_grad", "compiled", "compiled_no_grad"]
    + (["compiled_func_grad"] if importlib.util.find_spec("torch") and _torch_at_least(2, 13) else []),
    "jax": ["eager", "jit", "grad", "jit_grad"],
    "paddle": ["eager", "no_grad"],
}
#: values a vec3 holds (kept as given: -0.0's sign, NaN, +-inf)
VALUES = [
    (0.0, -9.8, 0.0),
    (1.5, -0.0, -0.0),
    (0.0, 0.0, 0.0),
    (float("nan"), 1.0, 2.0),
    (float("inf"), -float("inf"), 0.5),
    (F32_MAX, -F32_MAX, 3.0),
    (1, 2, -3),  # ints for a float vector
    (0.25, 2.0, 3.0),
]
#: values refused, naming the op and the parameter (as a tuple or a list only: a Warp value or a
#: float32 array cannot be made of them)
REFUSED = [((1e39, 0.0, 0.0), "got 1e\\+39"), ((1.0, 2.0), "3 numbers"), ((1.0, 2.0, 3.0, 4.0), "3 numbers")]
SPELLINGS = ["tuple", "list", "warp", "array"]


def _reference(device, a, g, s, w):
    """Warp's own launch and tape: the output and the gradient of ``a`` for upstream ``w``."""
    wa = wp.array(a, dtype=wp.vec3, device=device, requires_grad=True)
    wy = wp.zeros(len(a), dtype=wp.vec3, device=device, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(vec_shift_kernel, dim=len(a), inputs=[wa, wp.vec3(*g), s], outputs=[wy], device=device)
    wy.grad = wp.array(w, dtype=wp.vec3, device=device)
    tape.backward()
    return wy.numpy(), wa.grad.numpy()


def _vector(fw, spelling, g, device):
    if spelling == "tuple":
        return tuple(g)
    if spelling == "list":
        return list(g)
    if spelling == "warp":
        return wp.vec3(*g)
    values = np.array(g, dtype=np.float32)
    if fw == "numpy":
        return values
    if fw == "torch":
        import torch

        return torch.tensor(values, device=device)
    if fw == "jax":
        import jax

        return jax.device_put(values, jax_device(device))
    import paddle

    return paddle.to_tensor(values, place=paddle.CPUPlace() if device == "cpu" else paddle.CUDAPlace(0))


_COMPILED: dict = {}


def _run(fw, path, device, a, g, s, w, grad):
    """(output, gradient of ``a`` or None) of one call as a user of ``fw`` writes it."""
    if fw == "numpy":
        return OP(a, g, s), None
    if fw == "torch":
        import torch

        ta = torch.tensor(a, device=device, requires_grad=grad)
        if path == "compiled_func_grad":  # the transform runs eagerly inside the compiled function
            tw = torch.tensor(w, device=device)

            def loss(x):
                y = OP(x, g, s)
                return (y * tw).sum(), y

            ga, y = torch.compile(torch.func.grad(loss, has_aux=True), backend="aot_eager")(ta.detach())
            return y.detach().cpu().numpy(), ga.cpu().numpy()
        if path.startswith("compiled"):
            f = _COMPILED.get("torch")
            if f is None:
                f = _COMPILED["torch"] = torch.compile(lambda x, v, k: OP(x, v, k), backend="aot_eager")
        else:
            f = OP
        with torch.set_grad_enabled(not path.endswith("no_grad")):
            y = f(ta, g, s)
        if not y.requires_grad:
            return y.detach().cpu().numpy(), None
        (y * torch.tensor(w, device=device)).sum().backward()
        return y.detach().cpu().numpy(), ta.grad.cpu().numpy()
    if fw == "jax":
        import jax
        import jax.numpy as jnp

        ja = jax.device_put(a, jax_device(device))
        jw = jax.device_put(w, jax_device(device))

        def loss(x):  # the vector and the scale closed over: constants of a trace
            y = OP(x, g, s)
            return jnp.sum(y * jw), y

        if path in ("grad", "jit_grad"):
            fn = jax.value_and_grad(loss, has_aux=True)
            (_, y), ga = (jax.jit(fn) if path == "jit_grad" else fn)(ja)
            return np.asarray(y), np.asarray(ga)
        y = (jax.jit(lambda x: OP(x, g, s)) if path == "jit" else (lambda x: OP(x, g, s)))(ja)
        return np.asarray(y), None
    import paddle

    pa = paddle.to_tensor(a, place=paddle.CPUPlace() if device == "cpu" else paddle.CUDAPlace(0))
    pa.stop_gradient = not grad
    if path == "no_grad":
        with paddle.no_grad():
            return OP(pa, g, s).numpy(), None
    y = OP(pa, g, s)
    if pa.stop_gradient:
        return y.numpy(), None
    (y * paddle.to_tensor(w, place=pa.place)).sum().backward()
    return y.numpy(), pa.grad.numpy()


@pytest.mark.parametrize("fw", FRAMEWORKS)
@property_settings(max(1, EXAMPLES // 4))
@given(data=st.data())
def test_sequence_of_vector_values_equals_warp(fw, data):
    if fw == "torch":
        import torch

        torch._dynamo.reset()
        _COMPILED.clear()
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    for _ in range(data.draw(st.integers(3, 8), label="calls")):
        device = data.draw(st.sampled_from(devices_for(fw)), label="device")
        path = data.draw(st.sampled_from(PATHS[fw]), label="path")
        spelling = data.draw(st.sampled_from(SPELLINGS), label="spelling")
        s = data.draw(st.sampled_from([0.5, -2.0, 1.0]), label="s")
        grad = fw != "numpy" and data.draw(st.booleans(), label="grad")
        a = rng.uniform(-1, 1, (N, 3)).astype(np.float32)
        w = rng.uniform(-1, 1, (N, 3)).astype(np.float32)
        if spelling in ("tuple", "list") and data.draw(st.integers(0, 4), label="refuse") == 0:
            bad, match = data.draw(st.sampled_from(REFUSED), label="refused")
            with pytest.raises(interop.ArgumentError, match=rf"op 'vec_shift_kernel', parameter 'g'.*{match}"):
                _run(fw, path, device, a, _vector(fw, spelling, bad, device), s, w, grad)
            continue
        g = data.draw(st.sampled_from(VALUES), label="g")
        if spelling == "array" and fw == "jax" and path != "eager":
            spelling = "tuple"  # a closed-over JAX array is a constant too; a tuple says the same here
        y_ref, ga_ref = _reference(device, a, [float(c) for c in g], s, w)
        y, ga = _run(fw, path, device, a, _vector(fw, spelling, g, device), s, w, grad)
        where = f"{fw} {path} {spelling} g={g} s={s} grad={grad}"
        np.testing.assert_array_equal(y, y_ref, err_msg=where)
        if ga is not None:
            np.testing.assert_array_equal(ga, ga_ref, err_msg=where)
