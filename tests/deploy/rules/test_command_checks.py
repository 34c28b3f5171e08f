"""What each `deploy` command checks before it calls AWS: its options together, parsed as the
CLI parses them, and the first problem found."""

import pytest

from tests.deploy.deploying import CHECKOUT, ECR, ENDPOINT, IMAGE, ROLE, parsed
from tests.support import cli
from vllm_sagemaker.deploy.kit import checks

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


# An environment without an execution role.
NO_ROLE = {"SAGEMAKER_ROLE_ARN": ""}


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
        (
            ["image", "--context", CHECKOUT, "--repository", f"{ECR}"],
            {},
            "--repository '123456789012.dkr.ecr.us-east-1.amazonaws.com/vllm-sagemaker': give "
            "the repository's name (vllm-sagemaker), not its URI",
        ),
        # A real run needs a role; a dry run shows a placeholder, --cancel and --local need none.
        ([*ENDPOINT, "--name", "llm"], NO_ROLE, "--role: not given, and SAGEMAKER_ROLE_ARN"),
        ([*TRANSFORM, "--name", "job"], NO_ROLE, "--role: not given"),
        ([*BATCH, "--name", "b"], NO_ROLE, "--role: not given"),
        ([*ENDPOINT, "--name", "llm", "--dry-run"], NO_ROLE, None),
        (["batch", "--name", "b", "--work-prefix", "s3://bucket/w/", "--cancel"], NO_ROLE, None),
        ([*BATCH, "--name", "b", "--local", "http://h:8080"], NO_ROLE, None),
        # What deploy batch needs, before AWS.
        (
            ["batch", "--name", "b", "--work-prefix", "s3://bucket/w/", "-i", "in.jsonl"],
            {},
            "--input-file and --output-file: deploy batch needs both (or --cancel)",
        ),
        ([*BATCH, "--name", "b", "--api-key", "k"], {}, "--api-key is for --local containers"),
        ([*BATCH, "--name", "b", "--api-key", "k", "--local", "http://h:8080"], {}, None),
        (
            [
                *("batch", "--name", "b", "--model-id", "m", "--instance-type", "ml.g5.2xlarge"),
                *("-i", "in.jsonl", "-o", "out.jsonl", "--work-prefix", "s3://bucket/w/"),
            ],
            {},
            "--image, --instance-type and a model (--model-id, --model-data or --model-prefix): "
            "deploy batch on SageMaker needs them",
        ),
        (
            [*TRANSFORM, "--name", "job", "--output", "s3://bucket/in/results/"],
            {},
            "--output s3://bucket/in/results/: the input's shards would go to "
            "s3://bucket/in/results-parts/job/, which overlaps --input s3://bucket/in/",
        ),
    ],
)
def test_what_each_command_checks(
    args: list[str], environ: dict[str, str], problem: str | None
) -> None:
    found = checks.check(parsed(*args), {"SAGEMAKER_ROLE_ARN": ROLE, **environ})
    if problem is None:
        assert found.problems == []
        return
    assert found.problems and problem in found.problems[0], found.problems
