"""Reading JSON Lines as the format defines it: lines end at LF and nowhere else.

`str.splitlines()` also breaks at U+2028, U+0085 and other characters a model may put, unescaped,
inside a JSON string, so it must not be used on answers.
"""

import json
from typing import Any


def split_lines(text: str | bytes) -> list[str]:
    """The lines of a JSON Lines text that ends in LF (or is empty)."""
    if isinstance(text, bytes):
        text = text.decode()
    assert text == "" or text.endswith("\n"), "JSON Lines output must end in a newline"
    return text.split("\n")[:-1] if text else []


def parse_lines(text: str | bytes) -> list[Any]:
    """The JSON documents of a JSON Lines text, one per line."""
    return [json.loads(line) for line in split_lines(text)]
