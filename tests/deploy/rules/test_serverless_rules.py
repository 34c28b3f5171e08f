"""`deploy endpoint --serverless`'s rules: every refusal is one line and exit status 2 before any
AWS call (dry run and real run, run in this process with boto3's calls recorded), the plan of a
serverless variant (its ServerlessConfig, nothing of an instance, the container told it is
serverless), and the update AWS refuses (instances to serverless)."""

import pytest

from tests.deploy.deploying import ECR, IMAGE, ROLE, parsed
from tests.deploy.recording import recorded, run
from vllm_sagemaker.deploy.kit import cli as deploy_cli
from vllm_sagemaker.deploy.kit.plans import serverless
from vllm_sagemaker.deploy.kit.plans.endpoint import Instances, endpoint_calls
from vllm_sagemaker.deploy.kit.plans.model import ModelSource

SERVERLESS = ["deploy", "endpoint", "--name", "emb", "--image", IMAGE]
NO_INSTANCES = (
    "a serverless endpoint has no instances: SageMaker runs copies of the container as "
    "invocations come, up to MAX_CONCURRENCY at once, each with MEMORY_MB of memory"
)
SCALES_ITSELF = (
    "SageMaker scales a serverless endpoint itself, from none to MAX_CONCURRENCY copies: give "
    "--serverless MEMORY_MB:MAX_CONCURRENCY instead (Application Auto Scaling is for instances)"
)


