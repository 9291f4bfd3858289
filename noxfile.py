"""nox sessions: tests, demo, benchmarks, lint, properties, soak.

Framework versions are pinned exactly (see pyproject extras): an unpinned torch
would download several GB of CUDA packages.
"""

import nox

nox.options.sessions = ["tests", "lint"]
nox.options.reuse_existing_virtualenvs = True

FRAMEWORKS = ".[torch,jax,paddle,test]"


@nox.session
def tests(session):
    """Run the test suite against every framework that installs here (CPU)."""
    session.install("-e", FRAMEWORKS)
    session.run("pytest", "-q", *session.posargs)


@nox.session
def properties(session):
    """Property-based tests at full size: INTEROP_PROPERTY_EXAMPLES cases per test and framework.

    Default 3,400 per test: NumPy runs 3 property tests (layouts, dtypes, in-out), PyTorch 4 (and
    gradients), JAX and Paddle 3 (layouts, dtypes, gradients): >= 10,200 cases per framework.
    Override with ``nox -s properties -- <count>``. Cases are drawn at random (not the CI's fixed set).
    """
    session.install("-e", FRAMEWORKS)
    count = session.posargs[0] if session.posargs else "3400"
    env = {"INTEROP_PROPERTY_EXAMPLES": count, "INTEROP_PROPERTY_RANDOM": "1"}
    session.run("pytest", "-q", "-p", "no:cacheprovider", "tests/test_properties.py", env=env)


@nox.session
def soak(session):
    """Long runs at the issue's full size: 5,000 distinct shapes and 500 dropped ops (tests/test_bounds.py),
    then 100,000 forward+backward calls per framework with changing shapes (resident MiB printed)."""
    session.install("-e", FRAMEWORKS)
    session.run("pytest", "-q", "-s", "-p", "no:cacheprovider", "tests/test_bounds.py", env={"INTEROP_SOAK_FULL": "1"})
    session.run("python", "tests/soak.py", *(session.posargs or ["100000"]))


@nox.session
def demo(session):
    """Wrap one kernel and run it through every installed framework."""
    session.install("-e", ".[torch,jax,paddle]")
    session.run("python", "examples/demo.py")


@nox.session
def bench(session):
    """Per-call overhead against the alternatives, ratios printed."""
    session.install("-e", ".[torch,jax,paddle]")
    # NVIDIA's warp_custom_op, compared against in the torch rows; --no-deps keeps torch pinned
    session.run(
        "python", "-m", "pip", "install", "-q", "--no-deps", "nvalchemi-toolkit-ops==0.5.0", success_codes=[0, 1]
    )
    session.run("python", "-m", "benchmarks", *session.posargs)


@nox.session
def lint(session):
    """ruff lint and format check."""
    session.install("ruff==0.17.5")
    session.run("ruff", "check", "interop", "adapters", "tests", "benchmarks", "examples")
    session.run("ruff", "format", "--check", "interop", "adapters")
