"""The model a `deploy` command creates: where its container finds the weights, its environment,
the CreateModel call, and whether SageMaker holds that model already."""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vllm_sagemaker.core import cloudwatch
from vllm_sagemaker.deploy.base.calls import Call
from vllm_sagemaker.deploy.base.errors import ClientError, Problem
from vllm_sagemaker.deploy.kit.plans.instances import gpu_count
from vllm_sagemaker.deploy.kit.plans.names import TAGS

if TYPE_CHECKING:  # boto3 loads when a command runs; `--help` loads this module without it
    from vllm_sagemaker.deploy.base.reads import Reads

TENSOR_PARALLEL = "SM_VLLM_TENSOR_PARALLEL_SIZE"
# Where the execution role comes from when --role is not given.
ROLE_VARIABLE = "SAGEMAKER_ROLE_ARN"
# What a dry run shows for a role it was not given.
ROLE_PLACEHOLDER = f"<{ROLE_VARIABLE}>"


@dataclass(frozen=True)
class ModelSource:
    """Where the container finds the model: a hub id, a .tar.gz, or an S3 prefix SageMaker
    downloads before start or, with `stream`, vLLM's Run:ai streamer reads (SM_VLLM_MODEL)."""

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
        prefix = self.model_prefix.rstrip("/") + "/" if self.model_prefix else None
        if prefix and self.stream:
            environment["SM_VLLM_MODEL"] = prefix
        elif prefix:
            source = {"S3Uri": prefix, "S3DataType": "S3Prefix", "CompressionType": "None"}
            definition["ModelDataSource"] = {"S3DataSource": source}
        return definition


def model_env(env: Mapping[str, str], instance_type: str | None) -> dict[str, str]:
    """The user's settings, with tensor parallelism over every GPU unless the user chose it."""
    result = dict(env)
    gpus = gpu_count(instance_type) if instance_type else 0
    if gpus > 1 and TENSOR_PARALLEL not in result:
        result[TENSOR_PARALLEL] = str(gpus)
    return result


def create_model(
    name: str, image: str, source: ModelSource, env: Mapping[str, str], role: str
) -> Call:
    container = source.container(image, env)
    params = {"ModelName": name, "PrimaryContainer": container, "ExecutionRoleArn": role}
    return Call("sagemaker", "CreateModel", {**params, "Tags": TAGS})


_DATA_SOURCE = ("S3Uri", "S3DataType", "CompressionType")
# What `deploy endpoint` adds to its model's environment to name where its metrics come from
# (`plans.scaling.metrics_env`): not the model, so a transform job may use it all the same.
_WHERE = (cloudwatch.ENDPOINT_VARIABLE, cloudwatch.VARIANT_VARIABLE)


def _as_created(container: Mapping[str, Any]) -> dict[str, Any]:
    """What the kit sets of a container, without what DescribeModel adds (the data source's ETag
    and manifest, the container's Mode) nor the variables that name an endpoint's metrics."""
    source = container.get("ModelDataSource", {}).get("S3DataSource", {})
    return {
        "Image": container.get("Image"),
        "Environment": {
            key: value
            for key, value in (container.get("Environment") or {}).items()
            if key not in _WHERE
        },
        "ModelDataUrl": container.get("ModelDataUrl"),
        "ModelDataSource": {key: source.get(key) for key in _DATA_SOURCE if key in source},
    }


def model_differences(existing: Mapping[str, Any], planned: Call, role_known: bool) -> list[str]:
    """What differs between a DescribeModel answer and the CreateModel call (role if known)."""
    wanted = _as_created(planned.params["PrimaryContainer"])
    held = _as_created(existing.get("PrimaryContainer", {}))
    differences = [
        f"{key} is {held[key]!r}, not {wanted[key]!r}" for key in wanted if held[key] != wanted[key]
    ]
    held_role, role = existing.get("ExecutionRoleArn"), planned.params["ExecutionRoleArn"]
    if role_known and held_role != role:
        differences.append(f"ExecutionRoleArn is {held_role!r}, not {role!r}")
    return differences


def model_calls(reads: "Reads", model: Call) -> tuple[list[Call], list[str]]:
    """The CreateModel call, unless SageMaker holds that model as the kit would create it (then a
    note); ClientError naming the difference when it holds another of that name."""
    name = model.params["ModelName"]
    existing = reads.describe(
        Call("sagemaker", "DescribeModel", {"ModelName": name}),
        f"the plan assumes no model named {name} exists; if one does and differs, the run stops",
    )
    if existing is None:
        return [model], []
    role_known = model.params["ExecutionRoleArn"] != ROLE_PLACEHOLDER
    differences = model_differences(existing, model, role_known)
    if differences:
        raise ClientError(
            f"a model named {name} exists and differs from this one ("
            + "; ".join(differences)
            + "); give another --name, or delete that model first"
        )
    return [], [f"model {name} exists as asked; the run uses it"]


def tensor_parallel_problem(
    env: Mapping[str, str], gpus: int | None, has: str, instead: str
) -> Problem | None:
    """The tensor parallelism `env` asks for, when it takes more than the `gpus` GPUs (one each)
    of what `has` them; `instead`: what to give (`{size}`: the size asked)."""
    size = env.get(TENSOR_PARALLEL, "").strip()
    if not (gpus and size.isdigit() and int(size) > gpus):
        return None
    why = f"{has}, and tensor parallelism takes one each: give {instead.format(size=size)}"
    return Problem("--env", why, f"{TENSOR_PARALLEL}={size}")
