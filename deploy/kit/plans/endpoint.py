"""`deploy endpoint`'s calls: a model, an endpoint config and the endpoint (for an endpoint that
exists, versions of the model and config and an UpdateEndpoint), on instances or serverless."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vllm_sagemaker.core.config import ASYNC_MARKER, SERVERLESS_MARKER
from vllm_sagemaker.deploy.base.calls import Call
from vllm_sagemaker.deploy.kit.plans.instances import INFERENCE_AMI, gpu_count
from vllm_sagemaker.deploy.kit.plans.model import ModelSource, create_model, model_env
from vllm_sagemaker.deploy.kit.plans.names import TAGS, versioned
from vllm_sagemaker.deploy.kit.plans.scaling import VARIANT, resource_id
from vllm_sagemaker.deploy.kit.plans.serverless import Serverless

# Large models need more than SageMaker's defaults to download and to pass /ping.
STARTUP_HEALTH_CHECK_S = 1800
MODEL_DOWNLOAD_S = 1800
# Instances behind an endpoint unless --instance-count says otherwise.
DEFAULT_INSTANCE_COUNT = 1


@dataclass(frozen=True)
class Instances:
    instance_type: str
    count: int = DEFAULT_INSTANCE_COUNT


def capacity(hosting: Instances | Serverless) -> dict[str, Any]:
    """A variant's fields: its instances (an LLM's timeouts; the GPU AMI), or ServerlessConfig."""
    if isinstance(hosting, Serverless):
        return {"ServerlessConfig": hosting.config()}
    fields: dict[str, Any] = {
        "InstanceType": hosting.instance_type,
        "InitialInstanceCount": hosting.count,
        "ContainerStartupHealthCheckTimeoutInSeconds": STARTUP_HEALTH_CHECK_S,
        "ModelDataDownloadTimeoutInSeconds": MODEL_DOWNLOAD_S,
    }
    if gpu_count(hosting.instance_type):
        fields["InferenceAmiVersion"] = INFERENCE_AMI
    return fields


def endpoint_calls(
    name: str,
    image: str,
    source: ModelSource,
    hosting: Instances | Serverless,
    env: Mapping[str, str],
    role: str,
    async_output: str | None = None,
    version: str | None = None,
) -> list[Call]:
    """CreateModel, CreateEndpointConfig, CreateEndpoint; with `version` (the endpoint exists),
    a versioned model and config and an UpdateEndpoint (SageMaker swaps without downtime)."""
    resource = versioned(name, version) if version else name
    variant = {"VariantName": VARIANT, "ModelName": resource, **capacity(hosting)}
    config: dict[str, Any] = {
        "EndpointConfigName": resource,
        "ProductionVariants": [variant],
        "Tags": TAGS,
    }
    container_env = model_env(env, hosting.instance_type)
    if async_output:
        config["AsyncInferenceConfig"] = {"OutputConfig": {"S3OutputPath": async_output}}
        # SageMaker gives the container no sign that it is async: tell it.
        container_env.setdefault(ASYNC_MARKER, "true")
    if isinstance(hosting, Serverless):
        # Nor that it is serverless, whose limits are stricter than an instance's.
        container_env.setdefault(SERVERLESS_MARKER, "true")
    endpoint: dict[str, Any] = {"EndpointName": name, "EndpointConfigName": resource}
    return [
        create_model(resource, image, source, container_env, role),
        Call("sagemaker", "CreateEndpointConfig", config),
        Call("sagemaker", "UpdateEndpoint", endpoint)
        if version
        else Call("sagemaker", "CreateEndpoint", {**endpoint, "Tags": TAGS}),
    ]


def update_warnings(
    name: str,
    tags: Sequence[Mapping[str, str]],
    variants: Sequence[Mapping[str, Any]],
    scaled: Sequence[str],
    hosting: Instances | Serverless,
) -> list[str]:
    """What an update of `name` warns of: not the kit's; a scaling variant's type changed."""
    lines = []
    if not any(tag in TAGS for tag in tags):
        lines.append(
            f"warning: endpoint {name} has no {TAGS[0]['Key']} tag (the kit did not make it): "
            f"the update replaces its config with the kit's own, named {name}-<UTC time>"
        )
    wanted = hosting.instance_type
    for variant in variants:
        held, variant_name = variant.get("InstanceType"), variant.get("VariantName", "")
        if wanted and held and held != wanted and resource_id(name, variant_name) in scaled:
            lines.append(
                f"warning: variant {variant_name} of {name} scales (Application Auto Scaling) on "
                f"{held}, and SageMaker fails an update that changes its instance type to "
                f"{wanted}: deregister its scalable target {resource_id(name, variant_name)} first"
            )
    return lines