def model(args: list[str]) -> list[str]:
    """`args` with a model: --model-id unless they give one."""
    return args if "--model-prefix" in args else ["--model-id", "org/m", *args]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--serverless", "1000"],
            "--serverless 1000: Serverless Inference's memory sizes are 1024, 2048, 3072, 4096, "
            "5120 and 6144 MB",
        ),
        (["--serverless", "7168"], "--serverless 7168: Serverless Inference's memory sizes are"),
        (["--serverless", "2048:0"], "--serverless 2048:0: MAX_CONCURRENCY must be from 1 to 200"),
        (["--serverless", "2048:201"], "--serverless 2048:201: MAX_CONCURRENCY must be from 1"),
        (
            ["--serverless", "2GB"],
            "--serverless '2GB': give MEMORY_MB[:MAX_CONCURRENCY], as 2048 or 2048:10",
        ),
        (["--serverless", "2048:"], "--serverless '2048:': give MEMORY_MB[:MAX_CONCURRENCY]"),
        (
            ["--serverless", "2048", "--provisioned-concurrency", "6"],
            "--provisioned-concurrency 6 is more than the endpoint's MAX_CONCURRENCY 5 "
            "(--serverless 2048): give at most 5, or --serverless 2048:6",
        ),
        (
            ["--serverless", "2048:10", "--provisioned-concurrency", "11"],
            "--provisioned-concurrency 11 is more than the endpoint's MAX_CONCURRENCY 10",
        ),
        (
            ["--serverless", "2048", "--provisioned-concurrency", "0"],
            "--provisioned-concurrency 0: must be from 1 to 200",
        ),
        (
            ["--serverless", "2048:200", "--provisioned-concurrency", "201"],
            "--provisioned-concurrency 201: must be from 1 to 200",
        ),
        (
            ["--instance-type", "ml.c5.xlarge", "--provisioned-concurrency", "1"],
            "--provisioned-concurrency keeps copies of a serverless endpoint warm: give "
            "--serverless MEMORY_MB[:MAX_CONCURRENCY] too",
        ),
        (
            [],
            "--instance-type or --serverless: deploy endpoint needs one, as --instance-type "
            "ml.g5.2xlarge or --serverless 2048",
        ),
        (
            ["--serverless", "2048", "--instance-type", "ml.c5.xlarge"],
            f"--serverless with --instance-type: {NO_INSTANCES}",
        ),
        # Whatever the instance type: not its own checks first.
        (
            ["--serverless", "2048", "--instance-type", "ml.inf2.xlarge"],
            "--serverless with --instance-type:",
        ),
        (
            ["--serverless", "2048", "--instance-count", "1"],
            f"--serverless with --instance-count: {NO_INSTANCES}",
        ),
        (
            ["--serverless", "2048", "--autoscale", "1:4"],
            f"--serverless with --autoscale: {SCALES_ITSELF}",
        ),
        (["--serverless", "2048", "--scale-on", "waiting"], "--serverless with --scale-on:"),
        (["--serverless", "2048", "--target", "3"], "--serverless with --target:"),
        (
            ["--serverless", "2048", "--async-output", "s3://bucket/async/"],
            "--serverless with --async-output: AWS does not support async inference on "
            "Serverless Inference: deploy the async endpoint on instances (--instance-type), or "
            "leave out --async-output",
        ),
        (
            ["--serverless", "2048", "--image", f"{ECR}:gpu"],
            f"--image {ECR}:gpu: its tag names the gpu image, and Serverless Inference has no "
            "GPU: give the cpu image (`vllm-sagemaker deploy image --target cpu` builds it and "
            "prints its URI)",
        ),
        (["--serverless", "2048", "--image", f"{ECR}:v2-gpu"], f"--image {ECR}:v2-gpu: its tag"),
        (
            ["--serverless", "2048", "--model-prefix", "s3://models/minilm/"],
            "--model-prefix cannot be used for Serverless Inference: SageMaker does not copy an "
            "uncompressed S3 prefix (ModelDataSource) for serverless endpoints. Add "
            "--stream-weights",
        ),
    ],
)
@pytest.mark.parametrize("dry_run", [True, False])
def test_a_refusal_is_one_line_and_exit_2_before_aws(
    args: list[str], line: str, dry_run: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """In this process, so boto3's calls are seen: none is made."""
    with recorded() as calls:
        status, out, err = run(
            capsys, *SERVERLESS, *model(args), "--role", ROLE, *(["--dry-run"] if dry_run else [])
        )
    assert (status, out, calls) == (2, "", [])
    (told,) = err.splitlines()
    assert told.startswith(f"deploy: {line}"), told


@pytest.mark.parametrize(
    "args",
    [
        ["--serverless", "1024"],
        ["--serverless", "6144:200", "--provisioned-concurrency", "200"],
        ["--serverless", "2048:1", "--provisioned-concurrency", "1"],
        ["--serverless", " 3072:7 "],
        ["--serverless", "2048", "--image", f"{ECR}:cpu"],
        ["--serverless", "2048", "--image", f"{ECR}:v1"],
        ["--serverless", "2048", "--env", "SAGEMAKER_BATCH_API=true"],
        ["--serverless", "2048", "--model-prefix", "s3://models/minilm/", "--stream-weights"],
        ["--serverless", "2048", "--no-wait", "--keep-on-failure"],
    ],
)
def test_what_serverless_takes(args: list[str]) -> None:
    assert (
        deploy_cli.check(parsed(*SERVERLESS[1:], *model(args)), {"SAGEMAKER_ROLE_ARN": ROLE}) == []
    )


@pytest.mark.parametrize(
    ("value", "provisioned", "config"),
    [
        ("2048", None, {"MemorySizeInMB": 2048, "MaxConcurrency": 5}),
        ("6144:20", None, {"MemorySizeInMB": 6144, "MaxConcurrency": 20}),
        ("1024:3", 2, {"MemorySizeInMB": 1024, "MaxConcurrency": 3, "ProvisionedConcurrency": 2}),
    ],
)
def test_a_serverless_variant_and_its_model(
    value: str, provisioned: int | None, config: dict[str, int]
) -> None:
    """Its ServerlessConfig and nothing of an instance (type, count, AMI, the instance-only
    start-up timeouts); its model's environment tells the container it is serverless, with no
    tensor parallelism, unless --env set the marker itself."""
    asked = serverless.parsed(value, provisioned)
    assert asked is not None
    model, created, endpoint = endpoint_calls("emb", IMAGE, ModelSource("org/m"), asked, {}, ROLE)
    (variant,) = created.params["ProductionVariants"]
    assert variant == {"VariantName": "AllTraffic", "ModelName": "emb", "ServerlessConfig": config}
    assert model.params["PrimaryContainer"]["Environment"] == {
        "HF_MODEL_ID": "org/m",
        "SAGEMAKER_SERVERLESS": "true",
    }
    assert endpoint.operation == "CreateEndpoint"
    told = endpoint_calls(
        "emb", IMAGE, ModelSource("org/m"), asked, {"SAGEMAKER_SERVERLESS": "false"}, ROLE
    )
    assert told[0].params["PrimaryContainer"]["Environment"]["SAGEMAKER_SERVERLESS"] == "false"


def test_an_instance_variant_is_not_serverless() -> None:
    model, created, _ = endpoint_calls(
        "llm", IMAGE, ModelSource("org/m"), Instances("ml.g5.12xlarge", 2), {}, ROLE
    )
    (variant,) = created.params["ProductionVariants"]
    assert "ServerlessConfig" not in variant
    assert (variant["InstanceType"], variant["InitialInstanceCount"]) == ("ml.g5.12xlarge", 2)
    environment = model.params["PrimaryContainer"]["Environment"]
    assert "SAGEMAKER_SERVERLESS" not in environment
    assert environment["SM_VLLM_TENSOR_PARALLEL_SIZE"] == "4"


SERVERLESS_CONFIG = {
    "ProductionVariants": [
        {"VariantName": "AllTraffic", "ServerlessConfig": {"MemorySizeInMB": 2048}}
    ]
}
INSTANCE_CONFIG = {
    "ProductionVariants": [{"VariantName": "AllTraffic", "InstanceType": "ml.g5.2xlarge"}]
}


@pytest.mark.parametrize(
    ("config", "refused"), [(SERVERLESS_CONFIG, False), (INSTANCE_CONFIG, True), ({}, True)]
)
def test_aws_refuses_an_update_from_instances_to_serverless(
    config: dict[str, object], refused: bool
) -> None:
    found = serverless.update_problem("chat", config)
    if not refused:
        assert found is None
        return
    assert found == (
        "endpoint chat runs on instances, and AWS refuses to update an instance-based endpoint "
        "to serverless: delete it first (`vllm-sagemaker deploy delete --name chat`) and deploy "
        "again, or give the serverless endpoint another --name"
    )
