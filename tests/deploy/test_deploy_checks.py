"""What `deploy` checks before it calls AWS (`deploy.kit.checks`), which region it works in
(`deploy.base.region`), and that its help loads no boto3.

Each rule is a table; the command-level tests run `vllm-sagemaker deploy` as a user would, with no
AWS at all for the checks (they come before any call) and against moto for the regions.
"""

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import boto3
import botocore.session
import pytest

from tests.deploy.test_deploy import CHECKOUT, IMAGE, ROLE, deploy, fake_builders, model_options
from tests.support import cli, processes
from vllm_sagemaker.container import serve
from vllm_sagemaker.deploy.base import errors, region
from vllm_sagemaker.deploy.image import builders
from vllm_sagemaker.deploy.kit import checks
from vllm_sagemaker.deploy.kit import cli as deploy_cli
from vllm_sagemaker.deploy.kit.plans import instances
from vllm_sagemaker.handler.core.environment import environment_problems

# No AWS settings at all, and nothing to read them from: a check that calls AWS would say so.
NO_AWS = {
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
}


def without_aws() -> dict[str, str]:
    """The test's environment with every AWS_* variable removed, plus NO_AWS."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")}, **NO_AWS}


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
    found = checks.name_problem(name, checks.derived_names(command, name))
    if problem is None:
        assert found is None
        return
    assert found is not None and problem in found, found
    assert found.startswith(f"--name {name!r}")


@pytest.mark.parametrize(("command", "longest"), [("endpoint", 47), ("batch", 55), ("delete", 63)])
def test_the_longest_name_is_what_the_derived_names_leave(command: str, longest: int) -> None:
    assert checks.longest_name(command) == longest
    assert checks.name_problem("x" * longest, checks.derived_names(command, "x" * longest)) is None


@pytest.mark.parametrize(
    ("value", "problem", "warning"),
    [
        ("ml.g5.12xlarge", None, None),
        ("ml.p5.4xlarge", None, None),
        ("ml.c7i.2xlarge", None, None),
        ("ml.inf2.xlarge", None, None),
        ("ml.t2.medium", None, None),
        ("g5.12xlarge", "start with 'ml.' (ml.g5.12xlarge?)", None),
        ("ml.g5", "not of the form ml.<family>.<size>", None),
        ("ml.g5.12xlarge.extra", "not of the form", None),
        ("ml.G5.12xlarge", "not of the form", None),
        ("", "start with 'ml.'", None),
        ("ml.g9.mega", None, "does not know family g9, so it sets no tensor parallelism"),
        ("ml.p6-b200.48xlarge", None, "does not know family p6-b200"),
        ("ml.g5.96xlarge", None, "does not know size 96xlarge"),
    ],
)
def test_instance_types(value: str, problem: str | None, warning: str | None) -> None:
    found = checks.instance_type_problem(value)
    assert (found is None) is (problem is None), found
    if problem:
        assert found is not None and problem in found and value in found
    told = checks.instance_type_warning(value)
    assert (told is None) is (warning is None), told
    if warning:
        assert told is not None and warning in told and "SM_VLLM_TENSOR_PARALLEL_SIZE" in told


def families(enum: str) -> set[str]:
    model = botocore.session.get_session().get_service_model("sagemaker")
    return {value.split(".")[1] for value in model.shape_for(enum).enum}


def test_the_known_families_are_botocores() -> None:
    """The table's source: every family the kit knows is one SageMaker hosts on (botocore's
    model of its API), and transform jobs offer every GPU family the kit allows them."""
    assert families("ProductionVariantInstanceType") >= instances.KNOWN_FAMILIES
    assert set(instances.TRANSFORM_FAMILIES) <= families("TransformInstanceType")


@pytest.mark.parametrize(
    ("instance_type", "target", "warning"),
    [
        ("ml.g5.12xlarge", "gpu", None),
        ("ml.p4d.24xlarge", "gpu", None),
        ("ml.g4dn.xlarge", "gpu", None),
        ("ml.c7i.8xlarge", "cpu", None),
        ("ml.m7i.4xlarge", "cpu", None),
        ("ml.r7i.2xlarge", "cpu", None),
        ("ml.c6i.2xlarge", "cpu", None),
        ("ml.m5.xlarge", "cpu", None),
        ("ml.t2.medium", "cpu", None),
        ("ml.c7g.4xlarge", None, "Graviton (arm64); the CPU image runs there only if"),
        ("ml.r7gd.xlarge", None, "Graviton (arm64)"),
        ("ml.inf2.xlarge", None, "neither image drives its accelerators"),
        ("ml.trn1.2xlarge", None, "neither image drives its accelerators"),
        ("ml.dl1.24xlarge", None, "neither image drives its accelerators"),
        ("ml.g9.mega", None, None),
        ("ml.p6-b200.48xlarge", None, None),
        ("g5.12xlarge", None, None),
    ],
)
def test_which_image_an_instance_type_takes(
    instance_type: str, target: str | None, warning: str | None
) -> None:
    assert instances.image_target(instance_type) == target
    told = checks.instance_image_warning(instance_type)
    assert (told is None) is (warning is None), told
    if warning:
        assert told is not None and told.startswith(f"--instance-type {instance_type}: " + warning)


def test_the_families_are_sorted_once() -> None:
    """Every family without an NVIDIA GPU is a CPU, Graviton or accelerator family, once."""
    groups = (instances.CPU_FAMILIES, instances.GRAVITON_FAMILIES, instances.ACCELERATOR_FAMILIES)
    every = [family for group in groups for family in group]
    assert len(every) == len(set(every)) and not set(every) & instances.GPU_FAMILIES


@pytest.mark.parametrize(
    ("tag", "target"),
    [
        ("cpu", "cpu"),
        ("gpu", "gpu"),
        ("cpu-v2", "cpu"),
        ("v2.gpu", "gpu"),
        ("2026_01_GPU", "gpu"),
        ("v1", None),
        ("latest", None),
        ("cpus", None),
        ("gpu-and-cpu", None),
    ],
)
def test_which_image_a_tag_names(tag: str, target: str | None) -> None:
    assert checks.named_target(tag) == target


@pytest.mark.parametrize(
    ("image", "tag"),
    [
        (IMAGE, "latest"),
        ("123456789012.dkr.ecr.us-east-1.amazonaws.com/team/vllm-sagemaker:cpu", "cpu"),
        ("123456789012.dkr.ecr.us-east-1.amazonaws.com/vllm-sagemaker", None),
        ("123456789012.dkr.ecr.us-east-1.amazonaws.com/vllm@sha256:" + "a" * 64, None),
    ],
)
def test_image_tags(image: str, tag: str | None) -> None:
    assert checks.image_tag(image) == tag


ECR = "123456789012.dkr.ecr.us-east-1.amazonaws.com/vllm-sagemaker"


@pytest.mark.parametrize(
    ("image", "instance_type", "problem"),
    [
        (f"{ECR}:cpu", "ml.c7i.8xlarge", None),
        (f"{ECR}:gpu", "ml.g5.2xlarge", None),
        (f"{ECR}:v1", "ml.c7i.8xlarge", None),
        (f"{ECR}:latest", "ml.g5.2xlarge", None),
        (f"{ECR}@sha256:" + "a" * 64, "ml.c7i.8xlarge", None),
        (f"{ECR}:gpu", "ml.inf2.xlarge", None),
        (f"{ECR}:cpu", "ml.g9.mega", None),
        (
            f"{ECR}:gpu",
            "ml.c7i.8xlarge",
            "its tag names the gpu image, and ml.c7i.8xlarge has no GPU: give the cpu image "
            "(`vllm-sagemaker deploy image --target cpu` builds it",
        ),
        (f"{ECR}:gpu-v2", "ml.m7i.xlarge", "--target cpu"),
        (f"{ECR}:cpu", "ml.g5.12xlarge", "has NVIDIA GPUs: give the gpu image"),
        (f"{ECR}:v1.cpu", "ml.p5.48xlarge", "--target gpu"),
    ],
)
def test_the_image_must_fit_the_instance(
    image: str, instance_type: str, problem: str | None
) -> None:
    found = checks.image_instance_problem(image, instance_type)
    if problem is None:
        assert found is None
        return
    assert found is not None and found.startswith(f"--image {image}: ") and problem in found


@pytest.mark.parametrize(
    ("check", "value", "problem"),
    [
        (checks.repository_problem, "vllm-sagemaker", None),
        (checks.repository_problem, "team/vllm_sagemaker.v2", None),
        (checks.repository_problem, "Vllm", "--repository 'Vllm': ECR repository names are"),
        (checks.repository_problem, "vllm sagemaker", "--repository"),
        (checks.repository_problem, "x", "2-256"),
        (checks.repository_problem, "team//vllm", "--repository"),
        (checks.repository_problem, "vllm-", "--repository"),
        (checks.repository_problem, "a" * 257, "2-256"),
        (checks.tag_problem, "cpu", None),
        (checks.tag_problem, "v1.2_rc-3", None),
        (checks.tag_problem, "x" * 128, None),
        (checks.tag_problem, "x" * 129, "--tag 'xxxx"),
        (checks.tag_problem, ".v1", "not starting with a dot or hyphen"),
        (checks.tag_problem, "v1:2", "--tag 'v1:2': image tags are 1-128"),
        (checks.tag_problem, "", "--tag '': image tags"),
    ],
)
def test_repository_and_tag_names(
    check: Callable[[str], str | None], value: str, problem: str | None
) -> None:
    found = check(value)
    if problem is None:
        assert found is None
        return
    assert found is not None and problem in found, found


@pytest.mark.parametrize(
    ("target", "tag", "problem"),
    [
        ("cpu", "cpu", None),
        ("cpu", "v1", None),
        ("gpu", "gpu-2026", None),
        ("cpu", "gpu", "--tag 'gpu' names the gpu image, but --target is cpu: give --target gpu"),
        ("gpu", "v1-cpu", "--tag 'v1-cpu' names the cpu image, but --target is gpu"),
    ],
)
def test_a_tag_names_the_image_it_tags(target: str, tag: str, problem: str | None) -> None:
    found = checks.target_tag_problem(target, tag)
    if problem is None:
        assert found is None
        return
    assert found is not None and found.startswith(problem), found


def never() -> bool:
    raise AssertionError("docker info was asked when it did not matter")


@pytest.mark.parametrize(
    ("asked", "on_path", "answers", "tool", "why"),
    [
        (None, {"docker", "buildah", "podman"}, True, "docker", "docker, whose engine answers"),
        (None, {"docker", "buildah", "podman"}, False, "buildah", "buildah, as no Docker engine"),
        (None, {"docker", "podman"}, False, "podman", "podman, as no Docker engine answers"),
        (None, {"buildah", "podman"}, never, "buildah", "buildah, as no docker on PATH"),
        (None, {"podman"}, never, "podman", "podman, as no docker on PATH"),
        (None, set(), never, None, "deploy image needs a container builder: no docker on PATH"),
        (None, {"docker"}, False, None, "deploy image needs a container builder: no Docker engine"),
        ("buildah", {"docker", "buildah"}, never, "buildah", "buildah, as --builder asks"),
        ("podman", {"podman"}, never, "podman", "podman, as --builder asks"),
        ("docker", {"docker"}, True, "docker", "docker, as --builder asks"),
        ("docker", {"docker", "buildah"}, False, None, "--builder docker: no Docker engine"),
        ("docker", {"buildah"}, never, None, "--builder docker: no docker on PATH"),
        ("podman", {"docker", "buildah"}, never, None, "--builder podman: no podman on PATH"),
    ],
)
def test_which_builder(
    asked: str | None,
    on_path: set[str],
    answers: bool | Callable[[], bool],
    tool: str | None,
    why: str,
) -> None:
    """docker when its engine answers, else buildah, else podman; `docker info` is asked only
    when docker is on PATH and could be the one."""
    docker_answers = answers if callable(answers) else lambda: answers
    found = {name: name in on_path for name in builders.BUILDERS}
    choice = builders.choose(asked, found, docker_answers)
    assert choice.tool == tool
    assert choice.why.startswith(why), choice.why


@pytest.mark.parametrize(
    ("tool", "proxy", "login"),
    [
        (
            "buildah",
            "https://123456789012.dkr.ecr.us-east-1.amazonaws.com",
            "buildah login --username AWS --password-stdin 123456789012.dkr.ecr.us-east-1."
            "amazonaws.com",
        ),
        (
            "docker",
            "https://123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn/",
            "docker login --username AWS --password-stdin 123456789012.dkr.ecr.cn-north-1."
            "amazonaws.com.cn",
        ),
    ],
)
def test_login_and_push_commands(tool: str, proxy: str, login: str) -> None:
    registry = builders.registry_host(proxy)
    assert " ".join(builders.login(tool, registry)) == login
    assert builders.push(tool, f"{registry}/r:cpu") == [tool, "push", f"{registry}/r:cpu"]


def test_a_failed_command_is_one_line() -> None:
    failed = subprocess.CalledProcessError(3, ["buildah", "bud", "-t", "a b:cpu", "."])
    assert errors.explain(failed) == "buildah bud -t 'a b:cpu' . failed with exit status 3"


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
        (IMAGE, True),
        ("123456789012.dkr.ecr.us-east-1.amazonaws.com/team/vllm-sagemaker", True),
        ("123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn/vllm:v1", True),
        ("123456789012.dkr.ecr-fips.us-gov-west-1.amazonaws.com/vllm:v1", True),
        ("123456789012.dkr.ecr.us-east-1.amazonaws.com/vllm@sha256:" + "a" * 64, True),
        ("vllm-sagemaker:v1", False),
        ("docker.io/vllm/vllm-openai:latest", False),
        ("public.ecr.aws/abc/vllm:latest", False),
        ("12345.dkr.ecr.us-east-1.amazonaws.com/vllm:v1", False),
        ("123456789012.dkr.ecr.us-east-1.amazonaws.com/Vllm:v1", False),
        ("123456789012.dkr.ecr.us-east-1.amazonaws.com/vllm:", False),
    ],
)
def test_images(value: str, ok: bool) -> None:
    found = checks.image_problem(value)
    assert (found is None) is ok, found
    if not ok:
        assert found is not None and "deploy image" in found and value in found


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
        ("--max-payload-mb", 0, 0, 100, None),
        ("--max-payload-mb", 100, 0, 100, None),
        ("--max-payload-mb", 101, 0, 100, "--max-payload-mb 101: must be from 0 to 100"),
        ("--max-payload-mb", -1, 0, 100, "must be from 0 to 100"),
    ],
)
def test_ranges(option: str, value: int, least: int, most: int | None, problem: str | None) -> None:
    found = checks.range_problem(option, value, least, most)
    assert (found is None) is (problem is None)
    assert problem is None or (found is not None and problem in found)


@pytest.mark.parametrize(
    ("payload", "concurrent", "ok"), [(1, 2, True), (50, 2, True), (50, 3, False), (100, 0, True)]
)
def test_payload_in_flight(payload: int, concurrent: int, ok: bool) -> None:
    assert (checks.payload_problem(payload, concurrent) is None) is ok


@pytest.mark.parametrize(
    ("pairs", "problem"),
    [
        ([], None),
        (["SM_VLLM_MAX_MODEL_LEN=4096", "SM_VLLM_ENFORCE_EAGER=true"], None),
        (["SM_VLLM_API_KEY=secret", "HF_TOKEN=a=b"], None),
        (["PROCESS_AUTO_RECOVERY=false"], None),
        (["CUSTOM_FASTAPI_PING_HANDLER=model.py:ping"], None),
        (["NOVALUE"], "--env 'NOVALUE': give KEY=VALUE"),
        (["=x"], "give KEY=VALUE"),
        (["MY-VAR=1"], "give KEY=VALUE"),
        (["BIG=" + "x" * 1025], "--env BIG: 1025 characters"),
        (["PROCESS_AUTO_RECOVERY=maybe"], "PROCESS_AUTO_RECOVERY='maybe' is not a yes/no value"),
        (["SM_VLLM_API_KEY=true"], "SM_VLLM_API_KEY='true' holds no API key"),
        (["PROCESS_MAX_START_RETRIES=101"], "PROCESS_MAX_START_RETRIES must be a whole number"),
        (["SAGEMAKER_BIND_TO_PORT=http"], "SAGEMAKER_BIND_TO_PORT must be a TCP port"),
        (["SM_NUM_GPUS=all"], "SM_NUM_GPUS must be a whole number > 0"),
        (["STANDARD_AUTO_INSTALL_REQ=y"], "STANDARD_AUTO_INSTALL_REQ='y' is not a yes/no"),
        (["SAGEMAKER_MAX_PAYLOAD_IN_MB=0"], "SAGEMAKER_MAX_PAYLOAD_IN_MB must be a whole number"),
        (["CUSTOM_FASTAPI_PING_HANDLER=foo"], "names no function"),
    ],
)
def test_env(pairs: list[str], problem: str | None) -> None:
    found = checks.env_problem(pairs)
    if problem is None:
        assert found is None
        return
    assert found is not None and problem in found, found
    assert "\n" not in found


@pytest.mark.parametrize(
    "variables",
    [
        {"PROCESS_AUTO_RECOVERY": "maybe"},
        {"SM_VLLM_API_KEY": "true"},
        {"SM_NUM_GPUS": "0"},
        {"SAGEMAKER_BIND_TO_PORT": "70000"},
        {"SAGEMAKER_STOP_TIMEOUT_SECONDS": "-1", "SAGEMAKER_BATCH": "2"},
    ],
)
def test_deploy_refuses_what_serve_refuses(
    variables: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One rule: `serve` stops on exactly the problems `deploy --env` names."""
    monkeypatch.setenv("SM_VLLM_MODEL", "some/model")
    for key, value in variables.items():
        monkeypatch.setenv(key, value)
    assert serve.run([], dry_run=True) == 2
    (line,) = capsys.readouterr().err.splitlines()
    problems = environment_problems(variables, None)
    assert problems and line == "serve: " + "; ".join(problems)
    found = checks.env_problem([f"{k}={v}" for k, v in variables.items()])
    assert found == "--env: the container's serve would refuse it: " + "; ".join(problems)


