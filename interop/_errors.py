"""Exception types. Every bad-input error is an :class:`ArgumentError`, which is both a
``TypeError`` and a ``ValueError`` so callers may catch whichever their framework uses."""


class InteropError(Exception):
    """Base of warp-interop's errors."""


class ArgumentError(InteropError, TypeError, ValueError):
    """Bad input: the message names the op, the parameter, what was expected and what came."""


class UnsupportedError(InteropError, NotImplementedError):
    """A transformation or feature the op does not support; the message says what to do instead."""
