"""What each `deploy` command checks before it calls AWS: its options together, parsed as the
CLI parses them, and the first problem found."""

import pytest

from tests.deploy.deploying import CHECKOUT, ECR, ENDPOINT, IMAGE, ROLE, parsed
from tests.support import cli
from vllm_sagemaker.deploy.base.errors import UsageError
from vllm_sagemaker.deploy.kit import (
    batch,
    checks,
    component,
    endpoint,
    image,
    invoke,
    token,
    transform_job,
)
from vllm_sagemaker.deploy.kit import cli as deploy_cli

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
        ([*BATCH, "--name", "b", "--max-payload-mb", "0"], {}, "must be from 1 to 100 (0, no"),
        (
            [
                *TRANSFORM,
                "--name",
                "job",
                "--max-payload-mb",
                "50",
                "--max-concurrent-transforms",
                "3",
            ],
            {},
            "= 150 MB: SageMaker allows at most 100 MB in flight per instance",
        ),
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
    environ = {"SAGEMAKER_ROLE_ARN": ROLE, **environ}
    if problem is None:
        deploy_cli.check(parsed(*args), environ)
        return
    with pytest.raises(UsageError) as refused:
        deploy_cli.check(parsed(*args), environ)
    assert problem in refused.value.line


S3 = "s3://bucket/in/"
# Every check of the commands' tables: values it passes, values it refuses (or warns of), and
# what its line says. Values are by the names the check reads; one not given is None.
CASES: list[tuple[checks.Check, dict[str, object], dict[str, object], str]] = [
    (checks.REGION, {"region": "eu-west-1"}, {"region": "x"}, "--region 'x': not an AWS region"),
    (checks.NAME, {"name": "llm", "deploy_command": "delete"}, {"name": "a b"}, "--name 'a b'"),
    (checks.IMAGE, {"image": "x", "local": ["http://h"]}, {"image": "x"}, "Amazon ECR only"),
    (checks.MODEL_DATA, {"model_data": "s3://b1b/m.tar.gz"}, {"model_data": S3}, ".tar.gz"),
    (checks.MODEL_PREFIX, {"model_prefix": S3}, {"model_prefix": "m/"}, "--model-prefix 'm/'"),
    (checks.STREAM, {"stream_weights": True, "model_prefix": S3}, {"stream_weights": True}, "give"),
    (
        checks.INSTANCE_TYPE,
        {"instance_type": "ml.p4d.24xlarge", "deploy_command": "endpoint"},
        {"instance_type": "ml.p4d.24xlarge", "deploy_command": "transform"},
        "transform jobs do not run on ml.p4d",
    ),
    (
        checks.UNKNOWN_TYPE,
        {"instance_type": "ml.g5.xlarge", "deploy_command": "endpoint"},
        {"instance_type": "ml.g9.mega", "deploy_command": "endpoint"},
        "the kit does not know family g9",
    ),
    (
        checks.ARCHITECTURE,
        {"instance_type": "ml.c7i.xlarge"},
        {"instance_type": "ml.c7g.xlarge"},
        "Graviton (arm64)",
    ),
    (
        checks.IMAGE_FOR_TYPE,
        {"image": f"{ECR}:cpu", "instance_type": "ml.c7i.xlarge"},
        {"image": f"{ECR}:gpu", "instance_type": "ml.c7g.xlarge"},
        "is Graviton (arm64), no GPU",
    ),
    (checks.INSTANCE_COUNT, {"instance_count": 1}, {"instance_count": 0}, "must be at least 1"),
    (checks.ENV, {"env": ["SM_VLLM_MAX_MODEL_LEN=8k"]}, {"env": ["sm_vllm_x=1"]}, "case-sensitive"),
    (
        checks.TENSOR_PARALLEL_SIZE,
        {"environment": {"SM_VLLM_TENSOR_PARALLEL_SIZE": "4"}, "instance_type": "ml.g5.12xlarge"},
        {"environment": {"SM_VLLM_TENSOR_PARALLEL_SIZE": "8"}, "instance_type": "ml.g5.12xlarge"},
        "ml.g5.12xlarge has 4 GPUs",
    ),
    (
        checks.ROLE,
        {"environ": {}, "dry_run": True},
        {"environ": {"SAGEMAKER_ROLE_ARN": "x"}},
        "SAGEMAKER_ROLE_ARN 'x': not an IAM role ARN",
    ),
    (
        checks.TRANSFORM_PREFIX,
        {"model_prefix": S3, "stream_weights": True},
        {"model_prefix": S3, "stream_weights": False},
        "cannot be used for Batch Transform",
    ),
    (
        checks.PAYLOAD,
        {"max_payload_mb": 50, "max_concurrent_transforms": 2},
        {"max_payload_mb": 0, "max_concurrent_transforms": 2},
        "--max-payload-mb 0: must be from 1 to 100",
    ),
    (image.REPOSITORY, {"repository": "vllm"}, {"repository": "A"}, "--repository 'A'"),
    (image.TAG, {"tag": None}, {"tag": ".v1"}, "--tag '.v1'"),
    (image.ENGINE_TAG, {"tag": "cpu", "engine": "cpu"}, {"tag": "cpu", "engine": "gpu"}, "cpu"),
    (image.CONTEXT, {"context": CHECKOUT}, {"context": "/nonexistent"}, "no Dockerfile"),
    (endpoint.ASYNC_OUTPUT, {"async_output": S3}, {"async_output": "/tmp"}, "S3 only"),
    (endpoint.SERVERLESS, {"serverless": "2048:10"}, {"serverless": "2GB"}, "give MEMORY_MB"),
    (
        endpoint.PROVISIONED,
        {"serverless": "2048:10", "provisioned_concurrency": 10},
        {"provisioned_concurrency": 1},
        "give --serverless MEMORY_MB[:MAX_CONCURRENCY] too",
    ),
    (
        endpoint.INSTANCES_OR_SERVERLESS,
        {"serverless": "2048"},
        {},
        "--instance-type or --serverless: deploy endpoint needs one",
    ),
    (
        endpoint.SERVERLESS_CONFLICT,
        {"instance_type": "ml.c5.xlarge"},
        {"serverless": "2048", "scale_on": "waiting"},
        "--serverless with --scale-on",
    ),
    (
        endpoint.SERVERLESS_IMAGE,
        {"image": f"{ECR}:gpu"},
        {"serverless": "2048", "image": f"{ECR}:gpu"},
        "Serverless Inference has no GPU",
    ),
    (
        endpoint.SERVERLESS_PREFIX,
        {"serverless": "2048", "model_prefix": S3, "stream_weights": True},
        {"serverless": "2048", "model_prefix": S3},
        "cannot be used for Serverless Inference",
    ),
    (
        endpoint.AUTOSCALE,
        {"autoscale": "0:4", "async_output": S3},
        {"autoscale": "0:4"},
        "a real-time endpoint keeps at least 1 instance",
    ),
    (endpoint.SCALING, {"autoscale": "1:4"}, {"scale_on": "waiting"}, "give --autoscale MIN:MAX"),
    (
        endpoint.SCALE_ON_WAITING,
        {"scale_on": "waiting", "environment": {}},
        {"scale_on": "waiting", "environment": {"SAGEMAKER_METRICS": ""}},
        "leave SAGEMAKER_METRICS out of --env",
    ),
    (endpoint.TARGET_VALUE, {"target_value": 0.5}, {"target_value": 0.0}, "--target 0: must be"),
    (transform_job.INPUT, {"input": S3}, {"input": "data/"}, "--input 'data/': SageMaker reads"),
    (transform_job.OUTPUT, {"output": S3}, {"output": "out/"}, "--output 'out/': SageMaker reads"),
    (
        transform_job.SHARDS,
        {"input": S3, "output": "s3://bucket/out/", "name": "job"},
        {"input": S3, "output": "s3://bucket/in/x/", "name": "job"},
        "overlaps --input s3://bucket/in/",
    ),
    (
        batch.FLEET,
        {"input_file": "in.jsonl", "output_file": "o.jsonl", "local": ["http://h"]},
        {"input_file": "in.jsonl"},
        "--input-file and --output-file",
    ),
    (batch.INPUT_FILE, {"input_file": "in.jsonl"}, {"input_file": "s3://B/i"}, "--input-file"),
    (batch.OUTPUT_FILE, {"output_file": S3}, {"output_file": "s3://B/o"}, "--output-file"),
    (batch.ERROR_FILE, {"error_file": "e.jsonl"}, {"error_file": "s3://B/e"}, "--error-file"),
    (
        batch.WORK_PREFIX,
        {"work_prefix": "w/", "local": ["http://h"]},
        {"work_prefix": "w/"},
        "--work-prefix 'w/'",
    ),
    (batch.SHARD_LINES, {"shard_lines": 1}, {"shard_lines": 0}, "--shard-lines 0"),
    (batch.POLL, {"poll_seconds": 0.5}, {"poll_seconds": 0.0}, "--poll-seconds 0"),
    (batch.PRICE, {"instance_price": 1.5}, {"instance_price": -1.0}, "--instance-price -1"),
    (
        component.TENSOR_PARALLEL,
        {"environment": {"SM_VLLM_TENSOR_PARALLEL_SIZE": "2"}, "gpus": 2},
        {"environment": {"SM_VLLM_TENSOR_PARALLEL_SIZE": "4"}, "gpus": 2},
        "the component gets --gpus 2",
    ),
    (component.ENDPOINT, {"endpoint": "chat-gpus"}, {"endpoint": "chat_gpus"}, "--endpoint"),
    (
        component.GPUS,
        {"gpus": 4, "instance_type": "ml.g5.12xlarge"},
        {"gpus": 8, "instance_type": "ml.g5.12xlarge"},
        "--gpus 8: ml.g5.12xlarge has 4 GPUs; give at most 4",
    ),
    (
        component.COPIES,
        {"copies": 0, "scale_to_zero": True},
        {"copies": 0, "scale_to_zero": False},
        "--copies 0: a component without copies serves nothing",
    ),
    (
        component.INSTANCE_RANGE,
        {"instance_type": "ml.g5.12xlarge", "instances": "0:2", "scale_to_zero": True},
        {"instance_type": "ml.g5.12xlarge", "instances": "0:2", "scale_to_zero": False},
        "add --scale-to-zero, or give MIN 1 or more",
    ),
    (
        component.ZERO,
        {"scale_to_zero": True, "max_copies": 4},
        {"scale_to_zero": False, "max_copies": 4},
        "give --scale-to-zero too",
    ),
    *(
        (check, {name: value}, {name: bad}, line)
        for check, name, value, bad, line in zip(
            component.NUMBERS,
            (
                "gpus",
                "cpus",
                "memory",
                "max_copies",
                "target_value",
                "startup_timeout",
                "download_timeout",
            ),
            (1, 0.5, 1024, 1, 5.0, 60, 3600),
            (0, 0.0, 0, 0, -1.0, 59, 3601),
            (
                "--gpus 0",
                "--cpus 0",
                "--memory 0",
                "--max-copies 0",
                "--target -1",
                "--startup-timeout 59",
                "--download-timeout 3601",
            ),
            strict=True,
        )
    ),
    (invoke.OPENAI, {"openai": True}, {"openai": True, "use_async": True}, "leave out --async"),
    (
        invoke.COMPONENT,
        {"component": "chat"},
        {"component": "chat", "use_async": True},
        "InvokeEndpointAsync takes no inference component",
    ),
    (token.EXPIRES, {"expires": "90m"}, {"expires": "13h"}, "--expires '13h'"),
]


@pytest.mark.parametrize(
    ("check", "passes", "fails", "line"), CASES, ids=[case[0].reads for case in CASES]
)
def test_each_check(
    check: checks.Check, passes: dict[str, object], fails: dict[str, object], line: str
) -> None:
    assert check(passes) is None
    found = check(fails)
    assert found is not None and line in found and "\n" not in found, found


def test_every_check_of_every_command_has_a_case() -> None:
    """No check goes untried; and none is written twice (each is one object the tables share)."""
    tabled = {each for command in deploy_cli.COMMANDS.values() for each in command.CHECKS}
    assert tabled == {case[0] for case in CASES}
    assert len(CASES) == len({id(case[0]) for case in CASES})
