"""Session fixtures: the test models, and one real `serve` process per model.

All engines start together the first time any of them is needed, and stop at the end of the
session, so the suite pays each engine's start-up once.
"""

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import aws as aws_mock
from tests.support import model_factory, servers

pytest_plugins = ["pytester", "tests.support.server_deaths"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests under a `rules/` folder are pure (no engine, no server, no AWS): `-m rules` runs
    just them, in seconds."""
    for item in items:
        if "rules" in item.path.parts:
            item.add_marker(pytest.mark.rules)


# The cross-encoder's server requires this key, so auth is tested on a real engine.
API_KEY = "test-key"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
# A client's call to a container that wants API_KEY: (--api-key, VLLM_API_KEY, the one line it
# stops with; None: every line answered), as `transform` and `batch` both face it.
KEYED_CALLS = [
    (API_KEY, "", None),
    (None, API_KEY, None),  # VLLM_API_KEY when --api-key is not given
    (None, "", "{url} wants an API key (HTTP 401): pass it with --api-key or set VLLM_API_KEY"),
    (
        "wrong",
        API_KEY,
        "{url} refused the API key (HTTP 401): pass the container's key with --api-key or "
        "VLLM_API_KEY",
    ),
]
# A second chat server configured as SageMaker configures a transform job, with limits small
# enough to observe: 4 records in flight, a 3 s mini-batch deadline, 2 MB payloads.
BATCH_ENV = {
    "SAGEMAKER_BATCH": "true",
    "SAGEMAKER_MAX_PAYLOAD_IN_MB": "2",
    "SAGEMAKER_MAX_CONCURRENT_TRANSFORMS": "3",
    "SAGEMAKER_BATCH_STRATEGY": "SINGLE_RECORD",
    "SAGEMAKER_MAX_RECORDS_IN_FLIGHT": "4",
    "SAGEMAKER_MINI_BATCH_TIMEOUT_SECONDS": "3",
    # Server-side batches expire an hour after they are created (the test that expires one
    # ends its window in the store).
    "SAGEMAKER_BATCH_COMPLETION_WINDOW_SECONDS": "3600",
    # vLLM's /pause and /resume: tests freeze the engine so work outlasts a deadline on any
    # machine, however fast.
    "VLLM_SERVER_DEV_MODE": "1",
}


# The chat server serves LoRA adapters the SageMaker way: a1 from the start, others registered
# at run time through POST /adapters; it keeps stateful sessions.
LORA_ENV = {
    "SM_VLLM_ENABLE_LORA": "true",
    "SM_VLLM_MAX_LORA_RANK": "8",
    "SM_VLLM_MAX_LORAS": "2",
    "SAGEMAKER_ENABLE_STATEFUL_SESSIONS": "true",
}
# The platform server: the Llama streamed from (moto) S3 with nothing but the endpoint settings,
# two API-server processes sharing sessions that expire after 10 s (time for a session's test to
# run on a machine three times slower than a 2-core laptop), and the async-endpoint marker.
PLATFORM_ENV = {
    "SM_VLLM_API_SERVER_COUNT": "2",
    "SAGEMAKER_ENABLE_STATEFUL_SESSIONS": "true",
    "SAGEMAKER_SESSIONS_EXPIRATION": "10",
    "SAGEMAKER_ASYNC_INFERENCE": "true",
    # Its OpenAI routes answer an unknown `model` with vLLM's 404
    # (tests/handler/test_openai_path.py).
    "SAGEMAKER_MODEL_FALLBACK": "false",
    # EMF documents on stdout, one every 5 s for both API-server processes
    # (tests/handler/test_metrics.py).
    "SAGEMAKER_METRICS": "cloudwatch",
    "SAGEMAKER_METRICS_INTERVAL_SECONDS": "5",
    "SAGEMAKER_METRICS_NAMESPACE": "vLLM/Tests",
    "SAGEMAKER_METRICS_ENDPOINT_NAME": "platform-test",
}
MODEL_BUCKET = "models"
# LiteLLM's quick start names its own model_name in every batch line; the chat server serves that
# name beside its own (SM_VLLM_SERVED_MODEL_NAME, as the README says).
LITELLM_MODEL = "my-vllm-model"
# The embed server's customer script: a throttle middleware (it can refuse a request before
# the handler sees it) and formatters that tag what they saw; both reach our routes.
CUSTOMER_MIDDLEWARES = """
import contextvars

from fastapi.responses import JSONResponse
from model_hosting_container_standards.common.fastapi.middleware import (
    custom_middleware,
    input_formatter,
    output_formatter,
)

SEEN = contextvars.ContextVar("seen", default="")


@custom_middleware("throttle")
async def throttle(request, call_next):
    if request.headers.get("x-customer-throttle") == "refuse":
        return JSONResponse({"refused_by": "customer throttle"}, status_code=429)
    response = await call_next(request)
    response.headers["x-customer-throttle"] = f"{request.method} {request.url.path}"
    return response


@input_formatter
async def tag_request(request):
    SEEN.set(f"{request.method} {request.url.path}")
    return request


@output_formatter
async def tag_response(response):
    response.headers["x-customer-formatted"] = SEEN.get()
    return response
"""
# Upload limits small enough to pass in a test: 4 MiB for any file, 2 MiB for a batch input.
FILES_ENV = {"SAGEMAKER_BATCH_MAX_FILE_MB": "4", "SAGEMAKER_BATCH_MAX_INPUT_MB": "2"}


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {
        "chat": model_factory.make_chat_model(root / "tiny-llama"),
        "score": model_factory.make_cross_encoder(root / "tiny-cross-encoder"),
        "embed": model_factory.embedder_path(),
    }


@pytest.fixture(scope="session")
def adapters(models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two rank-8 adapters of the chat model, and one of rank 16 (above the server's limit)."""
    root = tmp_path_factory.mktemp("adapters")
    chat = models["chat"]
    return {
        "a1": model_factory.make_adapter(chat, root / "a1", seed=1),
        "a2": model_factory.make_adapter(chat, root / "a2", seed=2),
        "rank16": model_factory.make_adapter(chat, root / "rank16", seed=3, rank=16),
    }


@pytest.fixture(scope="session")
def s3_model(models: dict[str, Path], aws: dict[str, str]) -> str:
    """The chat model's files under s3://models/tiny-llama/ on the moto server."""
    return aws_mock.upload_dir(models["chat"], MODEL_BUCKET, "tiny-llama")


@pytest.fixture(scope="session")
def engines(
    models: dict[str, Path],
    adapters: dict[str, Path],
    s3_model: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, servers.Server]]:
    log_dir = tmp_path_factory.mktemp("logs")
    customer_code = tmp_path_factory.mktemp("embed-code")
    (customer_code / "model.py").write_text(CUSTOMER_MIDDLEWARES)
    sessions = tmp_path_factory.mktemp("sessions")
    chat_env = {
        **LORA_ENV,
        # vLLM's /pause and /resume (see BATCH_ENV).
        "VLLM_SERVER_DEV_MODE": "1",
        **FILES_ENV,
        "SM_VLLM_LORA_MODULES": f"a1={adapters['a1']}",
        "SM_VLLM_SERVED_MODEL_NAME": json.dumps([str(models["chat"]), LITELLM_MODEL]),
        "SAGEMAKER_SESSIONS_PATH": str(sessions / "chat"),
        "SAGEMAKER_BATCH_STORE": str(tmp_path_factory.mktemp("batch-store")),
    }
    env = {
        "chat": chat_env,
        "embed": {"SAGEMAKER_BATCH_API": "false", "SAGEMAKER_MODEL_PATH": str(customer_code)},
        "score": {
            "SM_VLLM_API_KEY": API_KEY,
            "SAGEMAKER_BATCH_STORE": str(tmp_path_factory.mktemp("score-store")),
        },
        "batch": BATCH_ENV,
        "platform": {**PLATFORM_ENV, "SAGEMAKER_SESSIONS_PATH": str(sessions / "platform")},
    }
    served = {**models, "batch": models["chat"], "platform": s3_model}
    with servers.running(served, log_dir, env) as running:
        yield running


@pytest.fixture(scope="session")
def chat_server(engines: dict[str, servers.Server]) -> servers.Server:
    return engines["chat"]


@pytest.fixture(scope="session")
def embed_server(engines: dict[str, servers.Server]) -> servers.Server:
    return engines["embed"]


@pytest.fixture(scope="session")
def score_server(engines: dict[str, servers.Server]) -> servers.Server:
    return engines["score"]


@pytest.fixture(scope="session")
def batch_server(engines: dict[str, servers.Server]) -> servers.Server:
    return engines["batch"]


@pytest.fixture(scope="session")
def platform_server(engines: dict[str, servers.Server]) -> servers.Server:
    return engines["platform"]


@pytest.fixture(scope="session")
def aws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A moto server; the environment that points boto3 at it, set for this process too."""
    with aws_mock.moto_server(tmp_path_factory.mktemp("moto") / "moto.log") as url:
        env = aws_mock.aws_env(url)
        with pytest.MonkeyPatch.context() as patch:
            for key, value in env.items():
                patch.setenv(key, value)
            yield env
