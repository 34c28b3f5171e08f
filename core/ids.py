"""Ids: one rule for every id this project makes and checks.

Every id is a prefix naming its kind (`file-`, `batch_`, `batch_req_`) and a random hex part;
one this server gives out may also carry a suffix (`file-<hex>-output`). An id is letters,
digits, `_` and `-`, starts with a letter or digit and has at most MAX_ID_CHARS, so it is safe in
a path, a file name and an object key.
"""

import re
import uuid

MAX_ID_CHARS = 128
FILE_ID_PREFIX = "file-"
BATCH_ID_PREFIX = "batch_"
REQUEST_ID_PREFIX = "batch_req_"
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


def new_id(prefix: str) -> str:
    """A new id of the kind `prefix` names (`file-`, `batch_`, `batch_req_`)."""
    return prefix + uuid.uuid4().hex


def batch_output_file_id(batch_id: str, kind: str) -> str:
    """The id of a batch's output (or errors) file: `batch_<hex>` -> `file-<hex>-<kind>`."""
    return f"{FILE_ID_PREFIX}{batch_id.removeprefix(BATCH_ID_PREFIX)}-{kind}"


def is_id(value: str, prefix: str = "") -> bool:
    """Whether `value` has the form of an id, of the kind `prefix` names when one is given
    (with something after the prefix)."""
    return (
        len(prefix) < len(value) <= MAX_ID_CHARS
        and value.startswith(prefix)
        and _ID.fullmatch(value) is not None
    )
