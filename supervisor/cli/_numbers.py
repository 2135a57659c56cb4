"""Numbers on the command line: ASCII digits only, one rule for every numeric option.

Python's ``int()`` and ``float()`` accept any Unicode decimal digit (``int("٣") == 3``,
``float("３") == 3.0``) while ``str.isdigit()`` also says yes to digits that are not
decimal (``"²"``, which ``int()`` then refuses with a traceback).  TOML, JSON and
pydantic read only ASCII digits, so a flag does the same: a number is the digits 0-9
(with a decimal point and an exponent where a fraction makes sense), and anything else
is one usage line naming the option, exit 2.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable

_INTEGER = re.compile(r"[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def is_ascii_integer(text: str) -> bool:
    """Whether ``text`` (surrounding blanks aside) is a whole number in ASCII digits."""
    return _INTEGER.fullmatch(text.strip()) is not None


def ascii_integer(text: str) -> int:
    """A non-negative whole number written in ASCII digits; ``ValueError`` otherwise."""
    if not is_ascii_integer(text):
        raise ValueError("must be a positive integer")
    return int(text.strip())


def ascii_number(text: str) -> float:
    """A number written in ASCII digits (``0.5``, ``2``, ``1e3``); ``ValueError`` otherwise."""
    if _DECIMAL.fullmatch(text.strip()) is None:
        raise ValueError("must be a number")
    return float(text.strip())


def option(parse: Callable[[str], object]) -> Callable[[str], object]:
    """``parse`` as an argparse ``type``: its ``ValueError`` becomes the option's usage line
    (``argument --max-concurrent: must be a positive integer``)."""

    def convert(text: str) -> object:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = parse.__name__
    return convert


INTEGER = option(ascii_integer)
"""The argparse ``type`` of an integer option."""
NUMBER = option(ascii_number)
"""The argparse ``type`` of a number option."""
