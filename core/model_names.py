"""Which model answers a request, whatever its body's `model` says: the rule of an endpoint that
serves one model.

SageMaker routes a request by the endpoint's name in its URL, and OpenAI clients must send some
`model`: the endpoint's name, `gpt-4o` from the code they had, or an empty string. A name this
server knows (a served model name, or a loaded LoRA adapter) answers as it is; an empty or
missing `model` is vLLM's own default; any other name is answered by the served model (vLLM's
first served name), so the answer's `model` says which model answered. With the fallback off
(SAGEMAKER_MODEL_FALLBACK=false) the body goes to vLLM as it came, which answers 404.
"""

from dataclasses import dataclass
from typing import Any

FALLBACK_VAR = "SAGEMAKER_MODEL_FALLBACK"


@dataclass(frozen=True)
class Models:
    """The names this server answers to: its served model names (the first is its default)
    and the LoRA adapters loaded now."""

    served: tuple[str, ...]
    adapters: frozenset[str] = frozenset()

    def knows(self, name: str) -> bool:
        return name in self.served or name in self.adapters


def asked(record: Any) -> str | None:
    """The model a request body names, when it names one: a non-empty string."""
    if not isinstance(record, dict):
        return None
    model = record.get("model")
    return model if isinstance(model, str) and model else None


def answering(name: str | None, models: Models) -> str | None:
    """The model to put in the body in place of `name`, or None to leave the body as it is
    (no name, a name the server knows, or a server that reports no served name)."""
    if name is None or models.knows(name) or not models.served:
        return None
    return models.served[0]
