"""JAX adapter: launches partitioned under ``jax.jit`` (``custom_partitioning``).

A batched launch (``vmap_method="loop"``: one launch per batch element) and a launch of an op
described with ``partition=`` are ``custom_partitioning`` calls that XLA splits along their leading
dimensions (:func:`_partitioned`; which operands and results split: :func:`_split_flags`). Each
shard runs the launch of a local entry, sized for its part (:func:`_local_launch`). Inside
``shard_map`` the call already runs per shard and is not partitioned again.

Below :mod:`adapters.jax.launch`, whose launches are built through :func:`_partitioned`: the
launches and entries here are the caller's objects, used by their attributes, and a shard's entry
is made with the class of the launch's own entry, so this module imports neither.
"""

from __future__ import annotations

import itertools
import math

import jax

from . import compat as _jax_compat


# ---------------------------------------------------------------------------------------
# Partitioning under jax.jit: batched (vmap "loop") launches, and ops with partition="rows"
# ---------------------------------------------------------------------------------------
def _split_flags(launch, levels: tuple):
    """Which operands/results split along their leading dimensions when the launch is partitioned,
    and the sizes of those dimensions (one for a batch or ``partition="rows"``, every launch
    dimension for ``partition="elementwise"``); None when the launch is not partitionable."""
    if levels:
        # one launch per element of the outermost batch: split it; unbatched operands replicate
        size, flags = levels[-1]
        return tuple(bool(f) for f in flags), (True,) * len(launch.results), (size,)
    entry = launch.entry
    partition = entry.desc.partition
    if partition is None or launch.fold:
        return None
    ld = tuple(launch.plan.launch_dims)
    lead = ld[:1] if partition == "rows" else ld
    nd = len(lead)
    rows = _rows(entry.desc, partition)
    if rows is None:
        return None
    ops = []
    for b in launch.operands:
        p = entry.desc.params[b.index]
        if p.is_array and rows.get(p.name, True):
            if tuple(b.spec.shape[:nd]) != lead:
                return None
            ops.append(True)
        else:
            ops.append(False)  # a traced scalar, an array the rows do not walk: the same on every shard
    for b in launch.results:
        p = entry.desc.params[b.index]
        if not p.is_array or not rows.get(p.name, True) or tuple(b.spec.shape[:nd]) != lead:
            return None  # e.g. the gradient of a traced scalar or of a replicated array: a sum over all rows
    return tuple(ops), (True,) * len(launch.results), lead


def _rows(desc, partition: str) -> dict | None:
    """Which array parameters split: with ``partition="rows"``, those the first thread index walks
    (read from the kernel, never from their lengths: ``interop._promises``); every array otherwise."""
    if partition != "rows":
        return {}
    return desc.row_arrays


def _local_launch(launch, levels: tuple, sizes: tuple):
    """The bare FFI call of ``launch`` on one shard holding ``sizes`` of its leading dimensions."""
    if levels:
        return launch._ffi(levels[:-1] + ((sizes[0], levels[-1][1]),))
    entry = launch.entry
    nd = len(sizes)
    rows = _rows(entry.desc, entry.desc.partition) or {}
    args = []
    for p, spec in zip(entry.desc.call_params, entry.specs):
        if p.index in entry.static:
            args.append(entry.static[p.index])
        elif p.is_array and rows.get(p.name, True):
            args.append(jax.ShapeDtypeStruct(tuple(sizes) + tuple(spec.shape[nd:]), spec.dtype))
        else:
            args.append(jax.ShapeDtypeStruct(tuple(spec.shape), spec.dtype))
    plan = launch.plan
    ld = tuple(sizes) + tuple(plan.launch_dims[nd:])
    od = {p.name: tuple(sizes) + tuple(plan.warp_shapes[p.index][nd:]) for p in entry.desc.output_params}
    jop = entry.jop
    local = type(entry)(jop, args, ld, od or None, entry.vmap_method)  # (an _Entry: see the module's docstring)
    local = jop._by_config.setdefault(local.config, local)
    if launch.direction == "fwd":
        local_launch = local.forward_keep() if launch.keep else local.fwd
    else:
        local_launch = local.adjoint(launch.want, launch.keep)
    return local_launch._ffi(())


def _partitioned(launch, levels: tuple):
    """The launch as a ``custom_partitioning`` call that XLA splits along the leading dimensions of
    its split operands and results (each shard runs the launch on its part); None if not partitionable."""
    split = _split_flags(launch, levels)
    if split is None:
        return None
    op_split, res_split, sizes = split
    if not any(op_split):
        return None
    nd = len(sizes)
    custom_partitioning, SdyShardingRule = _jax_compat.custom_partitioning()
    batch = tuple(s for s, _ in reversed(levels))
    op_ranks = [len(batch_shape(levels, b, k)) for k, b in enumerate(launch.operands)]
    res_ranks = [len(batch) + len(b.spec.shape) for b in launch.results]
    counter = itertools.count()

    def mapping(rank, split):
        # the split leading dims are factors shared by every split operand and result
        return tuple((f"r{d}" if (split and d < nd) else f"d{next(counter)}") for d in range(rank))

    rule = SdyShardingRule(
        tuple(mapping(r, s) for r, s in zip(op_ranks, op_split)),
        tuple(mapping(r, s) for r, s in zip(res_ranks, res_split)),
    )
    ffi = launch._ffi(levels)

    @custom_partitioning
    def call(*xs):
        return ffi(*xs)

    def axes_of(arg_shapes):
        """The mesh axes of each split dimension, from the first split operand that is sharded."""
        from jax.sharding import NamedSharding

        for a, s in zip(arg_shapes, op_split):
            sh = a.sharding
            if s and isinstance(sh, NamedSharding) and any(x is not None for x in tuple(sh.spec)[:nd]):
                spec = tuple(sh.spec)[:nd]
                return spec + (None,) * (nd - len(spec))
        return (None,) * nd

    def count(mesh, axes):
        if axes is None:
            return 1
        names = axes if isinstance(axes, tuple) else (axes,)
        return int(math.prod(mesh.shape[n] for n in names))

    def usable(mesh, axes):
        # a dimension not divisible by its shard count stays whole
        return tuple(a if size % count(mesh, a) == 0 else None for a, size in zip(axes, sizes))

    def shardings(mesh, axes, flags, ranks):
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        return tuple(NamedSharding(mesh, P(*axes[:r]) if f and r else P()) for f, r in zip(flags, ranks))

    def infer(mesh, arg_shapes, result_shape):
        return shardings(mesh, usable(mesh, axes_of(arg_shapes)), res_split, res_ranks)

    def partition(mesh, arg_shapes, result_shape):
        axes = usable(mesh, axes_of(arg_shapes))
        local_sizes = tuple(size // count(mesh, a) for a, size in zip(axes, sizes))
        local = _local_launch(launch, levels, local_sizes) if local_sizes != tuple(sizes) else ffi
        return (
            mesh,
            local,
            shardings(mesh, axes, res_split, res_ranks),
            shardings(mesh, axes, op_split, op_ranks),
        )

    call.def_partition(partition=partition, infer_sharding_from_operands=infer, sharding_rule=rule)

    def run(*xs):
        if _jax_compat.manual_axes():  # inside shard_map the call already runs per shard
            return ffi(*xs)
        return tuple(call(*xs))

    return run


def batch_shape(levels: tuple, binding, k: int) -> tuple:
    """The shape of operand ``k`` of a launch at batch ``levels`` (batched dims outermost first)."""
    dims = tuple(size for size, flags in reversed(levels) if flags[k])
    return dims + tuple(binding.spec.shape)
