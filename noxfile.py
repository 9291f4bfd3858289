"""nox sessions: tests, demo, bench, measure, lint, properties, soak, and the version matrix.

pyproject.toml declares the supported ranges; the exact versions every session installs are
in constraints/*.txt, so runs are reproducible. Environments are built with uv when it is
installed (``pip install "nox[uv]"``), else with venv + pip.

PyTorch: PyPI's Linux ``torch`` wheels are CUDA builds of several GB. The sessions install the
CPU build ``torch==2.13.0+cpu`` and only from a folder or index that has it: the index named by
``TORCH_CPU_INDEX``, else a folder in pip's ``find-links`` setting (``PIP_FIND_LINKS`` or pip's
config) holding the wheel, else PyTorch's own CPU index (https://download.pytorch.org/whl/cpu).
When that index cannot be reached (CI: no network but the package registries), torch is left out,
loudly (its tests are skipped, and the demo's last line names it); a CUDA torch is never downloaded.

Python: ``tests``, ``demo`` and the other sessions on constraints/ci.txt run on Python 3.11 (the
torch 2.13.0 CPU wheel is built for it) and, where 3.11 is not found, on the first of 3.12 and 3.13
that is, with what that Python can have (torch left out, loudly, unless a CPU wheel for it is
available). With none of them a session fails (exit status 1) saying what to install; a missing
interpreter is never a "skipped" session with exit status 0.

Matrix (each extra session runs only the tests of the framework it varies):
    tests             Python 3.11, torch 2.13.0 CPU, jax 0.10.2, paddle 3.3.1 (what CI runs); changes nothing
    measure           the maintainer's: the suite and the benchmarks measured, the docs' figures and chart written
    jax_newest        Python 3.12, jax/jaxlib 0.12.0.1, newest numpy and Warp
    jax_oldest        Python 3.11, the oldest jax/jaxlib pyproject.toml admits
    paddle_oldest     Python 3.11, the oldest paddlepaddle pyproject.toml admits
    gpu               the whole suite in the current environment (its CUDA builds), CUDA required
    torch_2_11 ... torch_2_15   Python 3.11, the PyTorch tests on torch 2.11.0, 2.12.1, 2.13.0 (CPU build),
                      2.14.1, 2.15.0 (PyPI's CUDA builds, about 6 GB each; run on the CPU); not in CI
    torch_newest      the same on the newest torch (2.15.0); not in CI
    torch_below_floor torch 2.10.0: the first torch call refuses it (tests/test_torch_version.py); not in CI
    warp_1_16 ... warp_1_19     the whole suite on each supported Warp (the rest as in ci.txt); not in CI
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import time

import nox
from nox.command import CommandFailed

nox.options.sessions = ["tests", "lint", "docs"]
nox.options.reuse_existing_virtualenvs = True
# a session whose Python is missing fails (exit status 1) instead of being skipped with exit status 0
nox.options.error_on_missing_interpreters = True
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
SUPPORTED_PYTHONS = ("3.11", "3.12", "3.13")  # in order of preference
TORCH = "2.13.0+cpu"
TORCH_NEWEST = "2.15.0"


def _python_runs(version: str) -> bool:
    """Whether ``python<version>`` on PATH runs and is that version (a pyenv shim of a version
    not selected is on PATH but fails)."""
    exe = shutil.which(f"python{version}")
    if exe is None:
        return False
    try:
        r = subprocess.run(
            [exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0 and r.stdout.strip() == version


# the Python of the sessions a user runs (tests, demo, ...): 3.11 if found, else the next supported one.
# A one-element list: the environment is .nox/<session>-3-12 etc., so a session never reuses an
# environment made with another Python. Without any, False (no environment): the session fails.
USER_PYTHON = next((v for v in SUPPORTED_PYTHONS if _python_runs(v)), None)
USER_PYTHONS: list[str] | bool = [USER_PYTHON] if USER_PYTHON else False
NO_PYTHON = (
    f"no supported Python found: none of {', '.join('python' + v for v in SUPPORTED_PYTHONS)} runs from PATH. "
    "Install one, e.g. Python 3.11 (all frameworks, torch included): `sudo apt install python3.11 python3.11-venv`, "
    "`uv python install 3.11` or `pyenv install 3.11`, then run this command again"
)
JAX_TESTS = ["tests/test_jax_adapter.py", "tests/test_jax_conformance.py", "tests/test_jax_guide.py"]
JAX_TESTS += ["tests/test_jax_shard_map.py", "tests/test_jax_scaling.py", "tests/test_docs.py"]
JAX_TESTS += ["tests/test_jax_kept_tapes.py"]
PADDLE_TESTS = [
    "tests/test_paddle_autograd.py",
    "tests/test_paddle_conformance.py",
    "tests/test_paddle_errors.py",
    "tests/test_paddle_guide.py",
    "tests/test_paddle_paths.py",
    "tests/test_paddle_static.py",
    "tests/test_docs.py",
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


def _loud(session, *lines: str) -> None:
    """A warning that stands out in the session's output."""
    bar = "!" * 78
    session.warn("\n".join([bar, *lines, bar]))


