"""Named ops live for the process, as ``torch.library`` keeps a ``custom_op``: the registered PyTorch
operators, JAX FFI targets and Paddle binding of an op described with ``name=`` keep working after
the user's last reference to the ``Op`` is gone (under opcheck, torch.compile and torch.export);
describing the name again reuses it. Anonymous ops are freed with their registrations
(tests/test_bounds.py, tests/test_properties_drops.py: memory bounded in describe/drop loops)."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import warp as wp
from catalogue import cube64, cube64_backward

import interop


@wp.kernel
def _scaled_square(x: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = s * x[i] * x[i]


@wp.kernel
def _other(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    out[wp.tid()] = x[wp.tid()] + 1.0


def _described_and_dropped(fn, **options) -> weakref.ref:
    """Describe an op, keep no reference to it, and let the garbage collector and the next op's
    registration (which releases dropped ops' torch operators) run."""
    ref = weakref.ref(interop.op(fn, **options))
    gc.collect()
    interop.op(_other)(np.ones(2, np.float32))  # numpy: no framework imported by this helper
    _release_torch_operators()
    return ref


def _release_torch_operators() -> None:
    import sys

    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        interop.op(_other)(torch.ones(2, device="cpu"))  # registers (if new): releases dropped ops' operators
        gc.collect()


# ---- the rule, in the core --------------------------------------------------------------------


def test_named_op_is_kept_for_the_process_and_anonymous_op_is_freed():
    named = _described_and_dropped(_scaled_square, name="named_ops::kept")
    anonymous = _described_and_dropped(_scaled_square, launch_dims=None, zero_outputs=False)
    assert named() is not None
    assert anonymous() is None
    # described again: the same op (its registrations, caches and launch records)
    assert interop.op(_scaled_square, name="named_ops::kept") is named()
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(named()(x, 2.0), 2 * x * x)


def test_same_name_with_another_description_is_refused_naming_it():
    keep = interop.op(_scaled_square, name="named_ops::taken")
    with pytest.raises(interop.ArgumentError, match=r"op name 'named_ops::taken' is already used by .*other options"):
        interop.op(_scaled_square, name="named_ops::taken", zero_outputs=False)
    with pytest.raises(
        interop.ArgumentError,
        match=r"op name 'named_ops::taken' is already used by .*another kernel or function object.*pick another name=",
    ):
        interop.op(_other, name="named_ops::taken")
    del keep
    gc.collect()
    # still taken after the user's reference is gone: the name stays registered
    with pytest.raises(interop.ArgumentError, match=r"op name 'named_ops::taken' is already used"):
        interop.op(_other, name="named_ops::taken")


# ---- PyTorch: torch.ops.<ns>.<name> after the op object is gone ---------------------------------


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def test_torch_operator_of_a_dropped_named_op_calls_and_differentiates(torch):
    ref = _described_and_dropped(_scaled_square, name="named_ops::sq_torch")
    assert ref() is not None
    x = torch.arange(4.0, requires_grad=True, device="cpu")
    y = torch.ops.named_ops.sq_torch(x, 2.0)
    torch.testing.assert_close(y, 2 * x.detach() ** 2)
    y.sum().backward()
    torch.testing.assert_close(x.grad, 4 * x.detach())
    # the op object's own call path is the same operator
    x.grad = None
    interop.op(_scaled_square, name="named_ops::sq_torch")(x, 2.0).sum().backward()
    torch.testing.assert_close(x.grad, 4 * x.detach())


def test_torch_opcheck_of_a_dropped_named_op(torch):
    _described_and_dropped(_scaled_square, name="named_ops::sq_opcheck")
    x = torch.linspace(-1, 1, 5, requires_grad=True, device="cpu")
    torch.library.opcheck(torch.ops.named_ops.sq_opcheck.default, (x, 1.5))
    torch.library.opcheck(torch.ops.named_ops.sq_opcheck.default, (x.detach(), 1.5))


def test_torch_compile_of_a_dropped_named_op(torch):
    _described_and_dropped(_scaled_square, name="named_ops::sq_compile")
    f = torch.compile(lambda x: torch.ops.named_ops.sq_compile(x, 3.0).sum(), backend="aot_eager", fullgraph=True)
    x = torch.linspace(-1, 1, 6, requires_grad=True, device="cpu")
    f(x).backward()
    torch.testing.assert_close(x.grad, 6 * x.detach())


def test_torch_export_of_a_dropped_named_op(torch):
    _described_and_dropped(_scaled_square, name="named_ops::sq_export")

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.ops.named_ops.sq_export(x, 2.0) + 1.0

    x = torch.linspace(-1, 1, 6, device="cpu")
    ep = torch.export.export(M(), (x,))
    gc.collect()
    _release_torch_operators()
    torch.testing.assert_close(ep.module()(x), 2 * x * x + 1.0)


def test_torch_hand_written_backward_of_a_dropped_named_op(torch):
    """The backward op (an op of its own, anonymous) is kept by the named op that uses it."""
    _described_and_dropped(cube64, backward=cube64_backward, name="named_ops::cube64")
    x = torch.linspace(-1, 1, 5, dtype=torch.float64, requires_grad=True, device="cpu")
    y = torch.ops.named_ops.cube64(x)
    (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    torch.testing.assert_close(g, 3 * x.detach() ** 2)
    torch.library.opcheck(torch.ops.named_ops.cube64.default, (x,))


def test_torch_block_dim_variant_of_a_dropped_named_op(torch):
    op = interop.op(_scaled_square, name="named_ops::sq_block")
    variant = op.with_block_dim(64)
    ns, name = variant.name.split("::")
    del op, variant
    gc.collect()
    _release_torch_operators()
    x = torch.arange(4.0, device="cpu")
    torch.testing.assert_close(getattr(getattr(torch.ops, ns), name)(x, 2.0), 2 * x * x)


# ---- JAX: FFI targets of a dropped named op ------------------------------------------------------


def test_jax_exported_call_of_a_dropped_named_op():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from adapters import jax as interop_jax

    x = jnp.arange(4.0, dtype=jnp.float32, device=jax.devices("cpu")[0])

    def export():  # the op lives only in here
        op = interop.op(_scaled_square, name="named_ops::sq_jax")
        exported = jax.export.export(
            jax.jit(lambda a: op(a, 2.0)), platforms=["cpu"], disabled_checks=interop_jax.disabled_checks(op)
        )
        return exported(x).serialize(), weakref.ref(op)

    serialized, ref = export()
    gc.collect()
    assert ref() is not None
    exp = jax.export.deserialize(serialized)
    np.testing.assert_array_equal(np.asarray(exp.call(x)), 2 * np.asarray(x) ** 2)
    again = interop.op(_scaled_square, name="named_ops::sq_jax")
    g = jax.grad(lambda a: again(a, 2.0).sum())(x)
    np.testing.assert_array_equal(np.asarray(g), 4 * np.asarray(x))


# ---- Paddle --------------------------------------------------------------------------------------


def test_paddle_binding_of_a_dropped_named_op_is_kept():
    paddle = pytest.importorskip("paddle")
    op = interop.op(_scaled_square, name="named_ops::sq_paddle")
    x = paddle.to_tensor(np.arange(4, dtype=np.float32), stop_gradient=False, place=paddle.CPUPlace())
    op(x, 2.0).sum().backward()
    ref, bound = weakref.ref(op), weakref.ref(op.bound("paddle"))
    del op
    gc.collect()
    assert ref() is not None and bound() is not None
    again = interop.op(_scaled_square, name="named_ops::sq_paddle")
    assert again.bound("paddle") is bound()
    x.clear_gradient()
    again(x, 2.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), 4 * np.arange(4, dtype=np.float32))
