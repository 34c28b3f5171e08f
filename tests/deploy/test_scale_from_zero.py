"""`batch --sagemaker-endpoint E --component C` while C has scaled to zero: AWS answers every
call that it has no capacity until a copy comes; the run says once that it waits, retries
without counting those answers against --max-retries, and ends with every line answered once,
in order, when capacity returns (after the stand-in has refused N calls: an event, not a time)."""

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.batching import completion, jsonl
from tests.deploy.recording import run
from tests.support import cli, waiting
from tests.support.aws import moto_endpoint
from tests.support.json_lines import parse_lines
from tests.support.runtime_emulator import Runtime, runtime_emulator
from tests.support.servers import Server
from vllm_sagemaker.deploy.base import invocations

LINES = 12
# How many calls meet no capacity before the copy comes: more than --max-retries.
REFUSALS = 5


@pytest.fixture
def scaled_to_zero(
    chat_server: Server, aws: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, Runtime]]:
    """An endpoint in moto whose one component, `chat`, has no copy; the stand-in reached by
    this process; tries while it scales from zero a moment apart, not 15 s."""
    monkeypatch.setattr(invocations, "FROM_ZERO_WAIT_S", 0.02)
    with moto_endpoint("zero") as name:
        runtime = Runtime({}, components={"chat": (name, chat_server.url)}, no_capacity={"chat"})
        with runtime_emulator(runtime) as url:
            monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", url)
            yield name, runtime


def test_a_batch_waits_for_a_component_to_scale_from_zero(
    scaled_to_zero: tuple[str, Runtime], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name, runtime = scaled_to_zero
    (tmp_path / "in.jsonl").write_bytes(jsonl([completion(f"r{i}") for i in range(LINES)]))
    output = tmp_path / "out.jsonl"

    def copy_comes() -> None:
        waiting.until(
            lambda: runtime.no_capacity_calls["chat"] >= REFUSALS, 120, "no call met no capacity"
        )
        with runtime.lock:
            runtime.no_capacity.discard("chat")

    wake = threading.Thread(target=copy_comes, daemon=True)
    wake.start()
    args = cli.options(
        input_file=str(tmp_path / "in.jsonl"),
        output_file=str(output),
        sagemaker_endpoint=name,
        component="chat",
        max_retries="1",
    )
    status, _, err = run(capsys, "batch", *args)
    wake.join(1)
    assert status == 0, err
    assert runtime.no_capacity_calls["chat"] >= REFUSALS
    answered = parse_lines(output.read_bytes())
    assert [line["custom_id"] for line in answered] == [f"r{i}" for i in range(LINES)]
    assert all(line["response"]["status_code"] == 200 for line in answered)
    waits = [line for line in err.splitlines() if "scaling from zero" in line]
    assert len(waits) == 1 and "waiting up to 30 min for a copy" in waits[0], err


def test_deploy_invoke_says_the_component_scales_from_zero(
    scaled_to_zero: tuple[str, Runtime], capsys: pytest.CaptureFixture[str]
) -> None:
    name, runtime = scaled_to_zero
    body = '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}'
    status, out, err = run(
        capsys, "deploy", "invoke", "--name", name, "--component", "chat", "--body", body
    )
    assert (status, out) == (1, "")
    assert err == (
        f"deploy: component chat on endpoint {name} is scaling from zero (it has no copy to "
        "answer): when the component has the kit's scale-to-zero alarm (`deploy component "
        "--scale-to-zero`), this call starts a copy, which takes several minutes: an instance "
        "when none is free, then the model's download and load: try again then\n"
    )
    assert runtime.no_capacity_calls["chat"] == 1
