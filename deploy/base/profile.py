"""Which AWS profile a client command works with: `--profile` (as the AWS CLI's, even where
AWS_ACCESS_KEY_ID is set), else AWS_PROFILE, else boto3's chain; applied once, before the command
runs. No boto3 loads unless a profile is given: `--help` builds every parser with this module."""

import argparse
import difflib
from collections.abc import Collection, Mapping, MutableMapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import boto3.session

# The variable boto3 (and the AWS CLI) read a profile from; botocore also reads the older one.
PROFILE_VARIABLE = "AWS_PROFILE"
OLD_PROFILE_VARIABLE = "AWS_DEFAULT_PROFILE"
# How many of the config's profiles a line lists.
_LISTED = 10

_given: str | None = None  # the --profile of this run, once applied


def add_profile_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--profile",
        metavar="NAME",
        help=f"the AWS profile whose credentials (and region) to use, as the AWS CLI's "
        f"--profile (default: ${PROFILE_VARIABLE}, else boto3's usual chain)",
    )


def use_profile(given: str | None, env: MutableMapping[str, str]) -> str | None:
    """Make boto3 (and through `env`, later processes) use --profile `given`; the line that
    refuses a profile the AWS config does not have."""
    global _given
    if not given:
        return None
    import boto3
    import botocore.exceptions

    try:
        boto3.setup_default_session(profile_name=given)
    except botocore.exceptions.ProfileNotFound:
        return unknown_profile(f"--profile {given!r}", given, *aws_config()[1:])
    env[PROFILE_VARIABLE] = given
    env.pop(OLD_PROFILE_VARIABLE, None)  # botocore would read it before AWS_PROFILE
    _given = given
    return None


def given_profile() -> str | None:
    return _given


def session() -> "boto3.session.Session":
    """boto3's default session, every client of the command's (with the --profile given)."""
    import boto3

    if boto3.DEFAULT_SESSION is None:
        boto3.setup_default_session()
    assert boto3.DEFAULT_SESSION is not None
    return boto3.DEFAULT_SESSION


def aws_config() -> tuple[str, Mapping[str, Mapping[str, str]], str]:
    """The profile this run uses, the AWS config's profiles (none when a file does not parse)
    and the files they are read from."""
    import botocore.exceptions
    import botocore.session

    config = botocore.session.Session()
    paths = (str(config.get_config_variable(name)) for name in ("config_file", "credentials_file"))
    files = " or ".join(dict.fromkeys(paths))
    try:
        profiles = config.full_config.get("profiles", {})
    except botocore.exceptions.BotoCoreError:
        profiles = {}
    return _given or config.get_config_variable("profile") or "default", profiles, files


def unknown_profile(where: str, name: str, known: Collection[str], files: str) -> str:
    """The line for a profile the AWS config does not have, `where` naming it as it was given."""
    near = difflib.get_close_matches(name, known, n=1)
    guess = f" ({near[0]}?)" if near else ""
    if not known:
        return (
            f"{where}: no such AWS profile in {files}, which hold none: "
            f"`aws configure --profile {name}` (or `aws configure sso`) makes one"
        )
    listed = sorted(known)
    more = ", ..." if len(listed) > _LISTED else ""
    return (
        f"{where}: no such AWS profile in {files}{guess}; they hold "
        f"{', '.join(listed[:_LISTED])}{more}"
    )
