"""SageMaker's OpenAI-compatible path, on the container's side.

Since May 2026 SageMaker answers `https://runtime.sagemaker.<region>.amazonaws.com/endpoints/
<name>/openai/v1/chat/completions` with a bearer token, passes the body to the container as it
came, and returns the container's answer as it is, streams included. Which container path it
calls is not documented: the one container error quoted from a real endpoint came from vLLM's
`/v1/chat/completions` route (docs/real-time.md, "From any OpenAI client"). So every plausible
form is served: `/invocations` (the record pipeline), vLLM's own inference routes (`/v1/...`),
and the same routes under `/openai/v1/...`. On each, a `model` the server does not know is
answered by the served model (`core.model_names`), since OpenAI clients must send one.
"""

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from vllm_sagemaker.core.errors import RequestError
from vllm_sagemaker.handler.records.messages import ClientGone, read_body, respond_error
from vllm_sagemaker.handler.records.pipeline import Pipeline

PREFIX = "/openai"


def canonical(scope: Scope) -> Scope:
    """`/openai/v1/...` as vLLM's `/v1/...`; any other path as it is."""
    path: str = scope["path"]
    if not path.startswith(PREFIX + "/v1/"):
        return scope
    stripped = path.removeprefix(PREFIX)
    return {**scope, "path": stripped, "raw_path": stripped.encode()}


class DirectRoutes:
    """vLLM's inference routes with the model rule: the body is read, its `model` replaced when
    the server does not know it, and the route gets the body as if it had come so."""

    def __init__(self, app: ASGIApp, pipeline: Pipeline, max_payload_bytes: int) -> None:
        self.app = app
        self.pipeline = pipeline
        self.max_payload_bytes = max_payload_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.pipeline.model_fallback:
            await self.app(scope, receive, send)
            return
        try:
            body = await read_body(receive, self.max_payload_bytes)
        except ClientGone:
            return
        except RequestError as error:
            await respond_error(send, error)
            return
        try:
            record = json.loads(body)
        except ValueError:
            record = None
        model = await self.pipeline.model_for(scope, scope["headers"], record)
        if model is not None:
            body = json.dumps({**record, "model": model}).encode()
        headers = [(k, v) for k, v in scope["headers"] if k != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app({**scope, "headers": headers}, replay, send)
