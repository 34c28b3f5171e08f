"""An endpoint updated as a new version of itself: the update's plan, which names are versions
of a name, and what makes an existing model differ from the one planned."""

from typing import Any

import pytest

from tests.deploy.deploying import IMAGE, ROLE
from vllm_sagemaker.deploy.kit.plans import endpoint as endpoint_plan
from vllm_sagemaker.deploy.kit.plans import model as model_plan
from vllm_sagemaker.deploy.kit.plans import names


def test_an_existing_endpoint_is_updated_to_a_new_version() -> None:
    """moto has no UpdateEndpoint, so the update plan is checked as data."""
    calls = endpoint_plan.endpoint_calls(
        "llm",
        IMAGE,
        model_plan.ModelSource(model_id="org/m"),
        endpoint_plan.Instances("ml.g5.2xlarge"),
        {},
        ROLE,
        version="20261122-120000",
    )
    assert [
        (c.operation, c.params.get("ModelName") or c.params.get("EndpointConfigName"))
        for c in calls
    ] == [
        ("CreateModel", "llm-20261122-120000"),
        ("CreateEndpointConfig", "llm-20261122-120000"),
        ("UpdateEndpoint", "llm-20261122-120000"),
    ]
    assert calls[2].params == {"EndpointName": "llm", "EndpointConfigName": "llm-20261122-120000"}


@pytest.mark.parametrize(
    ("candidate", "ours"),
    [
        ("chat", True),
        ("chat-20250101-000000", True),
        ("chat-prod", False),
        ("chat-prod-20250101-000000", False),
        ("chat-v2", False),
        ("chat-20250101-0000001", False),
        ("chat-2025010-000000", False),
        ("chatbot", False),
        ("my-chat-20250101-000000", False),
    ],
)
def test_which_names_are_versions_of_chat(candidate: str, ours: bool) -> None:
    assert names.is_version_of("chat", candidate) is ours


PREFIX_SOURCE = model_plan.ModelSource(model_prefix="s3://m/llama/")


@pytest.mark.parametrize(
    ("held", "role_known", "differences"),
    [
        ({}, True, []),
        # DescribeModel adds fields of its own: not differences.
        ({"Mode": "SingleModel"}, True, []),
        (
            {
                "ModelDataSource": {
                    "S3DataSource": {
                        "S3Uri": "s3://m/llama/",
                        "S3DataType": "S3Prefix",
                        "CompressionType": "None",
                        "ETag": "abc",
                        "ManifestS3Uri": "s3://m/manifest",
                    }
                }
            },
            True,
            [],
        ),
        (
            {"Image": "other:v2"},
            True,
            [f"Image is 'other:v2', not {IMAGE!r}"],
        ),
        (
            {"Environment": {"SM_VLLM_MAX_MODEL_LEN": "4096"}},
            True,
            ["Environment is {'SM_VLLM_MAX_MODEL_LEN': '4096'}, not {}"],
        ),
        # What `deploy endpoint` adds to name its metrics' endpoint is not the model.
        (
            {
                "Environment": {
                    "SAGEMAKER_METRICS_ENDPOINT_NAME": "chat",
                    "SAGEMAKER_METRICS_VARIANT_NAME": "AllTraffic",
                }
            },
            True,
            [],
        ),
        (
            {"Environment": {"SAGEMAKER_METRICS": "cloudwatch"}},
            True,
            ["Environment is {'SAGEMAKER_METRICS': 'cloudwatch'}, not {}"],
        ),
        (
            {"ExecutionRoleArn": "arn:aws:iam::1:role/Other"},
            True,
            [f"ExecutionRoleArn is 'arn:aws:iam::1:role/Other', not {ROLE!r}"],
        ),
        # A dry run without a role compares everything else.
        ({"ExecutionRoleArn": "arn:aws:iam::1:role/Other"}, False, []),
    ],
)
def test_model_differences(held: dict[str, Any], role_known: bool, differences: list[str]) -> None:
    planned = model_plan.create_model("m", IMAGE, PREFIX_SOURCE, {}, ROLE)
    container = {**planned.params["PrimaryContainer"]}
    existing: dict[str, Any] = {"PrimaryContainer": container, "ExecutionRoleArn": ROLE}
    for key, value in held.items():
        (existing if key == "ExecutionRoleArn" else container)[key] = value
    assert model_plan.model_differences(existing, planned, role_known) == differences


KIT = [{"Key": "created-by", "Value": "vllm-sagemaker"}]
ON_G5 = [{"VariantName": "AllTraffic", "InstanceType": "ml.g5.2xlarge"}]
SCALED = ["endpoint/llm/variant/AllTraffic"]
NOT_KIT = (
    "warning: endpoint llm has no created-by tag (the kit did not make it): the update replaces "
    "its config with the kit's own, named llm-<UTC time>"
)
MOVED = (
    "warning: variant AllTraffic of llm scales (Application Auto Scaling) on ml.g5.2xlarge, and "
    "SageMaker fails an update that changes its instance type to ml.g5.12xlarge: deregister its "
    "scalable target endpoint/llm/variant/AllTraffic first"
)


@pytest.mark.parametrize(
    ("tags", "scaled", "instance_type", "lines"),
    [
        (KIT, SCALED, "ml.g5.2xlarge", []),
        (KIT, [], "ml.g5.12xlarge", []),
        ([], [], "ml.g5.2xlarge", [NOT_KIT]),
        ([{"Key": "created-by", "Value": "someone"}], [], "ml.g5.2xlarge", [NOT_KIT]),
        (KIT, SCALED, "ml.g5.12xlarge", [MOVED]),
        (KIT, ["endpoint/llm-prod/variant/AllTraffic"], "ml.g5.12xlarge", []),
    ],
)
def test_what_an_update_warns_of(
    tags: list[dict[str, str]], scaled: list[str], instance_type: str, lines: list[str]
) -> None:
    where = endpoint_plan.Instances(instance_type)
    assert endpoint_plan.update_warnings("llm", tags, ON_G5, scaled, where) == lines
