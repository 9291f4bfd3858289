"""examples/demo.py tells the story: the kernel, the op line, every output and gradient compared,
one zero-copy convert round trip, and no third-party warnings."""

import importlib.util
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_demo_names_the_reason_the_installer_gave_for_a_framework_left_out(monkeypatch):
    """``nox -s demo`` passes why it left a framework out (INTEROP_DEMO_LEFT_OUT, JSON by framework):
    the demo's last line gives it for a framework that is not installed."""
    spec = importlib.util.spec_from_file_location("interop_demo", os.path.join(ROOT, "examples", "demo.py"))
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    monkeypatch.setenv("INTEROP_DEMO_LEFT_OUT", '{"torch": "no CPU wheel found locally, and the CPU index failed"}')
    assert demo._why_not_installed("torch") == "not installed: no CPU wheel found locally, and the CPU index failed"
    assert demo._why_not_installed("cupy") == "not installed"
    monkeypatch.setenv("INTEROP_DEMO_LEFT_OUT", "not json")
    assert demo._why_not_installed("torch") == "not installed"


def test_demo_output():
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "demo.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "def wave(" in out and "w[i] = v[i] * x[i]" in out  # the kernel source
    assert 'OP = interop.op(wave, outputs=2, name="demo::wave")' in out
    frameworks = ["numpy", "warp"] + [fw for fw in ("torch", "jax", "paddle") if importlib.util.find_spec(fw)]
    with_grads = len(frameworks) - 1  # NumPy has no autograd
    # the last two lines: what ran and agreed, then every framework left out and why (issue 33 item 6:
    # "PyTorch LEFT OUT" in the installer's first lines must not scroll away unseen)
    agree, left = out.rstrip().splitlines()[-2:]
    compared = re.findall(r"^    (y|w|dloss/dx|dloss/dv) +=.*max \|diff\| \S+  agrees$", out, re.M)
    cupy_rows = 2 if "cupy" in agree else 0  # where a GPU and CuPy are: its forward's two rows
    assert len(compared) == 2 * len(frameworks) + 2 * with_grads + cupy_rows, out
    assert "MISMATCH" not in out
    assert (
        agree
        == f"all frameworks run ({', '.join(frameworks + (['cupy'] if 'cupy' in agree else []))}) agree with the reference"
    )
    missing = [fw for fw in ("torch", "jax", "paddle", "cupy") if fw not in frameworks and fw not in agree]
    if missing:
        assert left.startswith("left out: ") and all(f"{fw} (" in left for fw in missing), left
    else:
        assert left == "left out: none", left
    if "torch" in frameworks:
        ptrs = re.findall(r"^    (?:torch|jax|numpy|paddle) +(0x[0-9a-f]+)  ", out, re.M)
        assert len(ptrs) >= 3 and len(set(ptrs)) == 1, out
        assert "same memory: True" in out
    # no third-party warnings (Warp's CUDA driver notice, Paddle's ccache notice, ...)
    assert not re.search(r"warn", r.stderr, re.I), r.stderr
    assert not re.search(r"warning", out, re.I), out
