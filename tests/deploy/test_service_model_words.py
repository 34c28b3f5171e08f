"""botocore's service model as the components stand-in checks every request against it
(tests/support/service_model.py): a request outside it gets AWS's ValidationException words, one
within it passes."""

from typing import Any

import pytest

from tests.support.components.autoscaling import COPIES
from tests.support.service_model import request_problem

INVALID = "1 validation error detected: "
NULL_NAME = "Value null at 'endpointName' failed to satisfy constraint: Member must not be null"
STATUS_PATH = "productionVariants.1.member.managedInstanceScaling.status"


@pytest.mark.parametrize(
    ("service", "operation", "params", "problem"),
    [
        ("sagemaker", "CreateInferenceComponent", {"InferenceComponentName": "c"}, NULL_NAME),
        (
            "sagemaker",
            "CreateInferenceComponent",
            {"InferenceComponentName": "bad_name", "EndpointName": "e"},
            "Value 'bad_name' at 'inferenceComponentName' failed to satisfy constraint: Member "
            r"must satisfy regular expression pattern: [a-zA-Z0-9]([\-a-zA-Z0-9]*[a-zA-Z0-9])?",
        ),
        (
            "sagemaker",
            "CreateInferenceComponent",
            {"InferenceComponentName": "c" * 64, "EndpointName": "e"},
            f"Value '{'c' * 64}' at 'inferenceComponentName' failed to satisfy constraint: "
            "Member must have length less than or equal to 63",
        ),
        (
            "sagemaker",
            "CreateInferenceComponent",
            {
                "InferenceComponentName": "c",
                "EndpointName": "e",
                "RuntimeConfig": {"CopyCount": -1},
            },
            "Value '-1' at 'runtimeConfig.copyCount' failed to satisfy constraint: Member must "
            "have value greater than or equal to 0",
        ),
        (
            "sagemaker",
            "CreateInferenceComponent",
            {
                "InferenceComponentName": "c",
                "EndpointName": "e",
                "Specification": {"ComputeResourceRequirements": {"MinMemoryRequiredInMb": 64}},
            },
            "Value '64' at 'specification.computeResourceRequirements.minMemoryRequiredInMb' "
            "failed to satisfy constraint: Member must have value greater than or equal to 128",
        ),
        (
            "sagemaker",
            "CreateInferenceComponent",
            {"InferenceComponentName": "c", "EndpointName": "e", "Tags": [{"Key": "k"}]},
            "Value null at 'tags.1.member.value' failed to satisfy constraint: Member must not "
            "be null",
        ),
        (
            "sagemaker",
            "CreateEndpointConfig",
            {
                "EndpointConfigName": "e",
                "ProductionVariants": [
                    {"VariantName": "v", "ManagedInstanceScaling": {"Status": "ON"}}
                ],
            },
            f"Value 'ON' at '{STATUS_PATH}' failed to satisfy constraint: Member must satisfy "
            "enum value set: [ENABLED, DISABLED]",
        ),
        (
            "sagemaker",
            "CreateEndpointConfig",
            {"EndpointConfigName": "e", "ProductionVariants": []},
            "Value '[]' at 'productionVariants' failed to satisfy constraint: Member must have "
            "length greater than or equal to 1",
        ),
        (
            "sagemaker",
            "CreateEndpointConfig",
            {"EndpointConfigName": "e", "ProductionVariants": [{"VariantName": "v", "Size": 1}]},
            "Unknown member 'productionVariants.1.member.size'",
        ),
        (
            "sagemaker",
            "CreateEndpointConfig",
            {
                "EndpointConfigName": "e",
                "ProductionVariants": [{"VariantName": "v", "InitialInstanceCount": "1"}],
            },
            "Value '1' at 'productionVariants.1.member.initialInstanceCount' failed to satisfy "
            "constraint: Member must be of type integer",
        ),
        (
            "application-autoscaling",
            "RegisterScalableTarget",
            {"ServiceNamespace": "sagemaker", "ResourceId": "", "ScalableDimension": COPIES},
            "Value '' at 'resourceId' failed to satisfy constraint: Member must have length "
            "greater than or equal to 1",
        ),
    ],
)
def test_a_request_outside_the_service_model_gets_aws_words(
    service: str, operation: str, params: dict[str, Any], problem: str
) -> None:
    assert request_problem(service, operation, params) == INVALID + problem


@pytest.mark.parametrize(
    ("service", "operation", "params"),
    [
        ("sagemaker", "ListEndpoints", {}),
        (
            "application-autoscaling",
            "RegisterScalableTarget",
            {
                "ServiceNamespace": "sagemaker",
                "ResourceId": "inference-component/c",
                "ScalableDimension": COPIES,
                "MinCapacity": 0,
                "MaxCapacity": 2,
            },
        ),
        (
            "sagemaker",
            "CreateInferenceComponent",
            {
                "InferenceComponentName": "c",
                "EndpointName": "e",
                "Specification": {
                    "ModelName": "m",
                    "ComputeResourceRequirements": {
                        "MinMemoryRequiredInMb": 1024,
                        "NumberOfCpuCoresRequired": 0.5,
                    },
                    "Container": {"Environment": {"A": "1"}},
                },
                "RuntimeConfig": {"CopyCount": 0},
            },
        ),
    ],
)
def test_a_request_within_the_service_model_passes(
    service: str, operation: str, params: dict[str, Any]
) -> None:
    assert request_problem(service, operation, params) is None
