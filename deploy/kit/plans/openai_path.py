"""SageMaker's OpenAI-compatible path: its base URL, its bearer token, made as the SageMaker SDK's
`generate_token` makes it (`POST https://sagemaker.amazonaws.com/?Action=CallWithBearerToken`
presigned with SigV4, service `sagemaker`, `host` the only signed header, `&Version=1` appended to
the URL without its scheme, base64 behind `sagemaker-api-key-`; on botocore, which the client has:
no AWS call is made), the header that reaches one inference component, and the reads that check
the endpoint and the component exist. botocore loads in the functions that sign or call AWS."""

import argparse
import base64
from typing import TYPE_CHECKING, Any

from vllm_sagemaker.deploy.base.calls import Call, client
from vllm_sagemaker.deploy.base.error_answers import no_endpoint
from vllm_sagemaker.deploy.base.errors import ClientError
from vllm_sagemaker.deploy.base.profile import session as aws_session
from vllm_sagemaker.deploy.base.reads import Reads
from vllm_sagemaker.deploy.base.region import run_region

if TYPE_CHECKING:
    from botocore.credentials import ReadOnlyCredentials

HOST = "sagemaker.amazonaws.com"
SERVICE = "sagemaker"
ACTION = "CallWithBearerToken"
PREFIX = "sagemaker-api-key-"
VERSION = "&Version=1"
MAX_S = 12 * 3600
# The runtime API's header of InferenceComponentName (botocore's sagemaker-runtime model), sent
# on the OpenAI-compatible path too to reach one inference component (assumed: AWS's page on the
# path names only the endpoint in its URL).
COMPONENT_HEADER = "X-Amzn-SageMaker-Inference-Component"


def token(credentials: "ReadOnlyCredentials", region: str, expires_s: int) -> str:
    from botocore.auth import SigV4QueryAuth
    from botocore.awsrequest import AWSRequest

    request = AWSRequest(
        method="POST", url=f"https://{HOST}/", headers={"host": HOST}, params={"Action": ACTION}
    )
    SigV4QueryAuth(credentials, SERVICE, region, expires=expires_s).add_auth(request)
    presigned = request.url.removeprefix("https://") + VERSION
    return PREFIX + base64.b64encode(presigned.encode()).decode()


def base_url(runtime_url: str, endpoint: str) -> str:
    return f"{runtime_url.rstrip('/')}/endpoints/{endpoint}/openai/v1"


def openai_base(name: str) -> str:
    """The OpenAI base URL of `name` on boto3's runtime URL (AWS_ENDPOINT_URL_* count)."""
    return base_url(client("sagemaker-runtime").meta.endpoint_url, name)


def bearer(expires_s: int) -> str:
    """A token from the credentials and region boto3 would use (the --profile's, if given)."""
    import botocore.exceptions

    session = aws_session()
    credentials = session.get_credentials()
    if credentials is None:
        raise botocore.exceptions.NoCredentialsError()
    return token(credentials.get_frozen_credentials(), session.region_name, expires_s)


def existing_endpoint(reads: Reads, name: str, assumption: str) -> dict[str, Any] | None:
    """DescribeEndpoint's answer for `name`; None only in a dry run that could not read it."""
    found = reads.describe(
        Call("sagemaker", "DescribeEndpoint", {"EndpointName": name}), assumption
    )
    if found is None and not reads.assumed:
        raise ClientError(no_endpoint(name, run_region()))
    return found


def existing_component(reads: Reads, endpoint: str, component: str) -> None:
    """The inference component `component` must be on `endpoint` (DescribeInferenceComponent);
    a dry run that cannot read it assumes it is."""
    assumption = f"the plan assumes component {component} is on endpoint {endpoint}"
    assumed = len(reads.assumed)
    found = reads.describe(
        Call("sagemaker", "DescribeInferenceComponent", {"InferenceComponentName": component}),
        assumption,
    )
    if found is None and len(reads.assumed) == assumed:
        where = run_region() or "the region"
        raise ClientError(f"component {component} does not exist on endpoint {endpoint} in {where}")
    if found is not None and found.get("EndpointName") != endpoint:
        raise ClientError(
            f"component {component} is on endpoint {found.get('EndpointName')}, not {endpoint}"
        )


def component_headers(component: str | None) -> dict[str, str]:
    """The headers that reach `component` (none without one)."""
    return {COMPONENT_HEADER: component} if component else {}


def add_component(parser: argparse.ArgumentParser, how: str) -> None:
    """`--component NAME`: one inference component of the endpoint, reached `how`."""
    parser.add_argument(
        "--component", metavar="NAME", help=f"the endpoint's inference component to call: {how}"
    )
