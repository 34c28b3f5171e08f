"""`vllm-sagemaker deploy`: the plans it prints with --dry-run, and real runs against moto."""

import base64
import contextlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests import ROOT
from tests.support import cli
from vllm_sagemaker.deploy.kit import invoke
from vllm_sagemaker.deploy.kit.plans import endpoint as endpoint_plan
from vllm_sagemaker.deploy.kit.plans import model as model_plan
from vllm_sagemaker.deploy.kit.plans import names, shards

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/vllm-sagemaker:latest"
ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"


# boto3 with no credentials and nothing listening where it would call.
NO_AWS = {
    "AWS_ACCESS_KEY_ID": "",
    "AWS_SECRET_ACCESS_KEY": "",
    "AWS_SESSION_TOKEN": "",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
}


def deploy(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = cli.run("deploy", *args, env=env)
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


def model_options(name: str, instance_type: str, **extra: str) -> list[str]:
    """The options every endpoint and transform command needs, plus `extra`."""
    return cli.options(
        name=name, image=IMAGE, model_id="org/model", instance_type=instance_type, **extra
    )


def plan(*args: str) -> list[dict[str, Any]]:
    """The calls a dry run prints where AWS cannot be read (it says what it assumed)."""
    done = deploy(*args, "--dry-run", env=NO_AWS)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


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
    }
    (variant,) = calls[1]["params"]["ProductionVariants"]
    assert variant["InstanceType"] == "ml.g5.12xlarge"
    assert variant["ContainerStartupHealthCheckTimeoutInSeconds"] >= 600
    assert variant["InferenceAmiVersion"] == "al2023-ami-sagemaker-inference-gpu-4-1"


def test_an_existing_endpoint_is_updated_to_a_new_version() -> None:
    """moto has no UpdateEndpoint, so the update plan is checked as data."""
    calls = endpoint_plan.endpoint_calls(
        "llm",
        IMAGE,
        model_plan.ModelSource(model_id="org/m"),
        "ml.g5.2xlarge",
        1,
        {},
        ROLE,
        version="20261122-120000",
    )
    assert [
        (c.operation, c.params.get("ModelName") or c.params.get("EndpointConfigName"))
        for c in calls
    ] == [
        ("CreateModel", "llm-20261122-120000"),
        ("CreateEndpointConfig", "llm-20261122-120000"),
        ("UpdateEndpoint", "llm-20261122-120000"),
    ]
    assert calls[2].params == {"EndpointName": "llm", "EndpointConfigName": "llm-20261122-120000"}


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


@pytest.mark.parametrize(
    ("count", "wanted", "expected"),
    [
        (300, 3, [(0, 100), (100, 200), (200, 300)]),
        (7, 3, [(0, 3), (3, 5), (5, 7)]),
        (2, 3, [(0, 1), (1, 2)]),
        (0, 3, []),
    ],
)
def test_shard_ranges(count: int, wanted: int, expected: list[tuple[int, int]]) -> None:
    assert shards.ranges(count, wanted) == expected


@pytest.mark.parametrize(
    ("counts", "instances", "cut"),
    [([300], 3, [3]), ([100, 200], 4, [2, 3]), ([5, 5, 5], 2, [1, 1, 1]), ([1], 4, [1])],
)
def test_shards_per_file(counts: list[int], instances: int, cut: list[int]) -> None:
    assert shards.shards_per_file(counts, instances) == cut


def test_endpoint_then_delete_against_moto(aws: dict[str, str]) -> None:
    env = {"SAGEMAKER_ROLE_ARN": ROLE}
    created = deploy("endpoint", *model_options("llm", "ml.p3.8xlarge"), env=env)
    assert created.returncode == 0, created.stderr
    sagemaker = boto3.client("sagemaker")
    assert sagemaker.describe_endpoint(EndpointName="llm")["EndpointStatus"] == "InService"
    model = sagemaker.describe_model(ModelName="llm")["PrimaryContainer"]
    assert model["Environment"]["SM_VLLM_TENSOR_PARALLEL_SIZE"] == "4"
    deleted = deploy("delete", "--name", "llm", env=env)
    assert deleted.returncode == 0, deleted.stderr
    # The moto server is the session's: other tests' deployments may stand beside this one.
    assert "llm" not in [e["EndpointName"] for e in sagemaker.list_endpoints()["Endpoints"]]
    configs = sagemaker.list_endpoint_configs()["EndpointConfigs"]
    assert "llm" not in [c["EndpointConfigName"] for c in configs]
    assert "llm" not in [m["ModelName"] for m in sagemaker.list_models()["Models"]]


