"""Small helpers shared by the parsers: number conversion and error construction.

Every helper raises :class:`fabtune.errors.ParseError` naming the tool and what was expected,
so a parser never turns a garbled field into a silent zero.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import NoReturn, TextIO

from fabtune.errors import ParseError

# No tool output fabtune parses has a line this long; a longer one is noise (a dump, a binary).
MAX_LINE_CHARS = 4096
# `KEY:VALUE` pairs as printed by dcb(8) and nccl/mlnx_qos style maps, e.g. "0:off 6:on".
_PAIR_RE = re.compile(r"^(?P<key>[^:\s]+):(?P<value>\S*)$")


def fail(tool: str, message: str) -> NoReturn:
    """Raise a ParseError prefixed with the tool name.

    Args:
        tool: Name of the tool whose output is being parsed (e.g. ``"ibstat"``).
        message: What was expected and not found.

    Raises:
        ParseError: always.
    """
    raise ParseError(f"{tool}: {message}")


def to_int(tool: str, value: str, what: str) -> int:
    """Convert a decimal or ``0x`` hexadecimal token to int.

    Args:
        tool: Tool name for the error message.
        value: The token as printed.
        what: Name of the field, for the error message.

    Returns:
        The integer value.

    Raises:
        ParseError: if the token is not an integer.
    """
    try:
        return int(value, 0) if value.lower().startswith("0x") else int(value, 10)
    except ValueError:
        fail(tool, f"{what} is not an integer: {value!r}")


def to_float(tool: str, value: str, what: str) -> float:
    """Convert a token to float.

    Args:
        tool: Tool name for the error message.
        value: The token as printed.
        what: Name of the field, for the error message.

    Returns:
        The float value.

    Raises:
        ParseError: if the token is not a number.
    """
    try:
        return float(value)
    except ValueError:
        fail(tool, f"{what} is not a number: {value!r}")


def split_pair(tool: str, token: str) -> tuple[str, str]:
    """Split one ``KEY:VALUE`` token.

    Args:
        tool: Tool name for the error message.
        token: A token such as ``"6:on"``.

    Returns:
        ``(key, value)``.

    Raises:
        ParseError: if the token has no colon.
    """
    match = _PAIR_RE.match(token)
    if match is None:
        fail(tool, f"expected KEY:VALUE, got {token!r}")
    return match["key"], match["value"]


def content_lines(text: str) -> list[str]:
    """Split text into lines, dropping trailing whitespace and carriage returns.

    Args:
        text: Raw tool output.

    Returns:
        The lines, in order (blank lines kept as empty strings).
    """
    return [line.rstrip() for line in text.splitlines()]


def stream_lines(stream: TextIO, limit: int = MAX_LINE_CHARS) -> Iterator[str]:
    """Lines of ``stream`` one at a time, trailing whitespace dropped (memory: one line).

    A line longer than ``limit`` characters is read past in pieces and yielded as an empty line,
    so a huge line costs neither memory nor regular-expression time and line numbers stay right.
    """
    while line := stream.readline(limit + 1):
        if len(line) > limit and not line.endswith("\n"):
            while (rest := stream.readline(limit)) and not rest.endswith("\n"):
                pass
            line = ""
        yield line.rstrip()


def text_lines(text: str, limit: int = MAX_LINE_CHARS) -> Iterator[str]:
    """Lines of ``text`` as :func:`stream_lines` yields them, one at a time (no list of all lines)."""
    start = 0
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        yield "" if end - start > limit else text[start:end].rstrip()
        start = end + 1
