"""nox sessions: tests, demo, benchmarks, lint.

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
