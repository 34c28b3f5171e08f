"""The AWS calls each `deploy` command makes, as data: pure functions from options (and what
was read from AWS) to a list of `Call`s, so `--dry-run` prints exactly what a real run executes,
and tests can read the plan.
"""

import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from vllm_sagemaker.deploy.aws.instances import INFERENCE_AMI, gpu_count
from vllm_sagemaker.handler.core import s3_uri
from vllm_sagemaker.handler.core.config import ASYNC_MARKER
from vllm_sagemaker.handler.core.content_types import JSON_LINES

TAGS = [{"Key": "created-by", "Value": "vllm-sagemaker"}]
# SageMaker's names of models, endpoints, endpoint configs and transform jobs: its API's pattern
# (which bounds the letters and digits, not the hyphens between them) and length.
MAX_NAME = 63
NAME_PATTERN = re.compile(rf"[a-zA-Z0-9](-*[a-zA-Z0-9]){{0,{MAX_NAME - 1}}}")
# The versions `deploy endpoint` makes when it updates an endpoint: `NAME-<UTC time>`.
VERSION_FORMAT = "%Y%m%d-%H%M%S"
# How often a run asks SageMaker whether an endpoint or a job has got where it waits for.
POLL_S = 15.0
# Large models need more than SageMaker's defaults to download and to pass /ping.
STARTUP_HEALTH_CHECK_S = 1800
MODEL_DOWNLOAD_S = 1800
TRANSFORM_INVOCATION_TIMEOUT_S = 3600
TRANSFORM_RETRIES = 1


@dataclass(frozen=True)
class Call:
    service: str
    operation: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Lines:
    """A body made of lines [start, end) (counted from 0) of the JSON Lines file `source`."""

    source: str
    start: int
    end: int


def _shown(value: object) -> object:
    """A body as the dry run prints it: bytes as text, `Lines` as what it names."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, Lines):
        return {"lines_of": asdict(value)}
    raise TypeError(f"{type(value).__name__} is not printable")


def to_json(calls: Sequence[Call]) -> str:
    return json.dumps(
        [{"service": c.service, "operation": c.operation, "params": c.params} for c in calls],
        indent=2,
        default=_shown,
    )


def version(now: float | None = None) -> str:
    """The version a new model and config of an existing endpoint are named after."""
    return time.strftime(VERSION_FORMAT, time.gmtime(now))


def versioned(name: str, version: str) -> str:
    """The name of `name`'s model and config at `version`."""
    return f"{name}-{version}"


def is_version_of(name: str, candidate: str) -> bool:
    """Whether `candidate` is `name` itself or one of the kit's versions of it, `NAME-<UTC time>`
    exactly: `chat-20250101-000000` is chat's, `chat-prod` and `chat-prod-20250101-000000` are
    not."""
    if candidate == name:
        return True
    if not candidate.startswith(name + "-"):
        return False
    stamp = candidate[len(name) + 1 :]
    try:
        parsed = time.strptime(stamp, VERSION_FORMAT)
    except ValueError:
        return False
    return time.strftime(VERSION_FORMAT, parsed) == stamp


@dataclass(frozen=True)
class ModelSource:
    """Where the container finds the model: a hub id, a .tar.gz, or an uncompressed S3 prefix,
    which SageMaker downloads before start (ModelDataSource) or, with `stream`, the container
    streams to the engine itself (vLLM's Run:ai streamer; SM_VLLM_MODEL=s3://...)."""

    model_id: str | None = None
    model_data: str | None = None
    model_prefix: str | None = None
    stream: bool = False

    def container(self, image: str, env: Mapping[str, str]) -> dict[str, Any]:
        environment = dict(env)
        definition: dict[str, Any] = {"Image": image, "Environment": environment}
        if self.model_id:
            environment["HF_MODEL_ID"] = self.model_id
        if self.model_data:
            definition["ModelDataUrl"] = self.model_data
        if self.model_prefix and self.stream:
            environment["SM_VLLM_MODEL"] = self.model_prefix.rstrip("/") + "/"
        elif self.model_prefix:
            definition["ModelDataSource"] = {
                "S3DataSource": {
                    "S3Uri": self.model_prefix.rstrip("/") + "/",
                    "S3DataType": "S3Prefix",
                    "CompressionType": "None",
                }
            }
        return definition


def model_env(env: Mapping[str, str], instance_type: str) -> dict[str, str]:
    """The container's environment: the user's settings, tensor parallelism over every GPU of
    the instance unless the user chose it."""
    result = dict(env)
    gpus = gpu_count(instance_type)
    if gpus > 1 and "SM_VLLM_TENSOR_PARALLEL_SIZE" not in result:
        result["SM_VLLM_TENSOR_PARALLEL_SIZE"] = str(gpus)
    return result


def create_model(
    name: str, image: str, source: ModelSource, env: Mapping[str, str], role: str
) -> Call:
    return Call(
        "sagemaker",
        "CreateModel",
        {
            "ModelName": name,
            "PrimaryContainer": source.container(image, env),
            "ExecutionRoleArn": role,
            "Tags": TAGS,
        },
    )


