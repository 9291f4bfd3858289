"""Ops described before PyTorch is imported still compile with fullgraph=True: the adapter
loads (and registers the operators) right after ``import torch``, not inside the trace."""

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent(
    """
    import sys
    import warp as wp
    import interop

    wp.config.quiet = True

    @wp.kernel
    def saxpy(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float, out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = a * x[i] + y[i]

    op = interop.op(saxpy, name="late::saxpy")
    assert "torch" not in sys.modules
    import torch

    assert "adapters.torch" in sys.modules
    assert hasattr(torch.ops.late, "saxpy")
    f = torch.compile(lambda a, b: op(a, b, 2.0), fullgraph=True)
    print(f(torch.ones(3), torch.ones(3)).tolist())
    """
)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")
def test_op_described_before_torch_import_compiles_fullgraph(tmp_path):
    path = tmp_path / "late.py"
    path.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == "[3.0, 3.0, 3.0]"


PADDLE_SCRIPT = textwrap.dedent(
    """
    import sys
    import warp as wp
    import interop

    wp.config.quiet = True

    @wp.kernel
    def saxpy(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float, out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = a * x[i] + y[i]

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
def test_op_described_before_paddle_import_runs_under_to_static(tmp_path):
    path = tmp_path / "late_paddle.py"
    path.write_text(PADDLE_SCRIPT)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == "[6.0, 6.0, 6.0] [4.0, 4.0, 4.0]"
