"""Errors raised by the mechanisms package."""

import json
import reprlib
from typing import Any


class MechanismError(ValueError):
    """Bad input, explained in one line that quotes the bad value and says how to fix it.

    All input validation in `mechanisms` raises this class or a subclass; the command line and
    the portal show the message as is, never a traceback.
    """


def _short_repr() -> reprlib.Repr:
    short = reprlib.Repr()
    short.maxlevel, short.maxstring, short.maxother, short.maxlong = 3, 60, 60, 40
    short.maxlist = short.maxdict = short.maxtuple = 6
    return short


def shown(value: Any) -> str:
    """A bad value as a message quotes it: its repr, cut short (deep, long or huge values)."""
    return SHORT_REPR.repr(value)


SHORT_REPR = _short_repr()


def parsed_json(text: str | bytes) -> Any:
    """`json.loads(text)`, with a document nested too deeply refused like any other bad JSON.

    Python's reader raises RecursionError at a few thousand nested brackets; here that is a
    `json.JSONDecodeError` (a ValueError), so every reader's handling of bad JSON names it.
    """
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("arrays or objects nested too deeply", "", 0) from None