def test_the_client_checks_handler_specs_by_form_only() -> None:
    """The customer's files are in the model, out of the client's reach."""
    spec = {"CUSTOM_FASTAPI_PING_HANDLER": "model.py:ping"}
    assert environment_problems(spec, None) == []
    assert "there is no file" in environment_problems(spec, lambda path: None)[0]


@pytest.mark.parametrize(
    ("body", "ok"), [(b'{"prompt": "hi"}', True), (b"[1, 2]", True), (b"{not json", False)]
)
def test_bodies(body: bytes, ok: bool) -> None:
    found = checks.json_problem("--body", body)
    assert (found is None) is ok
    if not ok:
        assert found is not None and found.startswith("--body: not JSON (")


def parsed(*args: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    deploy_cli.add_arguments(parser)
    return parser.parse_args(list(args))


ENDPOINT = ["endpoint", *cli.options(image=IMAGE, model_id="org/m", instance_type="ml.g5.2xlarge")]
TRANSFORM = [
    "transform",
    *cli.options(image=IMAGE, model_id="org/m", instance_type="ml.g5.2xlarge"),
    *cli.options(input="s3://bucket/in/", output="s3://bucket/out/"),
]
BATCH = [
    "batch",
    *cli.options(image=IMAGE, model_id="org/m", instance_type="ml.g5.2xlarge"),
    *cli.options(input_file="in.jsonl", output_file="out.jsonl", work_prefix="s3://bucket/w/"),
]


@pytest.mark.parametrize(
    ("args", "environ", "problem"),
    [
        ([*ENDPOINT, "--name", "llm"], {}, None),
        ([*TRANSFORM, "--name", "job"], {}, None),
        ([*BATCH, "--name", "b"], {}, None),
        (["invoke", "--name", "llm", "--body", "{}"], {}, None),
        (["delete", "--name", "llm"], {}, None),
        ([*ENDPOINT, "--name", "llm", "--region", "x"], {}, "--region 'x'"),
        ([*ENDPOINT, "--name", "llm", "--image", "vllm-sagemaker:v1"], {}, "--image"),
        ([*ENDPOINT, "--name", "llm", "--instance-type", "g5.12xlarge"], {}, "--instance-type"),
        ([*ENDPOINT, "--name", "llm", "--instance-count", "0"], {}, "--instance-count 0"),
        ([*ENDPOINT, "--name", "llm", "--async-output", "/tmp/out"], {}, "--async-output"),
        ([*ENDPOINT, "--name", "llm", "--role", "notanarn"], {}, "--role 'notanarn'"),
        ([*ENDPOINT, "--name", "llm"], {"SAGEMAKER_ROLE_ARN": "x"}, "SAGEMAKER_ROLE_ARN 'x'"),
        ([*ENDPOINT, "--name", "llm", "--env", "SM_NUM_GPUS=0"], {}, "--env"),
        ([*ENDPOINT, "--name", "llm", "--stream-weights"], {}, "--stream-weights"),
        (
            [
                *("endpoint", "--name", "llm", "--image", IMAGE),
                *("--instance-type", "ml.g5.2xlarge", "--model-prefix", "s3://models/llama/"),
                "--stream-weights",
            ],
            {},
            None,
        ),
        ([*TRANSFORM, "--name", "job", "--input", "data/"], {}, "--input 'data/'"),
        ([*TRANSFORM, "--name", "job", "--max-payload-mb", "101"], {}, "--max-payload-mb 101"),
        (
            [*TRANSFORM, "--name", "job", "--max-concurrent-transforms", "-1"],
            {},
            "--max-concurrent-transforms -1",
        ),
        ([*TRANSFORM, "--name", "job", "--instance-type", "ml.p4d.24xlarge"], {}, "transform jobs"),
        (
            [
                *("transform", "--name", "job", "--image", IMAGE),
                *("--instance-type", "ml.g5.2xlarge", "--model-prefix", "s3://models/llama/"),
                *("--input", "s3://bucket/in/", "--output", "s3://bucket/out/"),
            ],
            {},
            "--model-prefix cannot be used for Batch Transform",
        ),
        ([*BATCH, "--name", "b", "--shard-lines", "0"], {}, "--shard-lines 0"),
        ([*BATCH, "--name", "b", "--poll-seconds", "0"], {}, "--poll-seconds 0"),
        ([*BATCH, "--name", "b", "--instance-price", "-1"], {}, "--instance-price -1"),
        ([*BATCH, "--name", "b", "--work-prefix", "work/"], {}, "--work-prefix 'work/'"),
        ([*BATCH, "--name", "b", "-o", "s3://B/out.jsonl"], {}, "--output-file 's3://B/out.jsonl'"),
        ([*BATCH, "--name", "b", "--image", "x", "--local", "http://h:8080"], {}, None),
        ([*BATCH, "--name", "b", "--work-prefix", "w/", "--local", "http://h:8080"], {}, None),
        ([*BATCH, "--name", "x" * 56], {}, "NAME-<shard>-<attempt>"),
        ([*ENDPOINT, "--name", "llm", "--image", f"{ECR}:cpu"], {}, "--image"),
        ([*ENDPOINT, "--name", "llm", "--instance-type", "ml.c7i.xlarge"], {}, None),
        (
            [
                *ENDPOINT,
                "--name",
                "llm",
                "--instance-type",
                "ml.c7i.xlarge",
                "--image",
                f"{ECR}:gpu",
            ],
            {},
            "--target cpu",
        ),
        (
            ["endpoint", "--name", "llm", "--model-id", "m", "--instance-type", "ml.m7i.xlarge"],
            {},
            None,
        ),
        (
            ["endpoint", "--name", "llm", "--model-id", "m", "--instance-type", "ml.inf2.xlarge"],
            {},
            "--image: not given, and the kit cannot tell whether ml.inf2.xlarge takes",
        ),
        ([*TRANSFORM, "--name", "job", "--image", f"{ECR}:cpu"], {}, "--target gpu"),
        ([*BATCH, "--name", "b", "--image", f"{ECR}:cpu"], {}, "--target gpu"),
        ([*BATCH, "--name", "b", "--image", f"{ECR}:cpu", "--local", "http://h:8080"], {}, None),
        (["image", "--context", CHECKOUT], {}, None),
        (["image", "--context", CHECKOUT, "--target", "cpu", "--tag", "v1"], {}, None),
        (["image", "--context", CHECKOUT, "--repository", "A"], {}, "--repository 'A'"),
        (["image", "--context", CHECKOUT, "--tag=-v1"], {}, "--tag '-v1'"),
        (["image", "--context", CHECKOUT, "--tag", "cpu"], {}, "--target is gpu"),
        (["image", "--context", "/nonexistent"], {}, "--context '/nonexistent': no Dockerfile"),
    ],
)
def test_what_each_command_checks(
    args: list[str], environ: dict[str, str], problem: str | None
) -> None:
    found = checks.check(parsed(*args), environ)
    if problem is None:
        assert found.problems == []
        return
    assert found.problems and problem in found.problems[0], found.problems


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--name", "llama 3"], "deploy: --name 'llama 3': SageMaker names are 1-63"),
        (["--name", "x" * 70], "deploy: --name 'xxxxxxxxxxx"),
        (["--instance-type", "g5.12xlarge"], "deploy: --instance-type 'g5.12xlarge'"),
        (["--instance-count", "0"], "deploy: --instance-count 0: must be at least 1"),
        (["--image", "vllm-sagemaker:v1"], "deploy: --image 'vllm-sagemaker:v1'"),
        (["--role", "notanarn"], "deploy: --role 'notanarn'"),
        (["--env", "PROCESS_AUTO_RECOVERY=maybe"], "deploy: --env: the container's serve"),
    ],
)
def test_a_refused_option_is_one_line_and_exit_2_before_aws(args: list[str], line: str) -> None:
    """In a dry run and a real run alike; no AWS settings at all, so a call would be seen."""
    for dry_run in (["--dry-run"], []):
        done = deploy(*ENDPOINT, "--name", "llm", *args, *dry_run, env=without_aws())
        assert done.returncode == 2, done.stderr
        assert done.stdout == ""
        (told,) = done.stderr.splitlines()
        assert told.startswith(line), told


