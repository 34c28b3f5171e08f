"""`deploy token`: what an OpenAI client needs to call an endpoint on SageMaker's OpenAI-compatible
path, its base URL and a bearer token (`deploy.kit.plans.openai_path`), as shell lines or JSON."""

import argparse
import datetime
import json
import re
import shlex

from vllm_sagemaker.deploy.base.command import Check
from vllm_sagemaker.deploy.base.errors import Problem
from vllm_sagemaker.deploy.base.plan import Plan, Step
from vllm_sagemaker.deploy.base.reads import Reads
from vllm_sagemaker.deploy.base.say import say
from vllm_sagemaker.deploy.kit import checks
from vllm_sagemaker.deploy.kit.options import add_name
from vllm_sagemaker.deploy.kit.plans.openai_path import (
    COMPONENT_HEADER,
    MAX_S,
    add_component,
    bearer,
    component_headers,
    existing_component,
    existing_endpoint,
    openai_base,
)

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


def duration_s(text: str) -> int | None:
    """`12h`, `90m`, `600s` or `600` in seconds; None if not one, or not from 1 s to 12 h."""
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None:
        return None
    seconds = int(match[1]) * _UNIT_S[match[2]]
    return seconds if 0 < seconds <= MAX_S else None


def expires_problem(value: str) -> Problem | None:
    if duration_s(value) is None:
        return Problem("--expires", "give 1 s to 12 h as 12h, 90m, 600s or 600", repr(value))
    return None


EXPIRES = Check("expires", expires_problem)
CHECKS = (checks.REGION, checks.NAME, EXPIRES)


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


def plan(args: argparse.Namespace, reads: Reads) -> Plan:
    """Print OPENAI_BASE_URL and OPENAI_API_KEY for endpoint NAME (or, dry, only the URL), and
    with --component the header that reaches it."""
    existing_endpoint(reads, args.name, f"the plan assumes endpoint {args.name} exists")
    if args.component:
        existing_component(reads, args.name, args.component)
    base = openai_base(args.name)
    headers = component_headers(args.component)

    def make_token(calls: object, make: object) -> None:
        expires_s = duration_s(args.expires) or MAX_S
        key = bearer(expires_s)
        until = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=expires_s)
        stamp = until.strftime("%Y-%m-%dT%H:%M:%SZ")
        if args.json:
            said = {"base_url": base, "api_key": key, "expires_at": stamp, "headers": headers}
            print(json.dumps(said))
        else:
            print("\n".join(shell_lines(base, key, headers)))
        say(f"the token is good until {stamp}, unless your AWS credentials expire first")

    return Plan(
        (Step((), make=make_token),),
        preview="\n".join(shell_lines(base, None, headers)),
        then=("dry run: the token is made from your credentials when it runs; nothing is written",),
    )
