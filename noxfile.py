"""nox sessions: tests, demo, bench, lint, properties, soak, and the version matrix.

pyproject.toml declares the supported ranges; the exact versions every session installs are
in constraints/*.txt, so runs are reproducible. Environments are built with uv when it is
installed (``pip install "nox[uv]"``), else with venv + pip.

PyTorch: PyPI's Linux ``torch`` wheels are CUDA builds of several GB. The sessions install the
CPU build ``torch==2.13.0+cpu`` and only from a folder or index that has it: a folder in
pip's ``find-links`` setting (``PIP_FIND_LINKS`` or pip's config), or the index named by
``TORCH_CPU_INDEX`` (e.g. https://download.pytorch.org/whl/cpu). With neither, torch is left
out (its tests are skipped, and the session says so); a CUDA torch is never downloaded.

Matrix (each extra session runs only the tests of the framework it varies):
    tests             Python 3.11, torch 2.13.0 CPU, jax 0.10.2, paddle 3.3.1 (what CI runs)
    jax_newest        Python 3.12, jax/jaxlib 0.12.0.1, newest numpy and Warp
    jax_oldest        Python 3.11, the oldest jax/jaxlib pyproject.toml admits
    paddle_oldest     Python 3.11, the oldest paddlepaddle pyproject.toml admits
    gpu               the whole suite in the current environment (its CUDA builds), CUDA required
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys

import nox

nox.options.sessions = ["tests", "lint"]
nox.options.reuse_existing_virtualenvs = True
# uv if installed (fast, cached, hard-linked), else venv + pip; never download a Python
nox.options.default_venv_backend = "uv|venv"
os.environ.setdefault("UV_PYTHON_DOWNLOADS", "never")


def _pyenv_all_versions() -> None:
    """With pyenv, make every installed Python visible to the sessions (python3.12 etc.)."""
    if os.environ.get("PYENV_VERSION") or not shutil.which("pyenv"):
        return
    try:
        out = subprocess.run(["pyenv", "versions", "--bare"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return
    versions = [v for v in out.split() if v[:1].isdigit() and "/" not in v]
    if versions:
        # the default version first, so that plain python3 stays what it was
        default = subprocess.run(["pyenv", "version-name"], capture_output=True, text=True).stdout.strip()
        os.environ["PYENV_VERSION"] = ":".join(dict.fromkeys([default, *sorted(versions, reverse=True)]))


_pyenv_all_versions()

HERE = os.path.dirname(os.path.abspath(__file__))
CI_PYTHON = "3.11"  # the torch 2.13.0 CPU wheel is built for CPython 3.11
TORCH = "2.13.0+cpu"
JAX_TESTS = ["tests/test_jax_adapter.py", "tests/test_jax_conformance.py", "tests/test_jax_guide.py"]
JAX_TESTS += ["tests/test_jax_shard_map.py", "tests/test_jax_scaling.py", "tests/test_readme.py"]
PADDLE_TESTS = [
    "tests/test_paddle_autograd.py",
    "tests/test_paddle_conformance.py",
    "tests/test_paddle_errors.py",
    "tests/test_paddle_guide.py",
    "tests/test_paddle_paths.py",
    "tests/test_paddle_static.py",
    "tests/test_readme.py",
]


def _constraints(name: str) -> list[str]:
    return ["-c", os.path.join(HERE, "constraints", name)]


def _pip_find_links() -> list[str]:
    """Folders in pip's find-links setting (environment, then pip's config files)."""
    dirs = os.environ.get("PIP_FIND_LINKS", "").split()
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", "get", "global.find-links"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        dirs += out.split()
    except (OSError, subprocess.SubprocessError):
        pass
    return [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]


def _torch_source(session) -> list[str] | None:
    """pip/uv arguments that make the torch CPU build installable, or None (torch left out)."""
    if os.environ.get("TORCH_CPU_INDEX"):
        return ["--extra-index-url", os.environ["TORCH_CPU_INDEX"]]
    for d in _pip_find_links():
        if glob.glob(os.path.join(d, f"torch-{TORCH}-*.whl")):
            return ["--find-links", d]
    session.warn(
        f"torch left out: no torch-{TORCH} wheel in pip's find-links folders and TORCH_CPU_INDEX is not set "
        f"(PyPI's Linux torch is a several-GB CUDA build; this session never downloads it)."
    )
    return None


def _install(session, extras: str, constraints: str, *more: str) -> None:
    """Install the project (editable) with ``extras``, exact versions from ``constraints``."""
    args = []
    extras_list = [e for e in extras.split(",") if e]
    if "torch" in extras_list:
        src = _torch_source(session)
        if src is None:
            extras_list.remove("torch")
        else:
            args += src
    # progress: the installer's own output is shown (uv prints what it resolves and installs)
    session.install(*args, *_constraints(constraints), "-e", f".[{','.join(extras_list)}]", *more, silent=False)


@nox.session(python=CI_PYTHON)
def tests(session):
    """The test suite on the pinned combination CI runs (Python 3.11, torch, jax, paddle; CPU)."""
    _install(session, "torch,jax,paddle,test", "ci.txt")
    session.run("pytest", "-q", *session.posargs)


@nox.session(venv_backend="none")
def gpu(session):
    """The whole suite on a GPU machine, in the environment nox itself runs in (no install step: a
    GPU machine may have no network; install the project and the CUDA builds of the frameworks
    there first). CUDA parametrizations on, and a CUDA test that would be skipped for want of a GPU
    or of a framework's CUDA build fails instead (INTEROP_REQUIRE_CUDA=1).
    """
    env = {"INTEROP_TEST_DEVICES": "cpu,cuda", "INTEROP_REQUIRE_CUDA": "1"}
    session.run("python", "-m", "pytest", "-q", "-ra", "-p", "no:cacheprovider", *session.posargs, env=env)


@nox.session(python=CI_PYTHON)
def properties(session):
    """Property-based tests at full size: INTEROP_PROPERTY_EXAMPLES generated cases per test and framework.

    Default 3,400: the generated single calls (layouts x requires_grad x paths, 3,400 per framework),
    the sequences (850 per framework, 5-30 calls each: about 14,000 calls), the older layout/dtype/
    in-out/gradient properties (3,400 each), every import order (24), the interrupt storms (6 seeds
    per framework) and the describe/drop loops (340 ops per framework): well over 10,000 cases per
    framework. Counts per framework and dimension are printed at the end (and written to
    property-counts.json). Override with ``nox -s properties -- <count> [pytest args]``. Cases are
    drawn at random (not the CI's fixed set).
    """
    _install(session, "torch,jax,paddle,test", "ci.txt")
    count = session.posargs[0] if session.posargs else "3400"
    env = {
        "INTEROP_PROPERTY_EXAMPLES": count,
        "INTEROP_PROPERTY_RANDOM": "1",
        "INTEROP_PROPERTY_COUNTS": os.path.join(HERE, "property-counts.json"),
    }
    files = sorted(glob.glob(os.path.join("tests", "test_properties*.py")))
    session.run("pytest", "-q", "-p", "no:cacheprovider", *files, *session.posargs[1:], env=env)


@nox.session(python=CI_PYTHON)
def soak(session):
    """Long runs at the issue's full size: 5,000 distinct shapes and 500 dropped ops (tests/test_bounds.py),
    then 100,000 forward+backward calls per framework with changing shapes (resident MiB printed)."""
    _install(session, "torch,jax,paddle,test", "ci.txt")
    session.run("pytest", "-q", "-s", "-p", "no:cacheprovider", "tests/test_bounds.py", env={"INTEROP_SOAK_FULL": "1"})
    session.run("python", "tests/soak.py", *(session.posargs or ["100000"]))


@nox.session(python=CI_PYTHON)
def demo(session):
    """Wrap one kernel and run it through every installed framework (same pins as ``tests``)."""
    _install(session, "torch,jax,paddle", "ci.txt")
    session.run("python", "examples/demo.py", *session.posargs)


@nox.session(python=CI_PYTHON)
def bench(session):
    """Per-call overhead against the alternatives: ratios printed, chart written to benchmarks/results.png."""
    _install(session, "torch,jax,paddle", "ci.txt", "matplotlib")
    # NVIDIA's warp_custom_op, compared against in the torch rows; --no-deps keeps torch pinned
    session.install("--no-deps", "nvalchemi-toolkit-ops==0.5.0", success_codes=[0, 1, 2])
    session.run("python", "-m", "benchmarks", *session.posargs)


@nox.session(python=CI_PYTHON)
def lint(session):
    """ruff lint, ruff format check (every Python folder), mypy on interop/ and adapters/."""
    session.install(*_constraints("lint.txt"), "ruff", "mypy", "numpy", "warp-lang", silent=False)
    folders = ["interop", "adapters", "tests", "benchmarks", "examples", "noxfile.py", "conftest.py"]
    session.run("ruff", "check", *folders)
    session.run("ruff", "format", "--check", *folders)
    session.run("mypy", "interop", "adapters")


@nox.session(python="3.12")
def jax_newest(session):
    """JAX tests on the newest JAX (0.12.0.1 needs Python >= 3.12), newest numpy and Warp."""
    _install(session, "jax,test", "jax-newest.txt")
    session.run("pytest", "-q", *JAX_TESTS, *session.posargs)


@nox.session(python=CI_PYTHON)
def jax_oldest(session):
    """JAX tests on the oldest jax/jaxlib that pyproject.toml admits."""
    _install(session, "jax,test", "jax-oldest.txt")
    session.run("pytest", "-q", *JAX_TESTS, *session.posargs)


@nox.session(python=CI_PYTHON)
def paddle_oldest(session):
    """Paddle tests on the oldest paddlepaddle that pyproject.toml admits."""
    _install(session, "paddle,test", "paddle-oldest.txt")
    session.run("pytest", "-q", *PADDLE_TESTS, *session.posargs)