@pytest.mark.parametrize(
    ("args", "tools", "line"),
    [
        (["--repository", "Bad"], ("buildah",), "deploy: --repository 'Bad': ECR repository"),
        (["--target", "cpu", "--tag", "gpu"], ("buildah",), "deploy: --tag 'gpu' names the gpu"),
        (["--target", "tpu"], ("buildah",), "vllm-sagemaker deploy image: error: argument"),
        ([], (), "deploy: deploy image needs a container builder: no docker on PATH, and neither"),
        (["--builder", "podman"], ("buildah",), "deploy: --builder podman: no podman on PATH"),
        (["--builder", "docker"], ("docker",), "deploy: --builder docker: no Docker engine"),
    ],
)
def test_image_refusals_are_one_line_and_exit_2_before_aws(
    tmp_path: Path, args: list[str], tools: tuple[str, ...], line: str
) -> None:
    """No AWS settings at all, so a call would be seen; fake builders alone on PATH (docker's
    engine does not answer), none of which runs more than `docker info`."""
    env = {**without_aws(), **fake_builders(tmp_path, *tools, docker_info=1)}
    for dry_run in (["--dry-run"], []):
        done = deploy("image", "--context", CHECKOUT, *args, *dry_run, env=env)
        assert done.returncode == 2, done.stderr
        assert done.stdout == ""
        assert done.stderr.splitlines()[-1].startswith(line), done.stderr
        if line.startswith("deploy:"):
            assert len(done.stderr.splitlines()) == 1, done.stderr
    calls = tmp_path / "calls"
    assert not calls.exists() or set(calls.read_text().splitlines()) == {"docker info"}


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--instance-type", "ml.c7i.8xlarge", "--image", f"{ECR}:gpu"],
            f"deploy: --image {ECR}:gpu: its tag names the gpu image, and ml.c7i.8xlarge has no",
        ),
        (
            ["--instance-type", "ml.g5.2xlarge", "--image", f"{ECR}:cpu"],
            f"deploy: --image {ECR}:cpu: its tag names the cpu image",
        ),
    ],
)
def test_the_wrong_image_is_refused_before_aws(args: list[str], line: str) -> None:
    for dry_run in (["--dry-run"], []):
        done = deploy(*ENDPOINT, "--name", "llm", *args, *dry_run, env=without_aws())
        assert (done.returncode, done.stdout) == (2, ""), done.stderr
        (told,) = done.stderr.splitlines()
        assert told.startswith(line), told


