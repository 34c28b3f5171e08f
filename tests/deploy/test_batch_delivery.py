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
from vllm_sagemaker.deploy.batch.staging import Sink, staged_path


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


IDS = [f"l{i}" for i in range(3)]


def undelivered(tmp_path: Path, bucket: str, corrected: str | None = None) -> tuple[list[str], int]:
    """A run to s3://BUCKET/x.jsonl whose bucket goes away while its only mini-batch is held,
    then the same command with `--resume` once the bucket is back (or, `corrected`, with that
    output and `--resume-from` the old one): its lines on stderr, and the mini-batches the
    container was sent."""
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=bucket)
    (tmp_path / "in.jsonl").write_bytes(jsonl([completion(i) for i in IDS]))
    args = cli.options(
        input_file=str(tmp_path / "in.jsonl"),
        output_file=f"s3://{bucket}/x.jsonl",
        output_tmp_dir=str(tmp_path / "staging"),
    )
    with holding(hold_after=0) as (url, container):
        command = [cli.VLLM_SAGEMAKER, "batch", *args, "--endpoint", url]
        runner = processes.spawn(command, stderr=subprocess.PIPE)
        container.until_held(1)
        s3.delete_bucket(Bucket=bucket)
        container.release.set()
        _, stderr = runner.communicate(timeout=120)
        assert runner.returncode == 1
        if corrected is None:
            s3.create_bucket(Bucket=bucket)
            again = batch(*args, "--resume", "--endpoint", url)
        else:
            old = args[args.index("--output-file") + 1]
            args[args.index(old)] = corrected
            again = batch(*args, "--resume-from", old, "--endpoint", url)
        assert again.returncode == 0, again.stderr
        return stderr.decode().splitlines(), container.posts


def test_answers_that_cannot_be_delivered_are_kept_and_resume_delivers_them(
    tmp_path: Path, aws: dict[str, str]
) -> None:
    """The line names the kept answers, `--resume` and `--resume-from`; once the bucket is
    back, `--resume` delivers them and sends the container nothing more."""
    old = "s3://undelivered-back/x.jsonl"
    lines, posts = undelivered(tmp_path, "undelivered-back")
    (said,) = lines
    assert said.startswith(
        f"batch: cannot write {old}: bucket undelivered-back does not exist; its 3 answered "
        f"lines are kept in {staged_path(old, str(tmp_path / 'staging'))}: run the same command "
        f"with --resume to deliver them, or with a corrected output and --resume-from {old}"
    ), said
    assert posts == 1
    body = boto3.client("s3").get_object(Bucket="undelivered-back", Key="x.jsonl")["Body"]
    assert [line["custom_id"] for line in read(body.read())] == IDS
    assert list((tmp_path / "staging").iterdir()) == []


def test_a_corrected_output_with_resume_from_gets_the_kept_answers(
    tmp_path: Path, aws: dict[str, str]
) -> None:
    """The command the line gives, with a corrected -o: the kept answers are delivered there,
    the container is sent nothing more, and no staging is left."""
    boto3.client("s3").create_bucket(Bucket="corrected-output")
    lines, posts = undelivered(tmp_path, "gone-output", "s3://corrected-output/x.jsonl")
    (said,) = lines
    assert said.endswith("or with a corrected output and --resume-from s3://gone-output/x.jsonl")
    assert posts == 1
    body = boto3.client("s3").get_object(Bucket="corrected-output", Key="x.jsonl")["Body"]
    assert [line["custom_id"] for line in read(body.read())] == IDS
    assert list((tmp_path / "staging").iterdir()) == []


def test_resuming_from_an_output_takes_its_kept_answers_to_another(
    tmp_path: Path, aws: dict[str, str]
) -> None:
    """`Sink(..., resume_from=OLD)`, what `--resume-from OLD` runs: the answers kept for OLD are
    delivered to the new output, and OLD's staging directory is gone."""
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="undelivered-new")
    staging = str(tmp_path / "staging")
    old, new = "s3://undelivered-old/x.jsonl", "s3://undelivered-new/x.jsonl"
    kept = Path(staged_path(old, staging))
    kept.parent.mkdir(parents=True, mode=0o700)
    kept.write_bytes(jsonl([{"custom_id": i, "response": {}, "error": None} for i in IDS]))
    sink = Sink(new, staging, resume=False, resume_from=old)
    try:
        sink.hold()
        assert [result.custom_id for result in sink.earlier()] == IDS
        sink.deliver()
    finally:
        sink.close()
    body = s3.get_object(Bucket="undelivered-new", Key="x.jsonl")["Body"].read()
    assert [line["custom_id"] for line in read(body)] == IDS
    assert list(Path(staging).iterdir()) == []


def test_a_resumed_run_to_an_output_still_missing_names_its_kept_answers(
    tmp_path: Path, aws: dict[str, str]
) -> None:
    staging = str(tmp_path / "staging")
    old = "s3://still-missing/x.jsonl"
    kept = Path(staged_path(old, staging))
    kept.parent.mkdir(parents=True, mode=0o700)
    kept.write_bytes(b'{"custom_id": "a"}\n{"custom_id": "b"}\n')
    with pytest.raises(ClientError) as refused:
        Sink(old, staging, resume=True)
    assert refused.value.line == (
        f"cannot write {old}: bucket still-missing does not exist; its 2 answered lines are "
        f"kept in {kept}: run the same command with --resume to deliver them, or with a "
        f"corrected output and --resume-from {old}"
    )
