"""Where the nox sessions get PyTorch (issue 33 item 6): ``TORCH_CPU_INDEX``, else a local wheel in
pip's find-links folders, else PyTorch's own CPU index; when that fails (CI: no network but the
package registries) torch is left out, loudly, and the demo is told why. Never a CUDA build: the
requirement is the ``+cpu`` version, which PyPI does not have.

noxfile.py is loaded with a stand-in ``nox`` module (nox is not installed in the test environment)
and a stand-in session that records what it would install."""

from __future__ import annotations

import importlib.util
import os
import sys
import types

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class CommandFailed(Exception):
    pass


@pytest.fixture
def noxfile(monkeypatch):
    fake = types.ModuleType("nox")
    fake.options = types.SimpleNamespace()
    fake.session = lambda *a, **k: lambda f: f
    command = types.ModuleType("nox.command")
    command.CommandFailed = CommandFailed
    fake.command = command
    monkeypatch.setitem(sys.modules, "nox", fake)
    monkeypatch.setitem(sys.modules, "nox.command", command)
    monkeypatch.delenv("TORCH_CPU_INDEX", raising=False)
    spec = importlib.util.spec_from_file_location("interop_noxfile", os.path.join(ROOT, "noxfile.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "_pip_find_links", lambda: [])
    monkeypatch.setattr(mod, "_session_python", lambda session: mod.CI_PYTHON)
    return mod


class Session:
    def __init__(self, backend: str = "venv", fail_index: bool = False):
        self.venv_backend = backend
        self.fail_index = fail_index
        self.installs: list[tuple[tuple, dict]] = []
        self.warnings: list[str] = []

    def install(self, *args, **kw):
        self.installs.append((args, kw))
        if self.fail_index and any("download.pytorch.org" in a for a in args):
            raise CommandFailed("Could not fetch URL https://download.pytorch.org/whl/cpu/torch/")

    def log(self, *a):
        pass

    def warn(self, msg):
        self.warnings.append(msg)


def test_the_pinned_torch_is_a_cpu_build(noxfile):
    assert noxfile.TORCH.endswith("+cpu")
    assert noxfile.PYTORCH_CPU_INDEX == "https://download.pytorch.org/whl/cpu"


def test_torch_cpu_index_variable_comes_first(noxfile, monkeypatch):
    monkeypatch.setenv("TORCH_CPU_INDEX", "https://example.invalid/cpu")
    s = Session()
    assert noxfile._torch_source(s, "3.11", "ci.txt") == ["--extra-index-url", "https://example.invalid/cpu"]
    assert s.installs == []


def test_a_local_wheel_is_used_without_network(noxfile, monkeypatch, tmp_path):
    (tmp_path / f"torch-{noxfile.TORCH}-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    monkeypatch.setattr(noxfile, "_pip_find_links", lambda: [str(tmp_path)])
    s = Session()
    assert noxfile._torch_source(s, "3.11", "ci.txt") == ["--find-links", str(tmp_path)]
    assert s.installs == []


@pytest.mark.parametrize("backend", ["venv", "uv"])
def test_without_a_local_wheel_torch_comes_from_pytorchs_cpu_index(noxfile, backend):
    s = Session(backend)
    assert noxfile._torch_source(s, "3.11", "ci.txt") == []  # installed: nothing more to pass
    ((args, kw),) = s.installs
    assert args[-1] == f"torch=={noxfile.TORCH}"
    assert args[args.index("--extra-index-url") + 1] == "https://download.pytorch.org/whl/cpu"
    assert "-c" in args and args[args.index("-c") + 1].endswith(os.path.join("constraints", "ci.txt"))
    # an unreachable index fails fast
    if backend == "uv":
        assert kw["env"]["UV_HTTP_TIMEOUT"] and "--timeout" not in args
    else:
        assert "--timeout" in args and "--retries" in args
    assert s.warnings == [] and noxfile._LEFT_OUT == {}


def test_an_unreachable_index_leaves_torch_out_loudly_and_the_rest_installs(noxfile):
    s = Session(fail_index=True)
    noxfile._install(s, "torch,jax,paddle", "ci.txt")
    assert len(s.installs) == 2
    project_args = s.installs[-1][0]
    assert "-e" in project_args and project_args[project_args.index("-e") + 1] == ".[jax,paddle]"
    assert not any("download.pytorch.org" in a for a in project_args)
    (warning,) = s.warnings
    assert "PyTorch LEFT OUT" in warning and "https://download.pytorch.org/whl/cpu failed" in warning
    assert "failed" in noxfile._LEFT_OUT["torch"]  # handed to the demo (INTEROP_DEMO_LEFT_OUT)
