"""Fixtures of the deploy tests: `role`, the execution role that `deploy` finds in
SAGEMAKER_ROLE_ARN, with the session's moto server; `components`, the stand-in for SageMaker's
inference components and their Application Auto Scaling in front of that moto server."""

from collections.abc import Iterator

import pytest

from tests.deploy.deploying import ROLE
from tests.support.components.common import State
from tests.support.components.server import components_emulator


@pytest.fixture
def role(monkeypatch: pytest.MonkeyPatch, aws: dict[str, str]) -> str:
    monkeypatch.setenv("SAGEMAKER_ROLE_ARN", ROLE)
    return ROLE


@pytest.fixture
def components(aws: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[State]:
    """The emulator, reached by this process's boto3 clients (and the commands it runs) for
    `sagemaker` and `application-autoscaling` (botocore reads AWS_ENDPOINT_URL_<SERVICE ID>
    whenever it makes a client); every other service still goes to moto."""
    with components_emulator(aws["AWS_ENDPOINT_URL"]) as (url, state):
        monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER", url)
        monkeypatch.setenv("AWS_ENDPOINT_URL_APPLICATION_AUTO_SCALING", url)
        yield state
