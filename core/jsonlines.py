"""JSON Lines framing: how a multi-record body is split into records, in one rule.

The rule, used for every multi-record body and by the local transform runner alike:
1. a UTF-8 byte-order mark at the start of the body is dropped;
2. the body is split at each LF; a CR just before an LF is dropped (CRLF line ends);
3. every line is a record, blank lines included: a blank line is answered with an error line,
   so output line N always answers input line N;
4. what follows the last LF is a record only when it holds something other than whitespace, so a
   final newline (or trailing blanks) adds no record;
5. an empty body is one empty record.

An `application/json` body is one record when it parses as one JSON document (pretty-printed
JSON included); otherwise, when it has more than one non-blank line, it is JSON Lines.
"""

import io
import json
from collections.abc import Iterable, Iterator

BOM = b"\xef\xbb\xbf"


def without_bom(body: bytes) -> bytes:
    return body[len(BOM) :] if body.startswith(BOM) else body


def iter_records(lines: Iterable[bytes]) -> Iterator[bytes]:
    """The records in `lines` as a binary file yields them (each line ends in LF but maybe the
    last), by rules 1-4; an empty input has no records."""
    first = True
    for line in lines:
        if first:
            line, first = without_bom(line), False
        if line.endswith(b"\n"):
            yield line[:-2] if line.endswith(b"\r\n") else line[:-1]
        elif line.strip():
            yield line


def split(body: bytes) -> list[bytes]:
    """The records of a JSON Lines request body, by the rule in this module's docstring."""
    return list(iter_records(io.BytesIO(body))) or [b""]


def holds_several_records(body: bytes) -> bool:
    """Whether an `application/json` body is JSON Lines: more than one non-blank line and not
    one JSON document."""
    body = without_bom(body).strip()
    if b"\n" not in body:
        return False
    try:
        json.loads(body)
    except (ValueError, RecursionError):
        return True
    return False
