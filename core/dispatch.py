"""Which way a record reaches vLLM, in one table: its serving object, or its HTTP route in-process.

vLLM's own `run_batch` builds vLLM's request model from each line and calls the serving object
(`OpenAIServingChat.create_chat_completion`, the embedding, score, classify and pooling
handlers): the same engine, validation and answers as the HTTP route, without the route stack
(Starlette's routing, FastAPI's dependencies, the middlewares, JSON out and back in), which cost
about three times vLLM's own front end per record (docs/batch-transform.md, "Speed"). The
records of a multi-record body (Batch Transform, `vllm-sagemaker batch --endpoint`) and the
lines of server-side batches go that way. The HTTP route, in-process as before, answers:

| case                                                           | way     |
|----------------------------------------------------------------|---------|
| asked for: `dispatch=route` (custom attribute) or              | route   |
| SAGEMAKER_RECORD_DISPATCH=route (the whole container)          |         |
| one real-time request (streamed through as vLLM produces it)   | route   |
| a body that asks to stream                                     | route   |
| no serving object answers the route here: the table does not  | route   |
| know it (/v1/responses, ...) or this server did not build it   |         |
| customer middlewares or formatters (MHCS): they wrap the route | route   |
| anything else                                                  | serving |

What the serving objects do not cover needs no row: LoRA adapters by header reach them as the
body's `model` (the pipeline sets it), stateful sessions are answered before dispatch, API keys
are checked at the door, and the client's headers (request id, priority, trace) reach vLLM as
the serving object's request, as on the route.
"""

from enum import Enum

from vllm_sagemaker.core.env import ConfigError
from vllm_sagemaker.core.errors import RequestError

DISPATCH_VAR = "SAGEMAKER_RECORD_DISPATCH"
# The custom attribute that picks the way for one invocation's records.
DISPATCH_KEY = "dispatch"


class Way(Enum):
    SERVING = "serving"
    ROUTE = "route"


WAYS = ", ".join(way.value for way in Way)


def setting(value: str | None) -> Way | None:
    """SAGEMAKER_RECORD_DISPATCH: a way, None when unset (ConfigError when it names none)."""
    if not value or not value.strip():
        return None
    try:
        return Way(value.strip().lower())
    except ValueError:
        raise ConfigError(f"{DISPATCH_VAR} must be one of {WAYS}, got {value!r}") from None


def asked(value: str | None) -> Way | None:
    """The `dispatch=` custom attribute: a way, None when absent (a 400 when it names none)."""
    if value is None:
        return None
    try:
        return Way(value.strip().lower())
    except ValueError:
        raise RequestError(
            400,
            f"the custom attribute {DISPATCH_KEY}={value} names no way: use one of {WAYS}",
            "invalid_custom_attribute",
            DISPATCH_KEY,
        ) from None


def way(
    chosen: Way | None,
    record: bool,
    streams: bool,
    served: bool,
    customer_middleware: bool,
) -> Way:
    """The way one request reaches vLLM, by the table in this module's docstring.

    `chosen`: what the invocation or the container asked for; `record`: a record of a
    multi-record body or a batch line (not one real-time request); `streams`: its body asks to
    stream; `served`: a serving object answers its route on this server;
    `customer_middleware`: the customer's script registered middlewares or formatters around
    vLLM's routes."""
    if chosen is Way.ROUTE or not record or streams or not served:
        return Way.ROUTE
    return Way.ROUTE if customer_middleware else Way.SERVING
