"""Ids: one rule for every id this project makes and checks.

Every id is a prefix naming its kind (`file-`, `batch_`, `batch_req_`) and a random hex part;
one this server gives out may also carry a suffix (`file-<hex>-output`). An id is letters,
digits, `_` and `-`, starts with a letter or digit and has at most MAX_ID_CHARS, so it is safe in
a path, a file name and an object key.
"""

import re
import uuid

MAX_ID_CHARS = 128
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


def new_id(prefix: str) -> str:
    """A new id of the kind `prefix` names (`file-`, `batch_`, `batch_req_`)."""
    return prefix + uuid.uuid4().hex


def is_id(value: str, prefix: str = "") -> bool:
    """Whether `value` has the form of an id, of the kind `prefix` names when one is given
    (with something after the prefix)."""
    return (
        len(prefix) < len(value) <= MAX_ID_CHARS
        and value.startswith(prefix)
        and _ID.fullmatch(value) is not None
    )
