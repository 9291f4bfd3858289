"""The tests name the device of every array they make (issue 31, STYLE.md guideline 16).

On a machine with a GPU, Warp's and JAX's default device is the GPU: ``wp.array(x)`` lands on cuda:0 and
a reference ``wp.launch(..., device="cpu")`` on it crashes the worker; ``jnp.asarray(x)`` lands on the GPU
where a test assumed the CPU. This test reads every test module with ``ast`` and fails on a Warp, JAX or
torch constructor (or launch), or a ``paddle.to_tensor`` without ``place=``, that leaves the device to the
default. A deliberate exception (a test of the default device itself) carries the comment
``# default-device: <why>`` on one of the call's lines.

Scripts that a test runs in a child process (tests/_subprocess.py's ``run_script``, ``python -c``, a file
it writes) are Python source held in string literals: a string literal that parses as Python and imports
something is read as such a script (an f-string with its fields, or a ``str.format`` template with its
fields, read as names) and checked the same way, nested scripts too.
"""

from __future__ import annotations

import ast
import os
import string
import textwrap

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
    "paddle": {"to_tensor": 2},
}
#: JAX calls that take no ``device=`` and put their result on the default device; the test wraps them
#: in ``jax.device_put(..., device)`` (then they are fine) or makes the value another way
JAX_DEFAULT_ONLY = {("jax.random", "key"), ("jax.random", "PRNGKey")} | {
    ("jnp", t)
    for t in ("float16", "float32", "float64", "bfloat16", "int8", "int16", "int32", "int64", "uint8", "bool_")
}
#: the keywords that name the device, per module (where a launch names its stream, the stream names it)
DEVICE_KEYWORDS = {"wp": {"device", "stream"}, "jnp": {"device"}, "torch": {"device"}, "paddle": {"place"}}


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


def _template_source(template: str) -> str | None:
    """A ``str.format`` template with each field read as a name (``{{`` as ``{``), or None."""
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError:
        return None
    return "".join(text + ("" if name is None else "_field_") for text, name, _, _ in parts)


def _script_source(text: str) -> str | None:
    """The source of the script ``text`` is (several lines of Python that import something), or None."""
    if "\n" not in text:
        return None
    text = textwrap.dedent(text)
    for candidate in (text, _template_source(text)):
        if candidate is None:
            continue
        try:
            tree = ast.parse(candidate)
        except SyntaxError:
            continue
        # (a script's own string literals are not walked: a script nested in one is found from it)
        if any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(tree)):
            return candidate
        return None
    return None


def scripts(tree: ast.AST) -> list[tuple[int, str]]:
    """(first line, source) of each string literal in ``tree`` that is a script run in a child process
    (an f-string's fields read as names)."""
    found = []
    parts_of_fstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts_of_fstrings.update(id(v) for v in node.values)
            text = "".join(v.value if isinstance(v, ast.Constant) else "_field_" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in parts_of_fstrings:
            text = node.value
        else:
            continue
        script = _script_source(text)
        if script is not None:
            found.append((node.lineno, script))
    return found


def default_device_calls(source: str) -> list[tuple[int, str]]:
    """(line, call) for each array constructor or launch in ``source`` that names no device, in the
    scripts its string literals hold too (at the line of ``source`` where the script's line is)."""
    tree = ast.parse(source)
    found = _calls_without_device(tree, source)
    for first, script in scripts(tree):
        found += [(first + line - 1, call) for line, call in default_device_calls(script)]
    return sorted(found)


def _calls_without_device(tree: ast.AST, source: str) -> list[tuple[int, str]]:
    lines = source.splitlines()
    # calls that are the first argument of jax.device_put(x, device), or inside a block
    # ``with jax.default_device(device):``
    wrapped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _dotted(node.func) == "jax.device_put" and len(node.args) >= 2:
            wrapped.add(id(node.args[0]))
        if isinstance(node, ast.With) and any(
            isinstance(item.context_expr, ast.Call)
            and _dotted(item.context_expr.func) == "jax.default_device"
            and item.context_expr.args
            for item in node.items
        ):
            wrapped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
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
            named = any(k.arg in DEVICE_KEYWORDS[mod] for k in node.keywords)
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
    return found


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
        ("with jax.default_device(d):\n    x = jnp.ones(3)\n    k = jax.random.key(0)", False),
        ("with jax.default_device(d):\n    pass\nx = jnp.ones(3)", True),
        ("paddle.to_tensor(x)", True),
        ("paddle.to_tensor(x, stop_gradient=False)", True),
        ("paddle.to_tensor(x, place=paddle.CPUPlace())", False),
        ("paddle.to_tensor(x, 'float32', p)", False),
        # scripts run in a child process: string literals of Python that imports something
        ('CHILD = """\nimport warp as wp\nx = wp.zeros(3)\n"""', True),
        ('CHILD = """\nimport warp as wp\nx = wp.zeros(3, device="cpu")\n"""', False),
        ('run_script("""\n    import torch\n    t = torch.ones(3)\n    """)', True),
        ('CHILD = f"""\nimport torch\nt = torch.ones({n})\n"""', True),
        ('CHILD = f"""\nimport torch\nt = torch.ones({n}, device={dev!r})\n"""', False),
        ('CHILD = """\nimport jax.numpy as jnp\nd = {{"x": jnp.ones(3)}}\nn = {n!r}\n"""', True),  # .format()
        ('CHILD = """\nimport paddle\nt = paddle.to_tensor([1.0])\n"""', True),
        ('CHILD = """\nimport jax\nk = jax.random.key(0)  # default-device: why\n"""', False),
        ("OUTER = \"\"\"\nimport sys\nINNER = '''\nimport warp as wp\nwp.ones(2)\n'''\n\"\"\"", True),
        ('NOTE = """\nwp.zeros(3) is a snippet in prose,\nnot a script: nothing imported\n"""', False),
    ],
)
def test_the_checker_itself(source, flagged):
    assert bool(default_device_calls(source)) == flagged


def test_a_script_s_call_is_reported_at_its_line_in_the_file():
    source = 'X = 1\n\nCHILD = """\nimport warp as wp\na = wp.zeros(3, device="cpu")\nb = wp.ones(3)\n"""\n'
    assert default_device_calls(source) == [(6, "wp.ones(3)")]


def test_the_scripts_of_the_tests_are_found():
    """The scripts the tests run in child processes are read (as run_script's, as ``python -c``'s, as
    f-strings and ``str.format`` templates): a rule that found none would pass vacuously."""
    found = {}
    for path in _checked_files():
        with open(path, encoding="utf-8") as f:
            found[os.path.basename(path)] = len(scripts(ast.parse(f.read())))
    for name in ("test_threads.py", "test_bounds.py", "test_imports.py", "test_user_examples.py"):
        assert found[name] >= 1, (name, found[name])
    assert sum(found.values()) >= 40, found
