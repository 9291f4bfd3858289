"""What ``torch.utils.checkpoint`` (non-reentrant) adds per call of an op, against what it adds per
call of an empty ``autograd.Function`` that saves the same tensors (issue 49 item 5).

``python -m benchmarks.checkpoint_cost``: a chain of K calls of the cloth's spring op on a 4x4
cloth (per-call overhead only: the kernels cost almost nothing), forward+backward, plain and inside
one non-reentrant checkpoint; the same chain of an empty Function. The difference per call is what
the checkpoint's saved-tensor hooks (pack in the forward, pack and unpack in the recomputation,
the metadata check of each recomputed tensor) and its recomputation cost; when it is the same for
both, the op adds nothing of its own under the hooks.
"""

from __future__ import annotations

import statistics
import time

K = 50


def main() -> None:
    import torch
    import warp as wp
    from torch.utils.checkpoint import checkpoint

    from examples import cloth

    wp.config.quiet = True
    sc = cloth.scene(4, 4)
    springs_op, _, _ = cloth.ops(sc.n)
    cpu = torch.device("cpu")
    x = torch.tensor(sc.x0, device=cpu, requires_grad=True)
    v = torch.zeros_like(x, requires_grad=True)
    sp, rest = torch.tensor(sc.springs, device=cpu), torch.tensor(sc.rest, device=cpu)

    class Empty(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, v, sp, rest):
            ctx.save_for_backward(x, v, sp, rest)
            return torch.zeros_like(x)

        @staticmethod
        def backward(ctx, g):
            ctx.saved_tensors  # noqa: B018 (unpacked, as the op's backward does)
            return g, g, None, None

    def ours(x, v):
        for _ in range(K):
            x = x + springs_op(x, v, sp, rest, cloth.KE, cloth.KD)
        return x

    def empty(x, v):
        for _ in range(K):
            x = x + Empty.apply(x, v, sp, rest)
        return x

    rows = {
        "interop op": lambda: ours(x, v).sum().backward(),
        "interop op, checkpointed": lambda: checkpoint(ours, x, v, use_reentrant=False).sum().backward(),
        "empty Function": lambda: empty(x, v).sum().backward(),
        "empty Function, checkpointed": lambda: checkpoint(empty, x, v, use_reentrant=False).sum().backward(),
    }
    for f in rows.values():
        f()
        f()
    ts: dict[str, list[float]] = {k: [] for k in rows}
    for _ in range(15):
        for k, f in rows.items():
            t0 = time.perf_counter()
            f()
            ts[k].append((time.perf_counter() - t0) / K * 1e6)
    m = {k: statistics.median(s) for k, s in ts.items()}
    print(f"per call, a chain of {K} (forward+backward, median of 15 interleaved rounds):")
    for k, us in m.items():
        print(f"  {k:32s} {us:7.1f} us")
    print(
        f"  checkpoint adds per call: interop op {m['interop op, checkpointed'] - m['interop op']:.1f} us, "
        f"empty Function {m['empty Function, checkpointed'] - m['empty Function']:.1f} us"
    )


if __name__ == "__main__":
    main()
