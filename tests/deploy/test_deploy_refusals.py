"""`vllm-sagemaker deploy` refuses a bad option before any AWS call: one line and exit status
2, in a dry run and a real run alike, run with no AWS settings at all (a call would be seen); an
unknown instance family is only a warning."""

import json
import os
from pathlib import Path

import pytest

from tests.deploy.deploying import CHECKOUT, ECR, ENDPOINT, deploy, fake_builders

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
    ("args", "line"),
    [
        (["--name", "llama 3"], "deploy: --name 'llama 3': SageMaker names are 1-63"),
        (["--name", "x" * 70], "deploy: --name 'xxxxxxxxxxx"),
        (["--instance-type", "g5.12xlarge"], "deploy: --instance-type 'g5.12xlarge'"),
        (["--instance-count", "0"], "deploy: --instance-count 0: must be at least 1"),
        (["--image", "vllm-sagemaker:v1"], "deploy: --image 'vllm-sagemaker:v1'"),
        (["--role", "notanarn"], "deploy: --role 'notanarn'"),
        (["--env", "PROCESS_AUTO_RECOVERY=maybe"], "deploy: --env: the container's serve"),
        (
            ["--env", "SM_VLLM_MAX_MODLE_LEN=8192"],
            "deploy: --env: the container's serve would refuse it: SM_VLLM_MAX_MODLE_LEN: vLLM "
            "0.32.0 has no option --max-modle-len; did you mean SM_VLLM_MAX_MODEL_LEN "
            "(--max-model-len)?",
        ),
        # What a newcomer tried: a key serve does not read, a count that is no number, more
        # tensor-parallel shards than GPUs, the GPU image on Graviton.
        (
            ["--env", "sm_vllm_max_model_len=8192"],
            "deploy: --env sm_vllm_max_model_len: the container's variables are case-sensitive, "
            "and serve reads only SM_VLLM_* in upper case: give SM_VLLM_MAX_MODEL_LEN",
        ),
        (
            ["--env", "SM_VLLM_MAX_MODEL_LEN=abc"],
            "deploy: --env: the container's serve would refuse it: SM_VLLM_MAX_MODEL_LEN='abc': "
            "vLLM's --max-model-len takes a count, as 8192, 8k or 8K, or auto",
        ),
        (
            ["--instance-type", "ml.g5.12xlarge", "--env", "SM_VLLM_TENSOR_PARALLEL_SIZE=8"],
            "deploy: --env SM_VLLM_TENSOR_PARALLEL_SIZE=8: ml.g5.12xlarge has 4 GPUs, and tensor "
            "parallelism takes one each: give at most 4, or an instance type with more GPUs",
        ),
        (
            ["--instance-type", "ml.c7g.xlarge", "--image", f"{ECR}:gpu"],
            f"deploy: --image {ECR}:gpu: its tag names the gpu image, and ml.c7g.xlarge is "
            "Graviton (arm64), no GPU: give the cpu image",
        ),
        (
            ["--instance-type", "ML.G5.2XLARGE"],
            "deploy: --instance-type 'ML.G5.2XLARGE': SageMaker instance types are in lower "
            "case: did you mean ml.g5.2xlarge?",
        ),
        (
            ["--instance-type", "ml.g5.12xlarg"],
            "deploy: --instance-type 'ml.g5.12xlarg': not an instance type SageMaker endpoints "
            "take (botocore ",
        ),
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
        (
            ["--repository", f"{ECR}"],
            ("buildah",),
            f"deploy: --repository '{ECR}': give the repository's name (vllm-sagemaker), not its "
            "URI",
        ),
        (
            ["--repository", "a" * 211, "--region", "us-east-1"],
            ("buildah",),
            "deploy: --repository: 211 characters; with the registry of us-east-1 the image's "
            "name passes the 255 characters a builder takes: give at most 210",
        ),
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


BATCH_FILES = ["--input-file", "in.jsonl", "--output-file", "out.jsonl"]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--work-prefix", "s3://bucket/w/", "--input-file", "in.jsonl"],
            "deploy: --input-file and --output-file: deploy batch needs both (or --cancel)",
        ),
        (
            [*ENDPOINT[1:], *BATCH_FILES, "--work-prefix", "s3://bucket/w/", "--api-key", "k"],
            "deploy: --api-key is for --local containers: SageMaker's transform jobs call the "
            "container without one (leave SM_VLLM_API_KEY unset there)",
        ),
        (
            ["--model-id", "m", *BATCH_FILES, "--work-prefix", "s3://bucket/w/"],
            "deploy: --image, --instance-type and a model (--model-id, --model-data or "
            "--model-prefix): deploy batch on SageMaker needs them; or give --local URL...",
        ),
    ],
)
def test_what_deploy_batch_needs_is_refused_before_aws(args: list[str], line: str) -> None:
    for dry_run in (["--dry-run"], []):
        done = deploy("batch", "--name", "b", *args, *dry_run, env=without_aws())
        assert (done.returncode, done.stdout) == (2, ""), done.stderr
        assert done.stderr.splitlines() == [line]


def test_a_real_run_without_a_role_is_refused_before_aws() -> None:
    """The dry run shows a placeholder and says so (test_deploy_plans.py); the real run stops."""
    env = {**without_aws(), "SAGEMAKER_ROLE_ARN": ""}
    done = deploy(*ENDPOINT, "--name", "llm", env=env)
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr.splitlines() == [
        "deploy: --role: not given, and SAGEMAKER_ROLE_ARN is not set: give --role ARN (the "
        "execution role SageMaker runs the model as) or set SAGEMAKER_ROLE_ARN"
    ]
