"""`deploy endpoint`'s calls: a model, an endpoint config and the endpoint, or, for an endpoint
that exists, a new version of the model and config and an UpdateEndpoint."""

from collections.abc import Mapping
from typing import Any

from vllm_sagemaker.deploy.base.calls import Call
from vllm_sagemaker.deploy.kit.plans.instances import INFERENCE_AMI, gpu_count
from vllm_sagemaker.deploy.kit.plans.model import ModelSource, create_model, model_env
from vllm_sagemaker.deploy.kit.plans.names import TAGS, versioned
from vllm_sagemaker.deploy.kit.plans.scaling import VARIANT
from vllm_sagemaker.handler.core.config import ASYNC_MARKER

# Large models need more than SageMaker's defaults to download and to pass /ping.
STARTUP_HEALTH_CHECK_S = 1800
MODEL_DOWNLOAD_S = 1800


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
        "VariantName": VARIANT,
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
