"""Records to vLLM's serving objects, as vLLM's own `run_batch` calls them: the request model
built from the body, the serving object called, its answer (or error) rendered as the route
renders it. No Starlette routing, no FastAPI dependencies, no middleware stack.

`SERVING` is the table of vLLM 0.32's names (`app.state.<object>`, its method, the request
model the route validates the body against), found as run_batch's `handler_getter`s and the
routes' own getters find them; tests/handler/test_serving_names.py pins them. Everything else
is done as the route does it, with the route's own pieces: the body is validated as FastAPI
validates a route's body (`from_attributes`, errors under `body`), an error answer is the
app's own exception handler's (vLLM's, so an engine that died stops the server as it would), a
client gone cancels the call as vLLM's `with_cancellation` does (vLLM aborts the request on the
engine), and server load tracking counts the call as `load_aware_call` does.
"""

import asyncio
import contextlib
import inspect
import json
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope
from vllm.entrypoints.openai.chat_completion.protocol import (
    BatchChatCompletionRequest,
    ChatCompletionRequest,
)
from vllm.entrypoints.openai.completion.protocol import CompletionRequest
from vllm.entrypoints.pooling.classify.protocol import ClassificationRequest
from vllm.entrypoints.pooling.embed.protocol import EmbeddingRequest
from vllm.entrypoints.pooling.pooling.protocol import PoolingRequest
from vllm.entrypoints.pooling.scoring.protocol import RerankRequest, ScoreRequest
from vllm.entrypoints.serve.engine.protocol import ErrorResponse

from vllm_sagemaker.handler.records import asgi_call
from vllm_sagemaker.handler.records.minibatch import Stop

JSON = "application/json"
JSON_HEADERS = [(b"content-type", JSON.encode())]


@dataclass(frozen=True)
class Serving:
    """One route's serving object: `app.state.<state>`, called through `method` (None: the
    object itself is called, as vLLM's pooling routes do), on a `request` model."""

    state: str
    method: str | None
    request: Any

    @cached_property
    def adapter(self) -> TypeAdapter[Any]:
        return TypeAdapter(self.request)


SERVING: dict[str, Serving] = {
    "/v1/chat/completions": Serving(
        "openai_serving_chat", "create_chat_completion", ChatCompletionRequest
    ),
    "/v1/chat/completions/batch": Serving(
        "openai_serving_chat_batch", "create_batch_chat_completion", BatchChatCompletionRequest
    ),
    "/v1/completions": Serving("openai_serving_completion", "create_completion", CompletionRequest),
    "/v1/embeddings": Serving("serving_embedding", None, EmbeddingRequest),
    "/score": Serving("serving_scores", None, ScoreRequest),
    "/v1/score": Serving("serving_scores", None, ScoreRequest),
    "/rerank": Serving("serving_scores", None, RerankRequest),
    "/v1/rerank": Serving("serving_scores", None, RerankRequest),
    "/v2/rerank": Serving("serving_scores", None, RerankRequest),
    "/classify": Serving("serving_classification", None, ClassificationRequest),
    "/pooling": Serving("serving_pooling", None, PoolingRequest),
}

Handler = Callable[[Any, Request], Awaitable[Any]]


def handler(scope: Scope, route: str) -> Handler | None:
    """The serving call for `route` on the app of `scope`; None when the table does not know the
    route or this server did not build its serving object."""
    serving = SERVING.get(route)
    if serving is None:
        return None
    found = getattr(scope["app"].state, serving.state, None)
    if found is None:
        return None
    return found if serving.method is None else getattr(found, serving.method)


async def call(
    scope: Scope,
    route: str,
    body: bytes,
    headers: asgi_call.Headers,
    stop: Stop,
    serve: Handler,
) -> asgi_call.Reply:
    """`route`'s answer to `body`, from its serving object `serve` (`handler`): what the
    HTTP route would answer, status, headers and body. An empty answer when `stop` fires first
    (the call is cancelled; vLLM aborts it on the engine)."""
    synthetic = asgi_call.synthetic(scope, "POST", route, headers)
    receive = asgi_call.receiver(body, stop.event)
    request = Request(synthetic, receive)
    reply = asgi_call.Reply()
    try:
        value = SERVING[route].adapter.validate_python(json.loads(body), from_attributes=True)
    except ValidationError as error:
        errors = [{**e, "loc": ("body", *e["loc"])} for e in error.errors(include_url=False)]
        answer = await _on_error(request, RequestValidationError(errors, body=body))
    except Exception as error:
        # A request model's own validator may raise vLLM's errors (VLLMValidationError is not a
        # ValueError, so pydantic lets it through): FastAPI hands them to the app's handlers.
        answer = await _on_error(request, error)
    else:
        with _load_tracked(request):
            try:
                answer = await _until(serve(value, request), stop)
            except Exception as error:
                answer = await _on_error(request, error)
    if answer is not None:
        await _render(answer, synthetic, receive, reply)
    return reply


async def _until(work: Awaitable[Any], stop: Stop) -> Any:
    """`work`'s result, or None once `stop` fires first, as vLLM's `with_cancellation` answers a
    client gone: `work` is cancelled (as it is when the caller is), and whatever it still
    returns (vLLM answers its own cancellation with a "Client disconnected" error) is dropped."""
    if stop.reason is not None:
        return None
    task = asyncio.ensure_future(work)
    with stop.cancelling(task):
        try:
            result = await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            return None
        except Exception:
            if task.cancelling():
                return None
            raise
    return None if task.cancelling() else result


async def _on_error(request: Request, error: Exception) -> Response:
    """The app's own answer to `error`: its exception handler for the error's class, as
    Starlette's ExceptionMiddleware finds it; an error no handler takes is raised, as the route
    raises it past that middleware."""
    handlers = request.app.exception_handlers
    for cls in type(error).__mro__:
        if cls is not Exception and cls in handlers:
            answer = handlers[cls](request, error)
            return await answer if inspect.isawaitable(answer) else answer
    raise error


async def _render(answer: Any, scope: Scope, receive: Receive, reply: asgi_call.Reply) -> None:
    """Render a serving object's answer as its route does: a Response as it is, an
    ErrorResponse with its code, a response model as JSON, a stream as server-sent events."""
    if isinstance(answer, BaseModel) and not isinstance(answer, ErrorResponse):
        reply.status, reply.headers = 200, JSON_HEADERS
        reply.body += answer.model_dump_json().encode()
        return
    if isinstance(answer, ErrorResponse):
        answer = Response(answer.model_dump_json(), answer.error.code, media_type=JSON)
    elif isinstance(answer, AsyncGenerator):
        answer = StreamingResponse(answer, media_type="text/event-stream")
    await answer(scope, receive, reply.collect)


@contextlib.contextmanager
def _load_tracked(request: Request) -> Iterator[None]:
    """vLLM's server load tracking (`--enable-server-load-tracking`): one more call in flight."""
    state = request.app.state
    if not getattr(state, "enable_server_load_tracking", False):
        yield
        return
    state.server_load_metrics = getattr(state, "server_load_metrics", 0) + 1
    try:
        yield
    finally:
        state.server_load_metrics -= 1
