"""The README's Python blocks run as written (each in a subprocess, from a file: Warp needs kernel source)."""

import importlib.util
import os
import re
import subprocess
import sys

import pytest

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


def _blocks():
    """Every ```python block of the README: (id, code)."""
    text = open(os.path.join(ROOT, "README.md")).read()
    out = []
    heading = "top"
    for m in re.finditer(r"^(#{2,3} [^\n]*)$|^```python\n(.*?)^```", text, re.S | re.M):
        if m.group(1):
            heading = re.sub(r"[^a-z0-9]+", "-", m.group(1).lstrip("# ").lower()).strip("-")
            continue
        out.append((f"{heading}-{sum(1 for i, _ in out if i.startswith(heading + '-'))}", m.group(2)))
    return out


BLOCKS = _blocks()
FRAMEWORK_MODULES = ("torch", "jax", "paddle", "cupy")


def test_readme_has_the_examples_a_newcomer_needs():
    code = "\n".join(c for _, c in BLOCKS)
    assert len(BLOCKS) >= 8
    assert "def scale_then_add(x: wp.array" in code  # a Python-function op
    assert "in_axes=(None, None, 0)" in code  # jax.vmap with a scalar argument
    assert 'interop.convert(x, to="torch")' in code
    text = open(os.path.join(ROOT, "README.md")).read()
    assert text.index("## Installation") < text.index("## Quick start") < text.index("## Features")
    assert "(benchmarks/results.png)" in text and os.path.exists(os.path.join(ROOT, "benchmarks", "results.png"))


@pytest.mark.parametrize("code", [c for _, c in BLOCKS], ids=[i for i, _ in BLOCKS])
def test_readme_python_block_runs_as_written(code, tmp_path):
    """Each Python block of the README runs on its own, as written (blocks marked as needing a GPU
    run only where one is present; blocks for a framework that is not installed are skipped)."""
    if code.startswith("# needs a CUDA GPU"):
        import warp as wp

        if wp.get_cuda_device_count() == 0:
            pytest.skip("README block marked '# needs a CUDA GPU'; none found")
    imported = set(re.findall(r"^import ([\w, .]+)", code, re.M))
    names = {n.strip().split(".")[0].split(" ")[0] for line in imported for n in line.split(",")}
    missing = [m for m in FRAMEWORK_MODULES if m in names and importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"README block needs {', '.join(missing)} (not installed)")
    path = tmp_path / "readme_block.py"
    path.write_text(code)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    # the values a block's comments promise are what it prints
    for expected in re.findall(r"print\(.*?\)\s+# (.+)$", code, re.M):
        first = expected.split(":")[0].split(" (")[0].strip()
        if first.startswith(("[", "tensor(", "42.0")):
            assert first in r.stdout.replace("\n", " ") or first in " ".join(r.stdout.split()), (first, r.stdout)
