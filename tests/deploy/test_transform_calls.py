"""`deploy transform` writes only what it says: its input's shards go beside the output under
the job's name, never into the input nor among objects it did not write, and a taken name writes
nothing. Every botocore call recorded against moto."""

import json

import boto3
import pytest

from tests.deploy.deploying import model_options
from tests.deploy.recording import dry_then_real, run, state


def put_lines(bucket: str, key: str, count: int, start: int = 0) -> list[bytes]:
    lines = [json.dumps({"prompt": f"p{i}"}).encode() for i in range(start, start + count)]
    boto3.client("s3").put_object(Bucket=bucket, Key=key, Body=b"\n".join(lines) + b"\n")
    return lines


def keys(bucket: str, prefix: str) -> list[str]:
    listed = boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(item["Key"] for item in listed.get("Contents", []))


def body(bucket: str, key: str) -> bytes:
    return bytes(boto3.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())


def transform(name: str, instances: int) -> tuple[str, ...]:
    return (
        "deploy",
        "transform",
        *model_options(
            name,
            "ml.g4dn.xlarge",
            instance_count=str(instances),
            input="s3://rec-split/in/",
            output="s3://rec-split/out/",
        ),
    )


def test_transform_split_is_the_jobs_own(role: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Parts go beside the output under the job's name, never into the input; a later job with
    fewer files reads only its own parts, and what an earlier attempt left there is removed."""
    boto3.client("s3").create_bucket(Bucket="rec-split")
    first = put_lines("rec-split", "in/a.jsonl", 7) + put_lines("rec-split", "in/b.jsonl", 5, 7)
    planned = dry_then_real(capsys, *transform("rec-one", 4))
    parts = keys("rec-split", "out-parts/rec-one/")
    assert planned == [
        *(("s3", "PutObject", key) for key in parts),
        ("sagemaker", "CreateModel", "rec-one"),
        ("sagemaker", "CreateTransformJob", "rec-one"),
    ]
    assert len(parts) >= 4
    assert keys("rec-split", "in/") == ["in/a.jsonl", "in/b.jsonl"]
    assert b"".join(body("rec-split", k) for k in parts).splitlines() == first

    boto3.client("s3").delete_object(Bucket="rec-split", Key="in/b.jsonl")
    boto3.client("s3").put_object(
        Bucket="rec-split", Key="out-parts/rec-two/a.part-00009.jsonl", Body=b"{}\n"
    )
    planned = dry_then_real(capsys, *transform("rec-two", 3))
    assert planned[0] == ("s3", "DeleteObject", "out-parts/rec-two/a.part-00009.jsonl")
    job = boto3.client("sagemaker").describe_transform_job(TransformJobName="rec-two")
    prefix = job["TransformInput"]["DataSource"]["S3DataSource"]["S3Uri"]
    assert prefix == "s3://rec-split/out-parts/rec-two/"
    second = keys("rec-split", "out-parts/rec-two/")
    assert len(second) == 3
    assert b"".join(body("rec-split", k) for k in second).splitlines() == first[:7]


def test_transform_refuses_a_taken_name(role: str, capsys: pytest.CaptureFixture[str]) -> None:
    boto3.client("s3").create_bucket(Bucket="rec-taken")
    put_lines("rec-taken", "in/a.jsonl", 2)
    arguments = model_options(
        "rec-taken", "ml.g4dn.xlarge", input="s3://rec-taken/in/", output="s3://rec-taken/out/"
    )
    assert run(capsys, "deploy", "transform", *arguments)[0] == 0
    before = state()
    status, _, err = run(capsys, "deploy", "transform", *arguments)
    assert status == 1
    assert "a transform job named rec-taken exists" in err
    assert state() == before


@pytest.mark.parametrize(
    ("output", "planted", "refusal", "exit_status"),
    [
        ("s3://rec-overlap/in/results/", None, "overlaps --input s3://rec-overlap/in/", 2),
        ("s3://rec-overlap/out/", "out-parts/rec-planted/notes.txt", "which no cut wrote", 1),
    ],
)
def test_transform_split_refuses_to_mix_data(
    role: str,
    capsys: pytest.CaptureFixture[str],
    output: str,
    planted: str | None,
    refusal: str,
    exit_status: int,
) -> None:
    """Parts that would land inside the input (options that conflict: exit status 2), or beside
    an object the split did not write (the job would read it), stop the command before
    anything is written."""
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="rec-overlap")
    put_lines("rec-overlap", "in/a.jsonl", 4)
    if planted:
        s3.put_object(Bucket="rec-overlap", Key=planted, Body=b"mine")
    name = "rec-planted" if planted else "rec-inside"
    arguments = model_options(
        name, "ml.g4dn.xlarge", instance_count="2", input="s3://rec-overlap/in/", output=output
    )
    before = state()
    for dry in (["--dry-run"], []):
        status, out, err = run(capsys, "deploy", "transform", *arguments, *dry)
        assert status == exit_status and out == ""
        assert refusal in err.splitlines()[-1]
    assert state() == before
