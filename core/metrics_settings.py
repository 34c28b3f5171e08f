"""The CloudWatch metrics' settings (`SAGEMAKER_METRICS*`, named in `core.cloudwatch`):
whether the server writes EMF documents, how often, under which namespace and dimensions. `serve`
and `deploy --env` refuse a value CloudWatch would refuse, so a typo is one line at start rather
than metrics that never appear."""

import re
from collections.abc import Mapping
from dataclasses import dataclass

from vllm_sagemaker.core import cloudwatch
from vllm_sagemaker.core.env import ConfigError
from vllm_sagemaker.core.execution_parameters import positive_int

# CloudWatch's PutMetricData rules: a namespace of 1-255 of these characters, not under AWS/;
# a dimension value of 1-1024 ASCII characters, not only spaces.
NAMESPACE_PATTERN = re.compile(r"[A-Za-z0-9._/#: -]{1,255}")
RESERVED_PREFIX = "AWS/"
DIMENSION_VALUE_MAX = 1024


@dataclass(frozen=True)
class MetricsSettings:
    enabled: bool
    interval_s: int
    namespace: str
    endpoint: str
    variant: str

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "MetricsSettings":
        return cls(
            enabled=enabled(env),
            interval_s=positive_int(env, cloudwatch.INTERVAL_VARIABLE)
            or cloudwatch.DEFAULT_INTERVAL_S,
            namespace=namespace(env),
            endpoint=dimension_value(
                env, cloudwatch.ENDPOINT_VARIABLE, cloudwatch.DEFAULT_ENDPOINT
            ),
            variant=dimension_value(env, cloudwatch.VARIANT_VARIABLE, cloudwatch.DEFAULT_VARIANT),
        )

    @property
    def dimensions(self) -> dict[str, str]:
        return {
            cloudwatch.ENDPOINT_DIMENSION: self.endpoint,
            cloudwatch.VARIANT_DIMENSION: self.variant,
        }


def enabled(env: Mapping[str, str]) -> bool:
    """SAGEMAKER_METRICS: `cloudwatch` (any case) writes the documents; unset or empty, none."""
    raw = env.get(cloudwatch.METRICS_VARIABLE, "").strip()
    if not raw:
        return False
    if raw.lower() == cloudwatch.METRICS_ON:
        return True
    raise ConfigError(
        f"{cloudwatch.METRICS_VARIABLE} must be {cloudwatch.METRICS_ON!r} or unset, got {raw!r}"
    )


def namespace(env: Mapping[str, str]) -> str:
    name = cloudwatch.NAMESPACE_VARIABLE
    raw = env.get(name, "").strip()
    if not raw:
        return cloudwatch.DEFAULT_NAMESPACE
    if not NAMESPACE_PATTERN.fullmatch(raw) or raw.startswith(RESERVED_PREFIX):
        raise ConfigError(
            f"{name} must be a CloudWatch namespace (1-255 letters, digits and . - _ / # : or "
            f"spaces, not starting with {RESERVED_PREFIX}), got {raw!r}"
        )
    return raw


def dimension_value(env: Mapping[str, str], name: str, default: str) -> str:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if not raw.isascii() or len(raw) > DIMENSION_VALUE_MAX:
        raise ConfigError(
            f"{name} must be 1-{DIMENSION_VALUE_MAX} ASCII characters (a CloudWatch dimension "
            f"value), got {raw[:80]!r}"
        )
    return raw
