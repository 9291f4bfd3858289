"""DTensor sharding strategies of an op's torch operators (tensor, sequence and data parallelism).

A ``DTensor`` reaching a registered operator runs it on each rank's local tensor with the
placements a sharding strategy chooses. Every operator of an op (forward, mutating, backward)
carries a strategy derived from the op's description, the same declaration that drives
``custom_partitioning`` under ``jax.jit`` (DESIGN.md, "One partitioning declaration, two
engines"):

- **any op**: all inputs ``Replicate()`` -> outputs ``Replicate()`` (every rank computes the
  whole result). Sharded or partial inputs are redistributed to ``Replicate()`` first: an
  all-gather (or all-reduce) per input, chosen by DTensor; correct, and the cost of an op
  that declares nothing.
- ``partition="rows"``: arrays whose first dimension is the launch's first may also all be
  ``Shard(0)``: the outputs (and in the backward, the gradients of array inputs) are
  ``Shard(0)``, and each rank launches the kernel on its own rows, with no collective.
- ``partition="elementwise"``: the same for ``Shard(d)`` along any launch dimension ``d``.

In the sharded strategies, scalars passed as 0-d tensors stay ``Replicate()``, and their
gradients are ``Partial()`` (each rank's adjoint sums over its own elements). A call whose
arrays do not fit the declaration (an array or output whose leading dimensions are not the
launch's) gets the replicated strategy only, as under ``jax.jit``. Launch and output
dimensions fixed by the description or the call are global sizes: when a launch runs per
shard they are rewritten to the shard's sizes. In-out arrays of the mutating operator are
updated in place, so they keep their placement: a strategy that would redistribute one is
refused with an error naming the op, the parameter and the placement.

Registering a strategy needs ``torch.distributed.tensor``, whose import takes seconds: ops are
registered when it is imported (now if it already is, else by a one-shot import hook), never
by this module. The DTensor internals used live in ``torch/compat.py`` with the version checked.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from interop._errors import ArgumentError, UnsupportedError
from interop._plan import default_launch

from .._common import after_import
from . import compat as _torch_compat

__all__ = ["register", "strategies"]

_DTENSOR_MODULE = "torch.distributed.tensor"
_lock = threading.RLock()
_pending: list[tuple[Any, tuple, dict]] = []  # (binding, mask, {kind: CustomOpDef}) not yet registered
_hooked = False


def register(b, mask: tuple, ops: dict) -> None:
    """Give the operators of one scalar signature of binding ``b`` their sharding strategies
    (now if ``torch.distributed.tensor`` is imported, else when it is)."""
    if not _torch_compat.distributed_available():
        return
    if _DTENSOR_MODULE in sys.modules and _torch_compat.dtensor_internals() is not None:
        _register(b, mask, ops)
        return
    with _lock:
        _pending.append((b, mask, ops))
        _watch()


def any_dtensor(args, positions) -> bool:
    """Whether any of ``args`` at ``positions`` is a DTensor (False while none can exist)."""
    cls = _dtensor_type[0]
    if cls is None:
        return False
    return any(isinstance(args[i], cls) for i in positions)


_dtensor_type: list = [None]  # DTensor, once its strategies can be registered


def _register_pending() -> None:
    with _lock:
        todo = list(_pending)
        _pending.clear()
    if _torch_compat.dtensor_internals() is None:
        return
    for b, mask, ops in todo:
        _register(b, mask, ops)


def _register(b, mask: tuple, ops: dict) -> None:
    api = _torch_compat.dtensor_internals()
    if api is None:
        return
    _dtensor_type[0] = api.DTensor
    for kind, cdef in ops.items():
        overload = cdef._opoverload
        api.register(overload, _strategy_function(b, kind, api), _adjuster(b, kind, api))


def _watch() -> None:
    global _hooked
    if _hooked:
        return
    _hooked = True
    after_import(_DTENSOR_MODULE, _register_pending)


# ---------------------------------------------------------------------------------------
# the strategies: which placements each operator accepts on one mesh dimension
# ---------------------------------------------------------------------------------------
# A strategy on one mesh dimension is (output placements, input placements by argument
# position, None for a non-tensor argument); "R" Replicate, ("S", d) Shard(d), "P" Partial (sum).
# DTensor expands it to every mesh dimension and picks the cheapest.


class _Call:
    """The static facts of one operator call that the strategies depend on (global shapes)."""

    def __init__(self, b, kind: str, args: tuple, kwargs: dict, is_tensor):
        self.b = b
        self.kind = kind
        n, k, nout = b.ncall, len(b.returned), len(b.outputs)
        names = [p.name for p in b.call_params]
        if kind == "backward":
            names += [f"result_{p.name}" for p in b.returned] + [f"grad_{p.name}" for p in b.returned]
        dims_at = len(names)
        names += ["launch_dims"] + [f"output_dims_{p.name}" for p in b.outputs]
        if kind == "backward":
            names.append("needs")
        full = list(args) + [kwargs.get(nm) for nm in names[len(args) :]]
        self.args = full
        self.names = names
        self.tensor = tuple(is_tensor(a) for a in full)
        self.dims_at = dims_at
        self.ld = full[dims_at]
        self.ods = full[dims_at + 1 : dims_at + 1 + nout]
        self.needs: Any = full[-1] if kind == "backward" else None
        self.n, self.k = n, k

    def shape(self, pos: int) -> tuple:
        return tuple(self.args[pos].shape)

    def launch_dims(self) -> tuple | None:
        """The launch's global dims, or None when they cannot be told from the call."""
        b = self.b
        if self.ld is not None:
            return tuple(self.ld)
        if b.desc.launch_dims is not None:
            return tuple(b.desc.launch_dims)
        if b.first_array is None or not all(self.tensor[i] for i in b.array_pos):
            return None
        if b.desc.kind == "kernel":
            pos = {b.call_params[i].name: i for i in b.array_pos}
            try:
                return default_launch(b.desc, lambda name: self.shape(pos[name])[: b.call_params[pos[name]].ndim])
            except ArgumentError:
                return None  # the call itself raises it
        return self.shape(b.first_array)[: b.call_params[b.first_array].ndim]

    def explicit_output_dims(self, j: int):
        """Output ``j``'s dims as the call or the description gives them, or None (the launch dims)."""
        b = self.b
        od = self.ods[j] if j < len(self.ods) else None
        if od is None and b.desc.output_dims is not None:
            if b.desc.output_dims[0] == "all":
                od = b.desc.output_dims[1]
            else:
                od = dict(b.desc.output_dims[1]).get(b.outputs[j].name)
        return od

    def output_leading(self, j: int, ld: tuple) -> tuple:
        """The leading (Warp) dims of output ``j``: its output_dims, else the launch dims."""
        od = self.explicit_output_dims(j)
        dims = tuple(ld) if od is None else tuple(od)
        return dims[: self.b.outputs[j].ndim]

    def has_static_dims(self) -> bool:
        desc = self.b.desc
        return (
            self.ld is not None
            or any(d is not None for d in self.ods)
            or desc.launch_dims is not None
            or desc.output_dims is not None
        )


