"""Run a test's code in a fresh Python process: a segfault fails the test instead of killing pytest."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_script(code: str, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``code`` with this interpreter, the project (and ``tests``) importable; fail on a crash.

    The code is written to a file first (Warp reads kernels' source from their file).
    Returns the completed process (stdout/stderr text) when it exited with status 0.
    """
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests"), e.get("PYTHONPATH", "")])
    e.update(env or {})
    with tempfile.TemporaryDirectory() as d:
        script = Path(d) / "child.py"
        script.write_text(textwrap.dedent(code))
        p = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=timeout, env=e, cwd=str(ROOT)
        )
    if p.returncode != 0:
        how = f"signal {-p.returncode}" if p.returncode < 0 else f"status {p.returncode}"
        raise AssertionError(f"child process died with {how}\nstdout:\n{p.stdout[-4000:]}\nstderr:\n{p.stderr[-4000:]}")
    return p