def _session_python(session) -> str:
    """The session's Python as "3.X"; fails the session when there is none (no supported Python found)."""
    if not session.python:
        session.error(NO_PYTHON)
    version = session.run(
        "python", "-c", "import sys; print('%d.%d' % sys.version_info[:2])", silent=True, external=True
    ).strip()
    if version != CI_PYTHON:
        session.warn(
            f"This session runs on Python {version}, not {CI_PYTHON} (the one CI runs; not found, or another "
            "was forced): it installs what that Python can have."
        )
    return version


PYTORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# what the last _install left out, by framework (read by the demo session for its last line)
_LEFT_OUT: dict[str, str] = {}


def _torch_source(session, python: str, constraints: str) -> list[str] | None:
    """pip/uv arguments that make the torch CPU build installable for ``python``, or None (torch left out).

    Without ``TORCH_CPU_INDEX`` and a local wheel, torch is installed here from PyTorch's CPU index
    (the pin is a ``+cpu`` version, which PyPI does not have: never a CUDA build); if that fails (no
    network beyond the package registries), torch is left out, loudly."""
    if os.environ.get("TORCH_CPU_INDEX"):
        return ["--extra-index-url", os.environ["TORCH_CPU_INDEX"]]
    tag = "cp" + python.replace(".", "")
    for d in _pip_find_links():
        if glob.glob(os.path.join(d, f"torch-{TORCH}-{tag}-*.whl")):
            return ["--find-links", d]
    session.log(f"No torch {TORCH} wheel for Python {python} in pip's find-links folders: trying {PYTORCH_CPU_INDEX}")
    try:
        # short timeouts: an unreachable index fails in seconds, not after pip's default retries
        if getattr(session, "venv_backend", None) == "uv":
            opts, env = [], {"UV_HTTP_TIMEOUT": "20", "UV_HTTP_RETRIES": "1"}
        else:
            opts, env = ["--timeout", "20", "--retries", "1"], {}
        session.install(
            *opts, "--extra-index-url", PYTORCH_CPU_INDEX, *_constraints(constraints), f"torch=={TORCH}",
            env=env, silent=False,
        )  # fmt: skip
        return []  # installed: the project's install finds it satisfied
    except CommandFailed:
        pass
    why = f"no torch {TORCH} wheel for Python {python} ({tag}) found locally, and {PYTORCH_CPU_INDEX} failed"
    _LEFT_OUT["torch"] = why
    _loud(
        session,
        f"PyTorch LEFT OUT: {why} (no network?).",
        "PyPI's Linux torch is a CUDA build of several GB; this session never downloads it. The PyTorch",
        "parts are skipped. To include them: set TORCH_CPU_INDEX to an index with the CPU build, or put a",
        f"torch {TORCH} wheel for Python {python} in a find-links folder (PIP_FIND_LINKS).",
    )
    return None


def _install(session, extras: str, constraints: str, *more: str) -> None:
    """Install the project (editable) with ``extras``, exact versions from ``constraints``."""
    python = _session_python(session)
    args = []
    extras_list = [e for e in extras.split(",") if e]
    _LEFT_OUT.clear()
    if "torch" in extras_list:
        src = _torch_source(session, python, constraints)
        if src is None:
            extras_list.remove("torch")
        else:
            args += src
    # progress: the installer's own output is shown (uv prints what it resolves and installs)
    session.install(*args, *_constraints(constraints), "-e", f".[{','.join(extras_list)}]", *more, silent=False)


