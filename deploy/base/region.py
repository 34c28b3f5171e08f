"""Which AWS region `deploy` works in: `--region`, else AWS_REGION, else AWS_DEFAULT_REGION (the
one boto3 reads, so the choice is handed to it there), else the AWS profile's."""

from collections.abc import Mapping, MutableMapping

from vllm_sagemaker.deploy.base.profile import session

REGION_VARIABLES = ("AWS_REGION", "AWS_DEFAULT_REGION")
BOTO3_VARIABLE = "AWS_DEFAULT_REGION"
REGION_HELP = "give --region, or set AWS_REGION (or AWS_DEFAULT_REGION)"


def chosen_region(given: str | None, env: Mapping[str, str]) -> str | None:
    """`given` (--region), else the first region variable set; None: the profile's, if any."""
    return given or next((env[name] for name in REGION_VARIABLES if env.get(name)), None)


def use_region(given: str | None, env: MutableMapping[str, str]) -> None:
    region = chosen_region(given, env)
    if region:
        env[BOTO3_VARIABLE] = region


def run_region() -> str | None:
    """The region this run works in; None when there is none (the first AWS call says so)."""
    return session().region_name
