"""Calls that reach one inference component by name (`--component`), against moto and the
inference-component stand-in beside it: `deploy invoke` (InferenceComponentName on InvokeEndpoint
and its streaming form, the runtime API's header on the OpenAI path; refused with --async, which
InvokeEndpointAsync cannot take), and `deploy token`, which checks that the component is on the
endpoint and prints the header an OpenAI client sends."""

import json
import uuid
from collections.abc import Iterator

import pytest

from tests.deploy.deploying import IMAGE
from tests.deploy.recording import recorded, run
from tests.support.aws import moto_endpoint
from tests.support.components.common import State
from vllm_sagemaker.deploy.base import run as base_run

BODY = '{"messages": [{"role": "user", "content": "hi"}]}'
HEADER = "X-Amzn-SageMaker-Inference-Component"


def planned(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, object]]:
    status, out, err = run(capsys, "deploy", "invoke", *args, "--body", BODY, "--dry-run")
    assert status == 0, err
    plan: list[dict[str, object]] = json.loads(out)
    return plan


@pytest.mark.parametrize(
    ("mode", "operation"),
    [([], "InvokeEndpoint"), (["--stream"], "InvokeEndpointWithResponseStream")],
)
def test_the_dry_run_names_the_component(
    aws: dict[str, str], capsys: pytest.CaptureFixture[str], mode: list[str], operation: str
) -> None:
    assert planned(capsys, "--name", "shared", "--component", "chat", *mode) == [
        {
            "service": "sagemaker-runtime",
            "operation": operation,
            "params": {
                "EndpointName": "shared",
                "ContentType": "application/json",
                "Body": BODY,
                "InferenceComponentName": "chat",
            },
        }
    ]


def test_the_openai_path_sends_the_component_header(
    aws: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    (call,) = planned(capsys, "--name", "shared", "--component", "chat", "--openai")
    assert str(call["url"]).endswith("/endpoints/shared/openai/v1/chat/completions")
    assert call["headers"] == {HEADER: "chat"}
    (plain,) = planned(capsys, "--name", "shared", "--openai")
    assert "headers" not in plain


def test_a_component_is_refused_with_async(
    aws: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    with recorded() as calls:
        status, out, err = run(
            capsys,
            *("deploy", "invoke", "--name", "jobs", "--component", "chat", "--async"),
            *("--body", BODY),
        )
    assert (status, out, calls) == (2, "", [])
    assert err == (
        "deploy: --component: InvokeEndpointAsync takes no inference component (async endpoints "
        "have none); leave out --async or --component\n"
    )


@pytest.fixture
def component(
    role: str,
    components: State,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Iterator[tuple[str, str]]:
    """A component `chat` on an endpoint made for it, deleted after (the stand-in's states move
    on at each read: no 15 s between them); the endpoint's name and the component's."""
    monkeypatch.setattr(base_run, "POLL_S", 0.01)
    endpoint, name = f"ic-{uuid.uuid4().hex[:8]}", f"chat-{uuid.uuid4().hex[:8]}"
    made = [
        *("deploy", "component", "--endpoint", endpoint, "--name", name, "--image", IMAGE),
        *("--model-id", "org/m", "--instance-type", "ml.g5.2xlarge"),
    ]
    status, _, err = run(capsys, *made)
    assert status == 0, err
    yield endpoint, name
    assert run(capsys, "deploy", "delete", "--name", endpoint)[0] == 0


def test_token_for_a_component_prints_its_header(
    component: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint, name = component
    status, out, err = run(capsys, "deploy", "token", "--name", endpoint, "--component", name)
    assert status == 0, err
    base, key, header = out.splitlines()
    assert base.startswith("export OPENAI_BASE_URL=")
    assert base.endswith(f"/endpoints/{endpoint}/openai/v1")
    assert key.startswith("export OPENAI_API_KEY=sagemaker-api-key-")
    assert header == (
        f'# send the component\'s header: OpenAI(default_headers={{"{HEADER}": "{name}"}})'
    )

    status, out, err = run(
        capsys, "deploy", "token", "--name", endpoint, "--component", name, "--json"
    )
    assert status == 0, err
    told = json.loads(out)
    assert told["headers"] == {HEADER: name}
    assert told["base_url"].endswith(f"/endpoints/{endpoint}/openai/v1")


def test_token_for_a_missing_component_or_one_elsewhere_says_so(
    component: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint, name = component
    status, out, err = run(capsys, "deploy", "token", "--name", endpoint, "--component", "nope")
    assert (status, out) == (1, "")
    assert err == f"deploy: component nope does not exist on endpoint {endpoint} in us-east-1\n"

    with moto_endpoint("other") as other:
        status, out, err = run(capsys, "deploy", "token", "--name", other, "--component", name)
    assert (status, out) == (1, "")
    assert err == f"deploy: component {name} is on endpoint {endpoint}, not {other}\n"


def test_token_without_a_component_sends_no_header(
    aws: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    with moto_endpoint("plain") as name:
        status, out, err = run(capsys, "deploy", "token", "--name", name, "--json")
    assert status == 0, err
    assert json.loads(out)["headers"] == {}
