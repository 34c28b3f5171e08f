"""`deploy endpoint --serverless` against moto: the endpoint config's one variant carries
ServerlessConfig and nothing of an instance, the model's environment tells the container it is
serverless, the cpu image is found in ECR; the dry run writes nothing and the real run what it
printed; `deploy token`, `deploy dashboard` (what SageMaker publishes of a serverless variant) and
`deploy delete` work with it. Updates: serverless to serverless, and to instances, as plans (moto
has no UpdateEndpoint); an endpoint on instances is not updated to serverless (one line, exit
status 1, after the reads that tell it). A refused create takes back what the run made.
`deploy invoke` goes through the runtime stand-in, which holds Serverless Inference's 4 MB limit
of a request body."""

import http.server
import json
import os
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.deploy.deploying import IMAGE, deploy, model_options, put_image
from tests.deploy.recording import (
    Answer,
    answered,
    answering,
    dry_then_real,
    identity,
    recorded,
    run,
    state,
    writes,
)
from tests.support.local_http import serving
from tests.support.runtime_emulator import Runtime, runtime_emulator

SAGEMAKER = "sagemaker"
# What a variant on instances has and a serverless one must not.
INSTANCE_FIELDS = {
    "InstanceType",
    "InitialInstanceCount",
    "InferenceAmiVersion",
    "ContainerStartupHealthCheckTimeoutInSeconds",
    "ModelDataDownloadTimeoutInSeconds",
    "VolumeSizeInGB",
}


def serverless(name: str, *extra: str) -> list[str]:
    """`deploy endpoint` of a serverless embedder named `name`."""
    return ["deploy", "endpoint", "--name", name, "--model-id", "org/embedder", *extra]


def variant_of(config: str) -> dict[str, Any]:
    answer = boto3.client(SAGEMAKER).describe_endpoint_config(EndpointConfigName=config)
    (variant,) = answer["ProductionVariants"]
    return dict(variant)


def test_a_serverless_endpoint_then_token_dashboard_delete(
    role: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """No --image: the cpu image `deploy image --target cpu` pushed."""
    uri = put_image("vllm-sagemaker", "cpu")
    options = serverless("sl-emb", "--serverless", "2048:10", "--provisioned-concurrency", "2")
    created = dry_then_real(capsys, *options)
    assert created == [
        (SAGEMAKER, "CreateModel", "sl-emb"),
        (SAGEMAKER, "CreateEndpointConfig", "sl-emb"),
        (SAGEMAKER, "CreateEndpoint", "sl-emb"),
    ]
    variant = variant_of("sl-emb")
    assert variant["ServerlessConfig"] == {
        "MemorySizeInMB": 2048,
        "MaxConcurrency": 10,
        "ProvisionedConcurrency": 2,
    }
    assert INSTANCE_FIELDS & set(variant) == set()
    sagemaker = boto3.client(SAGEMAKER)
    container = sagemaker.describe_model(ModelName="sl-emb")["PrimaryContainer"]
    assert container["Image"] == uri
    assert container["Environment"] == {
        "HF_MODEL_ID": "org/embedder",
        "SAGEMAKER_SERVERLESS": "true",
        "SAGEMAKER_METRICS_ENDPOINT_NAME": "sl-emb",
        "SAGEMAKER_METRICS_VARIANT_NAME": "AllTraffic",
    }
    assert sagemaker.describe_endpoint(EndpointName="sl-emb")["EndpointStatus"] == "InService"

    status, out, err = run(capsys, "deploy", "token", "--name", "sl-emb")
    assert status == 0, err
    base, key = out.splitlines()
    assert base.startswith("export OPENAI_BASE_URL=") and base.endswith(
        "/endpoints/sl-emb/openai/v1"
    )
    assert key.startswith("export OPENAI_API_KEY=sagemaker-api-key-")

    assert dry_then_real(capsys, "deploy", "dashboard", "--name", "sl-emb") == [
        ("cloudwatch", "PutDashboard", "sl-emb")
    ]
    board = boto3.client("cloudwatch").get_dashboard(DashboardName="sl-emb")["DashboardBody"]
    drawn = {
        line[1]
        for widget in json.loads(board)["widgets"]
        for line in widget["properties"]["metrics"]
    }
    assert {
        "ModelSetupTime",
        "MemoryUtilization",
        "ServerlessConcurrentExecutionsUtilization",
    } <= drawn
    assert "ServerlessProvisionedConcurrencyUtilization" in drawn
    assert {"CPUUtilization", "GPUUtilization", "ConcurrentRequestsPerModel"} & drawn == set()
    boto3.client("cloudwatch").delete_dashboards(DashboardNames=["sl-emb"])

    status, _, err = run(capsys, "deploy", "delete", "--name", "sl-emb")
    assert status == 0, err
    assert err.splitlines() == [
        "deploy: removed endpoint sl-emb",
        "deploy: removed endpoint config sl-emb",
        "deploy: removed model sl-emb",
    ]
    after = state()
    assert "sl-emb" not in after["endpoints"] + after["configs"] + after["models"]


def planned(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, Any]]:
    """The dry run's plan of `args`; it read what it needed and wrote nothing."""
    before = state()
    with recorded() as calls:
        status, out, err = run(capsys, *args, "--dry-run")
    assert status == 0, err
    assert writes(calls) == []
    assert state() == before
    plan: list[dict[str, Any]] = json.loads(out)
    return plan