def _shard_dims(c: _Call) -> tuple[int, ...]:
    """The launch dimensions along which this call may run per shard (none: replicated only)."""
    partition = c.b.desc.partition
    if partition is None:
        return ()
    ld = c.launch_dims()
    if ld is None:
        return ()
    want = 1 if partition == "rows" else len(ld)
    b = c.b
    rows = _rows(b.desc)
    if rows is None or any(not rows.get(p.name, True) for p in b.returned):
        return ()
    # every array argument the rows walk (and in the backward, every result and upstream gradient) has
    # the launch's leading dims, and so does every output
    positions = [i for i, p in enumerate(b.call_params) if p.is_array and rows.get(p.name, True)]
    if c.kind == "backward":
        positions += list(range(c.n, c.n + 2 * c.k))
    for pos in positions:
        if not c.tensor[pos]:
            return ()
        s = c.shape(pos)
        if len(s) < want or tuple(s[:want]) != tuple(ld[:want]):
            return ()
    for j in range(len(b.outputs)):
        lead = c.output_leading(j, ld)
        if len(lead) < want or tuple(lead[:want]) != tuple(ld[:want]):
            return ()
    return tuple(range(want))


def _rows(desc) -> dict | None:
    """With ``partition="rows"``, which arrays are rows (sharded) and which are replicated, read from
    the kernel (``interop._promises``, never from their lengths); every array otherwise."""
    return desc.row_arrays if desc.partition == "rows" else {}


