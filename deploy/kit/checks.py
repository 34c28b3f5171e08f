"""The checks of their options several `deploy` commands share (`deploy.base.command.Check`),
made before any AWS call, dry or not; each command's module holds its table (`CHECKS`)."""

import re
from collections.abc import Callable, Mapping, Sequence
from functools import partial

from vllm_sagemaker.core import s3_uri
from vllm_sagemaker.core.environment import environment_problems, vllm_number_problems
from vllm_sagemaker.core.sm_vllm import SM_VLLM_PREFIX
from vllm_sagemaker.deploy.base.command import Check, env_from_pairs, given
from vllm_sagemaker.deploy.base.errors import Problem
from vllm_sagemaker.deploy.base.ordered import payload_problem
from vllm_sagemaker.deploy.base.storage import bucket_problem
from vllm_sagemaker.deploy.kit.image_checks import (
    image_instance_problem,
    image_problem,
    no_image_problem,
)
from vllm_sagemaker.deploy.kit.plans import instances
from vllm_sagemaker.deploy.kit.plans.instances import (
    instance_image_warning,
    instance_type_problem,
    instance_type_warning,
)
from vllm_sagemaker.deploy.kit.plans.model import (
    ROLE_VARIABLE,
    tensor_parallel_problem,
)
from vllm_sagemaker.deploy.kit.plans.names import (
    MAX_NAME,
    NAME_PATTERN,
    job_suffix,
    version,
    versioned,
)

NAME_CHARACTERS = "letters, digits and hyphens, starting and ending with a letter or digit"
# CreateModel's ExecutionRoleArn (its pattern and length).
_ROLE_ARN = re.compile(r"arn:aws[a-z-]*:iam::\d{12}:role/?[a-zA-Z_0-9+=,.@\-_/]+")
_ROLE_LENGTH = (20, 2048)
# SageMaker's S3 URIs are at most 1024 characters.
_MAX_S3_URI = 1024
# A container's Environment: keys like shell variables, values up to 1024 characters.
_ENV_KEY = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_MAX_ENV_VALUE = 1024
_REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-\d+")
# What a run without a role is told (a dry run shows a placeholder instead).
NO_ROLE = Problem(
    "--role",
    f"not given, and {ROLE_VARIABLE} is not set: give --role ARN (the execution role SageMaker "
    f"runs the model as) or set {ROLE_VARIABLE}",
)


def name_problem(name: str, command: str) -> Problem | None:
    """Why `--name` cannot name SageMaker resources, or a name `command` derives from it."""
    counted = f"{name!r} ({len(name)} characters)"
    if len(name) > MAX_NAME:
        return Problem("--name", f"SageMaker names are {MAX_NAME} at most", counted)
    if not NAME_PATTERN.fullmatch(name):
        why = f"SageMaker names are 1-{MAX_NAME} {NAME_CHARACTERS} (no spaces, underscores, dots "
        return Problem("--name", why + "or slashes)", repr(name))
    for what, example in derived_names(command, name):
        if len(example) > MAX_NAME:
            room = MAX_NAME - (len(example) - len(name))
            why = (
                f"{what} must fit SageMaker's {MAX_NAME} characters too, so give a name of at most"
            )
            return Problem("--name", f"{why} {room}", counted)
    return None


def derived_names(command: str, name: str) -> list[tuple[str, str]]:
    if command in ("endpoint", "component"):
        return [("the versions an update makes, NAME-<UTC time>,", versioned(name, version(0)))]
    if command == "batch":
        return [("its transform jobs, NAME-<shard>-<attempt>,", name + job_suffix(0, 1))]
    return []


def longest_name(command: str) -> int:
    extra = (len(derived) - 1 for _, derived in derived_names(command, "x"))
    return MAX_NAME - max(extra, default=0)


def range_problem(option: str, value: int, least: int, most: int | None = None) -> Problem | None:
    if value >= least and (most is None or value <= most):
        return None
    bounds = f"at least {least}" if most is None else f"from {least} to {most}"
    return Problem(option, f"must be {bounds}", value)


def positive_problem(option: str, value: float) -> Problem | None:
    return None if value > 0 else Problem(option, "must be more than 0", f"{value:g}")


def copied_prefix_problem(
    what: str, where: str, prefix: str | None, stream: bool
) -> Problem | None:
    if prefix and not stream:
        return Problem(
            "--model-prefix",
            f"cannot be used for {what}: SageMaker does not copy an uncompressed S3 prefix "
            f"(ModelDataSource) for {where}. Add --stream-weights (the container streams the "
            "weights from the prefix itself), pack the model as model.tar.gz and give "
            "--model-data, or use --model-id.",
            sep=" ",
        )
    return None


def s3_problem(option: str, value: str, archive: bool = False) -> Problem | None:
    if not s3_uri.is_s3(value):
        example = "s3://bucket/model.tar.gz" if archive else "s3://bucket/prefix/"
        return Problem(option, f"SageMaker reads and writes S3 only: give {example}", repr(value))
    problem = bucket_problem(value[len(s3_uri.S3) :].partition("/")[0])
    if problem:
        return Problem(option, problem, repr(value))
    if len(value) > _MAX_S3_URI:
        why = f"{len(value)} characters; SageMaker takes S3 URIs of {_MAX_S3_URI} at most"
        return Problem(option, why)
    if archive and not value.endswith(".tar.gz"):
        why = "SageMaker unpacks model data from a .tar.gz archive; for an uncompressed prefix "
        return Problem(option, why + "give --model-prefix", repr(value))
    return None


