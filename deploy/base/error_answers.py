"""What an error answer says, on one line: a server's (its message, else its status), AWS's, and
one that is not AWS's (a proxy's or moto's page: its status, never the page)."""

import json
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from vllm_sagemaker.core.errors import status_phrase
from vllm_sagemaker.deploy.base.region import REGION_HELP

if TYPE_CHECKING:  # no boto3 loads here: `deploy invoke`'s parser takes `answered`
    import botocore.exceptions

# The longest message quoted; the rest is cut with an ellipsis.
MAX_CHARS = 300
# The keys a JSON error names its message with (OpenAI's, AWS's, FastAPI's), first found first.
_MESSAGE_KEYS = ("message", "Message", "errorMessage", "detail", "error")
_XML_MESSAGE = re.compile(r"<Message>(.*?)</Message>", re.DOTALL)
_XML_CODE = re.compile(r"<Code>\s*([A-Za-z0-9.]+)\s*</Code>")
_NOT_AWS = "not AWS's answer: check AWS_ENDPOINT_URL and any proxy on the way (HTTPS_PROXY)"
# AWS's answer (HTTP 400 ValidationError) to a call of an inference component with no copy to
# take it, one scaled to zero: "Inference Component has no capacity to process this request.
# ApplicationAutoScaling may be in-progress (if configured) or try to increase the capacity by
# invoking UpdateInferenceComponentRuntimeConfig API." (quoted in AWS's scale-to-zero notebook).
_NO_CAPACITY = "has no capacity to process this request"
# What a copy takes to come back from zero ("the provisioning process takes several minutes":
# AWS's "Scale an endpoint to zero instances").
FROM_ZERO_TAKES = (
    "several minutes: an instance when none is free, then the model's download and load"
)


class AwsError(str):
    """AWS's error answer to a call, the line `AWS refused OPERATION: REASON`, its parts kept: the
    line of a call that failed names the call once."""

    operation: str
    reason: str

    def __new__(cls, operation: str, reason: str) -> "AwsError":
        line = super().__new__(cls, f"AWS refused {operation}: {reason}")
        line.operation, line.reason = operation, reason
        return line


def one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= MAX_CHARS else line[: MAX_CHARS - 1] + "…"


def message(body: str | bytes) -> str | None:
    """The message of an error answer's body (JSON, XML or plain text); None when it holds none."""
    text = (body.decode(errors="replace") if isinstance(body, bytes) else body).strip()
    if not text:
        return None
    if text.startswith("<"):
        found = _XML_MESSAGE.search(text)
        return one_line(found[1]) if found and found[1].strip() else None
    try:
        parsed = json.loads(text)
    except ValueError:
        return one_line(text)
    return _json_message(parsed)


def _json_message(parsed: Any) -> str | None:
    if isinstance(parsed, str) and parsed.strip():
        return one_line(parsed)
    if not isinstance(parsed, dict):
        return None
    return next(filter(None, map(_json_message, map(parsed.get, _MESSAGE_KEYS))), None)


def said(body: str | bytes, status: int) -> str:
    """`HTTP 429: <its message>`, else `HTTP 429: Too Many Requests`."""
    return f"HTTP {status}: {message(body) or status_phrase(status)}"


def error_code(response: Mapping[str, Any]) -> str:
    """A botocore error answer's `Code`, or where that is a bare HTTP status (an XML error to a
    JSON API), the `<Code>` its body names."""
    detail = response.get("Error", {})
    code = str(detail.get("Code", ""))
    found = _XML_CODE.search(str(detail.get("Message", ""))) if code.isdigit() else None
    return found[1] if found else code


def _aws_headers(names: Iterable[str]) -> bool:
    # AWS's `x-amz` headers, which no proxy's or moto's error page has.
    return any(name.lower().startswith("x-amz") for name in names)


def from_aws(response: Mapping[str, Any]) -> bool:
    """Whether a botocore error answer is AWS's: it names a code, or has AWS's headers (S3's
    HEAD has no body)."""
    headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
    return not error_code(response).isdigit() or _aws_headers(headers)


def not_aws(status: int) -> str:
    return f"was answered HTTP {status} {status_phrase(status)}, {_NOT_AWS}"


def answered(status: int, body: bytes, headers: Iterable[str]) -> str:
    """An HTTP error answer that came through AWS: its message, else its status."""
    told = message(body)
    if told is None and not _aws_headers(headers):
        return not_aws(status)
    return f"answered {status}: {told or status_phrase(status)}"


def missing(error: "botocore.exceptions.ClientError") -> bool:
    """Whether an error answer means the resource does not exist: S3's HEAD says a bare 404,
    SageMaker a ValidationException "Could not find ...", the others name the case."""
    detail = error.response.get("Error", {})
    code = str(detail.get("Code", ""))
    named = code.endswith(("NotFound", "NotFoundException")) or code in ("404", "NoSuchKey")
    return named or "Could not find" in detail.get("Message", "")


def aws_line(error: BaseException) -> str | None:
    import boto3.exceptions
    import botocore.exceptions
    from botocore.parsers import ResponseParserError

    if isinstance(error, botocore.exceptions.NoRegionError):
        return f"no AWS region: {REGION_HELP}"
    if isinstance(
        error,
        (botocore.exceptions.EndpointConnectionError, botocore.exceptions.ConnectTimeoutError),
    ):
        return f"{error}: check the network, the region and AWS_ENDPOINT_URL"
    if isinstance(error, botocore.exceptions.ClientError):
        code, operation = error_code(error.response), error.operation_name
        if not from_aws(error.response):
            return f"{operation} {not_aws(int(code))}"
        if code == "NoSuchBucket":
            return f"bucket {error.response['Error'].get('BucketName', '')} does not exist"
        if code in ("NoSuchKey", "404"):
            return "the object does not exist"
        told = message(str(error.response.get("Error", {}).get("Message", "")))
        return AwsError(operation, code + (f": {told}" if told else ""))
    if isinstance(error, ResponseParserError):
        return f"an answer that does not parse, {_NOT_AWS}"
    if isinstance(error, (botocore.exceptions.BotoCoreError, boto3.exceptions.Boto3Error)):
        return one_line(str(error))
    return None


def no_capacity(told: str | bytes) -> bool:
    """Whether an error answer (botocore's message, or the body of the OpenAI path's answer)
    is AWS's no-capacity answer: the component has no copy, as it scaled to zero."""
    return _NO_CAPACITY in (message(told) or "").lower()


def from_zero(endpoint: str, component: str | None) -> str:
    """`component C on endpoint E is scaling from zero`, or the endpoint's."""
    what = f"component {component} on endpoint {endpoint}" if component else f"endpoint {endpoint}"
    return f"{what} is scaling from zero (it has no copy to answer)"


def no_endpoint(name: str, region: str | None) -> str:
    return f"endpoint {name} does not exist in {region or 'the region'}"
