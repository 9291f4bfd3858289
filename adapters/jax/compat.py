"""The Warp and JAX internals the JAX adapter cannot avoid, in one place.

Checked against warp-lang 1.19.0 and jax/jaxlib 0.9.0 (the floor in pyproject.toml), 0.10.2 and
0.12.0.1 (nox sessions jax_oldest, tests, jax_newest).
"""

from __future__ import annotations

import sys

import jax

from interop import _warp_compat


def array_impl_type() -> type:
    """The class of concrete JAX arrays (``jax.Array`` is abstract), found without creating an array:
    creating one would start JAX's backends when the adapter is imported (as it is right after
    ``import jax`` once ops exist), before the user could configure them."""
    from jax._src.array import ArrayImpl

    if not issubclass(ArrayImpl, jax.Array):  # pragma: no cover - a JAX release that moved it
        raise ImportError("jax._src.array.ArrayImpl is not a jax.Array: this JAX release is not supported")
    return ArrayImpl


def primitive_class() -> type:
    """``jax.extend.core.Primitive`` (the class of the tangent's and adjoint's primitives), from where
    it is defined: importing ``jax.extend`` imports all of it (Pallas, ``shard_map``, its sharding
    and lowering helpers: 40-50 ms, a tenth of a JAX op's first call) for this one class. The public
    name is checked to be the same class where it is already imported (jax 0.9.0, 0.10.2, 0.12.0.1)."""
    try:
        from jax._src.core import Primitive
    except ImportError:  # pragma: no cover - a JAX release that moved it: the public, heavier import
        from jax.extend.core import Primitive

        return Primitive
    public = sys.modules.get("jax.extend.core")
    if public is not None and getattr(public, "Primitive", Primitive) is not Primitive:  # pragma: no cover
        return public.Primitive
    return Primitive


def is_tracer(x) -> bool:
    """A value being traced by jit/vmap/grad (public: ``jax.core.Tracer``)."""
    return isinstance(x, jax.core.Tracer)


def cuda_memset_async(device, ptr: int, nbytes: int, stream: int) -> None:
    """Zero ``nbytes`` at device pointer ``ptr`` on CUDA stream ``stream`` (XLA's), without a sync.

    Warp's part lives in ``interop._warp_compat`` (the one module that touches Warp internals).
    """
    _warp_compat.cuda_memset_async(device, ptr, nbytes, stream)


def deterministic(kernel) -> bool:
    """Whether Warp's deterministic mode applies to ``kernel`` (see ``interop._warp_compat``)."""
    return _warp_compat.deterministic(kernel)


# -- shard_map's varying-manual-axes types (check_vma=True) ----------------------------------
def varying_axes(x) -> frozenset:
    """The mesh axes ``x`` varies over inside ``shard_map`` (empty outside it).

    jax 0.10-0.12 keep them in ``jax.typeof(x).manual_axis_type.varying``; older releases in ``.vma``.
    """
    t = jax.typeof(x)
    mat = getattr(t, "manual_axis_type", None)
    if mat is not None:
        return frozenset(mat.varying)
    return frozenset(getattr(t, "vma", ()) or ())


def cast_varying(x, want: frozenset):
    """``x`` retyped to vary over exactly ``want``: ``pcast`` to add axes, ``psum`` to drop them.

    Dropping is what a gradient needs: a value replicated over an axis was broadcast to every
    device there, so its cotangent is the sum of the per-device cotangents.
    """
    have = varying_axes(x)
    extra = tuple(sorted(have - want))
    if extra:
        x = jax.lax.psum(x, extra)
    missing = tuple(sorted(want - have))
    if missing:
        x = jax.lax.pcast(x, missing, to="varying")
    return x


def custom_partitioning():
    """``(custom_partitioning, SdyShardingRule)`` from ``jax.experimental.custom_partitioning``."""
    from jax.experimental.custom_partitioning import SdyShardingRule, custom_partitioning

    return custom_partitioning, SdyShardingRule


def manual_axes() -> frozenset:
    """The mesh axes being mapped manually (inside ``shard_map``) where the current trace runs."""
    from jax.sharding import get_abstract_mesh

    mesh = get_abstract_mesh()
    return frozenset(getattr(mesh, "manual_axes", ()) or ())


def register_lowering_with_devices(prim, rule) -> None:
    """``mlir.register_lowering(prim, rule)`` for a primitive whose lowering may expand into
    ``custom_partitioning`` calls (a batched launch): such a lowering needs the computation's
    devices, which JAX provides only to jaxprs holding a primitive of
    ``jax._src.dispatch.prim_requires_devices_during_lowering`` (checked on jax 0.10.2)."""
    from jax._src import dispatch
    from jax.interpreters import mlir

    mlir.register_lowering(prim, rule)
    dispatch.prim_requires_devices_during_lowering.add(prim)


def shaped_array(shape: tuple, dtype, like=None):
    """A ``ShapedArray`` of ``shape``/``dtype`` typed like the abstract value ``like``: on the same
    (abstract) mesh and varying over the same manual axes inside ``shard_map``, replicated
    otherwise. jax 0.10-0.12 keep the axes in ``manual_axis_type`` with a ``NamedSharding`` whose
    mesh names them; older releases in ``vma``."""
    if like is None:
        return jax.core.ShapedArray(shape, dtype)
    sharding = getattr(like, "sharding", None)
    if sharding is not None and hasattr(sharding, "update"):
        from jax.sharding import PartitionSpec

        sharding = sharding.update(spec=PartitionSpec(*([None] * len(shape))))
        return like.update(shape=shape, dtype=dtype, weak_type=False, sharding=sharding)
    return like.update(shape=shape, dtype=dtype, weak_type=False)
