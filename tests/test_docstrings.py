"""The runnable examples in the public docstrings stay true."""

import doctest

import pytest

import interop._check_gradients
import interop._convert
import interop._op


@pytest.mark.parametrize("module", [interop._op, interop._convert, interop._check_gradients], ids=lambda m: m.__name__)
def test_docstring_examples_run(module):
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0
    assert result.failed == 0