def test_a_body_that_is_not_json_is_refused_before_aws() -> None:
    done = deploy("invoke", "--name", "llm", "--body", "{not json", env=without_aws())
    assert (done.returncode, done.stdout) == (2, "")
    (told,) = done.stderr.splitlines()
    assert told.startswith("deploy: --body: not JSON (Expecting property name")


def test_an_unknown_family_is_a_warning_and_the_plan_goes_on() -> None:
    done = deploy(
        *ENDPOINT, "--name", "llm", "--instance-type", "ml.g9.mega", "--dry-run", env=without_aws()
    )
    assert done.returncode == 0, done.stderr
    warning, *assumed = done.stderr.splitlines()
    assert warning.startswith("deploy: warning: --instance-type ml.g9.mega: the kit does not")
    assert [line for line in assumed if not line.startswith("deploy: dry run:")] == []
    variant = json.loads(done.stdout)[1]["params"]["ProductionVariants"][0]
    assert variant["InstanceType"] == "ml.g9.mega" and "InferenceAmiVersion" not in variant


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


def region_env(aws: dict[str, str], **regions: str) -> dict[str, str]:
    """The moto environment with `regions` (AWS_REGION=..., AWS_DEFAULT_REGION=...) only."""
    env = {k: v for k, v in {**os.environ, **aws}.items() if k not in region.REGION_VARIABLES}
    return {**env, **regions}


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return processes.run([cli.VLLM_SAGEMAKER, "deploy", *args], env=env, text=True)


