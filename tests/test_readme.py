"""The README's runnable example runs as written (in a subprocess, from a file: Warp needs kernel source)."""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_readme_vecmat_example_runs(tmp_path):
    text = open(os.path.join(ROOT, "README.md")).read()
    section = text.split("## Example: vectors, matrices, several outputs", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    code += (
        "\nassert d.shape == (n,) and e.shape == (n, 3) and f.shape == (n, 2, 2)"
        "\nassert w.shape == (n,) and w.ptr == b.ctypes.data\n"
        "print('ok')\n"
    )
    path = tmp_path / "readme_example.py"
    path.write_text(code)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("ok")


def test_readme_parameter_order_and_tile_example_runs(tmp_path):
    """The contract's example: an output before a scalar, a tile kernel with block_dim (described and per call)."""
    text = open(os.path.join(ROOT, "README.md")).read()
    section = text.split("- `block_dim` (tile kernels)", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    code = code.replace("seg(np.ones(4", "got_seg = seg(np.ones(4", 1).replace(
        "norms(np.ones((3, 8), np.float32))  ", "got_norms = norms(np.ones((3, 8), np.float32))  ", 1
    )
    code += (
        "\nimport numpy as np"
        "\nnp.testing.assert_array_equal(got_seg, [1.0, 3.0])"
        "\nnp.testing.assert_array_equal(got_norms, [8.0, 8.0, 8.0])"
        "\nnp.testing.assert_array_equal(wide, [8.0, 8.0, 8.0])"
        "\nassert norms.with_block_dim(128).description.block_dim == 128\n"
        "print('ok')\n"
    )
    path = tmp_path / "readme_tile_example.py"
    path.write_text(code)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("ok")
