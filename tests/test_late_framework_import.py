"""Ops described before PyTorch is imported still compile with fullgraph=True: the adapter
loads (and registers the operators) right after ``import torch``, not inside the trace."""

import importlib.util
import textwrap

import pytest
from _subprocess import run_script

SCRIPT = textwrap.dedent(
    """
    import sys
    import warp as wp
    import interop
    from guide_kernels import saxpy

    wp.config.quiet = True

    op = interop.op(saxpy, name="late::saxpy")
    assert "torch" not in sys.modules
    import torch

    assert "adapters.torch" in sys.modules
    assert hasattr(torch.ops.late, "saxpy")
    f = torch.compile(lambda a, b: op(a, b, 2.0), fullgraph=True)
    print(f(torch.ones(3, device="cpu"), torch.ones(3, device="cpu")).tolist())
    """
)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")
def test_op_described_before_torch_import_compiles_fullgraph():
    r = run_script(SCRIPT)  # fails with the child's output if it fails
    assert r.stdout.strip().splitlines()[-1] == "[3.0, 3.0, 3.0]"


PADDLE_SCRIPT = textwrap.dedent(
    """
    import sys
    import warp as wp
    import interop
    from guide_kernels import saxpy

    wp.config.quiet = True

    op = interop.op(saxpy)
    assert "paddle" not in sys.modules
    import paddle

    assert "adapters.paddle" in sys.modules

    @paddle.jit.to_static(full_graph=False)
    def f(a, b):
        return op(a, b, 2.0) * 2

    x = paddle.ones([3])
    x.stop_gradient = False
    y = f(x, paddle.ones([3]))
    y.sum().backward()
    print(y.numpy().tolist(), x.grad.numpy().tolist())
    """
)


@pytest.mark.skipif(importlib.util.find_spec("paddle") is None, reason="paddle not installed")
def test_op_described_before_paddle_import_runs_under_to_static():
    r = run_script(PADDLE_SCRIPT)
    assert r.stdout.strip().splitlines()[-1] == "[6.0, 6.0, 6.0] [4.0, 4.0, 4.0]"
