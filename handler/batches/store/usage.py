"""A batch's `usage`, as the Batch object shows it: zero, and one answer's usage added to it
(by a run to its tallies, by the S3 store to a batch's counts as each chunk finishes)."""

from collections.abc import Mapping
from typing import Any

from vllm_sagemaker.core import usage


def zero_usage() -> dict[str, Any]:
    return {
        "input_tokens": 0,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 0,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 0,
    }


def _detail(details: object, name: str) -> int:
    return usage.count(details.get(name)) if isinstance(details, dict) else 0


def add_usage(total: dict[str, Any], line_usage: Mapping[str, Any]) -> None:
    """Add one answer's usage (chat/completions/embeddings' `prompt_tokens`..., or the
    Responses API's `input_tokens`...) to the batch's usage."""
    prompt, completion = usage.prompt_completion(line_usage)
    cached = _detail(
        line_usage.get("prompt_tokens_details") or line_usage.get("input_tokens_details"),
        "cached_tokens",
    )
    reasoning = _detail(
        line_usage.get("completion_tokens_details") or line_usage.get("output_tokens_details"),
        "reasoning_tokens",
    )
    total["input_tokens"] += prompt
    total["output_tokens"] += completion
    total["input_tokens_details"]["cached_tokens"] += cached
    total["output_tokens_details"]["reasoning_tokens"] += reasoning
    total["total_tokens"] += prompt + completion
