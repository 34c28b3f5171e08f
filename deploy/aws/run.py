"""Carrying out a plan of AWS calls with boto3, or printing it for `--dry-run`."""

import sys
import time
from collections.abc import Sequence
from typing import Any

import boto3
from botocore import xform_name

from vllm_sagemaker.deploy.aws.plan import Call, to_json

POLL_S = 15.0


def execute(calls: Sequence[Call], dry_run: bool) -> list[dict[str, Any]]:
    """Make the calls in order (or print them as JSON and make none); their answers."""
    if dry_run:
        print(to_json(calls))
        return []
    return [
        getattr(boto3.client(call.service), xform_name(call.operation))(**call.params)
        for call in calls
    ]


def wait_for(describe: Call, status_key: str, done: set[str], failed: set[str]) -> dict[str, Any]:
    """Poll `describe` until its status is in `done` (returned) or `failed` (SystemExit)."""
    client = boto3.client(describe.service)
    operation = getattr(client, xform_name(describe.operation))
    last = None
    while True:
        answer = operation(**describe.params)
        status = answer[status_key]
        if status != last:
            print(f"deploy: {status}", file=sys.stderr, flush=True)
            last = status
        if status in done:
            return answer
        if status in failed:
            reason = answer.get("FailureReason", "no reason given")
            raise SystemExit(f"deploy: {status}: {reason}")
        time.sleep(POLL_S)
