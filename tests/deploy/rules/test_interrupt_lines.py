"""What Ctrl-C says, one rule for every command (`deploy.base.interrupts`): what was kept and
how to go on, `--resume` named only when there is something to resume; what a stopped wait
leaves on SageMaker; what a second Ctrl-C says."""

import pytest

from vllm_sagemaker.deploy.base.interrupts import (
    Interrupted,
    kept_line,
    second_line,
    top_line,
    wait_line,
)
from vllm_sagemaker.deploy.kit.batch import stopped_line

RESUME = "run the same command with --resume to finish"
AGAIN = "run the same command again"


@pytest.mark.parametrize(
    ("count", "noun", "verb", "where", "total", "line"),
    [
        (
            64,
            "line",
            "answered",
            "out.jsonl",
            None,
            f"stopped: 64 lines answered and kept in out.jsonl; {RESUME}",
        ),
        (1, "line", "answered", "o", None, f"stopped: 1 line answered and kept in o; {RESUME}"),
        (
            0,
            "line",
            "answered",
            "out.jsonl",
            None,
            f"stopped: no line answered, nothing written to out.jsonl; {AGAIN}",
        ),
        (
            2,
            "file",
            "transformed",
            "out/",
            5,
            f"stopped: 2 of 5 files transformed and kept in out/; {RESUME}",
        ),
        (
            0,
            "file",
            "transformed",
            "s3://b/out/",
            5,
            f"stopped: none of 5 files transformed, nothing written to s3://b/out/; {AGAIN}",
        ),
    ],
)
def test_what_a_stopped_run_kept(
    count: int, noun: str, verb: str, where: str, total: int | None, line: str
) -> None:
    assert kept_line(count, noun, verb, where, total) == line


@pytest.mark.parametrize(
    ("operation", "params", "status", "region", "line"),
    [
        (
            "DescribeEndpoint",
            {"EndpointName": "llm"},
            "Creating",
            "us-east-1",
            "stopped: endpoint llm (Creating) goes on in SageMaker without this command; check "
            "it with aws sagemaker describe-endpoint --endpoint-name llm --region us-east-1, or "
            "delete it with vllm-sagemaker deploy delete --name llm --region us-east-1",
        ),
        (
            "DescribeTransformJob",
            {"TransformJobName": "job"},
            None,
            None,
            "stopped: transform job job goes on in SageMaker without this command; check it with "
            "aws sagemaker describe-transform-job --transform-job-name job, or stop it with aws "
            "sagemaker stop-transform-job --transform-job-name job",
        ),
    ],
)
def test_what_a_stopped_wait_leaves(
    operation: str, params: dict[str, str], status: str | None, region: str | None, line: str
) -> None:
    assert wait_line(operation, params, status, region) == line


def test_a_stopped_wait_names_the_profile_given() -> None:
    line = wait_line("DescribeEndpoint", {"EndpointName": "e"}, "Updating", "eu-west-1", "prod")
    assert line.endswith(
        "check it with aws sagemaker describe-endpoint --endpoint-name e --region eu-west-1 "
        "--profile prod, or delete it with vllm-sagemaker deploy delete --name e --region "
        "eu-west-1 --profile prod"
    )


@pytest.mark.parametrize(
    ("command", "line"),
    [
        ("batch", f"batch: stopped at once by a second Ctrl-C; {RESUME}"),
        ("transform", f"transform: stopped at once by a second Ctrl-C; {RESUME}"),
        ("deploy", "deploy: stopped at once by a second Ctrl-C"),
    ],
)
def test_what_a_second_ctrl_c_says(command: str, line: str) -> None:
    assert second_line(command) == line


@pytest.mark.parametrize(
    ("stop", "line"),
    [
        (Interrupted("stopped: what; how"), "stopped: what; how"),
        (KeyboardInterrupt(), "stopped by Ctrl-C"),
        (Interrupted(), "stopped by Ctrl-C"),
    ],
)
def test_the_line_a_ctrl_c_gets_at_the_top(stop: KeyboardInterrupt, line: str) -> None:
    assert top_line(stop) == line


@pytest.mark.parametrize(
    ("local", "line"),
    [
        (
            True,
            "stopped: no new job starts; the shards finished are kept under ./work; run the "
            "same command again to finish the rest",
        ),
        (
            False,
            "stopped: no new job starts; transform jobs already started keep running; run the "
            "same command again to collect them and finish the rest",
        ),
    ],
)
def test_what_a_stopped_fleet_leaves(local: bool, line: str) -> None:
    assert stopped_line(local, "./work") == line
