"""What `deploy` checks of its options before it calls AWS, in dry runs and real runs alike.

Each rule is a pure function from an option's value to the line that says what is wrong with it
(the option, the value and the rule), or None; `check` applies the rules a command's options call
for. A problem is a usage error: one line on stderr and exit status 2 (argparse's), before any AWS
call. An instance family the kit does not know is only a warning: SageMaker adds families.
"""

import json
import os
import re
from argparse import Namespace
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from vllm_sagemaker.deploy.image import build
from vllm_sagemaker.deploy.kit import token
from vllm_sagemaker.deploy.kit.image_checks import (
    context_problem,
    image_instance_problem,
    image_problem,
    no_image_problem,
    repository_problem,
    tag_problem,
    target_tag_problem,
)
from vllm_sagemaker.deploy.kit.instance_checks import (
    instance_image_warning,
    instance_type_problem,
    instance_type_warning,
)
from vllm_sagemaker.deploy.kit.options import has_model
from vllm_sagemaker.deploy.kit.plans import instances, shards
from vllm_sagemaker.deploy.kit.plans.model import ROLE_VARIABLE
from vllm_sagemaker.deploy.kit.plans.names import (
    MAX_NAME,
    NAME_PATTERN,
    job_suffix,
    version,
    versioned,
)
from vllm_sagemaker.deploy.kit.scaling_options import scaling_problems
from vllm_sagemaker.deploy.kit.serverless_options import serverless_problems
from vllm_sagemaker.handler.core import s3_uri
from vllm_sagemaker.handler.core.environment import environment_problems

# The exit status of a refused option, as argparse's for the options it refuses itself.
NAME_CHARACTERS = "letters, digits and hyphens, starting and ending with a letter or digit"
# CreateTransformJob: MaxPayloadInMB from 0 (no limit: chunked encoding) to 100, and with
# MaxConcurrentTransforms, their product at most 100 MB as well.
MAX_PAYLOAD_MB = 100
# CreateModel's ExecutionRoleArn (its pattern and length).
_ROLE_ARN = re.compile(r"arn:aws[a-z-]*:iam::\d{12}:role/?[a-zA-Z_0-9+=,.@\-_/]+")
_ROLE_LENGTH = (20, 2048)
# S3's rules for bucket names (general purpose buckets).
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_BUCKET_RULE = (
    "3-63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or "
    "digit, not an IP address"
)
# SageMaker's S3 URIs are at most 1024 characters.
_MAX_S3_URI = 1024
# A container's Environment: keys like shell variables, values up to 1024 characters.
_ENV_KEY = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_MAX_ENV_VALUE = 1024
_REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-\d+")
# What a run without a role is told (a dry run shows a placeholder instead).
NO_ROLE = (
    f"--role: not given, and {ROLE_VARIABLE} is not set: give --role ARN (the execution role "
    f"SageMaker runs the model as) or set {ROLE_VARIABLE}"
)


def name_problem(name: str, derived: Sequence[tuple[str, str]] = ()) -> str | None:
    """Why `--name` cannot name SageMaker resources: as it is, or in a name the kit derives
    from it, given as (what it is, the derived name)."""
    if len(name) > MAX_NAME:
        return f"--name {name!r} ({len(name)} characters): SageMaker names are {MAX_NAME} at most"
    if not NAME_PATTERN.fullmatch(name):
        return (
            f"--name {name!r}: SageMaker names are 1-{MAX_NAME} {NAME_CHARACTERS} (no spaces, "
            "underscores, dots or slashes)"
        )
    for what, example in derived:
        if len(example) > MAX_NAME:
            room = MAX_NAME - (len(example) - len(name))
            return (
                f"--name {name!r} ({len(name)} characters): {what} must fit SageMaker's "
                f"{MAX_NAME} characters too, so give a name of at most {room}"
            )
    return None


def derived_names(command: str, name: str) -> list[tuple[str, str]]:
    """The names `command` derives from `--name`, as (what they are, the longest one)."""
    if command == "endpoint":
        return [("the versions an update makes, NAME-<UTC time>,", versioned(name, version(0)))]
    if command == "batch":
        return [("its transform jobs, NAME-<shard>-<attempt>,", name + job_suffix(0, 1))]
    return []


def longest_name(command: str) -> int:
    """The longest `--name` `command` takes, its derived names included."""
    extra = (len(derived) - 1 for _, derived in derived_names(command, "x"))
    return MAX_NAME - max(extra, default=0)


def range_problem(option: str, value: int, least: int, most: int | None = None) -> str | None:
    if value >= least and (most is None or value <= most):
        return None
    bounds = f"at least {least}" if most is None else f"from {least} to {most}"
    return f"{option} {value}: must be {bounds}"


def positive_problem(option: str, value: float) -> str | None:
    return None if value > 0 else f"{option} {value:g}: must be more than 0"


