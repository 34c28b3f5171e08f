"""The AWS calls each `deploy` command makes, as data: pure functions from options to a list of
`Call`s, so `--dry-run` prints exactly what a real run executes, and tests can read the plan.
"""

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from vllm_sagemaker.deploy.aws.instances import INFERENCE_AMI, gpu_count
from vllm_sagemaker.handler.core.config import ASYNC_MARKER
from vllm_sagemaker.handler.core.content_types import JSON_LINES

TAGS = [{"Key": "created-by", "Value": "vllm-sagemaker"}]
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


def to_json(calls: Sequence[Call]) -> str:
    return json.dumps([asdict(call) for call in calls], indent=2)


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
    resource = f"{name}-{version}" if version else name
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


def delete_calls(name: str, configs: Sequence[str], models: Sequence[str]) -> list[Call]:
    """What `deploy delete` removes: the endpoint `name`, then the endpoint configs and models
    deploy created for it (`name` and its versions from updates)."""
    return [
        Call("sagemaker", "DeleteEndpoint", {"EndpointName": name}),
        *(Call("sagemaker", "DeleteEndpointConfig", {"EndpointConfigName": c}) for c in configs),
        *(Call("sagemaker", "DeleteModel", {"ModelName": m}) for m in models),
    ]
