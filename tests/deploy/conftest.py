"""Fixtures of the deploy tests: `role`, the execution role that `deploy` finds in
SAGEMAKER_ROLE_ARN, with the session's moto server."""

import pytest

from tests.deploy.deploying import ROLE


@pytest.fixture
def role(monkeypatch: pytest.MonkeyPatch, aws: dict[str, str]) -> str:
    monkeypatch.setenv("SAGEMAKER_ROLE_ARN", ROLE)
    return ROLE
