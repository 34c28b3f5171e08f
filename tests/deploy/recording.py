"""Every botocore call a `deploy` command makes in this process, recorded against moto.

A dry run may read (Describe, List, Get, Head) and leaves SageMaker, S3 and ECR as they were;
the real run makes exactly the writes the dry run printed, in order: `dry_then_real` checks both.
`answering` gives botocore an answer of its own in place of moto's (a quota, an endpoint that
ended Failed).
Not a test module: the *_calls tests import these from here.
"""

import contextlib
import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse

from vllm_sagemaker.container import cli
from vllm_sagemaker.deploy.base import storage

# The parameter that names what a call touches, first found first.
_TARGETS = (
    "InferenceComponentName",
    "EndpointName",
    "TransformJobName",
    "EndpointConfigName",
    "ModelName",
    "repositoryName",
    "ResourceId",
    "DashboardName",
    "Key",
)
# botocore's events name a service by its id, hyphenated; a plan's calls by its client's name.
_CLIENTS = {"application-auto-scaling": "application-autoscaling"}
# What points SageMaker's calls at the inference-component stand-in.
COMPONENTS_VARIABLE = "AWS_ENDPOINT_URL_SAGEMAKER"
# Operations that only read: all a dry run may call.
_READS = ("Describe", "List", "Get", "Head")
# What differs between two runs of one plan: the update's version and the async body's name.
_VOLATILE = re.compile(r"\d{8}-\d{6}|[0-9a-f]{32}")


def identity(service: str, operation: str, params: dict[str, Any]) -> tuple[str, str, str]:
    """A call as (service, operation, what it touches), the run's volatile parts blanked."""
    target = next((str(params[key]) for key in _TARGETS if key in params), "")
    return service, operation, _VOLATILE.sub("*", target)


@contextlib.contextmanager
def recorded() -> Iterator[list[tuple[str, str, str]]]:
    """Every call boto3 makes in this process while the block runs, in order."""
    calls: list[tuple[str, str, str]] = []

    def record(event_name: str, params: dict[str, Any], **_: Any) -> None:
        _, service, operation = event_name.split(".")
        calls.append(identity(_CLIENTS.get(service, service), operation, params))

    boto3.setup_default_session()
    assert boto3.DEFAULT_SESSION is not None
    boto3.DEFAULT_SESSION.events.register("provide-client-params.*.*", record)
    storage.s3_client.cache_clear()
    try:
        yield calls
    finally:
        boto3.DEFAULT_SESSION = None
        storage.s3_client.cache_clear()


def writes(calls: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    return [call for call in calls if not call[1].startswith(_READS)]


def state() -> dict[str, Any]:
    """What SageMaker (its inference components too, in front of moto), S3, ECR, Application
    Auto Scaling and CloudWatch's alarms and dashboards hold: names, every object's ETag, every
    scalable target's capacities and every policy's metric."""
    s3 = boto3.client("s3")
    scaling = boto3.client("application-autoscaling")
    sagemaker = boto3.client("sagemaker")
    objects = sorted(
        (bucket["Name"], item["Key"], item["ETag"])
        for bucket in s3.list_buckets()["Buckets"]
        for item in s3.list_objects_v2(Bucket=bucket["Name"]).get("Contents", [])
    )
    return {
        "objects": objects,
        "endpoints": sorted(e["EndpointName"] for e in sagemaker.list_endpoints()["Endpoints"]),
        "configs": sorted(
            c["EndpointConfigName"] for c in sagemaker.list_endpoint_configs()["EndpointConfigs"]
        ),
        "models": sorted(m["ModelName"] for m in sagemaker.list_models()["Models"]),
        "jobs": sorted(
            j["TransformJobName"] for j in sagemaker.list_transform_jobs()["TransformJobSummaries"]
        ),
        "repositories": sorted(
            r["repositoryName"] for r in boto3.client("ecr").describe_repositories()["repositories"]
        ),
        "scalable_targets": sorted(
            (t["ResourceId"], t["MinCapacity"], t["MaxCapacity"])
            for t in scaling.describe_scalable_targets(ServiceNamespace="sagemaker")[
                "ScalableTargets"
            ]
        ),
        "scaling_policies": sorted(
            (p["ResourceId"], p["PolicyName"], json.dumps(p, default=str, sort_keys=True))
            for p in scaling.describe_scaling_policies(ServiceNamespace="sagemaker")[
                "ScalingPolicies"
            ]
        ),
        "alarms": sorted(
            a["AlarmName"] for a in boto3.client("cloudwatch").describe_alarms()["MetricAlarms"]
        ),
        # The inference-component stand-in, when it stands in front of moto.
        "components": sorted(
            c["InferenceComponentName"]
            for c in sagemaker.list_inference_components()["InferenceComponents"]
        )
        if os.environ.get(COMPONENTS_VARIABLE)
        else [],
        "dashboards": sorted(
            (d["DashboardName"], d["Size"])
            for d in boto3.client("cloudwatch").list_dashboards()["DashboardEntries"]
        ),
    }


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`vllm-sagemaker ARGS` in this process: exit status, stdout, stderr."""
    try:
        status = cli.main(list(args))
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else 1
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
    out, err = capsys.readouterr()
    return status, out, err


def dry_then_real(capsys: pytest.CaptureFixture[str], *args: str) -> list[tuple[str, str, str]]:
    """Run the command with --dry-run, then for real; assert the dry run wrote nothing and left
    AWS as it was, and the real run made exactly the printed writes, in order. The writes."""
    before = state()
    with recorded() as dry_calls:
        status, out, err = run(capsys, *args, "--dry-run")
    assert status == 0, err
    assert writes(dry_calls) == []
    assert state() == before
    printed = [identity(c["service"], c["operation"], c["params"]) for c in json.loads(out)]
    with recorded() as real_calls:
        status, _, err = run(capsys, *args)
    assert status == 0, err
    assert writes(real_calls) == printed
    return printed


# An answer botocore takes in place of moto's: the HTTP response and the parsed answer.
Answer = tuple[AWSResponse, dict[str, Any]]


def answered(parsed: dict[str, Any], status: int = 200) -> Answer:
    """An answer botocore takes in place of moto's."""
    return AWSResponse("", status, {}, None), {
        **parsed,
        "ResponseMetadata": {"HTTPStatusCode": status},
    }


@contextlib.contextmanager
def answering(operation: str, answer: Callable[[dict[str, Any]], Answer | None]) -> Iterator[None]:
    """Every call this process makes recorded, and `answer` given each `operation` call first:
    its answer replaces moto's (None: moto answers)."""
    with recorded():
        assert boto3.DEFAULT_SESSION is not None
        boto3.DEFAULT_SESSION.events.register(
            f"before-call.sagemaker.{operation}", lambda params, **_: answer(params)
        )
        yield