@nox.session(python=USER_PYTHONS)
def tests(session):
    """The test suite on the pinned combination CI runs (Python 3.11, torch, jax, paddle; CPU).

    Without Python 3.11: on 3.12 or 3.13, torch left out unless a CPU wheel for it is at hand.
    It changes nothing in the clone: in a git checkout, ``git status --porcelain`` after the run must
    be what it was before (the session fails otherwise, naming what changed). Measuring for the
    docs is ``nox -s measure``'s."""
    _install(session, "torch,jax,paddle,test", "ci.txt")
    # one worker per core (INTEROP_TEST_WORKERS overrides; 0 runs in this process): most of the time
    # is Warp building kernels and tests in subprocesses, which spread over the cores
    workers = os.environ.get("INTEROP_TEST_WORKERS", "auto")
    before = _git_status()
    start = time.monotonic()
    session.run("pytest", "-q", *(["-n", workers] if workers != "0" else []), *session.posargs)
    _within_budget(session, time.monotonic() - start)
    _unchanged(session, before)


def _git_status(root: str = HERE) -> list[str] | None:
    """``git status --porcelain`` of the clone as lines, or None where it cannot be read (no git, no checkout)."""
    try:
        r = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=all"],
            capture_output=True,
            text=True,
            cwd=root,
            timeout=120,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.splitlines() if r.returncode == 0 else None


def _unchanged(session, before: list[str] | None, root: str = HERE) -> None:
    """Fail the session when the run changed the clone (a tracked file modified, a file left that git
    does not ignore): the test command leaves a clone as it found it."""
    after = _git_status(root)
    if before is None or after is None:
        session.log("not a git checkout (or no git): whether the run changed the clone is not checked")
        return
    changed = sorted(set(after) ^ set(before))
    if changed:
        session.error(
            "the run changed the clone (git status --porcelain, before vs after):\n  "
            + "\n  ".join(changed)
            + "\nthe README's commands must leave the clone as they found it: find what writes there"
        )
    session.log("the clone is as the run found it (git status --porcelain unchanged)")


@nox.session(python=USER_PYTHONS)
def measure(session):
    """The maintainer's step that renews the published figures and the README's chart (commit them):
    a whole run of the suite (``docs/measurements/tests.json``), one run of the benchmarks
    (``docs/measurements/bench.json``), the training benchmark (``docs/training.png``, drawn with its
    date and machine, and its table ``benchmarks/results/training-cpu.txt``), the JAX transitions
    (``docs/measurements/jax-transitions.json``, the ``after`` runs), then
    ``python docs/figures.py --write``, which writes every figure of the README and the docs and
    draws ``benchmarks/results.png`` from them, with its date and machine. ``-- tests``, ``-- bench``,
    ``-- training`` or ``-- jax`` renews those measurements only.
    ``INTEROP_MACHINE_NOTE`` adds to the machine's description (e.g. "shared with other jobs").
    """
    _install(session, "torch,jax,paddle,test", "ci.txt", "matplotlib")
    parts = session.posargs or ["tests", "bench", "training", "jax"]
    if "tests" in parts:
        summary = os.path.join(HERE, "docs", "measurements", "tests.json")
        workers = os.environ.get("INTEROP_TEST_WORKERS", "auto")
        start = time.monotonic()
        session.run("pytest", "-q", *(["-n", workers] if workers != "0" else []), env={"INTEROP_TEST_SUMMARY": summary})
        _within_budget(session, time.monotonic() - start)
    if "bench" in parts:
        # NVIDIA's warp_custom_op, compared against in the torch rows; --no-deps keeps torch pinned
        session.install("--no-deps", "nvalchemi-toolkit-ops==0.5.0", success_codes=[0, 1, 2])
        note = os.environ.get("INTEROP_MACHINE_NOTE")
        out = os.path.join(HERE, "docs", "measurements", "bench.json")
        session.run("python", "-m", "benchmarks", "--json", out, *(["--machine-note", note] if note else []))
    if "training" in parts:
        table = session.run("python", "-m", "benchmarks", "--training", silent=True)
        head = f"# python -m benchmarks --training ({time.strftime('%Y-%m-%d')}, nox -s measure)\n\n"
        with open(os.path.join(HERE, "benchmarks", "results", "training-cpu.txt"), "w") as f:
            f.write(head + "".join(ln + "\n" for ln in str(table).splitlines() if not ln.startswith("Module ")))
    if "jax" in parts:
        out = os.path.join(HERE, "docs", "measurements", "jax-transitions.json")
        session.run("python", "-m", "benchmarks", "--jax-transitions", "--json", out, "--label", "after")
    session.run("python", os.path.join("docs", "figures.py"), "--write")


#: the README's test command's budget on the project's 2-core machine (DEVELOPERS.md), and how far
#: past it a run fails the session: a suite that doubled is caught the day it does, not at CI's limit
TEST_BUDGET_S = 15 * 60
TEST_BUDGET_MARGIN = 1.5


