"""`deploy token`, and the bearer token of SageMaker's OpenAI-compatible path, made as the
SageMaker SDK's `generate_token` makes it: `POST https://sagemaker.amazonaws.com/?Action=
CallWithBearerToken` presigned with SigV4 (service `sagemaker`, `host` the only signed header),
`&Version=1` appended to the URL without its scheme, base64 behind `sagemaker-api-key-`. On
botocore, which the client has (sagemaker-core would bring pandas, scipy and more); no AWS call
is made. botocore loads in the functions that sign or call AWS: `--help` loads this."""

import argparse
import base64
import datetime
import json
import re
import shlex
from typing import TYPE_CHECKING, Any

from vllm_sagemaker.deploy.base.calls import Call, client
from vllm_sagemaker.deploy.base.error_answers import no_endpoint
from vllm_sagemaker.deploy.base.errors import ClientError
from vllm_sagemaker.deploy.base.profile import session as aws_session
from vllm_sagemaker.deploy.base.reads import Reads
from vllm_sagemaker.deploy.base.region import run_region
from vllm_sagemaker.deploy.base.say import say
from vllm_sagemaker.deploy.kit import checks
from vllm_sagemaker.deploy.kit.checks import Check
from vllm_sagemaker.deploy.kit.options import add_name

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
_DURATION = re.compile(r"(\d+)([smh]?)")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600}

SUMMARY = "print what an OpenAI client needs to call an endpoint"
DESCRIPTION = (
    "Make a bearer token for the endpoint's OpenAI-compatible path from your AWS credentials (as "
    "the SageMaker SDK's generate_token does: a SigV4 signature, made locally), check that the "
    "endpoint exists, and print OPENAI_BASE_URL and OPENAI_API_KEY as lines a shell can eval; "
    "with --component, check that the component is on the endpoint and print the header that "
    "reaches it, as an OpenAI client's default_headers. Calling with the token needs the IAM "
    "actions sagemaker:CallWithBearerToken and sagemaker:InvokeEndpoint."
)


def add_component(parser: argparse.ArgumentParser, how: str) -> None:
    """`--component NAME`: one inference component of the endpoint, reached `how`."""
    parser.add_argument(
        "--component", metavar="NAME", help=f"the endpoint's inference component to call: {how}"
    )


def add_options(parser: argparse.ArgumentParser) -> None:
    add_name(parser, "token", "the endpoint")
    add_component(
        parser,
        f"checked to be on the endpoint; the {COMPONENT_HEADER} header (the runtime API's "
        "header of InferenceComponentName) is printed for the OpenAI client to send",
    )
    parser.add_argument(
        "--expires",
        default="12h",
        help="how long the token is good for: 12h, 90m, 600s (at most 12 h, and never past "
        "your credentials' own expiry); default 12h",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print {base_url, api_key, expires_at, headers} as JSON (headers: the ones to "
        "send, {} without --component)",
    )


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


def duration_s(text: str) -> int | None:
    """`12h`, `90m`, `600s` or `600` in seconds; None if not one, or not from 1 s to 12 h."""
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None:
        return None
    seconds = int(match[1]) * _UNIT_S[match[2]]
    return seconds if 0 < seconds <= MAX_S else None


def expires_problem(value: str) -> str | None:
    if duration_s(value) is None:
        return f"--expires {value!r}: give 1 s to 12 h as 12h, 90m, 600s or 600"
    return None


EXPIRES = Check("expires", expires_problem)
CHECKS = (checks.REGION, checks.NAME, EXPIRES)


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


def shell_lines(base: str, key: str | None, headers: dict[str, str]) -> list[str]:
    """What a shell evals (the key once made), and, as a comment, the headers to send."""
    lines = [f"export OPENAI_BASE_URL={shlex.quote(base)}"]
    if key is not None:
        lines.append(f"export OPENAI_API_KEY={shlex.quote(key)}")
    if headers:
        lines.append(
            f"# send the component's header: OpenAI(default_headers={json.dumps(headers)})"
        )
    return lines


def main(args: argparse.Namespace) -> int:
    """Print OPENAI_BASE_URL and OPENAI_API_KEY for endpoint NAME (or, dry, only the URL), and
    with --component the header that reaches it."""
    reads = Reads(args.dry_run)
    existing_endpoint(reads, args.name, f"the plan assumes endpoint {args.name} exists")
    if args.component:
        existing_component(reads, args.name, args.component)
    base = openai_base(args.name)
    headers = component_headers(args.component)
    if args.dry_run:
        for assumption in reads.assumed:
            say(f"dry run: {assumption}")
        say("dry run: the token is made from your credentials when it runs; nothing is written")
        print("\n".join(shell_lines(base, None, headers)))
        return 0
    expires_s = duration_s(args.expires) or MAX_S
    key = bearer(expires_s)
    until = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=expires_s)
    stamp = until.strftime("%Y-%m-%dT%H:%M:%SZ")
    if args.json:
        print(
            json.dumps({"base_url": base, "api_key": key, "expires_at": stamp, "headers": headers})
        )
    else:
        print("\n".join(shell_lines(base, key, headers)))
    say(f"the token is good until {stamp}, unless your AWS credentials expire first")
    return 0
