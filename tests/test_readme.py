"""The README's Python blocks run as written (each in a subprocess, from a file: Warp needs kernel source)."""

import importlib.util
import os
import re

import pytest
from _subprocess import run_script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run_block(code: str, cwd, timeout: float, expect_last: str | None = None):
    """Run README code in a fresh process from ``cwd``, the project importable (not ``tests``: blocks run as
    written); fail with its output if it fails; ``expect_last``: what its output must end with."""
    r = run_script(code, timeout=timeout, cwd=cwd, tests_importable=False)
    if expect_last is not None:
        assert r.stdout.strip().endswith(expect_last), r.stdout[-2000:]
    return r


def test_readme_vecmat_example_runs(tmp_path):
    text = open(os.path.join(ROOT, "README.md")).read()
    section = text.split("## Example: vectors, matrices, several outputs", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    code += (
        "\nassert d.shape == (n,) and e.shape == (n, 3) and f.shape == (n, 2, 2)"
        "\nassert w.shape == (n,) and w.ptr == b.ctypes.data\n"
        "print('ok')\n"
    )
    _run_block(code, tmp_path, timeout=300, expect_last="ok")


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
    _run_block(code, tmp_path, timeout=300, expect_last="ok")


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
    r = _run_block(code, tmp_path, timeout=600)
    # the values a block's comments promise are what it prints
    for expected in re.findall(r"print\(.*?\)\s+# (.+)$", code, re.M):
        first = expected.split(":")[0].split(" (")[0].strip()
        if first.startswith(("[", "tensor(", "42.0")):
            assert first in r.stdout.replace("\n", " ") or first in " ".join(r.stdout.split()), (first, r.stdout)