def test_aws_region_alone_works_for_every_command(aws: dict[str, str], tmp_path: Path) -> None:
    """No AWS_DEFAULT_REGION, the only variable boto3 reads: every command still reaches (moto)
    AWS, real runs and the dry runs that must read alike."""
    env = {**region_env(aws, AWS_REGION="us-east-1"), "SAGEMAKER_ROLE_ARN": ROLE}
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="region-data")
    s3.put_object(Bucket="region-data", Key="in/a.jsonl", Body=b'{"prompt": "a"}\n')
    line = {"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"prompt": "a"}}
    s3.put_object(Bucket="region-data", Key="batch.jsonl", Body=json.dumps(line).encode())
    builders_env = fake_builders(tmp_path, "docker")
    batch = [
        *cli.options(input_file="s3://region-data/batch.jsonl", output_file="s3://region-data/o"),
        *cli.options(work_prefix="s3://region-data/work/"),
    ]
    for args in (
        ["image", "--repository", "region-repo", "--context", CHECKOUT],
        ["endpoint", *model_options("region-llm", "ml.p3.2xlarge"), "--no-wait"],
        [
            "transform",
            *model_options("region-job", "ml.p3.2xlarge"),
            *cli.options(input="s3://region-data/in/", output="s3://region-data/out/"),
            "--no-wait",
        ],
        ["batch", *model_options("region-batch", "ml.p3.2xlarge"), *batch, "--dry-run"],
        ["invoke", "--name", "region-llm", "--body", "{}"],
        ["delete", "--name", "region-llm", "--dry-run"],
        ["delete", "--name", "region-llm"],
    ):
        done = run({**env, **builders_env} if args[0] == "image" else env, *args)
        assert done.returncode == 0, (args, done.stderr)
        assert "cannot read" not in done.stderr, (args, done.stderr)


def test_region_reaches_every_client(aws: dict[str, str]) -> None:
    """--region wins over the variables: the endpoint is made in that region, and read there."""
    env = {**region_env(aws, AWS_DEFAULT_REGION="us-east-1"), "SAGEMAKER_ROLE_ARN": ROLE}
    made = run(
        env, "endpoint", *model_options("region-west", "ml.p3.2xlarge"), "--region", "eu-west-1"
    )
    assert made.returncode == 0, made.stderr
    west = boto3.client("sagemaker", region_name="eu-west-1")
    assert west.describe_endpoint(EndpointName="region-west")["EndpointStatus"] == "InService"
    east = boto3.client("sagemaker", region_name="us-east-1")
    assert "region-west" not in [e["EndpointName"] for e in east.list_endpoints()["Endpoints"]]
    deleted = run(env, "delete", "--name", "region-west", "--region", "eu-west-1")
    assert deleted.returncode == 0, deleted.stderr
    assert west.list_endpoints()["Endpoints"] == []


def test_no_region_is_one_line_naming_where_to_give_one(aws: dict[str, str]) -> None:
    done = run(region_env(aws), "delete", "--name", "llm")
    assert done.returncode == 1
    (told,) = done.stderr.splitlines()
    assert told.startswith("deploy: cannot read DescribeEndpoint: no AWS region: give --region")
    assert "AWS_REGION" in told and "AWS_DEFAULT_REGION" in told


IMPORTS_BOTO3 = "import sys; {}; print('boto3' in sys.modules or 'botocore' in sys.modules)"


@pytest.mark.parametrize(
    "statement",
    [
        "import argparse; from vllm_sagemaker.deploy.kit import cli; "
        "cli.add_arguments(argparse.ArgumentParser())",
        "from vllm_sagemaker.container import cli; cli.build_parser()",
    ],
)
def test_help_loads_no_boto3(statement: str) -> None:
    """`vllm-sagemaker --help` builds every parser; boto3 loads only when a command runs."""
    done = processes.run([sys.executable, "-c", IMPORTS_BOTO3.format(statement)], text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
