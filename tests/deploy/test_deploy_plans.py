"""`vllm-sagemaker deploy --dry-run`: the calls each command plans where AWS cannot be read
(endpoint, transform, CPU instances, streamed weights, async endpoints), and the dry runs that must
read and so stop with one line."""

import json

import pytest

from tests.deploy.deploying import IMAGE, NO_AWS, ROLE, deploy, model_options, plan
from tests.support import cli


def test_endpoint_plan() -> None:
    calls = plan(
        "endpoint", *model_options("llm", "ml.g5.12xlarge", env="SM_VLLM_MAX_MODEL_LEN=4096")
    )
    assert [c["operation"] for c in calls] == [
        "CreateModel",
        "CreateEndpointConfig",
        "CreateEndpoint",
    ]
    container = calls[0]["params"]["PrimaryContainer"]
    assert container["Image"] == IMAGE
    assert container["Environment"] == {
        "HF_MODEL_ID": "org/model",
        "SM_VLLM_MAX_MODEL_LEN": "4096",
        "SM_VLLM_TENSOR_PARALLEL_SIZE": "4",
        "SAGEMAKER_METRICS_ENDPOINT_NAME": "llm",
        "SAGEMAKER_METRICS_VARIANT_NAME": "AllTraffic",
    }
    (variant,) = calls[1]["params"]["ProductionVariants"]
    assert variant["InstanceType"] == "ml.g5.12xlarge"
    assert variant["ContainerStartupHealthCheckTimeoutInSeconds"] >= 600
    assert variant["InferenceAmiVersion"] == "al2023-ami-sagemaker-inference-gpu-4-1"


@pytest.mark.parametrize("join", [True, False])
def test_transform_plan(join: bool) -> None:
    calls = plan(
        "transform",
        "--name",
        "job",
        "--image",
        IMAGE,
        "--model-data",
        "s3://models/model.tar.gz",
        "--instance-type",
        "ml.g5.2xlarge",
        "--instance-count",
        "3",
        "--input",
        "s3://data/in/",
        "--output",
        "s3://data/out/",
        *(["--join-source", "Input"] if join else []),
    )
    assert [c["operation"] for c in calls] == ["CreateModel", "CreateTransformJob"]
    assert calls[0]["params"]["PrimaryContainer"]["ModelDataUrl"] == "s3://models/model.tar.gz"
    job = calls[1]["params"]
    assert job["BatchStrategy"] == "MultiRecord"
    assert job["TransformInput"]["SplitType"] == "Line"
    assert job["TransformInput"]["ContentType"] == "application/jsonlines"
    assert job["TransformOutput"] == {
        "S3OutputPath": "s3://data/out/",
        "Accept": "application/jsonlines",
        "AssembleWith": "Line",
    }
    assert job["TransformResources"]["InstanceCount"] == 3
    assert job["ModelClientConfig"]["InvocationsTimeoutInSeconds"] >= 600
    assert ("DataProcessing" in job) is join
    if join:
        assert job["DataProcessing"] == {"JoinSource": "Input"}


def test_transform_refuses_a_model_prefix() -> None:
    done = deploy(
        "transform",
        "--dry-run",
        "--name",
        "job",
        "--image",
        IMAGE,
        "--model-prefix",
        "s3://models/p/",
        "--instance-type",
        "ml.g5.2xlarge",
        "--input",
        "s3://data/in/",
        "--output",
        "s3://data/out/",
    )
    assert done.returncode == 2
    assert "ModelDataSource" in done.stderr and "--model-data" in done.stderr


