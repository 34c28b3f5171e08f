"""`deploy component`'s calls: an endpoint for inference components (its variant has instances
and managed instance scaling, no model), a component on it (a model of its own, the GPUs, cores,
memory and copies it is given), and a component's scale to zero. Pure rules."""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vllm_sagemaker.deploy.base.calls import Call
from vllm_sagemaker.deploy.base.errors import Problem
from vllm_sagemaker.deploy.kit.plans.endpoint import MODEL_DOWNLOAD_S, STARTUP_HEALTH_CHECK_S
from vllm_sagemaker.deploy.kit.plans.instances import INFERENCE_AMI, gpu_count, image_engine
from vllm_sagemaker.deploy.kit.plans.model import TENSOR_PARALLEL, tensor_parallel_problem
from vllm_sagemaker.deploy.kit.plans.names import MAX_NAME, NAME_PATTERN, TAGS
from vllm_sagemaker.deploy.kit.plans.scaling import (
    VARIANT,
    Scalable,
    Wake,
    min_max_problem,
    parsed_range,
    register_call,
    tracking_call,
    wake_calls,
)

# A component's copies, as Application Auto Scaling names them.
COPIES = "sagemaker:inference-component:DesiredCopyCount"
# SageMaker's metric of the invocations each copy of a component gets a minute, as target
# tracking names it, and what the kit keeps it at unless --target says otherwise.
INVOCATIONS_PER_COPY = "SageMakerInferenceComponentInvocationsPerCopy"
DEFAULT_TARGET = 5.0
# The calls a component without a copy failed (AWS/SageMaker, per InferenceComponentName): what
# wakes a component scaled to zero.
NO_CAPACITY = "NoCapacityInvocationFailures"
# AWS's bounds of StartupParameters' timeouts.
TIMEOUT_RANGE = (60, 3600)
# The memory a component reserves unless --memory says otherwise (AWS requires a value).
DEFAULT_MEMORY_MB = 1024
ROUTING = "LEAST_OUTSTANDING_REQUESTS"


@dataclass(frozen=True)
class Component:
    """What `deploy component` gives one inference component."""

    name: str
    endpoint: str
    gpus: int | None = None
    cpus: float | None = None
    memory_mb: int = DEFAULT_MEMORY_MB
    copies: int = 1
    startup_s: int = STARTUP_HEALTH_CHECK_S
    download_s: int = MODEL_DOWNLOAD_S


def copies_of(component: str) -> Scalable:
    return Scalable(f"inference-component/{component}", COPIES)


def endpoint_calls(name: str, instance_type: str, least: int, most: int, role: str) -> list[Call]:
    """CreateEndpointConfig and CreateEndpoint of an endpoint for components: one variant of
    `instance_type`, between `least` and `most` instances (managed instance scaling; `least` 0
    lets it scale to zero), requests to the copy with the fewest in flight."""
    variant: dict[str, Any] = {
        "VariantName": VARIANT,
        "InstanceType": instance_type,
        "InitialInstanceCount": max(least, 1),
        "ManagedInstanceScaling": {
            "Status": "ENABLED",
            "MinInstanceCount": least,
            "MaxInstanceCount": most,
        },
        "RoutingConfig": {"RoutingStrategy": ROUTING},
    }
    if gpu_count(instance_type):
        variant["InferenceAmiVersion"] = INFERENCE_AMI
    config = {
        "EndpointConfigName": name,
        "ProductionVariants": [variant],
        "ExecutionRoleArn": role,
        "Tags": TAGS,
    }
    return [
        Call("sagemaker", "CreateEndpointConfig", config),
        Call(
            "sagemaker",
            "CreateEndpoint",
            {"EndpointName": name, "EndpointConfigName": name, "Tags": TAGS},
        ),
    ]


def component_env(env: Mapping[str, str], gpus: int | None) -> dict[str, str]:
    """The model's environment: tensor parallelism over the component's GPUs (never the
    instance's) unless the user chose it."""
    result = dict(env)
    if gpus and gpus > 1:
        result.setdefault(TENSOR_PARALLEL, str(gpus))
    return result


