"""Token counts read off an answer, for log lines, without parsing the whole answer.

vLLM writes `usage` as the last member of its answers (and of the final event of a stream when
`stream_options.include_usage` is set), so the last `"usage": {...}` object in the bytes is the
answer's. Embeddings have only prompt tokens; answers without usage count as zero.
"""

import json
import re

_USAGE = re.compile(rb'"usage":\s*(\{[^{}]*\})')


def tokens(body: bytes) -> tuple[int, int]:
    """(prompt_tokens, completion_tokens) of the last usage object in `body`, else (0, 0)."""
    start = body.rfind(b'"usage"')
    match = _USAGE.match(body, start) if start >= 0 else None
    if match is None:
        return 0, 0
    try:
        counts = json.loads(match.group(1))
    except ValueError:
        return 0, 0
    return _count(counts.get("prompt_tokens")), _count(counts.get("completion_tokens"))


def _count(value: object) -> int:
    return value if isinstance(value, int) and value >= 0 else 0