def test_transform_cuts_one_file_into_three_shards_for_three_instances(aws: dict[str, str]) -> None:
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="jobs-data")
    lines = [json.dumps({"custom_id": f"r{i}", "prompt": f"p{i}"}).encode() for i in range(300)]
    s3.put_object(Bucket="jobs-data", Key="in/requests.jsonl", Body=b"\n".join(lines) + b"\n")
    arguments = model_options(
        "job",
        "ml.p3.2xlarge",
        instance_count="3",
        input="s3://jobs-data/in/",
        output="s3://jobs-data/out/",
    )
    done = deploy("transform", *arguments, env={"SAGEMAKER_ROLE_ARN": ROLE})
    assert done.returncode == 0, done.stderr
    job = boto3.client("sagemaker").describe_transform_job(TransformJobName="job")
    prefix = job["TransformInput"]["DataSource"]["S3DataSource"]["S3Uri"]
    assert prefix == "s3://jobs-data/out-parts/job/"
    keys = sorted(
        o["Key"]
        for o in s3.list_objects_v2(Bucket="jobs-data", Prefix="out-parts/job/")["Contents"]
    )
    assert len(keys) >= 3
    joined = b"".join(s3.get_object(Bucket="jobs-data", Key=k)["Body"].read() for k in keys)
    assert joined.splitlines() == lines
    assert done.stdout.splitlines() == [
        f"s3://jobs-data/out/{key.removeprefix('out-parts/job/')}.out" for key in keys
    ]


def test_invoke_against_moto(aws: dict[str, str]) -> None:
    done = deploy("invoke", "--name", "any", "--body", '{"prompt": "hi"}')
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    planned = plan("invoke", "--name", "llm", "--body", '{"prompt": "hi"}', "--stream")
    assert planned == [
        {
            "service": "sagemaker-runtime",
            "operation": "InvokeEndpointWithResponseStream",
            "params": {
                "EndpointName": "llm",
                "ContentType": "application/json",
                "Body": '{"prompt": "hi"}',
            },
        }
    ]


def fake_builders(
    directory: Path, *tools: str, docker_info: int = 0, failing: str = ""
) -> dict[str, str]:
    """Recording stand-ins for the builders `tools` (docker, buildah, podman) in `directory`,
    which becomes the whole PATH (so no real builder is found): each appends `TOOL ARGS` to
    `directory/calls`, and `login` also what it read on stdin to `directory/stdin`; `docker
    info` exits `docker_info`; the subcommand `failing` exits 3. The environment to run with."""
    directory.mkdir(exist_ok=True)
    for tool in tools:
        script = directory / tool
        script.write_text(
            "#!/bin/sh\n"
            f'echo "{tool} $*" >> {directory}/calls\n'
            f'[ "$1" = login ] && /bin/cat > {directory}/stdin\n'
            f'[ "$1" = info ] && exit {docker_info}\n'
            f'[ "$1" = "{failing}" ] && exit 3\n'
            "exit 0\n"
        )
        script.chmod(0o755)
    return {"PATH": str(directory)}


def recorded_calls(directory: Path) -> list[str]:
    calls = directory / "calls"
    return calls.read_text().splitlines() if calls.exists() else []


# The build context the image commands are given: this checkout (it holds the Dockerfile).
CHECKOUT = str(ROOT)


def test_image_logs_in_builds_and_pushes(aws: dict[str, str], tmp_path: Path) -> None:
    """Docker cannot run here: a recording script stands in for the docker CLI only; its engine
    answers `docker info`, so docker is the builder."""
    env = fake_builders(tmp_path, "docker")
    done = deploy(
        "image", "--repository", "vllm-sagemaker", "--tag", "v1", "--context", CHECKOUT, env=env
    )
    assert done.returncode == 0, done.stderr
    uri = done.stdout.strip()
    assert uri.endswith("/vllm-sagemaker:v1")
    info, login, build, push = recorded_calls(tmp_path)
    assert info == "docker info"
    registry = uri.split("/")[0]
    assert login == f"docker login --username AWS --password-stdin {registry}"
    assert build == f"docker build --build-arg ENGINE=gpu -t {uri} {CHECKOUT}"
    assert push == f"docker push {uri}"
    repositories = boto3.client("ecr").describe_repositories()["repositories"]
    assert "vllm-sagemaker" in [r["repositoryName"] for r in repositories]


