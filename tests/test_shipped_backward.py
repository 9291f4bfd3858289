"""Hand-written backward kernels used as their authors ship them (issue 23, item 3).

The kernels (tests/catalogue.py) are shaped like physicsnemo's grid derivatives: the backward's
parameters are ``grad0, grad1, grad2, inv_dx0, inv_dx1, inv_dx2, grad_field``, mapped to the op's
slots with ``interop.backward``. Gradients are compared with ``wp.Tape`` over the forward kernel
(Warp's own adjoint).
"""

from __future__ import annotations

import catalogue as cat
import numpy as np
import pytest
import warp as wp
from _devices import jax_device

import interop

F = np.float32
SHAPE = (3, 4, 5)
INV_DX = (2.0, 0.5, 4.0)


def _tape_grad(field: np.ndarray, weights: list[np.ndarray], inv_dx=INV_DX) -> np.ndarray:
    """d sum_d(w_d * grad_d) / d field, by wp.Tape over the forward kernel."""
    f = wp.array(field, requires_grad=True, device="cpu")
    outs = [wp.zeros(SHAPE, dtype=float, requires_grad=True, device="cpu") for _ in range(3)]
    tape = wp.Tape()
    with tape:
        wp.launch(cat.central_diff_3d_fwd, dim=SHAPE, inputs=[f, *inv_dx], outputs=outs, device=f.device)
    tape.backward(grads={o: wp.array(w, device="cpu") for o, w in zip(outs, weights)})
    return f.grad.numpy()


def _grad(fw: str, op, field: np.ndarray, weights: list[np.ndarray], inv_dx=INV_DX) -> np.ndarray:
    if fw == "torch":
        import torch

        t = torch.tensor(field, requires_grad=True, device="cpu")
        sum((o * torch.tensor(w, device="cpu")).sum() for o, w in zip(op(t, *inv_dx), weights)).backward()
        return t.grad.numpy()
    if fw == "paddle":
        import paddle

        cpu = paddle.CPUPlace()
        t = paddle.to_tensor(field, stop_gradient=False, place=cpu)
        sum((o * paddle.to_tensor(w, place=cpu)).sum() for o, w in zip(op(t, *inv_dx), weights)).backward()
        return t.grad.numpy()
    import jax
    import jax.numpy as jnp

    def loss(x):
        return sum(jnp.sum(o * w) for o, w in zip(op(x, *inv_dx), weights))

    g = jax.grad(loss) if fw == "jax" else jax.jit(jax.grad(loss))
    return np.asarray(g(jnp.asarray(field, device=jax_device("cpu"))))


def _data(seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(SHAPE).astype(F), [rng.standard_normal(SHAPE).astype(F) for _ in range(3)]


@pytest.mark.parametrize("fw", ["torch", "jax", "jax.jit", "paddle"])
def test_shipped_backward_gradients_match_wp_tape(fw):
    field, weights = _data()
    op = interop.op(cat.central_diff_3d_fwd, outputs=3, backward=cat.SHIPPED_BACKWARD)
    np.testing.assert_allclose(_grad(fw, op, field, weights), _tape_grad(field, weights), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fw", ["torch", "jax", "paddle"])
def test_the_mapping_decides_what_each_parameter_receives(fw):
    # grad0 and grad1 swapped: the backward reads the upstream gradient of grad1 as its grad0
    field, (w0, w1, w2) = _data(1)
    swapped = interop.backward(cat.central_diff_3d_bwd, grad0="adj_grad1", grad1="adj_grad0", grad2="adj_grad2")
    op = interop.op(cat.central_diff_3d_fwd, outputs=3, backward=swapped)
    # with inv_dx0 == inv_dx1 that is the Tape's gradient with the weights of grad0 and grad1 swapped
    inv_dx = (1.0, 1.0, 4.0)
    got = _grad(fw, op, field, [w0, w1, w2], inv_dx)
    np.testing.assert_allclose(got, _tape_grad(field, [w1, w0, w2], inv_dx), rtol=1e-5, atol=1e-5)
    assert not np.allclose(got, _tape_grad(field, [w0, w1, w2], inv_dx), atol=1e-3)


def test_the_backward_is_part_of_the_op_identity():
    a = interop.op(cat.central_diff_3d_fwd, outputs=3, backward=cat.SHIPPED_BACKWARD)
    same = interop.backward(cat.central_diff_3d_bwd, grad2="adj_grad2", grad1="adj_grad1", grad0="adj_grad0")
    assert same == cat.SHIPPED_BACKWARD and hash(same) == hash(cat.SHIPPED_BACKWARD)
    assert interop.op(cat.central_diff_3d_fwd, outputs=3, backward=same) is a
    other = interop.backward(cat.central_diff_3d_bwd, grad0="adj_grad1", grad1="adj_grad0", grad2="adj_grad2")
    assert interop.op(cat.central_diff_3d_fwd, outputs=3, backward=other).name != a.name


@pytest.mark.parametrize(
    "sources, match",
    [
        (
            {},
            r"parameter 'grad0' is given 'grad0', which is not a slot of this op; slots are the forward's inputs "
            r"\['field', 'inv_dx0', 'inv_dx1', 'inv_dx2'\], the upstream gradients \['adj_grad0', 'adj_grad1', "
            r"'adj_grad2'\] and the gradient outputs \['grad_field'\]",
        ),
        (
            {"grad0": "adj_grad0", "grad1": "adj_grad0", "grad2": "adj_grad2"},
            r"parameters 'grad0' and 'grad1' both take 'adj_grad0'",
        ),
        (
            {"grad0": "adj_grad0", "grad1": "adj_grad1", "grad2": "adj_grad2", "grad_field": "field"},
            r"no parameter writes the gradient for \['grad_field'\]",
        ),
    ],
)
def test_a_mapping_that_does_not_fit_the_op_is_refused_naming_the_slots(sources, match):
    with pytest.raises(
        interop.ArgumentError, match=r"op 'central_diff_3d_fwd': backward 'central_diff_3d_bwd': " + match
    ):
        interop.op(cat.central_diff_3d_fwd, outputs=3, backward=interop.backward(cat.central_diff_3d_bwd, **sources))


def test_a_name_that_is_not_a_parameter_of_the_backward_is_refused():
    with pytest.raises(
        interop.ArgumentError, match=r"'g0' is not a parameter of the kernel; its parameters are \['grad0'"
    ):
        interop.backward(cat.central_diff_3d_bwd, g0="adj_grad0")