def test_a_cpu_instance_plan() -> None:
    """With --image given, a CPU instance type gets the image, no tensor parallelism and no
    inference AMI; the dry run says so."""
    cpu_image = IMAGE.replace(":latest", ":cpu")
    done = deploy(
        "endpoint",
        *cli.options(name="llm", image=cpu_image, model_id="org/m", instance_type="ml.m7i.8xlarge"),
        "--dry-run",
        env=NO_AWS,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0] == (
        "deploy: CPU instance ml.m7i.8xlarge: the cpu image; the kit sets no tensor parallelism "
        "and no GPU inference AMI"
    )
    model, config, _ = json.loads(done.stdout)
    assert model["params"]["PrimaryContainer"] == {
        "Image": cpu_image,
        "Environment": {
            "HF_MODEL_ID": "org/m",
            "SAGEMAKER_METRICS_ENDPOINT_NAME": "llm",
            "SAGEMAKER_METRICS_VARIANT_NAME": "AllTraffic",
        },
    }
    assert "InferenceAmiVersion" not in config["params"]["ProductionVariants"][0]


@pytest.mark.parametrize("command", ["endpoint", "transform"])
def test_stream_weights_from_an_s3_prefix(command: str) -> None:
    job = (
        ["--input", "s3://data/in/", "--output", "s3://data/out/"] if command == "transform" else []
    )
    calls = plan(
        command,
        *cli.options(
            name="llm", image=IMAGE, model_prefix="s3://models/llama", instance_type="ml.g5.2xlarge"
        ),
        "--stream-weights",
        *job,
    )
    container = calls[0]["params"]["PrimaryContainer"]
    assert container["Environment"]["SM_VLLM_MODEL"] == "s3://models/llama/"
    assert "ModelDataSource" not in container and "ModelDataUrl" not in container


def test_stream_weights_needs_a_prefix() -> None:
    done = deploy(
        "endpoint", *model_options("llm", "ml.g5.2xlarge"), "--stream-weights", "--dry-run"
    )
    assert done.returncode != 0
    assert "--model-prefix" in done.stderr


def test_async_endpoint_marks_the_container() -> None:
    calls = plan("endpoint", *model_options("llm", "ml.g5.2xlarge", async_output="s3://outputs/"))
    environment = calls[0]["params"]["PrimaryContainer"]["Environment"]
    assert environment["SAGEMAKER_ASYNC_INFERENCE"] == "true"
    plain = plan("endpoint", *model_options("llm", "ml.g5.2xlarge"))
    assert "SAGEMAKER_ASYNC_INFERENCE" not in plain[0]["params"]["PrimaryContainer"]["Environment"]


def test_a_dry_run_that_cannot_read_says_what_it_assumed() -> None:
    done = deploy("endpoint", *model_options("llm", "ml.g5.2xlarge"), "--dry-run", env=NO_AWS)
    assert done.returncode == 0, done.stderr
    assert [c["operation"] for c in json.loads(done.stdout)][-1] == "CreateEndpoint"
    lines = done.stderr.splitlines()
    assert len(lines) == 2, lines
    assert (
        "deploy: dry run: no --role and no SAGEMAKER_ROLE_ARN, so the plan shows "
        "<SAGEMAKER_ROLE_ARN> for the execution role; the real run needs --role ARN or "
        "SAGEMAKER_ROLE_ARN"
    ) in lines
    [note] = [line for line in lines if "cannot read" in line]
    assert note.startswith("deploy: dry run: cannot read DescribeEndpoint")
    assert "UpdateEndpoint instead" in note


@pytest.mark.parametrize(
    "args",
    [
        ["delete", "--name", "llm"],
        [
            "batch",
            *model_options("b", "ml.g5.2xlarge"),
            *cli.options(input_file="s3://bucket/in.jsonl", output_file="s3://bucket/out.jsonl"),
            *cli.options(work_prefix="s3://bucket/work/"),
        ],
    ],
)
def test_a_dry_run_that_must_read_stops_with_one_line(args: list[str]) -> None:
    done = deploy(*args, "--dry-run", env={**NO_AWS, "SAGEMAKER_ROLE_ARN": ROLE})
    assert done.returncode == 1, done.stdout
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1].startswith("deploy: cannot read "), done.stderr
