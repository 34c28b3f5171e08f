"""The SageMaker handler: an ASGI middleware that runs inside vLLM's OpenAI server."""

from handler.middleware import SageMakerMiddleware

__all__ = ["SageMakerMiddleware"]