def test_the_cpu_image_with_buildah(aws: dict[str, str], tmp_path: Path) -> None:
    """`--target cpu --builder buildah`: exactly login, build and push, with ECR's password on
    login's stdin; stdout is the URI alone. The dry run after it shows the same commands and
    runs none."""
    env = fake_builders(tmp_path, "buildah")
    args = ("image", "--target", "cpu", "--builder", "buildah", "--context", CHECKOUT)
    done = deploy(*args, env=env)
    assert done.returncode == 0, done.stderr
    repository = boto3.client("ecr").describe_repositories(repositoryNames=["vllm-sagemaker"])
    uri = repository["repositories"][0]["repositoryUri"] + ":cpu"
    assert done.stdout == uri + "\n"
    registry = uri.split("/")[0]
    commands = [
        f"buildah login --username AWS --password-stdin {registry}",
        f"buildah bud --layers --build-arg ENGINE=cpu -t {uri} {CHECKOUT}",
        f"buildah push {uri}",
    ]
    assert recorded_calls(tmp_path) == commands
    token = boto3.client("ecr").get_authorization_token()["authorizationData"][0]
    password = base64.b64decode(token["authorizationToken"]).decode().split(":", 1)[1]
    assert (tmp_path / "stdin").read_text() == password
    assert "deploy: builder: buildah, as --builder asks" in done.stderr.splitlines()

    (tmp_path / "calls").unlink()
    dry = deploy(*args, "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout) == []  # the repository is there: no AWS write either
    assert recorded_calls(tmp_path) == []
    shown = [line.removeprefix("deploy: then: ") for line in dry.stderr.splitlines()]
    assert shown[-3:] == commands


@pytest.mark.parametrize(
    ("tools", "docker_info", "chosen"),
    [
        (("docker", "buildah", "podman"), 0, "docker, whose engine answers"),
        (("docker", "buildah", "podman"), 1, "buildah, as no Docker engine answers `docker info`"),
        (("docker", "podman"), 1, "podman, as no Docker engine answers `docker info`"),
        (("podman",), 0, "podman, as no docker on PATH"),
    ],
)
def test_which_builder_runs(
    tmp_path: Path, tools: tuple[str, ...], docker_info: int, chosen: str
) -> None:
    """Without --builder: docker when its engine answers, else buildah, else podman."""
    env = {**NO_AWS, **fake_builders(tmp_path, *tools, docker_info=docker_info)}
    done = deploy("image", "--context", CHECKOUT, "--dry-run", env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == f"deploy: builder: {chosen}"
    tool = chosen.split(",")[0]
    assert lines[-2].startswith(f"deploy: then: {tool} b")
    assert "ENGINE=gpu -t '<registry>/vllm-sagemaker:gpu'" in lines[-2]
    assert [call for call in recorded_calls(tmp_path) if call != "docker info"] == []


def test_a_failing_builder_is_one_line(aws: dict[str, str], tmp_path: Path) -> None:
    env = fake_builders(tmp_path, "podman", failing="build")
    done = deploy(
        "image", "--target", "cpu", "--repository", "failing-build", "--context", CHECKOUT, env=env
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and done.stdout == ""
    build = recorded_calls(tmp_path)[-1]
    assert build.startswith("podman build --layers --build-arg ENGINE=cpu -t ")
    assert done.stderr.splitlines()[-1] == f"deploy: {build} failed with exit status 3"


def put_image(repository: str, tag: str) -> str:
    """An image tagged `tag` in ECR's `repository` (created when missing), as a push leaves it;
    its URI."""
    ecr = boto3.client("ecr")
    try:
        found = ecr.describe_repositories(repositoryNames=[repository])["repositories"][0]
    except ecr.exceptions.RepositoryNotFoundException:
        found = ecr.create_repository(repositoryName=repository)["repository"]
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json"}
    with contextlib.suppress(ecr.exceptions.ImageAlreadyExistsException):
        ecr.put_image(repositoryName=repository, imageManifest=json.dumps(manifest), imageTag=tag)
    return f"{found['repositoryUri']}:{tag}"


def test_an_endpoint_on_a_cpu_instance_takes_the_cpu_image(aws: dict[str, str]) -> None:
    """No --image: the endpoint takes vllm-sagemaker:cpu, which `deploy image --target cpu`
    pushed, and no GPU setting; with no image of that tag, one line says which to build."""
    uri = put_image("vllm-sagemaker", "cpu")
    # moto knows the instance types of 2020 only: no ml.c7i.
    options = cli.options(name="cpu-llm", model_id="org/m", instance_type="ml.c5.4xlarge")
    done = deploy("endpoint", *options, "--no-wait", env={"SAGEMAKER_ROLE_ARN": ROLE})
    assert done.returncode == 0, done.stderr
    assert f"deploy: image: {uri} (no --image given)" in done.stderr.splitlines()
    sagemaker = boto3.client("sagemaker")
    container = sagemaker.describe_model(ModelName="cpu-llm")["PrimaryContainer"]
    assert container["Image"] == uri
    assert container["Environment"] == {"HF_MODEL_ID": "org/m"}
    config = sagemaker.describe_endpoint_config(EndpointConfigName="cpu-llm")
    (variant,) = config["ProductionVariants"]
    assert variant["InstanceType"] == "ml.c5.4xlarge" and "InferenceAmiVersion" not in variant
    assert deploy("delete", "--name", "cpu-llm").returncode == 0

    on_gpu = cli.options(name="gpu-llm", model_id="org/m", instance_type="ml.g5.2xlarge")
    missing = deploy("endpoint", *on_gpu, "--dry-run", env={"SAGEMAKER_ROLE_ARN": ROLE})
    assert (missing.returncode, missing.stdout) == (1, "")
    (told,) = missing.stderr.splitlines()
    assert told.startswith("deploy: no --image given, and ECR's vllm-sagemaker in us-east-1 holds")
    assert told.endswith("run `vllm-sagemaker deploy image --target gpu` first, or give --image")


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
        "Environment": {"HF_MODEL_ID": "org/m"},
    }
    assert "InferenceAmiVersion" not in config["params"]["ProductionVariants"][0]


def test_async_endpoint_and_invocation_against_moto(aws: dict[str, str]) -> None:
    boto3.client("s3").create_bucket(Bucket="async-results")
    created = deploy(
        "endpoint",
        *model_options("async-llm", "ml.p3.2xlarge", async_output="s3://async-results/out/"),
        env={"SAGEMAKER_ROLE_ARN": ROLE},
    )
    assert created.returncode == 0, created.stderr
    config = boto3.client("sagemaker").describe_endpoint_config(EndpointConfigName="async-llm")
    assert (
        config["AsyncInferenceConfig"]["OutputConfig"]["S3OutputPath"] == "s3://async-results/out/"
    )
    done = deploy("invoke", "--name", "async-llm", "--async", "--body", '{"prompt": "hi"}')
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("s3://")
    inputs = boto3.client("s3").list_objects_v2(Bucket="async-results", Prefix="out/inputs/")
    (uploaded,) = inputs["Contents"]
    body = boto3.client("s3").get_object(Bucket="async-results", Key=uploaded["Key"])["Body"]
    assert body.read() == b'{"prompt": "hi"}'
    assert deploy("delete", "--name", "async-llm").returncode == 0


def test_streamed_tokens_are_printed_as_they_arrive() -> None:
    """InvokeEndpointWithResponseStream hands over the SSE bytes in arbitrary pieces."""
    pieces = [
        b'data: {"choices": [{"text": "Hel',
        b'lo"}]}\n\ndata: {"choices": [{"delta": {"content": ", world"}}]}\n',
        b"\ndata: [DONE]\n\n",
    ]
    assert list(invoke.stream_text(pieces)) == ["Hello", ", world"]


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


@pytest.mark.parametrize(
    ("candidate", "ours"),
    [
        ("chat", True),
        ("chat-20250101-000000", True),
        ("chat-prod", False),
        ("chat-prod-20250101-000000", False),
        ("chat-v2", False),
        ("chat-20250101-0000001", False),
        ("chat-2025010-000000", False),
        ("chatbot", False),
        ("my-chat-20250101-000000", False),
    ],
)
def test_which_names_are_versions_of_chat(candidate: str, ours: bool) -> None:
    assert names.is_version_of("chat", candidate) is ours


PREFIX_SOURCE = model_plan.ModelSource(model_prefix="s3://m/llama/")


@pytest.mark.parametrize(
    ("held", "role_known", "differences"),
    [
        ({}, True, []),
        # DescribeModel adds fields of its own: not differences.
        ({"Mode": "SingleModel"}, True, []),
        (
            {
                "ModelDataSource": {
                    "S3DataSource": {
                        "S3Uri": "s3://m/llama/",
                        "S3DataType": "S3Prefix",
                        "CompressionType": "None",
                        "ETag": "abc",
                        "ManifestS3Uri": "s3://m/manifest",
                    }
                }
            },
            True,
            [],
        ),
        (
            {"Image": "other:v2"},
            True,
            [f"Image is 'other:v2', not {IMAGE!r}"],
        ),
        (
            {"Environment": {"SM_VLLM_MAX_MODEL_LEN": "4096"}},
            True,
            ["Environment is {'SM_VLLM_MAX_MODEL_LEN': '4096'}, not {}"],
        ),
        (
            {"ExecutionRoleArn": "arn:aws:iam::1:role/Other"},
            True,
            [f"ExecutionRoleArn is 'arn:aws:iam::1:role/Other', not {ROLE!r}"],
        ),
        # A dry run without a role compares everything else.
        ({"ExecutionRoleArn": "arn:aws:iam::1:role/Other"}, False, []),
    ],
)
def test_model_differences(held: dict[str, Any], role_known: bool, differences: list[str]) -> None:
    planned = model_plan.create_model("m", IMAGE, PREFIX_SOURCE, {}, ROLE)
    container = {**planned.params["PrimaryContainer"]}
    existing: dict[str, Any] = {"PrimaryContainer": container, "ExecutionRoleArn": ROLE}
    for key, value in held.items():
        (existing if key == "ExecutionRoleArn" else container)[key] = value
    assert model_plan.model_differences(existing, planned, role_known) == differences


@pytest.mark.parametrize(
    ("output", "job", "prefix"),
    [
        ("s3://b/results/", "llama", "s3://b/results-parts/llama/"),
        ("s3://b/results", "llama", "s3://b/results-parts/llama/"),
        ("s3://b/", "llama", "s3://b/parts/llama/"),
        ("s3://b", "x-y", "s3://b/parts/x-y/"),
    ],
)
def test_split_prefix(output: str, job: str, prefix: str) -> None:
    assert shards.shard_prefix(output, job) == prefix


@pytest.mark.parametrize(
    ("input_prefix", "target", "overlap"),
    [
        ("s3://b/in/", "s3://b/out-parts/job/", False),
        ("s3://b/data/", "s3://b/data/res-parts/job/", True),
        ("s3://b/out", "s3://b/out-parts/job/", True),
        ("s3://b/out-parts/job/a/", "s3://b/out-parts/job/", True),
    ],
)
def test_parts_must_not_overlap_the_input(input_prefix: str, target: str, overlap: bool) -> None:
    assert shards.overlap(input_prefix, target) is overlap


@pytest.mark.parametrize(
    ("key", "shard"),
    [
        ("out-parts/job/a.part-00000.jsonl", True),
        ("out-parts/job/d/a.b.part-00012.jsonl", True),
        ("out-parts/job/a.part-00003", True),
        ("out-parts/job/a.jsonl.part-00001.gz", True),
        ("out-parts/job/a.jsonl", False),
        ("out-parts/job/a.part-1.jsonl", False),
        ("out-parts/job/notes.txt", False),
    ],
)
def test_which_objects_are_shards(key: str, shard: bool) -> None:
    assert shards.is_shard(key) is shard
    if shard:
        assert shards.shard_key("d/a.jsonl", 7) == "d/a.part-00007.jsonl"


def test_a_dry_run_that_cannot_read_says_what_it_assumed() -> None:
    done = deploy("endpoint", *model_options("llm", "ml.g5.2xlarge"), "--dry-run", env=NO_AWS)
    assert done.returncode == 0, done.stderr
    assert [c["operation"] for c in json.loads(done.stdout)][-1] == "CreateEndpoint"
    (note,) = done.stderr.splitlines()
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