def strategies(b, kind: str, args: tuple, kwargs: dict, is_tensor) -> list[tuple[list, list]]:
    """The single-mesh-dimension strategies of operator ``kind`` of binding ``b`` for a call with
    ``args``/``kwargs`` (tensor arguments carry global ``.shape``)."""
    c = _Call(b, kind, args, kwargs, is_tensor)
    ins_r: list[Any] = ["R" if t else None for t in c.tensor]
    out_r: list[Any] = ["R"] * _n_outputs(c)
    result: list[tuple[list, list]] = [(out_r, ins_r)]
    array_pos = {i for i, p in enumerate(b.call_params) if p.is_array}
    rows = _rows(b.desc) or {}
    row_pos = {i for i in array_pos if rows.get(b.call_params[i].name, True)}
    for d in _shard_dims(c):
        s = ("S", d)
        ins: list[Any] = []
        for i, t in enumerate(c.tensor):
            if not t:
                ins.append(None)
            elif i in row_pos or (kind == "backward" and c.n <= i < c.n + 2 * c.k):
                ins.append(s)
            else:
                ins.append("R")  # a scalar passed as a 0-d tensor, an array the rows do not walk
        if kind == "backward":
            # a gradient per needed call argument: a row array's is sharded like it, a scalar's or a
            # replicated array's is the sum of the shards' sums
            outs: list[Any] = [s if i in row_pos else "P" for i, need in enumerate(c.needs[: c.n]) if need]
        else:
            outs = [s] * _n_outputs(c)
        result.append((outs, ins))
    return result


def _n_outputs(c: _Call) -> int:
    if c.kind == "backward":
        return sum(bool(x) for x in c.needs[: c.n])
    if c.kind == "mutable":
        return len(c.b.outputs)
    return len(c.b.returned)


def _strategy_function(b, kind: str, api):
    inout = tuple(b.inout_pos) if kind == "mutable" else ()

    def strategy(op_schema):
        args = op_schema.args_schema
        kwargs = op_schema.kwargs_schema
        single = strategies(b, kind, args, kwargs, api.is_strategy)
        if not api.rewrites_dims and _Call(b, kind, args, kwargs, api.is_strategy).has_static_dims():
            single = single[:1]  # fixed global dims, no adjuster to rewrite them per shard: replicated only
        nout = len(single[0][0])
        full = [[api.placement(x) for x in outs + ins] for outs, ins in single]
        if inout:
            full = _keep_inout_placements(b, op_schema, full, nout, inout, api)
        return api.expand(op_schema, full, nout)

    return strategy


def _keep_inout_placements(b, op_schema, full: list, nout: int, inout: tuple, api) -> list:
    """Only the strategies that leave each in-out array where it is (it is updated in place)."""
    args = op_schema.args_schema
    mesh_ndim = None
    current = {}
    for i in inout:
        placements = api.current_placements(args[i])
        current[i] = placements
        mesh_ndim = len(placements)
    kept = []
    for row in full:
        if all(all(p == row[nout + i] for p in current[i]) for i in inout):
            kept.append(row)
    if kept:
        return kept
    i = inout[0]
    allowed = sorted({repr(row[nout + i]) for row in full})
    raise UnsupportedError(
        f"op {b.label!r}: the mutating operator updates in-out parameter {b.call_params[i].name!r} in place, "
        f"so it cannot move it from where it lies ({', '.join(map(repr, current[i]))} on a {mesh_ndim}-d mesh); "
        f"this op takes it as {' or '.join(allowed)}: redistribute it first, or call the op itself (op(...)), "
        "which runs the functional operator and copies the result into it"
    )


def _adjuster(b, kind: str, api):
    """Rewrites global launch/output dims of a call that runs per shard to the shard's dims."""

    def adjust(input_specs, schema):
        args, kwargs = schema.args_schema, schema.kwargs_schema
        c = _Call(b, kind, args, kwargs, api.is_spec)
        if not c.has_static_dims():
            return schema  # launch and outputs are sized by the local arrays themselves
        ld = c.launch_dims()
        first = b.first_array
        shape, local = c.shape(first), api.local_shape(args[first])
        # sharded launch dims are the first array's (the strategy checked it); the others are whole
        local_ld = [local[q] if q < len(shape) and shape[q] == ld[q] else ld[q] for q in range(len(ld))]
        new = list(c.args)
        new[c.dims_at] = local_ld
        for j in range(len(b.outputs)):
            od = c.explicit_output_dims(j)
            if od is None:
                continue  # sized by the (local) launch dims
            od = list(od)
            for q in range(min(len(ld), b.outputs[j].ndim, len(od))):
                if od[q] == ld[q]:
                    od[q] = local_ld[q]
            new[c.dims_at + 1 + j] = od
        # every argument by position (the schema takes them so)
        return api.schema_with(schema, tuple(new))

    return adjust