def copied_prefix_problem(
    model_prefix: str | None, stream: bool, what: str, where: str
) -> str | None:
    """A model prefix SageMaker would have to copy (ModelDataSource) for `what`, which it does
    not do for `where` (transform jobs, serverless endpoints); the instance types a transform job
    takes: `instance_checks`."""
    if model_prefix and not stream:
        return (
            f"--model-prefix cannot be used for {what}: SageMaker does not copy an uncompressed "
            f"S3 prefix (ModelDataSource) for {where}. Add --stream-weights (the container "
            "streams the weights from the prefix itself), pack the model as model.tar.gz and "
            "give --model-data, or use --model-id."
        )
    return None


def payload_problem(max_payload_mb: int, max_concurrent: int) -> str | None:
    if max_payload_mb * max_concurrent <= MAX_PAYLOAD_MB:
        return None
    return (
        f"--max-payload-mb {max_payload_mb} times --max-concurrent-transforms {max_concurrent} = "
        f"{max_payload_mb * max_concurrent} MB: SageMaker allows at most {MAX_PAYLOAD_MB} MB "
        "in flight per instance"
    )


def bucket_problem(bucket: str) -> str | None:
    if (
        _BUCKET.fullmatch(bucket)
        and not any(pair in bucket for pair in ("..", ".-", "-."))
        and not re.fullmatch(r"[0-9.]+", bucket)
    ):
        return None
    return f"{bucket!r} is not an S3 bucket name ({_BUCKET_RULE})"


def s3_problem(option: str, value: str, archive: bool = False) -> str | None:
    """Why `value` is not an S3 URI SageMaker can use (with `archive`, of a .tar.gz)."""
    if not s3_uri.is_s3(value):
        example = "s3://bucket/model.tar.gz" if archive else "s3://bucket/prefix/"
        return f"{option} {value!r}: SageMaker reads and writes S3 only: give {example}"
    bucket = value[len(s3_uri.S3) :].partition("/")[0]
    problem = bucket_problem(bucket)
    if problem:
        return f"{option} {value!r}: {problem}"
    if len(value) > _MAX_S3_URI:
        return (
            f"{option}: {len(value)} characters; SageMaker takes S3 URIs of {_MAX_S3_URI} at most"
        )
    if archive and not value.endswith(".tar.gz"):
        return (
            f"{option} {value!r}: SageMaker unpacks model data from a .tar.gz archive; for an "
            "uncompressed prefix give --model-prefix"
        )
    return None


def role_problem(source: str, value: str) -> str | None:
    least, most = _ROLE_LENGTH
    if _ROLE_ARN.fullmatch(value) and least <= len(value) <= most:
        return None
    return (
        f"{source} {value!r}: not an IAM role ARN: give arn:aws:iam::<12-digit account>:role/<name>"
    )


def region_problem(value: str) -> str | None:
    if _REGION.fullmatch(value):
        return None
    return f"--region {value!r}: not an AWS region name (us-east-1, eu-west-2, ...)"


def shards_problem(input_prefix: str, output: str, job: str) -> str | None:
    """`deploy transform`'s shards (when it cuts the input) inside its own --input."""
    target = shards.shard_prefix(output, job)
    if not shards.overlap(input_prefix, target):
        return None
    return (
        f"--output {output}: the input's shards would go to {target}, which overlaps --input "
        f"{input_prefix}; give an --output outside the input"
    )


def fleet_problem(args: Namespace) -> str | None:
    """What `deploy batch` needs beside --cancel: its files, and on SageMaker (no --local) an
    image, an instance type and a model, and no --api-key."""
    if not args.input_file or not args.output_file:
        return "--input-file and --output-file: deploy batch needs both (or --cancel)"
    if args.local:
        return None
    if args.api_key:
        return (
            "--api-key is for --local containers: SageMaker's transform jobs call the container "
            "without one (leave SM_VLLM_API_KEY unset there)"
        )
    if not (args.image and args.instance_type and has_model(args)):
        return (
            "--image, --instance-type and a model (--model-id, --model-data or --model-prefix): "
            "deploy batch on SageMaker needs them; or give --local URL..."
        )
    return None


def env_from_pairs(pairs: Sequence[str]) -> dict[str, str]:
    """`--env KEY=VALUE` options as the container's variables (a later KEY wins)."""
    return {key: value for key, _, value in (pair.partition("=") for pair in pairs)}


def env_problem(pairs: Sequence[str]) -> str | None:
    """Why the `--env` settings are refused: a pair SageMaker would refuse, or a value `serve`
    refuses (its own rules: `handler.core.environment`)."""
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not _ENV_KEY.fullmatch(key):
            return f"--env {pair!r}: give KEY=VALUE, KEY made of letters, digits and underscores"
        if len(value) > _MAX_ENV_VALUE:
            return f"--env {key}: {len(value)} characters, SageMaker takes {_MAX_ENV_VALUE} at most"
    problems = environment_problems(env_from_pairs(pairs), None)
    if problems:
        return "--env: the container's serve would refuse it: " + "; ".join(problems)
    return None


