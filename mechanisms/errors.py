"""Errors raised by the mechanisms package."""


class MechanismError(ValueError):
    """Bad input, explained in one line that quotes the bad value and says how to fix it.

    All input validation in `mechanisms` raises this class or a subclass; the command line and
    the portal show the message as is, never a traceback.
    """
