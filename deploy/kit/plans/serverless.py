"""`deploy endpoint --serverless`: Serverless Inference's facts and rules. A serverless variant
carries ServerlessConfig instead of instances; it runs on CPUs, takes no start-up timeouts (AWS's
cold start is a fixed 3 minutes) and none of the options in `CONFLICTS`."""

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vllm_sagemaker.core.config import SERVERLESS_MEMORY_SIZES_MB
from vllm_sagemaker.deploy.base.errors import Problem

# ProductionVariantServerlessConfig: MemorySizeInMB in 1 GB steps (SERVERLESS_MEMORY_SIZES_MB),
# MaxConcurrency and ProvisionedConcurrency from 1 to 200 (ProvisionedConcurrency at most
# MaxConcurrency).
CONCURRENCY = (1, 200)
# The SageMaker Python SDK's ServerlessInferenceConfig default.
DEFAULT_MAX_CONCURRENCY = 5
# What the CLI's metavar and the lines call the option's value.
FORM = "MEMORY_MB[:MAX_CONCURRENCY]"
_VALUE = re.compile(r"(\d+)(?::(\d+))?")

# The options of `deploy endpoint` a serverless endpoint cannot take, as (argparse dest, option,
# why): it has no instances, SageMaker scales it itself, and AWS does not support async inference
# on it ("Serverless Inference ... feature exclusions").
_NO_INSTANCES = (
    "a serverless endpoint has no instances: SageMaker runs copies of the container as "
    "invocations come, up to MAX_CONCURRENCY at once, each with MEMORY_MB of memory"
)
_SCALES_ITSELF = (
    "SageMaker scales a serverless endpoint itself, from none to MAX_CONCURRENCY copies: give "
    "--serverless MEMORY_MB:MAX_CONCURRENCY instead (Application Auto Scaling is for instances)"
)
CONFLICTS = (
    ("instance_type", "--instance-type", _NO_INSTANCES),
    ("instance_count", "--instance-count", _NO_INSTANCES),
    ("autoscale", "--autoscale", _SCALES_ITSELF),
    ("scale_on", "--scale-on", _SCALES_ITSELF),
    ("target_value", "--target", _SCALES_ITSELF),
    (
        "async_output",
        "--async-output",
        "AWS does not support async inference on Serverless Inference: deploy the async endpoint "
        "on instances (--instance-type), or leave out --async-output",
    ),
)


@dataclass(frozen=True)
class Serverless:
    memory_mb: int
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    provisioned: int | None = None
    instance_type: None = field(default=None, init=False)  # none: SageMaker's own capacity

    def config(self) -> dict[str, int]:
        config = {"MemorySizeInMB": self.memory_mb, "MaxConcurrency": self.max_concurrency}
        if self.provisioned is not None:
            config["ProvisionedConcurrency"] = self.provisioned
        return config

    def __str__(self) -> str:
        warm = f", {self.provisioned} kept warm" if self.provisioned is not None else ""
        return f"{self.memory_mb} MB, at most {self.max_concurrency} invocations at once{warm}"


def parsed(value: str, provisioned: int | None = None) -> Serverless | None:
    """`--serverless MEMORY_MB[:MAX_CONCURRENCY]`; None when not of that form."""
    match = _VALUE.fullmatch(value.strip())
    if match is None:
        return None
    most = int(match[2]) if match[2] is not None else DEFAULT_MAX_CONCURRENCY
    return Serverless(int(match[1]), most, provisioned)


def serverless_problem(value: str) -> Problem | None:
    found = parsed(value)
    if found is None:
        return Problem("--serverless", f"give {FORM}, as 2048 or 2048:10", repr(value))
    if found.memory_mb not in SERVERLESS_MEMORY_SIZES_MB:
        *sizes, last = SERVERLESS_MEMORY_SIZES_MB
        why = f"Serverless Inference's memory sizes are {', '.join(map(str, sizes))} and {last} MB"
        return Problem("--serverless", why, value)
    least, most = CONCURRENCY
    if not least <= found.max_concurrency <= most:
        return Problem("--serverless", f"MAX_CONCURRENCY must be from {least} to {most}", value)
    return None


def provisioned_problem(value: str | None, provisioned: int | None) -> Problem | None:
    """A --provisioned-concurrency without --serverless, out of range or above MAX_CONCURRENCY."""
    option = "--provisioned-concurrency"
    if provisioned is None:
        return None
    if value is None:
        why = f"keeps copies of a serverless endpoint warm: give --serverless {FORM} too"
        return Problem(option, why, sep=" ")
    least, most = CONCURRENCY
    if not least <= provisioned <= most:
        return Problem(option, f"must be from {least} to {most}", provisioned)
    found = parsed(value)
    if found is None or provisioned <= found.max_concurrency:
        return None
    why = (
        f"is more than the endpoint's MAX_CONCURRENCY {found.max_concurrency} (--serverless "
        f"{value}): give at most {found.max_concurrency}, or --serverless "
        f"{found.memory_mb}:{provisioned}"
    )
    return Problem(option, why, provisioned, sep=" ")


def conflict_problem(*given: object) -> Problem | None:
    """The first option of `CONFLICTS` given (`given`: their values) beside --serverless."""
    for (_, option, why), value in zip(CONFLICTS, given, strict=True):
        if value is not None:
            return Problem(f"--serverless with {option}", why)
    return None


def update_problem(name: str, config: Mapping[str, Any]) -> str | None:
    """AWS refuses to update an endpoint on instances (`config`, DescribeEndpointConfig's answer)
    to serverless; the other way it allows."""
    if any("ServerlessConfig" in variant for variant in config.get("ProductionVariants", [])):
        return None
    return (
        f"endpoint {name} runs on instances, and AWS refuses to update an instance-based "
        f"endpoint to serverless: delete it first (`vllm-sagemaker deploy delete --name {name}`) "
        "and deploy again, or give the serverless endpoint another --name"
    )
