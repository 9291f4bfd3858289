"""Exception types. Every bad-input error is an :class:`ArgumentError`, which is both a
``TypeError`` and a ``ValueError`` so callers may catch whichever their framework uses."""


class InteropError(Exception):
    """Base of warp-interop's errors."""


class ArgumentError(InteropError, TypeError, ValueError):
    """Bad input: the message names the op, the parameter, what was expected and what came."""


class UnsupportedError(InteropError, NotImplementedError):
    """A transformation or feature the op does not support; the message says what to do instead."""


def naming_op(e: BaseException, label: str) -> BaseException:
    """``e`` with a message that names op ``label``, of the same type where that type can be rebuilt.

    Used for failures the package does not cause but reports (a kernel that does not compile,
    an exception raised by a Python-function op or a hand-written backward): the caller can
    still catch the original type; the original exception is the new one's ``__cause__``.
    An exception whose type cannot be rebuilt from a message keeps its type and gets a note.
    """
    prefix = f"op {label!r}: "
    msg = str(e)
    if msg.startswith(prefix) or f"op {label!r}" in msg:
        return e
    try:
        new = type(e)(prefix + msg)
    except Exception:
        new = None
    if new is None or str(new) != prefix + msg:
        if hasattr(e, "add_note"):
            e.add_note(f"raised in op {label!r}")
        return e
    new.__cause__ = e
    new.__traceback__ = e.__traceback__
    return new


class BoundsError(InteropError, IndexError):
    """An array access out of range in a checked op (``interop.op(..., checked=True)`` or
    ``INTEROP_CHECKED=1``): the message names the op, the parameter, the index, the array's shape
    and the kernel's source line. The access was not made."""
