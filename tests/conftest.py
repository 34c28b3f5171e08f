"""Session fixtures: the test models, and one real `serve` process per model.

All engines start together the first time any of them is needed, and stop at the end of the
session, so the suite pays each engine's start-up once.
"""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import aws as aws_mock
from tests import model_factory, servers

# The cross-encoder's server requires this key, so auth is tested on a real engine.
API_KEY = "test-key"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
# A second chat server configured as SageMaker configures a transform job, with limits small
# enough to observe: 4 records in flight, a 3 s mini-batch deadline, 2 MB payloads.
BATCH_ENV = {
    "SAGEMAKER_BATCH": "true",
    "SAGEMAKER_MAX_PAYLOAD_IN_MB": "2",
    "SAGEMAKER_MAX_CONCURRENT_TRANSFORMS": "3",
    "SAGEMAKER_BATCH_STRATEGY": "SINGLE_RECORD",
    "SAGEMAKER_MAX_RECORDS_IN_FLIGHT": "4",
    "SAGEMAKER_MINI_BATCH_TIMEOUT_SECONDS": "3",
}


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {
        "chat": model_factory.make_chat_model(root / "tiny-llama"),
        "score": model_factory.make_cross_encoder(root / "tiny-cross-encoder"),
        "embed": model_factory.embedder_path(),
    }


@pytest.fixture(scope="session")
def engines(
    models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, servers.Server]]:
    log_dir = tmp_path_factory.mktemp("logs")
    env = {"score": {"SM_VLLM_API_KEY": API_KEY}, "batch": BATCH_ENV}
    with servers.running({**models, "batch": models["chat"]}, log_dir, env) as running:
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
def aws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A moto server; the environment that points boto3 at it, set for this process too."""
    with aws_mock.moto_server(tmp_path_factory.mktemp("moto") / "moto.log") as url:
        env = aws_mock.aws_env(url)
        with pytest.MonkeyPatch.context() as patch:
            for key, value in env.items():
                patch.setenv(key, value)
            yield env