def _within_budget(session, wall: float) -> None:
    """Print the suite's wall time against its budget; fail far past it (a whole run only)."""
    session.log(f"the test suite took {wall / 60:.1f} min (budget {TEST_BUDGET_S / 60:.0f} min)")
    if session.posargs:
        return  # a selection of tests says nothing about the whole suite's time
    if wall > TEST_BUDGET_S * TEST_BUDGET_MARGIN:
        session.error(
            f"the test suite took {wall / 60:.1f} min, past {TEST_BUDGET_MARGIN}x its budget of "
            f"{TEST_BUDGET_S / 60:.0f} min: find where the time goes (docs/measurements/tests.json, "
            "its slowest files) and move full-size runs to nox sessions of their own"
        )


@nox.session(venv_backend="none")
def gpu(session):
    """The whole suite on a GPU machine, in the environment nox itself runs in (no install step: a
    GPU machine may have no network; install the project and the CUDA builds of the frameworks
    there first). CUDA parametrizations on, and a CUDA test that would be skipped for want of a GPU
    or of a framework's CUDA build fails instead (INTEROP_REQUIRE_CUDA=1).
    """
    env = {"INTEROP_TEST_DEVICES": "cpu,cuda", "INTEROP_REQUIRE_CUDA": "1"}
    session.run("python", "-m", "pytest", "-q", "-ra", "-p", "no:cacheprovider", *session.posargs, env=env)


@nox.session(python=USER_PYTHONS)
def properties(session):
    """Property-based tests at full size: INTEROP_PROPERTY_EXAMPLES generated cases per test and framework.

    Default 3,400: the generated single calls (layouts x requires_grad x paths, 3,400 per framework),
    the struct calls (3,400), the tile calls (680), the index-array calls (gather/scatter, 3,400),
    the sequences (850 per framework, 5-30 calls each: about 14,000 calls), the older layout/dtype/
    in-out/gradient properties (3,400 each), every import order (24), the interrupt storms (6 seeds
    per framework) and the describe/drop loops (340 ops per framework): well over 10,000 generated
    cases per framework (each drawn call, the calls of a sequence each; the session fails below
    PROPERTY_MIN_CASES at this default size). Counts per framework and dimension, and the generated
    cases per framework, are printed at the end (and written to property-counts.json). Override with ``nox -s properties -- <count> [pytest args]``. Cases are
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
    if count == "3400" and not session.posargs[1:]:
        _check_property_totals(session, env["INTEROP_PROPERTY_COUNTS"], PROPERTY_MIN_CASES)


#: the generated cases per framework a full-size properties session must run (issue 50)
PROPERTY_MIN_CASES = 10_000


def _check_property_totals(session, path: str, minimum: int) -> None:
    """Fail the session when a framework ran fewer than ``minimum`` generated cases (the "cases"
    dimension of the counts written by conftest.py)."""
    with open(path) as f:
        table = json.load(f)
    totals = {fw: sum(dims.get("cases", {}).values()) for fw, dims in table.items()}
    session.log("generated cases per framework: " + ", ".join(f"{fw} {n:,}" for fw, n in totals.items()))
    short = {fw: n for fw, n in totals.items() if n < minimum}
    if short:
        session.error(f"fewer than {minimum:,} generated cases for {short}")


@nox.session(python=USER_PYTHONS)
def soak(session):
    """Long runs at the issue's full size: 5,000 distinct shapes and 500 dropped ops (tests/test_bounds.py),
    the eager JAX interrupt storms at 5,000 interrupts each (tests/test_jax_interrupts.py), then 100,000
    forward+backward calls per framework with changing shapes (resident MiB printed)."""
    _install(session, "torch,jax,paddle,test", "ci.txt")
    session.run("pytest", "-q", "-s", "-p", "no:cacheprovider", "tests/test_bounds.py", env={"INTEROP_SOAK_FULL": "1"})
    # the eager JAX interrupt storms at 5,000 landed interrupts each (a 0.1% leak caught with 99.3%)
    session.run(
        "pytest", "-q", "-p", "no:cacheprovider", "tests/test_jax_interrupts.py", env={"INTEROP_SOAK_FULL": "1"}
    )
    session.run("python", "tests/soak.py", *(session.posargs or ["100000"]))


@nox.session(python=USER_PYTHONS)
def demo(session):
    """Wrap one kernel and run it through every installed framework (same pins as ``tests``)."""
    _install(session, "torch,jax,paddle", "ci.txt")
    # the demo's last line names what was left out, with the reason found here
    env = {"INTEROP_DEMO_LEFT_OUT": json.dumps(_LEFT_OUT)}
    before = _git_status()
    session.run("python", "examples/demo.py", *session.posargs, env=env)
    _unchanged(session, before)  # the README's first command leaves the clone as it found it too


@nox.session(python=USER_PYTHONS)
def bench(session):
    """Per-call overhead against the alternatives: ratios printed (``-- --chart PATH`` draws them). The
    README's chart and the docs' figures are ``nox -s measure``'s."""
    _install(session, "torch,jax,paddle", "ci.txt", "matplotlib")
    # NVIDIA's warp_custom_op, compared against in the torch rows; --no-deps keeps torch pinned
    session.install("--no-deps", "nvalchemi-toolkit-ops==0.5.0", success_codes=[0, 1, 2])
    session.run("python", "-m", "benchmarks", *session.posargs)


