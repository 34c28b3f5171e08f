"""Hugging Face TGI / DJL LMI bodies, mapped onto vLLM's completions route and back.

`{"inputs": "...", "parameters": {...}}` becomes a completion request; the completion becomes
TGI's answer `[{"generated_text": "..."}]` (with `details` when asked), so clients written for
those containers keep working unchanged.
"""

from typing import Any

from vllm_sagemaker.core.errors import RequestError

# TGI/LMI parameter -> vLLM completion parameter, where only the name differs.
RENAMED = {
    "max_new_tokens": "max_tokens",
    "stop_sequences": "stop",
    "truncate": "truncate_prompt_tokens",
    "top_n_tokens": "logprobs",
}
KEPT = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop",
    "repetition_penalty",
    "frequency_penalty",
    "presence_penalty",
    "ignore_eos",
    "min_tokens",
    "n",
    "best_of",
)
# Accepted and ignored: they change nothing vLLM can honour.
IGNORED = ("watermark", "decoder_input_details", "typical_p", "return_full_text", "details")


def to_completion(body: dict[str, Any]) -> dict[str, Any]:
    """The completion request for a TGI/LMI body."""
    inputs = body["inputs"]
    if not (
        isinstance(inputs, str)
        or (isinstance(inputs, list) and inputs and all(isinstance(i, str) for i in inputs))
    ):
        raise RequestError(
            400, "inputs must be a string or a list of strings", "invalid_type", "inputs"
        )
    parameters = body.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise RequestError(400, "parameters must be an object", "invalid_type", "parameters")
    unknown = sorted(set(parameters) - set(RENAMED) - set(KEPT) - set(IGNORED) - {"do_sample"})
    if unknown:
        raise RequestError(
            400, f"unknown TGI parameters: {', '.join(unknown)}", "unknown_parameter", "parameters"
        )
    completion: dict[str, Any] = {"prompt": inputs}
    for name, value in parameters.items():
        if name in RENAMED:
            completion[RENAMED[name]] = value
        elif name in KEPT:
            completion[name] = value
    if parameters.get("do_sample") is False:
        completion["temperature"] = 0.0
    if isinstance(completion.get("stop"), str):
        completion["stop"] = [completion["stop"]]
    if body.get("stream"):
        completion["stream"] = True
    return completion


def wants_details(body: dict[str, Any]) -> bool:
    parameters = body.get("parameters")
    return isinstance(parameters, dict) and bool(parameters.get("details"))


def from_completion(completion: dict[str, Any], details: bool) -> list[dict[str, Any]]:
    """TGI's answer for a vLLM completion: one `{"generated_text"}` per choice, in order."""
    choices = sorted(completion.get("choices", []), key=lambda choice: choice.get("index", 0))
    answers: list[dict[str, Any]] = []
    for choice in choices:
        answer: dict[str, Any] = {"generated_text": choice.get("text", "")}
        if details:
            answer["details"] = {
                "finish_reason": choice.get("finish_reason"),
                "generated_tokens": (completion.get("usage") or {}).get("completion_tokens"),
            }
        answers.append(answer)
    return answers