def endpoint_calls(
    name: str,
    image: str,
    source: ModelSource,
    instance_type: str,
    instance_count: int,
    env: Mapping[str, str],
    role: str,
    async_output: str | None = None,
    version: str | None = None,
) -> list[Call]:
    """CreateModel, CreateEndpointConfig, CreateEndpoint for a real-time (or async) endpoint.

    With `version` (the endpoint exists already) the model and config get a versioned name and
    the endpoint is updated to them: SageMaker swaps instances without downtime."""
    resource = versioned(name, version) if version else name
    variant = {
        "VariantName": "AllTraffic",
        "ModelName": resource,
        "InstanceType": instance_type,
        "InitialInstanceCount": instance_count,
        "ContainerStartupHealthCheckTimeoutInSeconds": STARTUP_HEALTH_CHECK_S,
        "ModelDataDownloadTimeoutInSeconds": MODEL_DOWNLOAD_S,
    }
    if gpu_count(instance_type):
        variant["InferenceAmiVersion"] = INFERENCE_AMI
    config: dict[str, Any] = {
        "EndpointConfigName": resource,
        "ProductionVariants": [variant],
        "Tags": TAGS,
    }
    container_env = model_env(env, instance_type)
    if async_output:
        config["AsyncInferenceConfig"] = {"OutputConfig": {"S3OutputPath": async_output}}
        # SageMaker gives the container no sign that it is async: tell it.
        container_env.setdefault(ASYNC_MARKER, "true")
    endpoint: dict[str, Any] = {"EndpointName": name, "EndpointConfigName": resource}
    return [
        create_model(resource, image, source, container_env, role),
        Call("sagemaker", "CreateEndpointConfig", config),
        Call("sagemaker", "UpdateEndpoint", endpoint)
        if version
        else Call("sagemaker", "CreateEndpoint", {**endpoint, "Tags": TAGS}),
    ]


def transform_call(
    name: str,
    input_prefix: str,
    output: str,
    instance_type: str,
    instance_count: int,
    max_payload_mb: int,
    max_concurrent: int,
    join_input: bool,
    model: str | None = None,
) -> Call:
    """CreateTransformJob over JSON Lines: Line split, MultiRecord, AssembleWith Line; the model
    is the job's namesake unless `model` names another."""
    params: dict[str, Any] = {
        "TransformJobName": name,
        "ModelName": model or name,
        "MaxConcurrentTransforms": max_concurrent,
        "MaxPayloadInMB": max_payload_mb,
        "BatchStrategy": "MultiRecord",
        "ModelClientConfig": {
            "InvocationsTimeoutInSeconds": TRANSFORM_INVOCATION_TIMEOUT_S,
            "InvocationsMaxRetries": TRANSFORM_RETRIES,
        },
        "Environment": {
            "SAGEMAKER_MINI_BATCH_TIMEOUT_SECONDS": str(TRANSFORM_INVOCATION_TIMEOUT_S * 9 // 10)
        },
        "TransformInput": {
            "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": input_prefix}},
            "ContentType": JSON_LINES,
            "SplitType": "Line",
        },
        "TransformOutput": {"S3OutputPath": output, "Accept": JSON_LINES, "AssembleWith": "Line"},
        "TransformResources": {"InstanceType": instance_type, "InstanceCount": instance_count},
        "Tags": TAGS,
    }
    if join_input:
        params["DataProcessing"] = {"JoinSource": "Input"}
    return Call("sagemaker", "CreateTransformJob", params)


def delete_calls(endpoint: str | None, configs: Sequence[str], models: Sequence[str]) -> list[Call]:
    """What `deploy delete` removes: the endpoint (None: there is none), then the endpoint
    configs and models, each once, in the order given."""
    return [
        *([Call("sagemaker", "DeleteEndpoint", {"EndpointName": endpoint})] if endpoint else []),
        *(
            Call("sagemaker", "DeleteEndpointConfig", {"EndpointConfigName": c})
            for c in dict.fromkeys(configs)
        ),
        *(Call("sagemaker", "DeleteModel", {"ModelName": m}) for m in dict.fromkeys(models)),
    ]


def put(uri: str, body: object) -> Call:
    """Writing `body` at `uri`: S3's PutObject, or a local file."""
    if s3_uri.is_s3(uri):
        bucket, key = s3_uri.s3_parts(uri)
        return Call("s3", "PutObject", {"Bucket": bucket, "Key": key, "Body": body})
    return Call("file", "Write", {"Path": uri, "Body": body})


def remove(uri: str) -> Call:
    """Deleting the object or file at `uri`."""
    if s3_uri.is_s3(uri):
        bucket, key = s3_uri.s3_parts(uri)
        return Call("s3", "DeleteObject", {"Bucket": bucket, "Key": key})
    return Call("file", "Remove", {"Path": uri})


_DATA_SOURCE = ("S3Uri", "S3DataType", "CompressionType")


def _as_created(container: Mapping[str, Any]) -> dict[str, Any]:
    """What the kit sets of a container, as it sets it: SageMaker's DescribeModel adds fields
    of its own (the data source's ETag and manifest, the container's Mode), left out here."""
    source = container.get("ModelDataSource", {}).get("S3DataSource", {})
    return {
        "Image": container.get("Image"),
        "Environment": container.get("Environment") or {},
        "ModelDataUrl": container.get("ModelDataUrl"),
        "ModelDataSource": {key: source.get(key) for key in _DATA_SOURCE if key in source},
    }


def model_differences(existing: Mapping[str, Any], planned: Call, role_known: bool) -> list[str]:
    """What differs between a model SageMaker holds (DescribeModel's answer) and the CreateModel
    call the kit would make: the container's image, environment and model data, and the role
    (when it is known: a dry run may go without)."""
    wanted = _as_created(planned.params["PrimaryContainer"])
    held = _as_created(existing.get("PrimaryContainer", {}))
    differences = [
        f"{key} is {held[key]!r}, not {wanted[key]!r}" for key in wanted if held[key] != wanted[key]
    ]
    held_role, role = existing.get("ExecutionRoleArn"), planned.params["ExecutionRoleArn"]
    if role_known and held_role != role:
        differences.append(f"ExecutionRoleArn is {held_role!r}, not {role!r}")
    return differences
