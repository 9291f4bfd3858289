"""Run a test's code in a fresh Python process: a segfault fails the test instead of killing pytest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def run_script(
    code: str,
    *argv: str,
    timeout: float = 600,
    env: dict | None = None,
    cwd: str | Path | None = None,
    tests_importable: bool = True,
    modules: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """Run ``code`` with this interpreter and command-line arguments ``argv``, the project (and ``tests``,
    unless ``tests_importable`` is false) importable, in ``cwd`` (default: the repository root); fail on
    a crash or a non-zero exit.

    The code is written to a file first (Warp reads kernels' source from their file); ``modules``
    (name -> source) are written next to it, importable by the child.
    Returns the completed process (stdout/stderr text) when it exited with status 0.
    """
    e = dict(os.environ)
    paths = [str(ROOT), str(ROOT / "tests")] if tests_importable else [str(ROOT)]
    e["PYTHONPATH"] = os.pathsep.join([*paths, e.get("PYTHONPATH", "")])
    e.update(env or {})
    with tempfile.TemporaryDirectory() as d:
        script = Path(d) / "child.py"
        script.write_text(textwrap.dedent(code))
        for name, source in (modules or {}).items():
            (Path(d) / f"{name}.py").write_text(textwrap.dedent(source))
        p = subprocess.run(
            [sys.executable, str(script), *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=e,
            cwd=str(cwd or ROOT),
        )
    if p.returncode != 0:
        how = f"signal {-p.returncode}" if p.returncode < 0 else f"status {p.returncode}"
        raise AssertionError(f"child process died with {how}\nstdout:\n{p.stdout[-4000:]}\nstderr:\n{p.stderr[-4000:]}")
    return p


def run_for_results(code: str, *argv: str, **kwargs) -> Any:
    """:func:`run_script`, then the JSON the child printed last on a line starting ``RESULTS ``."""
    p = run_script(code, *argv, **kwargs)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULTS ")]
    assert lines, f"no RESULTS line\nstdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-5000:]}"
    return json.loads(lines[-1][len("RESULTS ") :])