def specification(component: Component, model: str) -> dict[str, Any]:
    needs: dict[str, Any] = {"MinMemoryRequiredInMb": component.memory_mb}
    if component.gpus:
        needs["NumberOfAcceleratorDevicesRequired"] = component.gpus
    if component.cpus:
        needs["NumberOfCpuCoresRequired"] = component.cpus
    return {
        "ModelName": model,
        "ComputeResourceRequirements": needs,
        "StartupParameters": {
            "ContainerStartupHealthCheckTimeoutInSeconds": component.startup_s,
            "ModelDataDownloadTimeoutInSeconds": component.download_s,
        },
    }


def component_call(component: Component, model: str, exists: bool) -> Call:
    """CreateInferenceComponent, or for one that exists, UpdateInferenceComponent (to a new
    model; SageMaker rolls its copies over)."""
    params: dict[str, Any] = {
        "InferenceComponentName": component.name,
        "Specification": specification(component, model),
        "RuntimeConfig": {"CopyCount": component.copies},
    }
    if exists:
        return Call("sagemaker", "UpdateInferenceComponent", params)
    return Call(
        "sagemaker",
        "CreateInferenceComponent",
        {
            **params,
            "EndpointName": component.endpoint,
            "VariantName": VARIANT,
            "Tags": TAGS,
        },
    )


def endpoint_problem(endpoint: str) -> Problem | None:
    if len(endpoint) <= MAX_NAME and NAME_PATTERN.fullmatch(endpoint):
        return None
    why = f"SageMaker names are 1-{MAX_NAME} letters, digits and hyphens"
    return Problem("--endpoint", why, repr(endpoint))


def zero_calls(component: str, most: int, value: float | None) -> list[Call]:
    """A component's scale to zero: its copies between 0 and `most`, kept at `value`
    invocations a minute each, and one started when a call finds none."""
    scaled = copies_of(component)
    tracking = {
        "TargetValue": DEFAULT_TARGET if value is None else value,
        "PredefinedMetricSpecification": {"PredefinedMetricType": INVOCATIONS_PER_COPY},
    }
    wake = Wake(NO_CAPACITY, ("InferenceComponentName", component), "Maximum", 30, 1)
    return [
        register_call(scaled, 0, most),
        tracking_call(scaled, tracking),
        *wake_calls(scaled, wake),
    ]


def gpus_problem(gpus: int | None, instance_type: str | None) -> Problem | None:
    """More GPUs than `instance_type` has (a type the kit does not size is not refused)."""
    if gpus is None or instance_type is None:
        return None
    if image_engine(instance_type) == "cpu":
        return Problem(
            "--gpus", f"{instance_type} has no GPU; leave --gpus out, or give a GPU type", gpus
        )
    held = gpu_count(instance_type)
    if not held or gpus <= held:
        return None
    why = f"{instance_type} has {held} GPU{'s' if held > 1 else ''}; give at most {held}, or an "
    return Problem("--gpus", why + "endpoint on an instance type with more", gpus)


def copy_tensor_parallel_problem(env: Mapping[str, str], gpus: int | None) -> Problem | None:
    """Tensor parallelism over more GPUs than the component is given."""
    has, instead = (
        f"the component gets --gpus {gpus}",
        f"--gpus {{size}}, or leave {TENSOR_PARALLEL} out",
    )
    return tensor_parallel_problem(env, gpus, has, instead)


def copies_problem(copies: int | None, scale_to_zero: bool) -> Problem | None:
    if copies is None or copies > 0:
        return None
    if copies < 0:
        return Problem("--copies", "must be 0 or more", copies)
    if not scale_to_zero:
        why = "a component without copies serves nothing and nothing would start one; add "
        return Problem(
            "--copies", why + "--scale-to-zero (a call then starts a copy) or give 1 or more", 0
        )
    return None


def instances_problem(value: str, scale_to_zero: bool) -> Problem | None:
    """--instances MIN:MAX, the endpoint's managed instance scaling."""
    problem = min_max_problem("--instances", value, "1:2")
    if problem:
        return problem
    least, _ = parsed_range(value) or (1, 1)
    if least == 0 and not scale_to_zero:
        why = "an endpoint reaches 0 instances only when its components scale to zero copies: "
        return Problem("--instances", why + "add --scale-to-zero, or give MIN 1 or more", value)
    return None
