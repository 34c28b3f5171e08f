"""Credentials AWS cannot be asked with, as one line: what is wrong, and what to run.

No credentials, expired ones (keys, an SSO session, what a `credential_process` prints), keys AWS
refuses, a process that fails, a profile the AWS config does not have: each is told with where
boto3 took the credentials from (keys in the environment, or a profile, followed through a
role's `source_profile`) and what renews them there: `aws sso login --profile NAME` for an SSO
profile, `aws configure --profile NAME` for keys, the profile's own credential_process for one
that has it, `aws configure` where there is nothing. `line` is the pure rule; `explain` reads
the environment and the AWS config only for an error that is about credentials.
"""

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import botocore.exceptions

from vllm_sagemaker.deploy.base import profile
from vllm_sagemaker.deploy.base.error_answers import error_code, one_line

# AWS's codes for credentials it refuses: expired ones, and keys it does not know or that sign
# wrong.
EXPIRED_CODES = frozenset({"ExpiredToken", "ExpiredTokenException", "RequestExpired"})
INVALID_CODES = frozenset(
    {
        "InvalidAccessKeyId",
        "InvalidClientTokenId",
        "InvalidToken",
        "SignatureDoesNotMatch",
        "UnrecognizedClientException",
    }
)
# botocore's error for a refresh (a credential_process, an assumed role) that brought expired
# credentials: a RuntimeError, told by its text.
_STILL_EXPIRED = "refreshed credentials are still expired"
# Where boto3 takes keys from before any profile (unless --profile is given).
KEY_VARIABLE = "AWS_ACCESS_KEY_ID"
# The variables botocore reads a profile's name from, first found first.
_PROFILE_VARIABLES = (profile.OLD_PROFILE_VARIABLE, profile.PROFILE_VARIABLE)
# How many `source_profile` steps are followed to the profile that holds the credentials.
_MAX_HOPS = 5


@dataclass(frozen=True)
class Source:
    """Where boto3 takes credentials from: keys in the environment (`env_keys`), else profile
    `name`, looked up in `profiles` (the AWS config's, each a mapping of its settings)."""

    name: str = "default"
    profiles: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    env_keys: bool = False


def kind(error: BaseException) -> str | None:
    """What is wrong with the credentials behind `error`: missing, partial, expired, sso,
    failed (their provider failed), invalid, profile (none such); None: not about credentials."""
    if isinstance(error, botocore.exceptions.NoCredentialsError):
        return "missing"
    if isinstance(error, botocore.exceptions.PartialCredentialsError):
        return "partial"
    if isinstance(error, RuntimeError) and _STILL_EXPIRED in str(error):
        return "expired"
    if isinstance(error, (botocore.exceptions.SSOError, botocore.exceptions.TokenRetrievalError)):
        return "sso"
    if isinstance(error, botocore.exceptions.CredentialRetrievalError):
        return "failed"
    if isinstance(error, botocore.exceptions.ProfileNotFound):
        return "profile"
    if isinstance(error, botocore.exceptions.ClientError):
        code = error_code(error.response)
        if code in EXPIRED_CODES:
            return "expired"
        if code in INVALID_CODES:
            return "invalid"
    return None


def cannot_ask(error: BaseException) -> bool:
    """Whether `error` means AWS cannot be asked with these credentials (what a dry run may
    plan around); a profile that does not exist is a mistake to fix first."""
    return kind(error) not in (None, "profile")


def _flag(name: str) -> str:
    return "" if name == "default" else f" --profile {name}"


def _holder(source: Source) -> tuple[str, Mapping[str, str]] | None:
    """The profile that holds the credentials, following `source_profile` from a role; None
    when there is no such profile."""
    name = source.name
    for _ in range(_MAX_HOPS):
        settings = source.profiles.get(name)
        if settings is None:
            return None
        if "role_arn" not in settings or "source_profile" not in settings:
            return name, settings
        name = settings["source_profile"]
    return name, source.profiles.get(name, {})


def remedy(source: Source) -> str:
    """What to run so that `source` gives working credentials."""
    if source.env_keys:
        return (
            "set working AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), "
            "or unset them to use a profile"
        )
    held = _holder(source)
    if held is None:
        return (
            "run `aws configure` (keys) or `aws configure sso`, or give --profile NAME "
            "(for an SSO profile, `aws sso login --profile NAME` first)"
        )
    name, settings = held
    owner = "its" if name == source.name else f"profile {name}'s"
    if "sso_session" in settings or "sso_start_url" in settings:
        return f"run `aws sso login{_flag(name)}`"
    if "credential_process" in settings:
        return (
            f"renew what {owner} credential_process (`{settings['credential_process']}`) "
            "prints (often a login to its tool)"
        )
    if "credential_source" in settings:
        return (
            f"renew the credentials of {owner} credential_source ({settings['credential_source']})"
        )
    if "web_identity_token_file" in settings:
        return f"renew the token in {settings['web_identity_token_file']}"
    if "aws_access_key_id" in settings:
        return f"run `aws configure{_flag(name)}` with working keys"
    return f"run `aws configure{_flag(name)}` (keys) or `aws configure sso{_flag(name)}`"


def _whose(source: Source) -> str:
    if source.env_keys:
        return f"the AWS credentials in {KEY_VARIABLE}"
    if source.name in source.profiles:
        return f"the AWS credentials of profile {source.name}"
    return "the AWS credentials"


def line(error: BaseException, source: Source) -> str | None:
    """The line for a credentials problem `error`, its credentials taken from `source`; None
    for any other error (and for a profile that does not exist, which `explain` tells)."""
    what = kind(error)
    if what in (None, "profile"):
        return None
    fix = remedy(source)
    if what == "missing":
        place = f" in profile {source.name}" if source.name in source.profiles else ""
        return f"no AWS credentials found{place}: {fix}"
    if what == "partial":
        return f"incomplete AWS credentials ({error}): {fix}"
    if what == "sso":
        return f"the SSO session of profile {source.name} has expired or was never started: {fix}"
    if what == "failed":
        return f"cannot get AWS credentials ({one_line(str(error))}): {fix}"
    problem = "have expired" if what == "expired" else "are not valid"
    if isinstance(error, botocore.exceptions.ClientError):  # AWS's answer: its code says which
        problem = f"{problem} ({error_code(error.response)})"
    return f"{_whose(source)} {problem}: {fix}"


def source(env: Mapping[str, str] = os.environ) -> Source:
    """Where boto3 takes this run's credentials from: the environment's keys (unless
    --profile was given), else the profile, with every profile of the AWS config."""
    import botocore.session

    given = profile.given_profile()
    config = botocore.session.Session(profile=given)
    try:
        profiles = config.full_config.get("profiles", {})
    except botocore.exceptions.BotoCoreError:  # a config file that does not parse
        profiles = {}
    name = given or config.get_config_variable("profile") or "default"
    return Source(name, profiles, given is None and bool(env.get(KEY_VARIABLE)))


def explain(error: BaseException) -> str | None:
    """The line for `error` when it is about credentials (or a profile); None otherwise."""
    if kind(error) is None:
        return None
    if isinstance(error, botocore.exceptions.ProfileNotFound):
        name = str(error.kwargs.get("profile", ""))
        named = (var for var in _PROFILE_VARIABLES if os.environ.get(var) == name)
        where = next(named, "the AWS profile")
        return profile.unknown_profile(f"{where} {name!r}", name, *profile.config_profiles())
    return line(error, source())
