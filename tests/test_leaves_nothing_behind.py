"""The test suite leaves nothing behind outside the clone (issues 33 and 52).

A run makes its own temporary directory (conftest.py: TMPDIR for the run, its workers and child
processes), removes it at the end, and fails when something was left in it; the tests here run
pytest in a fresh process with TMPDIR pointed at a folder of their own and look at that folder."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.join(ROOT, "tests", "test_leaves_nothing_behind.py")


def _pytest(tmp, *tests: str, env_more: dict | None = None) -> subprocess.CompletedProcess:
    """pytest on ``tests`` in a fresh process whose temporary directory is ``tmp`` (the run's own
    temporary directory and torch.compile cache made afresh there by conftest.py)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHINDUCTOR_CACHE_DIR", "INTEROP_TESTS_TMPDIR")}
    env.update({"TMPDIR": str(tmp), **(env_more or {})})
    env.pop("PYTEST_XDIST_WORKER", None)
    code = (
        "import os, sys, pytest; "
        "rc = pytest.main(['-q', '-p', 'no:cacheprovider', '--rootdir', sys.argv[1], *sys.argv[2:]]); "
        "print('RUNTMP', os.environ['INTEROP_TESTS_TMPDIR']); print('CACHE', os.environ['TORCHINDUCTOR_CACHE_DIR']); "
        "sys.exit(rc)"
    )
    return subprocess.run(
        [sys.executable, "-c", code, ROOT, *tests], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600
    )


def _printed(r: subprocess.CompletedProcess, key: str) -> str:
    return next(line.split(" ", 1)[1] for line in r.stdout.splitlines() if line.startswith(key + " "))


def test_a_run_removes_its_temporary_directory_and_inductor_cache(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    r = _pytest(tmp, os.path.join(ROOT, "tests", "test_noxfile_torch.py") + "::test_the_pinned_torch_is_a_cpu_build")
    assert r.returncode == 0, r.stdout + r.stderr
    run_tmp, cache = _printed(r, "RUNTMP"), _printed(r, "CACHE")
    assert run_tmp.startswith(str(tmp)) and cache.startswith(run_tmp)  # made in the temporary directory...
    assert not os.path.exists(run_tmp)  # ...and gone
    assert os.listdir(tmp) == [], os.listdir(tmp)


def test_the_guide_and_the_cuda_builds_leave_nothing_in_the_temporary_directory(tmp_path):
    """The precompiled guide's block (its folder in a tempfile.TemporaryDirectory) and an sm_90 build
    by NVRTC (Warp's wp_pch_* folders, NVRTC's __nvrtc_auto_pch_*): the run passes, so its temporary
    directory held nothing but pytest's own folders at the end, and nothing is left beside it."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    guide = "tests/test_docs.py::test_python_block_runs_as_written[docs-guide-precompiled:what-is-checked-at-load-0]"
    build = "tests/test_cuda_codegen.py::test_tangent_kernel_compiles_for_cuda[rules-scalar]"
    r = _pytest(tmp, os.path.join(ROOT, guide), os.path.join(ROOT, build))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert os.listdir(tmp) == [], os.listdir(tmp)


def test_a_run_that_leaves_a_file_in_its_temporary_directory_fails_naming_it(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    r = _pytest(tmp, HERE + "::test_leave_a_file", env_more={"INTEROP_TEST_LEAVE_A_FILE": "1"})
    assert r.returncode == 1, r.stdout + r.stderr
    assert "1 passed" in r.stdout and "left 1 entries in its temporary directory" in r.stdout, r.stdout
    assert "interop-left-behind-" in r.stdout, r.stdout
    assert os.listdir(tmp) == [], os.listdir(tmp)  # removed all the same


def test_leave_a_file():
    """A helper of the test above (skipped otherwise): a test that leaves a file in the temporary directory."""
    if os.environ.get("INTEROP_TEST_LEAVE_A_FILE") != "1":
        pytest.skip("a helper of test_a_run_that_leaves_a_file_in_its_temporary_directory_fails_naming_it")
    import tempfile

    fd, _ = tempfile.mkstemp(prefix="interop-left-behind-")
    os.close(fd)


# ---- the README's test command leaves the clone as it found it (noxfile.py's tests session) ----
class _Session:
    """What the tests session's check calls on nox's session: ``log`` and ``error`` (which stops it)."""

    def __init__(self):
        self.logs: list[str] = []

    def log(self, msg):
        self.logs.append(msg)

    def error(self, msg):
        raise RuntimeError(msg)


def _noxfile(monkeypatch):
    import importlib.util
    import types

    fake = types.ModuleType("nox")
    fake.options = types.SimpleNamespace()
    fake.session = lambda *a, **k: lambda f: f
    command = types.ModuleType("nox.command")
    command.CommandFailed = type("CommandFailed", (Exception,), {})
    fake.command = command
    monkeypatch.setitem(sys.modules, "nox", fake)
    monkeypatch.setitem(sys.modules, "nox.command", command)
    spec = importlib.util.spec_from_file_location("interop_noxfile_clean", os.path.join(ROOT, "noxfile.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_tests_session_fails_when_the_run_changed_the_clone(monkeypatch, tmp_path):
    """In a git checkout (a scratch one here), a tracked file modified or a file left that git does not
    ignore fails the session, naming it; ignored files (.venv-nox/, .nox/) and an unchanged clone pass."""
    import shutil

    if shutil.which("git") is None:
        pytest.skip("no git here")
    nox = _noxfile(monkeypatch)
    repo = tmp_path / "clone"
    repo.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    shutil.copy(os.path.join(ROOT, ".gitignore"), repo / ".gitignore")
    (repo / "README.md").write_text("figures\n")
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "clone"]):
        subprocess.run(["git", *cmd], cwd=repo, env=env, check=True, capture_output=True)
    before = nox._git_status(str(repo))
    assert before == []
    (repo / ".venv-nox").mkdir()  # what the README's command makes: ignored
    (repo / ".nox").mkdir()
    (repo / ".nox" / "x").write_text("")
    session = _Session()
    nox._unchanged(session, before, str(repo))
    assert "unchanged" in session.logs[-1]
    (repo / "README.md").write_text("other figures\n")
    (repo / "tests.json").write_text("{}")
    with pytest.raises(RuntimeError) as e:
        nox._unchanged(_Session(), before, str(repo))
    assert "M README.md" in str(e.value) and "?? tests.json" in str(e.value), str(e.value)
    assert nox._git_status(str(tmp_path)) is None  # not a checkout: not checked, said so
    session = _Session()
    nox._unchanged(session, None, str(tmp_path))
    assert "not checked" in session.logs[-1]
