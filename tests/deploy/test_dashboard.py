"""`deploy dashboard` against moto: its dry run reads the endpoint and writes nothing, the run
writes one PutDashboard whose body names the endpoint and the namespace its container's
environment gives; no endpoint of that name is one line and exit status 1."""

import json

import boto3
import pytest

from tests.deploy.deploying import model_options
from tests.deploy.recording import dry_then_real, recorded, run, state


def test_dashboard_of_an_endpoint(role: str, capsys: pytest.CaptureFixture[str]) -> None:
    env = "SAGEMAKER_METRICS_NAMESPACE=Team/LLM"
    options = model_options("dash", "ml.g4dn.xlarge", env=env)
    assert run(capsys, "deploy", "endpoint", *options)[0] == 0
    status, _, err = run(capsys, "deploy", "dashboard", "--name", "dash", "--dry-run")
    assert status == 0, err
    assert (
        "deploy: warning: endpoint dash's container writes none of its own metrics "
        "(SAGEMAKER_METRICS is unset in its model's environment)" in err
    )
    assert run(capsys, "deploy", "delete", "--name", "dash")[0] == 0
    assert (
        run(capsys, "deploy", "endpoint", *options, "--env", "SAGEMAKER_METRICS=cloudwatch")[0] == 0
    )
    assert "warning" not in run(capsys, "deploy", "dashboard", "--name", "dash", "--dry-run")[2]
    written = dry_then_real(capsys, "deploy", "dashboard", "--name", "dash")
    assert written == [("cloudwatch", "PutDashboard", "dash")]
    body = json.loads(
        boto3.client("cloudwatch").get_dashboard(DashboardName="dash")["DashboardBody"]
    )
    lines = [line for widget in body["widgets"] for line in widget["properties"]["metrics"]]
    assert {line[0] for line in lines} == {"AWS/SageMaker", "/aws/sagemaker/Endpoints", "Team/LLM"}
    assert all(line[line.index("EndpointName") + 1] == "dash" for line in lines)
    assert run(capsys, "deploy", "delete", "--name", "dash")[0] == 0
    boto3.client("cloudwatch").delete_dashboards(DashboardNames=["dash"])


def test_no_endpoint_is_one_line(role: str, capsys: pytest.CaptureFixture[str]) -> None:
    before = state()
    for dry in (["--dry-run"], []):
        with recorded() as calls:
            status, out, err = run(capsys, "deploy", "dashboard", "--name", "dash-none", *dry)
        assert status == 1 and out == ""
        assert err == (
            "deploy: no endpoint named dash-none in us-east-1: the dashboard draws an endpoint's "
            "metrics; deploy it first (`vllm-sagemaker deploy endpoint`)\n"
        )
        assert [call[1] for call in calls] == ["DescribeEndpoint"]
    assert state() == before
