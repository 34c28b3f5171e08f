"""A component scaling from zero, as the client sees it: AWS's no-capacity answer is recognised
in botocore's error and in the OpenAI path's body alike; `deploy invoke` says it in one line;
batch work waits it out without counting it as a retry, says so once, and stops past its bound."""

import asyncio
import json
from typing import Any

import botocore.exceptions
import pytest

from vllm_sagemaker.deploy.base import error_answers, invocations
from vllm_sagemaker.deploy.batch import sagemaker_endpoint
from vllm_sagemaker.deploy.kit.invoke import from_zero_line

# AWS's words, quoted in its scale-to-zero notebook.
NO_CAPACITY = (
    "Inference Component has no capacity to process this request. ApplicationAutoScaling may be "
    "in-progress (if configured) or try to increase the capacity by invoking "
    "UpdateInferenceComponentRuntimeConfig API."
)
TAKES = "several minutes: an instance when none is free, then the model's download and load"


@pytest.mark.parametrize(
    ("told", "no_capacity"),
    [
        (NO_CAPACITY, True),
        # the OpenAI path's body, JSON with the message inside
        (json.dumps({"message": NO_CAPACITY}).encode(), True),
        (json.dumps({"error": {"message": NO_CAPACITY, "code": "validation_error"}}), True),
        ("Endpoint chat not found.", False),
        ("Request payload is too large.", False),
        ("Inference Component Name header is required for endpoints to which you plan to", False),
        ("", False),
    ],
)
def test_the_no_capacity_answer_is_recognised(told: str | bytes, no_capacity: bool) -> None:
    assert error_answers.no_capacity(told) is no_capacity


def invoke_error(code: str, message: str) -> botocore.exceptions.ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": 400},
    }
    return botocore.exceptions.ClientError(response, "InvokeEndpoint")


@pytest.mark.parametrize(
    ("error", "meaning"),
    [
        (invoke_error("ValidationError", NO_CAPACITY), invocations.NoCapacity),
        (invoke_error("ValidationError", "Endpoint chat not found."), invocations.InvocationFailed),
        (invoke_error("ThrottlingException", "Rate exceeded"), invocations.Throttled),
    ],
)
def test_batch_reads_the_no_capacity_answer_as_a_wait(
    error: botocore.exceptions.ClientError, meaning: type
) -> None:
    assert type(sagemaker_endpoint.classify(error)) is meaning


@pytest.mark.parametrize(
    ("endpoint", "component", "line"),
    [
        (
            "shared",
            "chat",
            "component chat on endpoint shared is scaling from zero (it has no copy to answer): "
            "when the component has the kit's scale-to-zero alarm (`deploy component "
            f"--scale-to-zero`), this call starts a copy, which takes {TAKES}: try again then",
        ),
        (
            "llm",
            None,
            "endpoint llm is scaling from zero (it has no copy to answer): when its components "
            "have the kit's scale-to-zero alarm (`deploy component --scale-to-zero`), this call "
            f"starts a copy, which takes {TAKES}: try again then",
        ),
    ],
)
def test_the_invoke_line(endpoint: str, component: str | None, line: str) -> None:
    assert from_zero_line(endpoint, component) == line


class Scaling:
    """An attempt that meets no capacity `misses` times, then answers; it counts its calls."""

    def __init__(self, misses: int) -> None:
        self.misses = misses
        self.calls = 0

    async def __call__(self) -> bytes:
        self.calls += 1
        if self.calls <= self.misses:
            raise invocations.NoCapacity(f"ValidationError: {NO_CAPACITY}")
        return b"answer"


WAITING = (
    f"batch: component chat on endpoint shared is scaling from zero (it has no copy to answer): "
    f"waiting up to 30 min for a copy ({TAKES}); these tries do not count against --max-retries"
)


@pytest.fixture
def no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(invocations, "FROM_ZERO_WAIT_S", 0.0)


@pytest.mark.usefixtures("no_wait")
def test_no_capacity_is_waited_out_said_once_and_never_counted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    waiting = invocations.FromZero(error_answers.from_zero("shared", "chat"))
    attempts = [Scaling(misses=4), Scaling(misses=2)]

    async def both() -> list[bytes]:
        return [await invocations.with_retries(a, 0, from_zero=waiting) for a in attempts]

    assert asyncio.run(both()) == [b"answer", b"answer"]
    assert [a.calls for a in attempts] == [5, 3]
    assert capsys.readouterr().err.splitlines() == [WAITING]


@pytest.mark.usefixtures("no_wait")
def test_without_a_wait_no_capacity_is_a_retry() -> None:
    with pytest.raises(invocations.InvocationFailed, match=r"no capacity .* \(after 0 retries\)"):
        asyncio.run(invocations.with_retries(Scaling(misses=1), 0))


@pytest.mark.usefixtures("no_wait")
def test_past_its_bound_the_wait_stops_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    waiting = invocations.FromZero(error_answers.from_zero("shared", "chat"), most_s=0)
    with pytest.raises(invocations.InvocationFailed) as stopped:
        asyncio.run(invocations.with_retries(Scaling(misses=1), 5, from_zero=waiting))
    assert stopped.value.line == (
        "component chat on endpoint shared is scaling from zero (it has no copy to answer), and "
        "no copy came within 0 min: look at its scaling (`deploy component --scale-to-zero` "
        "makes the alarm that starts a copy)"
    )
    assert len(capsys.readouterr().err.splitlines()) == 1
