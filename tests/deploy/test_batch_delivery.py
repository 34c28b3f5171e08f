"""Where `vllm-sagemaker batch` delivers, checked before any line runs: an S3 output whose bucket
does not exist, or whose name S3 refuses, stops the run with one line before the container is
called. Answers whose delivery fails at the end anyway are kept, the line says where and how to
deliver them: `--resume-from` the output they were meant for takes them to a corrected output,
none answered again. The stand-in container (`tests.deploy.holding`) counts what it is sent."""

import subprocess
from pathlib import Path

import boto3
import pytest

from tests.deploy.batching import batch, completion, jsonl, read
from tests.deploy.holding import holding
from tests.support import cli, processes
from vllm_sagemaker.deploy.base.errors import ClientError
from vllm_sagemaker.deploy.batch.staging import Sink, lock_dir, staged_path


@pytest.mark.parametrize(
    ("output", "status", "line"),
    [
        ("s3://no-such-bucket/x.jsonl", 1, "no-such-bucket does not exist"),
        ("s3://Bad_Name/x.jsonl", 2, "'Bad_Name' is not an S3 bucket name (3-63 lowercase"),
        ("s3://10.0.0.1/x.jsonl", 2, "'10.0.0.1' is not an S3 bucket name"),
        ("s3://a..b/x.jsonl", 2, "'a..b' is not an S3 bucket name"),
    ],
)
def test_an_output_bucket_that_cannot_be_written_is_refused_before_any_line(
    tmp_path: Path, aws: dict[str, str], output: str, status: int, line: str
) -> None:
    (tmp_path / "in.jsonl").write_bytes(jsonl([completion("a"), completion("b")]))
    with holding() as (url, container):
        done = batch(
            *cli.options(
                input_file=str(tmp_path / "in.jsonl"),
                output_file=output,
                endpoint=url,
                output_tmp_dir=str(tmp_path / "staging"),
            )
        )
    assert done.returncode == status
    (said,) = done.stderr.decode().splitlines()
    assert said.startswith(f"batch: cannot write {output}: "), said
    assert line in said, said
    assert container.posts == 0
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.jsonl"]


def test_answers_that_cannot_be_delivered_reach_a_corrected_output_without_running_again(
    tmp_path: Path, aws: dict[str, str]
) -> None:
    """The bucket goes away while the run goes on: its delivery fails, the line names the kept
    answers and `--resume-from`; a Sink resuming from it delivers them to another bucket."""
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="gone")
    s3.create_bucket(Bucket="kept")
    staging = str(tmp_path / "staging")
    old, new = "s3://gone/x.jsonl", "s3://kept/x.jsonl"
    ids = [f"l{i}" for i in range(3)]
    (tmp_path / "in.jsonl").write_bytes(jsonl([completion(i) for i in ids]))
    with holding(hold_after=0) as (url, container):
        args = cli.options(input_file=str(tmp_path / "in.jsonl"), output_file=old, endpoint=url)
        batch_args = [cli.VLLM_SAGEMAKER, "batch", *args, "--output-tmp-dir", staging]
        runner = processes.spawn(batch_args, stderr=subprocess.PIPE)
        container.until_held(1)
        s3.delete_bucket(Bucket="gone")
        container.release.set()
        _, stderr = runner.communicate(timeout=120)
    kept = staged_path(old, staging)
    assert runner.returncode == 1
    (said,) = stderr.decode().splitlines()
    assert said.startswith(
        f"batch: cannot write {old}: bucket gone does not exist; its 3 answered lines are kept "
        f"in {kept}: run the same command with --resume to deliver them, or with a corrected "
        f"output and --resume-from {old}"
    ), said
    sink = Sink(new, staging, resume=False, resume_from=old)
    try:
        sink.hold()
        assert [result.custom_id for result in sink.earlier()] == ids
        sink.deliver()
    finally:
        sink.close()
    body = s3.get_object(Bucket="kept", Key="x.jsonl")["Body"].read()
    assert [line["custom_id"] for line in read(body)] == ids
    assert not lock_dir(old, staging).exists() and not lock_dir(new, staging).exists()


def test_a_resumed_run_to_an_output_still_missing_names_its_kept_answers(
    tmp_path: Path, aws: dict[str, str]
) -> None:
    staging = str(tmp_path / "staging")
    old = "s3://still-gone/x.jsonl"
    kept = Path(staged_path(old, staging))
    kept.parent.mkdir(parents=True, mode=0o700)
    kept.write_bytes(b'{"custom_id": "a"}\n{"custom_id": "b"}\n')
    with pytest.raises(ClientError) as refused:
        Sink(old, staging, resume=True)
    assert refused.value.line == (
        f"cannot write {old}: bucket still-gone does not exist; its 2 answered lines are kept in "
        f"{kept}: run the same command with --resume to deliver them, or with a corrected output "
        f"and --resume-from {old}"
    )
