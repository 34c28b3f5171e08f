"""The SageMaker handler: an ASGI middleware that runs inside vLLM's OpenAI server.

vLLM loads it with `--middleware vllm_sagemaker.handler.middleware.SageMakerMiddleware`."""