def test_updates_of_a_serverless_endpoint(role: str, capsys: pytest.CaptureFixture[str]) -> None:
    """moto has no UpdateEndpoint: an update is checked as its dry run's plan. To serverless
    with other settings, and to instances (AWS allows both): a new version and UpdateEndpoint."""
    assert run(capsys, *serverless("sl-up", "--image", IMAGE, "--serverless", "2048"))[0] == 0
    again = planned(capsys, *serverless("sl-up", "--image", IMAGE, "--serverless", "4096:20"))
    assert [identity(c["service"], c["operation"], c["params"]) for c in again] == [
        (SAGEMAKER, "CreateModel", "sl-up-*"),
        (SAGEMAKER, "CreateEndpointConfig", "sl-up-*"),
        (SAGEMAKER, "UpdateEndpoint", "sl-up"),
    ]
    (variant,) = again[1]["params"]["ProductionVariants"]
    assert variant["ServerlessConfig"] == {"MemorySizeInMB": 4096, "MaxConcurrency": 20}
    assert again[0]["params"]["PrimaryContainer"]["Environment"]["SAGEMAKER_SERVERLESS"] == "true"
    on_instances = planned(capsys, "deploy", "endpoint", *model_options("sl-up", "ml.c5.xlarge"))
    assert on_instances[2]["operation"] == "UpdateEndpoint"
    (variant,) = on_instances[1]["params"]["ProductionVariants"]
    assert variant["InstanceType"] == "ml.c5.xlarge" and "ServerlessConfig" not in variant
    environment = on_instances[0]["params"]["PrimaryContainer"]["Environment"]
    assert "SAGEMAKER_SERVERLESS" not in environment
    assert run(capsys, "deploy", "delete", "--name", "sl-up")[0] == 0


@pytest.mark.parametrize("dry_run", [True, False])
def test_an_endpoint_on_instances_is_not_updated_to_serverless(
    role: str, capsys: pytest.CaptureFixture[str], dry_run: bool
) -> None:
    """One line, exit status 1 (AWS told it: the reads of the endpoint and its config), nothing
    written, the endpoint as it was."""
    name = f"sl-rt-{int(dry_run)}"
    options = model_options(name, "ml.g4dn.xlarge")
    assert run(capsys, "deploy", "endpoint", "--no-wait", *options)[0] == 0
    before = state()
    with recorded() as calls:
        status, out, err = run(
            capsys,
            *serverless(name, "--image", IMAGE, "--serverless", "2048"),
            *(["--dry-run"] if dry_run else []),
        )
    assert (status, out) == (1, "")
    assert err.splitlines() == [
        f"deploy: endpoint {name} runs on instances, and AWS refuses to update an instance-based "
        f"endpoint to serverless: delete it first (`vllm-sagemaker deploy delete --name {name}`) "
        "and deploy again, or give the serverless endpoint another --name"
    ]
    assert calls == [
        (SAGEMAKER, "DescribeEndpoint", name),
        (SAGEMAKER, "DescribeEndpointConfig", name),
    ]
    assert state() == before
    assert run(capsys, "deploy", "delete", "--name", name)[0] == 0


def test_a_refused_serverless_endpoint_takes_back_its_config_and_model(
    role: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The account's serverless concurrency quota refuses CreateEndpoint: the config and the
    model the run created go, newest first."""

    def quota(params: dict[str, Any]) -> Answer:
        message = "total concurrency of serverless endpoints is 10"
        return answered({"Error": {"Code": "ResourceLimitExceeded", "Message": message}}, 400)

    with answering("CreateEndpoint", quota):
        status, out, err = run(
            capsys, *serverless("sl-quota", "--image", IMAGE, "--serverless", "2048:20")
        )
    assert (status, out) == (1, "")
    assert err.splitlines()[-1] == (
        "deploy: CreateEndpoint failed: ResourceLimitExceeded: total concurrency of serverless "
        "endpoints is 10; removed endpoint config sl-quota and model sl-quota"
    )
    after = state()
    assert "sl-quota" not in after["endpoints"] + after["configs"] + after["models"]


def _echo() -> type[http.server.BaseHTTPRequestHandler]:
    """A container that answers each invocation with the size of its body."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            size = len(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            answer = json.dumps({"bytes": size}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

    return Handler


def test_invoke_a_serverless_endpoint(aws: dict[str, str], tmp_path: Path) -> None:
    """Through the runtime stand-in: a 3 MB body is answered; a 5 MB one, which an endpoint on
    instances takes, is refused by Serverless Inference's 4 MB limit, in one line."""
    bodies = {}
    for megabytes in (3, 5):
        bodies[megabytes] = tmp_path / f"{megabytes}mb.json"
        bodies[megabytes].write_text(json.dumps({"input": "x" * (megabytes * 1000 * 1000 - 20)}))
    endpoints = {"sl-inv": "serverless", "rt-inv": "instances"}
    with serving(_echo()) as container:
        runtime = Runtime(dict.fromkeys(endpoints, container), serverless=frozenset({"sl-inv"}))
        with runtime_emulator(runtime) as url:
            env = {**os.environ, "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": url}

            def invoke(name: str, megabytes: int) -> Any:
                return deploy("invoke", "--name", name, "--body", f"@{bodies[megabytes]}", env=env)

            small = invoke("sl-inv", 3)
            assert small.returncode == 0, small.stderr
            assert json.loads(small.stdout) == {"bytes": bodies[3].stat().st_size}
            large = invoke("sl-inv", 5)
            assert (large.returncode, large.stdout) == (1, "")
            assert large.stderr.splitlines() == [
                "deploy: AWS refused InvokeEndpoint: ValidationError: Request payload is too large."
            ]
            on_instances = invoke("rt-inv", 5)
            assert on_instances.returncode == 0, on_instances.stderr
            assert json.loads(on_instances.stdout) == {"bytes": bodies[5].stat().st_size}
