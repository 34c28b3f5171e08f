"""Token counts: one rule for what counts as a count, and where an answer keeps its tokens.

A count is a non-negative int and never a boolean (`true` is not one token); anything else
(a string, a float, null, garbage) counts as zero rather than failing the line, the batch or the
log line it is read for. A usage object names its tokens as chat, completions and embeddings do
(`prompt_tokens`, `completion_tokens`) or as the Responses API does (`input_tokens`,
`output_tokens`).

For log lines, `tokens` reads them off an answer without parsing the whole answer: vLLM writes
`usage` as the last member of its answers (and of the final event of a stream when
`stream_options.include_usage` is set), so the last `"usage": {...}` object in the bytes is the
answer's. Embeddings have only prompt tokens; answers without usage count as zero.
"""

import json
import re
from collections.abc import Mapping

_USAGE = re.compile(rb'"usage":\s*(\{[^{}]*\})')


def count(value: object) -> int:
    """`value` as a token count: a non-negative int that is not a boolean, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def prompt_completion(usage: Mapping[str, object]) -> tuple[int, int]:
    """(prompt, completion) tokens of one usage object, under either API's names."""
    return (
        count(usage.get("prompt_tokens", usage.get("input_tokens"))),
        count(usage.get("completion_tokens", usage.get("output_tokens"))),
    )


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
    return prompt_completion(counts) if isinstance(counts, dict) else (0, 0)
