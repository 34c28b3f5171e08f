"""The one line for an error of boto3 or of an AWS answer, wherever it is raised: a `deploy`
command's call, an S3 read or write of any command (`deploy.base.storage`), `batch`'s
InvokeEndpoint.

Credentials and profiles are `deploy.base.credentials`'s; here are the region, the network, AWS's
refusals and any other botocore error. An answer that is not AWS's (a proxy's HTML page) is
told by its status, never printed.
"""

import botocore.exceptions
from botocore.parsers import ResponseParserError

from vllm_sagemaker.deploy.base import credentials
from vllm_sagemaker.deploy.base.error_answers import error_code, message, one_line
from vllm_sagemaker.deploy.base.region import REGION_HELP
from vllm_sagemaker.handler.core.errors import status_phrase

_DENIED = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"})
# What to check when the answer came from something other than AWS.
_NOT_AWS = "not AWS's answer: check AWS_ENDPOINT_URL and any proxy on the way (HTTPS_PROXY)"


def aws_answer(error: botocore.exceptions.ClientError) -> str:
    """An error answer of AWS: what it refused and why."""
    code = error_code(error.response)
    said = message(str(error.response.get("Error", {}).get("Message", "")))
    operation = error.operation_name
    if code in _DENIED:
        return (
            f"AWS refused {operation} (access denied: {said}): the credentials' policy must "
            "allow it"
        )
    if code.isdigit() and said is None:  # a bare status, with a page or nothing
        return f"{operation} was answered HTTP {code} {status_phrase(int(code))}, {_NOT_AWS}"
    return f"AWS refused {operation}: {code}" + (f": {said}" if said else "")


def aws_line(error: BaseException) -> str | None:
    """The line for an error of boto3 or AWS; None for any other error."""
    told = credentials.explain(error)
    if told is not None:
        return told
    if isinstance(error, botocore.exceptions.NoRegionError):
        return f"no AWS region: {REGION_HELP}"
    if isinstance(
        error,
        (botocore.exceptions.EndpointConnectionError, botocore.exceptions.ConnectTimeoutError),
    ):
        return f"{error}: check the network, the region and AWS_ENDPOINT_URL"
    if isinstance(error, botocore.exceptions.ClientError):
        return aws_answer(error)
    if isinstance(error, ResponseParserError):
        return f"an answer that does not parse, {_NOT_AWS}"
    if isinstance(error, botocore.exceptions.BotoCoreError):
        return one_line(str(error))
    import boto3.exceptions

    if isinstance(error, boto3.exceptions.Boto3Error):
        return one_line(str(error))
    return None


def no_endpoint(name: str, region: str | None) -> str:
    """The line for an endpoint that does not exist, as every command says it."""
    return f"endpoint {name} does not exist in {region or 'the region'}"