@nox.session(python=USER_PYTHONS)
def lint(session):
    """ruff lint, ruff format check (every Python folder), mypy on interop/ and adapters/."""
    _session_python(session)
    session.install(*_constraints("lint.txt"), "ruff", "mypy", "numpy", "warp-lang", silent=False)
    folders = ["interop", "adapters", "tests", "benchmarks", "examples", "docs", "noxfile.py", "conftest.py"]
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


def _torch_tests(session, version: str, constraints: str) -> None:
    """Install the project with torch ``version`` (exact pins from ``constraints``) and run ``pytest -k torch``."""
    _session_python(session)
    session.install(*_constraints(constraints), "-e", ".[torch,test]", f"torch=={version}", silent=False)
    check = f"import torch; print('torch', torch.__version__); assert torch.__version__.startswith('{version}')"
    session.run("python", "-c", check)
    session.run("pytest", "-q", "-p", "no:cacheprovider", "-k", "torch", *session.posargs)


# One session per supported torch minor version (pyproject.toml's floor up to the newest on PyPI):
# the PyTorch tests on PyPI's Linux build of that release (CUDA builds of several GB with their
# nvidia-* packages, which run on the CPU; 2.13.0 is the CPU wheel CI uses). Not in CI (the size).
# Installed with pip (venv backend), so pip's own configuration (index, find-links, a mirror) applies.
TORCH_MINORS = {"2.11": ("2.11.0", "torch-2.11.txt"), "2.12": ("2.12.1", "torch-2.12.txt")}
TORCH_MINORS["2.13"] = (TORCH, "ci.txt")
TORCH_MINORS["2.14"] = ("2.14.1", "torch-2.14.txt")
TORCH_MINORS["2.15"] = (TORCH_NEWEST, "torch-newest.txt")


def _torch_minor_session(minor: str, version: str, constraints: str):
    def session_fn(session):
        if minor == "2.13":
            src = _torch_source(session, _session_python(session), constraints)  # the CPU wheel, as the tests session
            if src is None:
                session.error(f"torch {version} (CPU build) is not at hand: see the PyTorch note above")
            session.install(*src, *_constraints(constraints), "-e", ".[torch,test]", silent=False)
            session.run("python", "-c", "import torch; print('torch', torch.__version__)")
            session.run("pytest", "-q", "-p", "no:cacheprovider", "-k", "torch", *session.posargs)
        else:
            _torch_tests(session, version, constraints)

    session_fn.__doc__ = f"The PyTorch tests (``pytest -k torch``) on torch {version}, on the CPU; not in CI."
    session_fn.__name__ = f"torch_{minor.replace('.', '_')}"
    return nox.session(python=CI_PYTHON, venv_backend="venv", name=session_fn.__name__)(session_fn)


for _minor, (_version, _file) in TORCH_MINORS.items():
    globals()[f"torch_{_minor.replace('.', '_')}"] = _torch_minor_session(_minor, _version, _file)


# One session per supported Warp minor version (pyproject.toml's floor up to the newest): the whole
# suite on that Warp, everything else pinned as in ci.txt. Not in CI (CI runs 1.19).
WARP_MINORS = {"1.16": "1.16.0", "1.17": "1.17.0", "1.18": "1.18.0", "1.19": "1.19.0"}


