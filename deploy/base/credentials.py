"""Credentials AWS cannot be asked with or refuses, as one line: what is wrong, where boto3 took
them from (the environment's keys, or a profile through a role's `source_profile`), what renews
them. `line` is the pure rule; `credentials_line` reads the environment and the AWS config for
it."""

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import botocore.exceptions

from vllm_sagemaker.deploy.base import profile
from vllm_sagemaker.deploy.base.error_answers import (
    AwsError,
    error_code,
    from_aws,
    message,
    one_line,
)

# What is wrong with the credentials, by AWS's code for them, then by botocore's error.
_CODE_KINDS = {
    **dict.fromkeys(("ExpiredToken", "ExpiredTokenException", "RequestExpired"), "expired"),
    **dict.fromkeys(("InvalidAccessKeyId", "InvalidClientTokenId", "InvalidToken"), "invalid"),
    **dict.fromkeys(("SignatureDoesNotMatch", "UnrecognizedClientException"), "invalid"),
}
_ERROR_KINDS: tuple[tuple[type[Exception] | tuple[type[Exception], ...], str], ...] = (
    (botocore.exceptions.NoCredentialsError, "missing"),
    (botocore.exceptions.PartialCredentialsError, "partial"),
    ((botocore.exceptions.SSOError, botocore.exceptions.TokenRetrievalError), "sso"),
    (botocore.exceptions.CredentialRetrievalError, "failed"),
    (botocore.exceptions.ProfileNotFound, "profile"),
)
DENIED_CODES = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"})
# botocore's RuntimeError for a refresh (a credential_process, a role) that brought expired ones.
_STILL_EXPIRED = "refreshed credentials are still expired"
# Where boto3 takes keys from before any profile (unless --profile is given).
KEY_VARIABLE = "AWS_ACCESS_KEY_ID"


@dataclass(frozen=True)
class Source:
    """Where boto3 takes credentials from: the environment's keys, else profile `name` of
    `profiles` (the AWS config's)."""

    name: str = "default"
    profiles: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    env_keys: bool = False


def kind(error: BaseException) -> str | None:
    """What is wrong with the credentials behind `error` (a key of `_LINES`, or profile: none
    such); None: not about credentials (or access denied: `denied`)."""
    if isinstance(error, RuntimeError) and _STILL_EXPIRED in str(error):
        return "expired"
    if isinstance(error, botocore.exceptions.ClientError):
        return _CODE_KINDS.get(error_code(error.response))
    return next((found for kind, found in _ERROR_KINDS if isinstance(error, kind)), None)


def denied(error: BaseException) -> bool:
    if not isinstance(error, botocore.exceptions.ClientError):
        return False
    code = error_code(error.response)
    return code in DENIED_CODES or (code == "403" and from_aws(error.response))  # S3's HEAD


def cannot_ask(error: BaseException) -> bool:
    """Whether AWS cannot be asked with these credentials (a dry run may plan around it); a
    profile that does not exist is a mistake to fix first."""
    return kind(error) not in (None, "profile")


def _holder(source: Source) -> tuple[str, Mapping[str, str]] | None:
    """The profile that holds the credentials, following `source_profile` from a role."""
    name = source.name
    for _ in range(5):  # `source_profile` steps followed
        settings = source.profiles.get(name)
        if settings is None:
            return None
        if "role_arn" not in settings or "source_profile" not in settings:
            return name, settings
        name = settings["source_profile"]
    return name, source.profiles.get(name, {})


# What renews a profile's credentials, by the first of its settings it has.
_RENEW = (
    ("sso_session", "run `aws sso login{flag}`"),
    ("sso_start_url", "run `aws sso login{flag}`"),
    (
        "credential_process",
        "renew what {owner} credential_process (`{value}`) prints (often a login to its tool)",
    ),
    ("credential_source", "renew the credentials of {owner} credential_source ({value})"),
    ("web_identity_token_file", "renew the token in {value}"),
    ("aws_access_key_id", "run `aws configure{flag}` with working keys"),
    ("", "run `aws configure{flag}` (keys) or `aws configure sso{flag}`"),
)


def remedy(source: Source) -> str:
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
    key, text = next((key, text) for key, text in _RENEW if key in settings or not key)
    return text.format(
        flag="" if name == "default" else f" --profile {name}",
        owner="its" if name == source.name else f"profile {name}'s",
        value=settings.get(key),
    )


def _whose(source: Source) -> str:
    if source.env_keys:
        return f"the AWS credentials in {KEY_VARIABLE}"
    if source.name in source.profiles:
        return f"the AWS credentials of profile {source.name}"
    return "the AWS credentials"


# The line for each kind of problem, with what renews the credentials (`fix`).
_LINES = {
    "missing": "no AWS credentials found{place}: {fix}",
    "partial": "incomplete AWS credentials ({told}): {fix}",
    "sso": "the SSO session of profile {source.name} has expired or was never started: {fix}",
    "failed": "cannot get AWS credentials ({told}): {fix}",
    "expired": "{whose} have expired{code}: {fix}",
    "invalid": "{whose} are not valid{code}: {fix}",
    "denied": "access denied to {whose} ({told}): their policy must allow it",
}


def line(error: BaseException, source: Source) -> str | None:
    """The line for a credentials problem `error` (not a missing profile: `credentials_line`),
    else None; access denied is AWS's `AwsError` of the call."""
    if isinstance(error, OSError):
        return _process_line(error, source)
    what = "denied" if denied(error) else kind(error)
    if what not in _LINES:
        return None
    code, said = "", None
    if isinstance(error, botocore.exceptions.ClientError):  # AWS's answer: its code says which
        code = error_code(error.response)
        said = message(str(error.response.get("Error", {}).get("Message", "")))
    text = _LINES[what].format(
        place=f" in profile {source.name}" if source.name in source.profiles else "",
        source=source,
        fix=remedy(source),
        told=said or code or one_line(str(error)),
        whose=_whose(source),
        code=f" ({code})" if code else "",
    )
    return AwsError(getattr(error, "operation_name", ""), text) if what == "denied" else text


def _process_line(error: OSError, source: Source) -> str | None:
    # A `credential_process` that cannot start (not found, not executable).
    held = None if source.env_keys else _holder(source)
    name, settings = held or (source.name, {})
    command = settings.get("credential_process", "")
    if command.split()[:1] != [error.filename]:
        return None
    found = isinstance(error, FileNotFoundError)
    problem = "was not found" if found else f"cannot run ({error.strerror})"
    return f"the credential_process command of profile {name} {problem}: `{command}`"


def credentials_line(error: BaseException, env: Mapping[str, str] = os.environ) -> str | None:
    """The line for `error` when it is about credentials (or a profile); None otherwise."""
    if kind(error) is None and not denied(error) and not isinstance(error, OSError):
        return None  # without reading the AWS config
    name, profiles, files = profile.aws_config()
    if isinstance(error, botocore.exceptions.ProfileNotFound):
        unknown = str(error.kwargs.get("profile", ""))
        variables = (profile.OLD_PROFILE_VARIABLE, profile.PROFILE_VARIABLE)  # botocore's order
        where = next((var for var in variables if env.get(var) == unknown), "the AWS profile")
        return profile.unknown_profile(f"{where} {unknown!r}", unknown, profiles, files)
    # The environment's keys lose to --profile.
    env_keys = profile.given_profile() is None and bool(env.get(KEY_VARIABLE))
    return line(error, Source(name, profiles, env_keys))
