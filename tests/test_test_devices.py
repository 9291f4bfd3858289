"""The tests name the device of every array they make (issue 31, STYLE.md guideline 16).

On a machine with a GPU, Warp's and JAX's default device is the GPU: ``wp.array(x)`` lands on cuda:0 and
a reference ``wp.launch(..., device="cpu")`` on it crashes the worker; ``jnp.asarray(x)`` lands on the GPU
where a test assumed the CPU. This test reads every test module with ``ast`` and fails on a Warp, JAX or
torch constructor (or launch) that leaves the device to the default. A deliberate exception (a test of
the default device itself) carries the comment ``# default-device: <why>`` on one of the call's lines.
"""

from __future__ import annotations

import ast
import os

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
ALLOW = "# default-device:"

#: module alias -> function -> index of ``device`` among the positional parameters (None: keyword only)
CONSTRUCTORS = {
    "wp": {
        "array": None,
        "zeros": 2,
        "empty": 2,
        "ones": 2,
        "full": 3,
        "from_numpy": 3,
        "launch": 6,
        "launch_tiled": None,
    },
    "jnp": {
        n: None for n in ("asarray", "array", "arange", "zeros", "ones", "full", "empty", "linspace", "eye", "identity")
    },
    "torch": {
        n: None
        for n in (
            "tensor",
            "as_tensor",
            "zeros",
            "ones",
            "empty",
            "full",
            "arange",
            "linspace",
            "eye",
            "rand",
            "randn",
            "randint",
            "randperm",
        )
    },
}
#: JAX calls that take no ``device=`` and put their result on the default device; the test wraps them
#: in ``jax.device_put(..., device)`` (then they are fine) or makes the value another way
JAX_DEFAULT_ONLY = {("jax.random", "key"), ("jax.random", "PRNGKey")} | {
    ("jnp", t)
    for t in ("float16", "float32", "float64", "bfloat16", "int8", "int16", "int32", "int64", "uint8", "bool_")
}
#: where a launch names its stream, the stream names the device
DEVICE_KEYWORDS = {"device", "stream"}


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _names(func: ast.expr) -> tuple[str, str] | None:
    dotted = _dotted(func)
    if dotted is None or "." not in dotted:
        return None
    mod, _, fn = dotted.rpartition(".")
    mod = {"warp": "wp", "jax.numpy": "jnp"}.get(mod, mod)
    return mod, fn


def default_device_calls(source: str) -> list[tuple[int, str]]:
    """(line, call) for each array constructor or launch in ``source`` that names no device."""
    tree = ast.parse(source)
    lines = source.splitlines()
    wrapped: set[int] = set()  # calls that are the first argument of jax.device_put(x, device)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _dotted(node.func) == "jax.device_put" and len(node.args) >= 2:
            wrapped.add(id(node.args[0]))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        names = _names(node.func)
        if names is None:
            continue
        mod, fn = names
        bad = False
        if (mod, fn) == ("wp", "array") and not node.args and {k.arg for k in node.keywords} <= {"dtype", "ndim"}:
            continue  # a type (a kernel's annotation), not an array
        if mod in CONSTRUCTORS and fn in CONSTRUCTORS[mod]:
            index = CONSTRUCTORS[mod][fn]
            named = any(k.arg in DEVICE_KEYWORDS for k in node.keywords)
            positional = index is not None and len(node.args) > index
            spread = any(k.arg is None for k in node.keywords)  # **kwargs: cannot tell; name it explicitly
            bad = not (named or positional) or (spread and not named)
        elif names in JAX_DEFAULT_ONLY:
            bad = id(node) not in wrapped
        elif (mod, fn) == ("jax", "device_put"):
            bad = len(node.args) < 2 and not any(k.arg == "device" for k in node.keywords)
        if not bad or id(node) in wrapped:
            continue
        span = lines[node.lineno - 1 : node.end_lineno]
        if any(ALLOW in line for line in span):
            continue
        found.append((node.lineno, ast.get_source_segment(source, node).splitlines()[0]))
    return sorted(found)


def _checked_files() -> list[str]:
    files = [os.path.join(TESTS, f) for f in sorted(os.listdir(TESTS)) if f.endswith(".py")]
    return files + [os.path.join(ROOT, "conftest.py")]


@pytest.mark.parametrize("path", _checked_files(), ids=lambda p: os.path.relpath(p, ROOT))
def test_every_array_names_its_device(path):
    with open(path, encoding="utf-8") as f:
        calls = default_device_calls(f.read())
    where = "\n".join(f"  {os.path.relpath(path, ROOT)}:{line}: {call}" for line, call in calls)
    assert not calls, (
        f"{len(calls)} array constructor(s) or launch(es) leave the device to the default "
        f"(on a GPU machine that is the GPU); name it (device=..., jax.device_put(x, jax_device(...))) "
        f"or mark a deliberate one '{ALLOW} <why>':\n{where}"
    )


@pytest.mark.parametrize(
    "source, flagged",
    [
        ("wp.array(x)", True),
        ("wp.array(x, dtype=float, device='cpu')", False),
        ("wp.zeros(3, float, 'cpu')", False),
        ("wp.zeros(3, float)", True),
        ("wp.launch(k, dim=3, inputs=[a])", True),
        ("wp.launch(k, dim=3, inputs=[a], stream=s)", False),
        ("wp.zeros_like(a)", False),
        ("def k(a: wp.array(dtype=float)): pass", False),
        ("jnp.asarray(x)", True),
        ("jnp.asarray(x, device=d)", False),
        ("jax.numpy.ones(3)", True),
        ("jnp.float32(1.0)", True),
        ("jax.device_put(jnp.float32(1.0), d)", False),
        ("jax.device_put(x)", True),
        ("jax.random.key(0)", True),
        ("torch.zeros(3)", True),
        ("torch.zeros(3, device=d)", False),
        ("torch.from_numpy(a)", False),
        ("torch.ones(3, **kw)", True),
        ("wp.array(x)  # default-device: the test is about the default", False),
    ],
)
def test_the_checker_itself(source, flagged):
    assert bool(default_device_calls(source)) == flagged