def json_problem(option: str, body: bytes) -> str | None:
    try:
        json.loads(body)
    except json.JSONDecodeError as error:
        return f"{option}: not JSON ({error}): give a JSON document, or @file holding one"
    except UnicodeDecodeError:
        return f"{option}: not JSON (not UTF-8 text): give a JSON document, or @file holding one"
    return None


@dataclass
class Findings:
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _option(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def expires_problem(value: str) -> str | None:
    if token.duration_s(value) is None:
        return f"--expires {value!r}: give 1 s to 12 h as 12h, 90m, 600s or 600"
    return None


def check(args: Namespace, environ: Mapping[str, str]) -> Findings:
    """Every problem (and warning) of a `deploy` command's options, names first; `environ`
    gives the role when --role is not given."""
    given = vars(args)
    command = args.deploy_command
    on_sagemaker = not given.get("local")
    found: list[str | None] = []
    if args.region is not None:
        found.append(region_problem(args.region))
    if "name" in given:
        found.append(name_problem(args.name, derived_names(command, args.name)))
    if given.get("image") is not None and on_sagemaker:
        found.append(image_problem(args.image))
    if command == "image":
        tag = args.tag or build.default_tag(args.target)
        found += [
            repository_problem(args.repository),
            tag_problem(tag),
            target_tag_problem(args.target, tag),
            context_problem(args.context, os.path.isfile(os.path.join(args.context, "Dockerfile"))),
        ]
    for dest in ("model_data", "model_prefix", "async_output"):
        if given.get(dest) is not None:
            found.append(s3_problem(_option(dest), given[dest], archive=dest == "model_data"))
    if given.get("stream_weights") and not given.get("model_prefix"):
        found.append("--stream-weights: it streams the weights from --model-prefix; give one")
    if command == "transform":
        found += [s3_problem("--input", args.input), s3_problem("--output", args.output)]
        if not any(found):
            found.append(shards_problem(args.input, args.output, args.name))
    if command == "batch" and not args.cancel:
        found.append(fleet_problem(args))
    for dest in ("input_file", "output_file", "error_file"):
        if s3_uri.is_s3(given.get(dest) or ""):
            found.append(s3_problem(_option(dest), given[dest]))
    if given.get("work_prefix") is not None and on_sagemaker:
        found.append(s3_problem("--work-prefix", args.work_prefix))
    if command == "endpoint":
        # Before the instance type's checks: with --serverless, it is refused whatever it is.
        found += serverless_problems(args)
        if args.serverless is not None:
            found.append(
                copied_prefix_problem(
                    args.model_prefix,
                    args.stream_weights,
                    "Serverless Inference",
                    "serverless endpoints",
                )
            )
    warnings: list[str | None] = []
    if given.get("instance_type") is not None:
        # Transform jobs' types on SageMaker; what any SageMaker API takes otherwise.
        catalog = instances.catalog(command in ("transform", "batch") and on_sagemaker)
        found.append(instance_type_problem(args.instance_type, catalog))
        warnings += [
            instance_type_warning(args.instance_type, catalog),
            instance_image_warning(args.instance_type),
        ]
        if given.get("image") is not None and on_sagemaker:
            found.append(image_instance_problem(args.image, args.instance_type))
        elif command == "endpoint":
            found.append(no_image_problem(args.instance_type))
    if command in ("transform", "batch") and on_sagemaker and given.get("instance_type"):
        found.append(
            copied_prefix_problem(
                args.model_prefix, args.stream_weights, "Batch Transform", "transform jobs"
            )
        )
    if given.get("instance_count") is not None:
        found.append(range_problem("--instance-count", args.instance_count, 1))
    if "max_payload_mb" in given:
        found += [
            range_problem("--max-payload-mb", args.max_payload_mb, 0, MAX_PAYLOAD_MB),
            range_problem("--max-concurrent-transforms", args.max_concurrent_transforms, 0),
            payload_problem(args.max_payload_mb, args.max_concurrent_transforms),
        ]
    if "shard_lines" in given:
        found.append(range_problem("--shard-lines", args.shard_lines, 1))
        found.append(positive_problem("--poll-seconds", args.poll_seconds))
    if given.get("instance_price") is not None:
        found.append(positive_problem("--instance-price", args.instance_price))
    if given.get("env"):
        found.append(env_problem(args.env))
    if command == "token":
        found.append(expires_problem(args.expires))
    if command == "endpoint":
        found += scaling_problems(args, env_from_pairs(args.env))
        if args.scale_target is not None:
            found.append(positive_problem("--target", args.scale_target))
    if given.get("openai") and given.get("use_async"):
        found.append("--openai: the OpenAI-compatible path is real-time; leave out --async")
    if command in ("endpoint", "transform", "batch") and on_sagemaker:
        role = ("--role", args.role) if args.role else (ROLE_VARIABLE, environ.get(ROLE_VARIABLE))
        if role[1]:
            found.append(role_problem(*role))
        elif not args.dry_run and not given.get("cancel"):
            found.append(NO_ROLE)
    return Findings(
        [problem for problem in found if problem], [warning for warning in warnings if warning]
    )