def role_problem(source: str, value: str) -> Problem | None:
    least, most = _ROLE_LENGTH
    if _ROLE_ARN.fullmatch(value) and least <= len(value) <= most:
        return None
    why = "not an IAM role ARN: give arn:aws:iam::<12-digit account>:role/<name>"
    return Problem(source, why, repr(value))


def execution_role_problem(
    role: str | None, environ: Mapping[str, str], dry: bool, cancel: bool
) -> Problem | None:
    """--role, else $SAGEMAKER_ROLE_ARN: an ARN, needed unless dry or --cancel."""
    source, value = ("--role", role) if role else (ROLE_VARIABLE, environ.get(ROLE_VARIABLE))
    if value:
        return role_problem(source, value)
    return None if dry or cancel else NO_ROLE


def region_problem(value: str) -> Problem | None:
    if _REGION.fullmatch(value):
        return None
    return Problem("--region", "not an AWS region name (us-east-1, eu-west-2, ...)", repr(value))


def env_problem(pairs: Sequence[str]) -> Problem | None:
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not _ENV_KEY.fullmatch(key):
            why = "give KEY=VALUE, KEY made of letters, digits and underscores"
            return Problem("--env", why, repr(pair))
        if len(value) > _MAX_ENV_VALUE:
            why = f"{len(value)} characters, SageMaker takes {_MAX_ENV_VALUE} at most"
            return Problem("--env", why, key)
        if key.upper().startswith(SM_VLLM_PREFIX) and not key.startswith(SM_VLLM_PREFIX):
            why = "the container's variables are case-sensitive, and serve reads only "
            return Problem(
                "--env", f"{why}{SM_VLLM_PREFIX}* in upper case: give {key.upper()}", key
            )
    env = env_from_pairs(pairs)
    problems = environment_problems(env, None) + vllm_number_problems(env)
    if problems:
        return Problem("--env", "the container's serve would refuse it: " + "; ".join(problems))
    return None


def instance_tensor_parallel_problem(
    env: Mapping[str, str], instance_type: str | None
) -> Problem | None:
    gpus = instances.gpu_count(instance_type or "")
    has = f"{instance_type} has {gpus} GPU{'s' if gpus > 1 else ''}"
    return tensor_parallel_problem(
        env, gpus, has, f"at most {gpus}, or an instance type with more GPUs"
    )


def instance_rule(
    value: Callable[[str, instances.Catalog], str | None],
) -> Callable[[str | None, str, list[str] | None], str | None]:
    """An --instance-type rule against the types of transform jobs (sharded, not --local) or
    of endpoints."""

    def checked(instance_type: str | None, command: str, local: list[str] | None) -> str | None:
        if instance_type is None:
            return None
        return value(instance_type, instances.catalog(command in SHARDED and not local))

    return checked


def given_image_problem(image: str | None, instance_type: str | None, command: str) -> str | None:
    if instance_type is None:
        return None
    if image is not None:
        return image_instance_problem(image, instance_type)
    return no_image_problem(instance_type) if command in ("endpoint", "component") else None


def stream_problem(stream: bool, prefix: str | None) -> Problem | None:
    if stream and not prefix:
        return Problem("--stream-weights", "it streams the weights from --model-prefix; give one")
    return None


# The commands whose instances are a transform job's.
SHARDED = ("transform", "batch")

REGION = Check("region", given(region_problem))
NAME = Check("name deploy_command", name_problem)
IMAGE = Check("image", given(image_problem), unless="local")
MODEL_DATA = Check("model_data", given(partial(s3_problem, "--model-data", archive=True)))
MODEL_PREFIX = Check("model_prefix", given(partial(s3_problem, "--model-prefix")))
STREAM = Check("stream_weights model_prefix", stream_problem)
INSTANCE_TYPE = Check("instance_type deploy_command local", instance_rule(instance_type_problem))
UNKNOWN_TYPE = Check(
    "instance_type deploy_command local", instance_rule(instance_type_warning), warns=True
)
ARCHITECTURE = Check("instance_type", given(instance_image_warning), warns=True)
IMAGE_FOR_TYPE = Check("image instance_type deploy_command", given_image_problem, unless="local")
INSTANCE_COUNT = Check("instance_count", given(partial(range_problem, "--instance-count", least=1)))
ENV = Check("env", env_problem)
TENSOR_PARALLEL_SIZE = Check("environment instance_type", instance_tensor_parallel_problem)
ROLE = Check("role environ dry_run cancel", execution_role_problem, unless="local")
TRANSFORM_PREFIX = Check(
    "model_prefix stream_weights",
    partial(copied_prefix_problem, "Batch Transform", "transform jobs"),
    unless="local",
)
# The kit's transform jobs pack records (MultiRecord): the local runner's rule for them.
PAYLOAD = Check("max_payload_mb max_concurrent_transforms", partial(payload_problem, packs=True))

MODEL = (IMAGE, MODEL_DATA, MODEL_PREFIX, STREAM)
INSTANCES = (INSTANCE_TYPE, UNKNOWN_TYPE, ARCHITECTURE, IMAGE_FOR_TYPE)
TRANSFORMS = (TRANSFORM_PREFIX, INSTANCE_COUNT, PAYLOAD)
CONTAINER = (ENV, TENSOR_PARALLEL_SIZE)
