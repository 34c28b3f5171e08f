"""Which AWS region `deploy` works in: `--region`, else AWS_REGION, else AWS_DEFAULT_REGION, else
the AWS profile's. boto3 reads only AWS_DEFAULT_REGION, so the choice is made here, once, and
handed to boto3 in that variable: every client the command makes works in that region.
"""

from collections.abc import Mapping, MutableMapping

# The variables a region is read from, first found first.
REGION_VARIABLES = ("AWS_REGION", "AWS_DEFAULT_REGION")
# The one boto3 reads.
BOTO3_VARIABLE = "AWS_DEFAULT_REGION"
# What to do when no region is found.
REGION_HELP = "give --region, or set AWS_REGION (or AWS_DEFAULT_REGION)"


def chosen_region(given: str | None, env: Mapping[str, str]) -> str | None:
    """`given` (--region), else the first region variable set; None: the profile's, if any."""
    return given or next((env[name] for name in REGION_VARIABLES if env.get(name)), None)


def use_region(given: str | None, env: MutableMapping[str, str]) -> None:
    """Make boto3 (through `env`, the process's environment) use the chosen region."""
    region = chosen_region(given, env)
    if region:
        env[BOTO3_VARIABLE] = region


def run_region() -> str | None:
    """The region this run works in: the chosen one (handed to boto3 by `use_region`), else the
    AWS profile's; None when there is none (the first AWS call says so)."""
    import boto3  # here: the parsers load this module, and `--help` loads no boto3

    return boto3.session.Session().region_name
