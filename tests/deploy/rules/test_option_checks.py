"""The options `deploy` checks before it calls AWS (`deploy.kit.checks`), a table each:
SageMaker names, S3 URIs, roles, regions, ranges and bodies; and which region it works in
(`deploy.base.region`)."""

import pytest

from tests.deploy.deploying import ROLE
from vllm_sagemaker.deploy.base import region
from vllm_sagemaker.deploy.kit import checks, invoke


@pytest.mark.parametrize(
    ("name", "command", "problem"),
    [
        ("llama", "endpoint", None),
        ("Llama-3--8b", "endpoint", None),
        ("a", "delete", None),
        ("x" * 63, "delete", None),
        ("x" * 63, "transform", None),
        ("x" * 47, "endpoint", None),
        ("x" * 55, "batch", None),
        ("llama 3", "endpoint", "SageMaker names are 1-63 letters, digits and hyphens"),
        ("my_model", "transform", "no spaces, underscores"),
        ("llama/8b", "invoke", "SageMaker names are"),
        ("llama.8b", "endpoint", "SageMaker names are"),
        ("-llama", "endpoint", "starting and ending with a letter or digit"),
        ("llama-", "endpoint", "starting and ending with a letter or digit"),
        ("", "endpoint", "SageMaker names are"),
        ("x" * 64, "delete", "(64 characters): SageMaker names are 63 at most"),
        ("x" * 70, "endpoint", "(70 characters)"),
        ("x" * 48, "endpoint", "NAME-<UTC time>, must fit SageMaker's 63 characters too, so give "),
        ("x" * 56, "batch", "NAME-<shard>-<attempt>, must fit SageMaker's 63 characters too"),
    ],
)
def test_names(name: str, command: str, problem: str | None) -> None:
    found = checks.name_problem(name, command)
    if problem is None:
        assert found is None
        return
    assert found is not None and problem in found, found
    assert found.startswith(f"--name {name!r}")


@pytest.mark.parametrize(("command", "longest"), [("endpoint", 47), ("batch", 55), ("delete", 63)])
def test_the_longest_name_is_what_the_derived_names_leave(command: str, longest: int) -> None:
    assert checks.longest_name(command) == longest
    assert checks.name_problem("x" * longest, command) is None


@pytest.mark.parametrize(
    ("option", "value", "archive", "problem"),
    [
        ("--input", "s3://bucket/in/", False, None),
        ("--input", "s3://my.bucket-1/in", False, None),
        ("--model-data", "s3://models/llama/model.tar.gz", True, None),
        ("--model-data", "/local/model.tar.gz", True, "S3 only: give s3://bucket/model.tar.gz"),
        ("--model-data", "s3://models/llama/", True, "from a .tar.gz archive"),
        ("--async-output", "/tmp/out", False, "S3 only: give s3://bucket/prefix/"),
        ("--output", "https://bucket.s3.amazonaws.com/out/", False, "S3 only"),
        ("--input", "s3://b/in/", False, "'b' is not an S3 bucket name"),
        ("--input", "s3://My_Bucket/in/", False, "is not an S3 bucket name"),
        ("--input", "s3://bucket..x/in/", False, "is not an S3 bucket name"),
        ("--input", "s3://192.168.1.1/in/", False, "not an IP address"),
        ("--input", "s3://-bucket/in/", False, "is not an S3 bucket name"),
        ("--input", "s3:///in/", False, "'' is not an S3 bucket name"),
        ("--input", "s3://bucket/" + "k" * 1020, False, "1032 characters"),
    ],
)
def test_s3_uris(option: str, value: str, archive: bool, problem: str | None) -> None:
    found = checks.s3_problem(option, value, archive)
    if problem is None:
        assert found is None
        return
    assert found is not None and problem in found and found.startswith(option), found


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        (ROLE, True),
        ("arn:aws:iam::123456789012:role/service-role/AmazonSageMaker-ExecutionRole", True),
        ("arn:aws-cn:iam::123456789012:role/SageMaker", True),
        ("notanarn", False),
        ("arn:aws:iam::123456789012:user/me", False),
        ("arn:aws:iam::1234:role/SageMaker", False),
        ("SageMakerRole", False),
    ],
)
def test_roles(value: str, ok: bool) -> None:
    found = checks.role_problem("--role", value)
    assert (found is None) is ok, found
    if not ok:
        assert found is not None and found.startswith(f"--role {value!r}: not an IAM role ARN")


@pytest.mark.parametrize(
    ("value", "ok"),
    [("us-east-1", True), ("eu-central-2", True), ("us-gov-west-1", True), ("nowhere", False)],
)
def test_regions(value: str, ok: bool) -> None:
    assert (checks.region_problem(value) is None) is ok


@pytest.mark.parametrize(
    ("option", "value", "least", "most", "problem"),
    [
        ("--instance-count", 1, 1, None, None),
        ("--instance-count", 0, 1, None, "--instance-count 0: must be at least 1"),
    ],
)
def test_ranges(option: str, value: int, least: int, most: int | None, problem: str | None) -> None:
    found = checks.range_problem(option, value, least, most)
    assert (found is None) is (problem is None)
    assert problem is None or (found is not None and problem in found)


@pytest.mark.parametrize(
    ("body", "ok"), [(b'{"prompt": "hi"}', True), (b"[1, 2]", True), (b"{not json", False)]
)
def test_bodies(body: bytes, ok: bool) -> None:
    found = invoke.json_problem("--body", body)
    assert (found is None) is ok
    if not ok:
        assert found is not None and found.startswith("--body: not JSON (")


@pytest.mark.parametrize(
    ("given", "env", "chosen"),
    [
        ("eu-west-1", {"AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-2"}, "eu-west-1"),
        (None, {"AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-2"}, "us-east-1"),
        (None, {"AWS_REGION": "", "AWS_DEFAULT_REGION": "us-east-2"}, "us-east-2"),
        (None, {"AWS_DEFAULT_REGION": "us-east-2"}, "us-east-2"),
        (None, {}, None),
        ("", {}, None),
    ],
)
def test_which_region(given: str | None, env: dict[str, str], chosen: str | None) -> None:
    assert region.chosen_region(given, env) == chosen
    region.use_region(given, env)
    assert env.get("AWS_DEFAULT_REGION") == (chosen or env.get("AWS_DEFAULT_REGION"))