def _warp_minor_session(minor: str, version: str):
    def session_fn(session):
        python = _session_python(session)
        with open(os.path.join(HERE, "constraints", "ci.txt")) as f:
            lines = f.read().splitlines()
        pins = [ln for ln in lines if not ln.lower().startswith("warp-lang==")]
        ci_warp = f"warp-lang=={version}" in lines
        path = os.path.join(session.create_tmp(), f"warp-{version}.txt")
        with open(path, "w") as f:
            f.write("\n".join([*pins, f"warp-lang=={version}"]) + "\n")
        extras, args = ["torch", "jax", "paddle", "test"], []
        src = _torch_source(session, python, "ci.txt")
        if src is None:
            extras.remove("torch")
        else:
            args += src
        session.install(*args, "-c", path, "-e", f".[{','.join(extras)}]", silent=False)
        check = f"import warp; print('warp', warp.__version__); assert warp.__version__ == '{version}'"
        session.run("python", "-c", check)
        # with INTEROP_MEASURE=1, a whole run is this version's measurement (docs/measurements/warp-1.XX.json:
        # counts per outcome, the figures of README.md's Status and docs/install.md); without, the
        # clone is left as found, as by the tests session
        workers = os.environ.get("INTEROP_TEST_WORKERS", "auto")
        # (CI's Warp: nox -s measure's run is that measurement, docs/measurements/tests.json)
        measure = os.environ.get("INTEROP_MEASURE") == "1" and not session.posargs and not ci_warp
        summary = os.path.join(HERE, "docs", "measurements", f"warp-{minor}.json")
        env = {"INTEROP_TEST_SUMMARY": summary} if measure else {}
        try:
            session.run(
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                *(["-n", workers] if workers != "0" else []),
                *session.posargs,
                env=env,
            )
        finally:
            if env:
                session.run("python", os.path.join("docs", "figures.py"), "--write", external=True)

    session_fn.__doc__ = (
        f"The whole suite on warp-lang {version} (the rest pinned as in ci.txt), on the CPU; not in CI. "
        f"With INTEROP_MEASURE=1 a whole run writes docs/measurements/warp-{minor}.json and the docs' figures from "
        "it (on CI's Warp, nox -s measure's run is that measurement)."
    )
    session_fn.__name__ = f"warp_{minor.replace('.', '_')}"
    return nox.session(python=USER_PYTHONS, name=session_fn.__name__)(session_fn)


for _minor, _version in WARP_MINORS.items():
    globals()[f"warp_{_minor.replace('.', '_')}"] = _warp_minor_session(_minor, _version)


@nox.session(python=CI_PYTHON, venv_backend="venv")
def torch_newest(session):
    """The PyTorch tests (``pytest -k torch``) on the newest torch on PyPI (2.15.0, as ``torch_2_15``):
    PyPI's CUDA build with its nvidia-* packages, about 6 GB (it runs on the CPU). Not in CI (the size)."""
    _torch_tests(session, TORCH_NEWEST, "torch-newest.txt")


@nox.session(python=CI_PYTHON, venv_backend="venv")
def torch_below_floor(session):
    """Torch 2.10.0, below the supported floor: the first torch call raises, naming the version and the
    range (tests/test_torch_version.py). torch is installed first and alone: the project's ``torch``
    extra would replace it."""
    _session_python(session)
    session.install(*_constraints("torch-2.10.txt"), "torch==2.10.0", silent=False)
    session.install(*_constraints("torch-2.10.txt"), "-e", ".[test]", "packaging", silent=False)
    session.run("pytest", "-q", "-p", "no:cacheprovider", "tests/test_torch_version.py", *session.posargs)


@nox.session(python=USER_PYTHONS)
def docs(session):
    """Build the documentation site from docs/ (MkDocs, ``--strict``: a warning fails the build) into site/.

    The API reference is read from the source by mkdocstrings (griffe): the package itself is not installed.
    ``nox -s docs -- serve`` serves it at http://127.0.0.1:8000 instead.
    """
    _session_python(session)
    # every measured figure in the README and the docs is its measurement's (docs/figures.py)
    session.run("python", os.path.join("docs", "figures.py"), "--check")
    session.install(*_constraints("docs.txt"), "mkdocs", "mkdocs-material", "mkdocstrings[python]", silent=False)
    env = {"NO_MKDOCS_2_WARNING": "1"}  # mkdocs-material's banner about MkDocs 2.0, printed on every build
    if session.posargs[:1] == ["serve"]:
        session.run("mkdocs", "serve", "--strict", *session.posargs[1:], env=env)
    else:
        session.run("mkdocs", "build", "--strict", "--site-dir", "site", *session.posargs, env=env)
