"""SageMaker inference components (control plane) and their Application Auto Scaling, which
moto 5.2.5 lacks, served in front of moto: boto3 reaches it through AWS_ENDPOINT_URL_SAGEMAKER
and AWS_ENDPOINT_URL_APPLICATION_AUTO_SCALING, every other service still goes to moto.

Every call to either service is checked first against botocore's own service model
(`service_model`), as AWS checks it: 400 `{"__type": "ValidationException", "message": ...}`,
which botocore reads as the error code. Then the emulator holds, from AWS's API reference and
developer guide:

- an endpoint config whose variants have no `ModelName` (an endpoint for components): every
  variant then without one, with an `InstanceType`, `ExecutionRoleArn` on the config, and
  `ManagedInstanceScaling` with `MinInstanceCount` at most `MaxInstanceCount` and, when it is 0,
  `Status` ENABLED; `ManagedInstanceScaling` on a variant with a model is refused
  ("ManagedInstanceScaling is only supported for inference component endpoints.", AWS's words in
  a public issue).
  Configs with models go to moto as they are; DescribeEndpointConfig, DeleteEndpointConfig and
  ListEndpointConfigs answer both (deleting a config an endpoint uses is allowed, as on AWS);
- endpoints on such configs (CreateEndpoint, DescribeEndpoint with `ProductionVariants`' managed
  instance scaling and instance counts, UpdateEndpoint, DeleteEndpoint, ListEndpoints merged with
  moto's, ListTags and AddTags of its ARNs); an endpoint is deleted at once, as moto's are;
- inference components: Create (the endpoint must exist and be one for components, InService,
  the variant one of its own; `Specification` names a model moto holds or a `Container`, and has
  `ComputeResourceRequirements` unless it names a `BaseInferenceComponentName`), Describe (with
  `RuntimeConfig` `DesiredCopyCount` and `CurrentCopyCount`), Update, UpdateRuntimeConfig, Delete
  and List (its filters); an endpoint that still has components is not deleted. A CopyCount of
  0 is taken on any endpoint for components: that AWS wants MinInstanceCount 0 for it was not
  confirmed, so it is not enforced;
- Application Auto Scaling of `inference-component/<name>` on
  `sagemaker:inference-component:DesiredCopyCount` (RegisterScalableTarget of a component that
  exists, PutScalingPolicy of target tracking, with its two alarms, or step scaling,
  Describe*, DeleteScalingPolicy, DeregisterScalableTarget, which deletes its policies as the
  API reference says); other dimensions go to moto, and the Describe calls answer both.
  PutScalingPolicy without a target: ObjectNotFoundException "No scalable target registered for
  service namespace: ..., resource ID: ..., scalable dimension: ..." (AWS's words in public
  issues).

States: a component or endpoint is `Creating` (a component's update: `Updating`) at the first
Describe after the call and `InService` from the next on (its copies then all current); a
deleted component is `Deleting` at the next Describe and gone after it.

AWS's words confirmed in public issues: `Could not find endpoint "<arn>".` and `Cannot create
already existing endpoint "<arn>".`. Ours, by analogy or unconfirmed: the same words for configs,
models and components ("Could not find inference component"), and the messages of a component
on an endpoint with models or not InService, of an endpoint deleted with its components, of a
variant it lacks, of a config mixing variants, of a missing role, instance type, capacity or
scaling configuration, of a target for a missing component, and DeleteScalingPolicy's and
DeregisterScalableTarget's ObjectNotFoundException.

ARNs carry the region of the request's signature and moto's account; what the emulator holds
is not kept apart by region. `State` is what the emulator holds, every call it received
(operation, parameters), and `fail_next` makes the next call of an operation fail with a given
AWS error.
"""

import contextlib
import copy
import http.server
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import botocore.exceptions
import httpx

from tests.support.aws import REGION
from tests.support.local_http import HOP_BY_HOP, TARGET, forwarded, serving
from tests.support.service_model import request_problem

ACCOUNT = "123456789012"  # moto's account
# The X-Amz-Target prefix of each service's calls (botocore's `targetPrefix`).
SERVICES = {"SageMaker": "sagemaker", "AnyScaleFrontendService": "application-autoscaling"}
COPIES = "sagemaker:inference-component:DesiredCopyCount"
COMPONENT_ID = re.compile(r"inference-component/(?P<name>.+)")
# A request's region, from its SigV4 credential scope.
SCOPE = re.compile(r"Credential=[^/]+/\d{8}/(?P<region>[^/]+)/")
JSON = "application/x-amz-json-1.1"
# Where a status goes once a Describe has answered it (None: the resource is gone).
SETTLES: dict[str, str | None] = {
    "Creating": "InService",
    "Updating": "InService",
    "Deleting": None,
}
SCALING_ROLE = (
    f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/sagemaker.application-autoscaling."
    "amazonaws.com/AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"
)


class Refused(Exception):
    """An AWS error answer: 400 with its code and message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def invalid(message: str) -> Refused:
    return Refused("ValidationException", message)


def arn(region: str, kind: str, name: str) -> str:
    """A SageMaker ARN, its name in lower case as SageMaker writes it."""
    return f"arn:aws:sagemaker:{region}:{ACCOUNT}:{kind}/{name.lower()}"


@dataclass
class Held:
    """A resource as its Describe answers it; `shown`: its present status was answered once."""

    fields: dict[str, Any]
    status_key: str = ""
    shown: bool = False
    tags: list[dict[str, str]] = field(default_factory=list)

    def moved(self, status: str) -> None:
        self.fields[self.status_key] = status
        self.fields["LastModifiedTime"] = time.time()
        self.shown = False

    def described(self) -> bool:
        """Advance a status already answered once (Creating -> InService); False: it is gone."""
        status = self.fields.get(self.status_key, "")
        if status in SETTLES and self.shown:
            settled = SETTLES[status]
            if settled is None:
                return False
            self.moved(settled)
        self.shown = True
        return True


@dataclass
class State:
    """What the emulator holds, by name (targets by ResourceId, policies by ResourceId and
    PolicyName), every call it received, and the errors the next calls get."""

    configs: dict[str, Held] = field(default_factory=dict)
    endpoints: dict[str, Held] = field(default_factory=dict)
    components: dict[str, Held] = field(default_factory=dict)
    targets: dict[str, dict[str, Any]] = field(default_factory=dict)
    policies: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    failures: dict[str, Refused] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)

    def fail_next(self, operation: str, code: str, message: str = "failed by the test") -> None:
        """The next `operation` (of either service) is answered 400 `code` `message`."""
        with self.lock:
            self.failures[operation] = Refused(code, message)

    def operations(self) -> list[str]:
        with self.lock:
            return [operation for operation, _ in self.calls]

    def copies(self, component: str) -> int:
        """The component's DesiredCopyCount."""
        with self.lock:
            return int(self.components[component].fields["RuntimeConfig"]["DesiredCopyCount"])


Answer = dict[str, Any]
Forward = Callable[[], httpx.Response]


class Emulator:
    def __init__(self, moto: str) -> None:
        self.moto = moto
        self.state = State()
        self.region = REGION
        self.clients: dict[tuple[str, str], Any] = {}
        self.http = httpx.Client(timeout=60)  # to moto, its connections kept

    # What moto holds.

    def moto_client(self, service: str) -> Any:
        """boto3's client of moto for `service` in the request's region (made once)."""
        key = (service, self.region)
        with self.state.lock:
            if key not in self.clients:
                self.clients[key] = boto3.session.Session().client(
                    service,
                    endpoint_url=self.moto,
                    region_name=self.region,
                    aws_access_key_id="testing",
                    aws_secret_access_key="testing",
                )
            return self.clients[key]

    def in_moto(self, operation: str, **params: Any) -> Answer | None:
        """moto's answer to a SageMaker Describe call, None when it holds no such thing."""
        client = self.moto_client("sagemaker")
        try:
            answer: Answer = getattr(client, _snake(operation))(**params)
        except botocore.exceptions.ClientError:
            return None
        return answer

    # The call.

    def answer(self, target: str, params: Answer, region: str, forward: Forward) -> Answer | None:
        """The emulator's answer to the call, or None when moto's answer is the answer."""
        prefix, _, operation = target.rpartition(".")
        service = SERVICES[prefix]
        with self.state.lock:
            self.state.calls.append((operation, copy.deepcopy(params)))
            failure = self.state.failures.pop(operation, None)
        if failure is not None:
            raise failure
        problem = request_problem(service, operation, params)
        if problem is not None:
            raise invalid(problem)
        self.region = region
        if operation not in HANDLED:
            return None
        handler: Callable[[Answer, Forward], Answer | None] = getattr(self, _snake(operation))
        return handler(params, forward)

    # Endpoint configs.

    def create_endpoint_config(self, params: Answer, forward: Forward) -> Answer | None:
        variants = params["ProductionVariants"]
        with_model = [v for v in variants if v.get("ModelName")]
        if with_model:
            if any(v.get("ManagedInstanceScaling") for v in with_model):
                raise invalid(
                    "ManagedInstanceScaling is only supported for inference component endpoints."
                )
            if len(with_model) < len(variants):
                raise invalid(
                    "Either every production variant names a ModelName or none does (an "
                    "endpoint config for inference components)."
                )
            return None
        name = params["EndpointConfigName"]
        for variant in variants:
            _check_variant(variant)
        if not params.get("ExecutionRoleArn"):
            raise invalid("ExecutionRoleArn is required for an endpoint config without ModelName.")
        config_arn = arn(self.region, "endpoint-config", name)
        with self.state.lock:
            exists = name in self.state.configs
        if exists or self.in_moto("DescribeEndpointConfig", EndpointConfigName=name):
            raise invalid(f'Cannot create already existing endpoint configuration "{config_arn}".')
        fields = {key: value for key, value in copy.deepcopy(params).items() if key != "Tags"} | {
            "EndpointConfigArn": config_arn,
            "CreationTime": time.time(),
        }
        with self.state.lock:
            self.state.configs[name] = Held(fields, tags=list(params.get("Tags", [])))
        return {"EndpointConfigArn": config_arn}

    def held_config(self, name: str) -> Held | None:
        with self.state.lock:
            return self.state.configs.get(name)

    def describe_endpoint_config(self, params: Answer, forward: Forward) -> Answer | None:
        held = self.held_config(params["EndpointConfigName"])
        return None if held is None else copy.deepcopy(held.fields)

    def delete_endpoint_config(self, params: Answer, forward: Forward) -> Answer | None:
        with self.state.lock:
            held = self.state.configs.pop(params["EndpointConfigName"], None)
        return None if held is None else {}

    def list_endpoint_configs(self, params: Answer, forward: Forward) -> Answer | None:
        with self.state.lock:
            ours = [
                {
                    key: held.fields[key]
                    for key in ("EndpointConfigName", "EndpointConfigArn", "CreationTime")
                }
                for name, held in self.state.configs.items()
                if params.get("NameContains", "") in name
            ]
        return _merged(forward, "EndpointConfigs", ours, params)

    # Endpoints.

    def endpoint_variants(self, held: Held) -> list[Answer]:
        config = self.held_config(held.fields["EndpointConfigName"])
        in_service = held.fields["EndpointStatus"] == "InService"
        variants = []
        for variant in config.fields["ProductionVariants"] if config else []:
            count = variant.get("InitialInstanceCount", 1) if in_service else 0
            shown = {
                "VariantName": variant["VariantName"],
                "CurrentWeight": 1.0,
                "DesiredWeight": 1.0,
                "CurrentInstanceCount": count,
                "DesiredInstanceCount": variant.get("InitialInstanceCount", 1),
            }
            for key in ("ManagedInstanceScaling", "RoutingConfig"):
                if key in variant:
                    shown[key] = copy.deepcopy(variant[key])
            variants.append(shown)
        return variants

    def create_endpoint(self, params: Answer, forward: Forward) -> Answer | None:
        name, config = params["EndpointName"], params["EndpointConfigName"]
        if self.held_config(config) is None:
            return None
        endpoint_arn = arn(self.region, "endpoint", name)
        with self.state.lock:
            exists = name in self.state.endpoints
        if exists or self.in_moto("DescribeEndpoint", EndpointName=name):
            raise invalid(f'Cannot create already existing endpoint "{endpoint_arn}".')
        now = time.time()
        fields = {
            "EndpointName": name,
            "EndpointArn": endpoint_arn,
            "EndpointConfigName": config,
            "EndpointStatus": "Creating",
            "CreationTime": now,
            "LastModifiedTime": now,
        }
        with self.state.lock:
            self.state.endpoints[name] = Held(
                fields, "EndpointStatus", tags=list(params.get("Tags", []))
            )
        return {"EndpointArn": endpoint_arn}

    def held_endpoint(self, name: str) -> Held | None:
        with self.state.lock:
            return self.state.endpoints.get(name)

    def describe_endpoint(self, params: Answer, forward: Forward) -> Answer | None:
        with self.state.lock:
            held = self.held_endpoint(params["EndpointName"])
            if held is None:
                return None
            held.described()
            return copy.deepcopy(held.fields) | {"ProductionVariants": self.endpoint_variants(held)}

    def update_endpoint(self, params: Answer, forward: Forward) -> Answer | None:
        name, config = params["EndpointName"], params["EndpointConfigName"]
        held = self.held_endpoint(name)
        ours = self.held_config(config) is not None
        if held is None and not ours:
            return None
        if held is None or not ours:
            raise invalid(
                f"Endpoint {name} and endpoint config {config}: an endpoint for inference "
                "components and one with models do not update into each other."
            )
        with self.state.lock:
            held.fields["EndpointConfigName"] = config
            held.moved("Updating")
        return {"EndpointArn": held.fields["EndpointArn"]}

    def delete_endpoint(self, params: Answer, forward: Forward) -> Answer | None:
        name = params["EndpointName"]
        with self.state.lock:
            if name not in self.state.endpoints:
                return None
            on_it = sorted(
                c
                for c, held in self.state.components.items()
                if held.fields["EndpointName"] == name
            )
            if on_it:
                raise invalid(
                    f"Endpoint {name} has inference components ({', '.join(on_it)}): delete "
                    "them first."
                )
            del self.state.endpoints[name]
        return {}

    def list_endpoints(self, params: Answer, forward: Forward) -> Answer | None:
        keys = ("EndpointName", "EndpointArn", "CreationTime", "LastModifiedTime", "EndpointStatus")
        with self.state.lock:
            ours = [
                {key: held.fields[key] for key in keys}
                for name, held in self.state.endpoints.items()
                if params.get("NameContains", "") in name
                and params.get("StatusEquals", held.fields["EndpointStatus"])
                == held.fields["EndpointStatus"]
            ]
        return _merged(forward, "Endpoints", ours, params)

    # Tags of what the emulator holds.

    def tagged(self, resource: str) -> Held | None:
        with self.state.lock:
            for held in (
                *self.state.configs.values(),
                *self.state.endpoints.values(),
                *self.state.components.values(),
            ):
                if resource in (held.fields.get(key) for key in ARN_KEYS):
                    return held
        return None

    def list_tags(self, params: Answer, forward: Forward) -> Answer | None:
        held = self.tagged(params["ResourceArn"])
        return None if held is None else {"Tags": copy.deepcopy(held.tags)}

    def add_tags(self, params: Answer, forward: Forward) -> Answer | None:
        held = self.tagged(params["ResourceArn"])
        if held is None:
            return None
        with self.state.lock:
            added = {tag["Key"] for tag in params["Tags"]}
            held.tags = [tag for tag in held.tags if tag["Key"] not in added] + list(params["Tags"])
            return {"Tags": copy.deepcopy(held.tags)}

    # Inference components.

    def held_component(self, name: str) -> Held:
        with self.state.lock:
            held = self.state.components.get(name)
        if held is None:
            component_arn = arn(self.region, "inference-component", name)
            raise invalid(f'Could not find inference component "{component_arn}".')
        return held

    def check_specification(self, specification: Answer, creating: bool) -> None:
        base = specification.get("BaseInferenceComponentName")
        if base is not None:
            self.held_component(base)
        model = specification.get("ModelName")
        if creating and base is None and not model and not specification.get("Container"):
            raise invalid("Specification needs a ModelName or a Container.")
        if model and self.in_moto("DescribeModel", ModelName=model) is None:
            raise invalid(f'Could not find model "{arn(self.region, "model", model)}".')
        if creating and base is None and "ComputeResourceRequirements" not in specification:
            raise invalid(
                "Specification.ComputeResourceRequirements is required unless "
                "BaseInferenceComponentName is given."
            )

    def create_inference_component(self, params: Answer, forward: Forward) -> Answer | None:
        name, endpoint = params["InferenceComponentName"], params["EndpointName"]
        component_arn = arn(self.region, "inference-component", name)
        with self.state.lock:
            exists = name in self.state.components
        if exists:
            raise invalid(f'Cannot create already existing inference component "{component_arn}".')
        held = self.held_endpoint(endpoint)
        if held is None:
            if self.in_moto("DescribeEndpoint", EndpointName=endpoint) is not None:
                raise invalid(
                    f"Endpoint {endpoint} has models on its production variants: inference "
                    "components need an endpoint whose variants have no ModelName."
                )
            raise invalid(f'Could not find endpoint "{arn(self.region, "endpoint", endpoint)}".')
        with self.state.lock:
            status = held.fields["EndpointStatus"]
            variants = [v["VariantName"] for v in self.endpoint_variants(held)]
            endpoint_arn = held.fields["EndpointArn"]
        if status != "InService":
            raise invalid(
                f"Endpoint {endpoint} is {status}: inference components are placed on an "
                "endpoint InService."
            )
        variant = params.get("VariantName", variants[0] if len(variants) == 1 else None)
        if variant not in variants:
            raise invalid(
                f"Endpoint {endpoint} has no production variant {variant} (it has "
                f"{', '.join(variants)})."
            )
        if "Specification" not in params:
            raise invalid("Specification is required.")
        self.check_specification(params["Specification"], True)
        copies = params.get("RuntimeConfig", {}).get("CopyCount", 1)
        now = time.time()
        fields = {
            "InferenceComponentName": name,
            "InferenceComponentArn": component_arn,
            "EndpointName": endpoint,
            "EndpointArn": endpoint_arn,
            "VariantName": variant,
            "Specification": copy.deepcopy(params["Specification"]),
            "RuntimeConfig": {"DesiredCopyCount": copies, "CurrentCopyCount": 0},
            "InferenceComponentStatus": "Creating",
            "CreationTime": now,
            "LastModifiedTime": now,
        }
        with self.state.lock:
            self.state.components[name] = Held(
                fields, "InferenceComponentStatus", tags=list(params.get("Tags", []))
            )
        return {"InferenceComponentArn": component_arn}

    def describe_inference_component(self, params: Answer, forward: Forward) -> Answer | None:
        name = params["InferenceComponentName"]
        held = self.held_component(name)
        with self.state.lock:
            if not held.described():
                del self.state.components[name]
                component_arn = held.fields["InferenceComponentArn"]
                raise invalid(f'Could not find inference component "{component_arn}".')
            runtime = held.fields["RuntimeConfig"]
            if held.fields["InferenceComponentStatus"] == "InService":
                runtime["CurrentCopyCount"] = runtime["DesiredCopyCount"]
            return copy.deepcopy(held.fields)

    def changeable(self, name: str) -> Held:
        held = self.held_component(name)
        status = held.fields["InferenceComponentStatus"]
        if status == "Deleting":
            raise invalid(f"Inference component {name} is {status} and cannot be updated.")
        return held

    def update_inference_component(self, params: Answer, forward: Forward) -> Answer | None:
        held = self.changeable(params["InferenceComponentName"])
        if "Specification" in params:
            self.check_specification(params["Specification"], False)
        with self.state.lock:
            if "Specification" in params:
                held.fields["Specification"] = copy.deepcopy(params["Specification"])
            if "CopyCount" in params.get("RuntimeConfig", {}):
                held.fields["RuntimeConfig"]["DesiredCopyCount"] = params["RuntimeConfig"][
                    "CopyCount"
                ]
            held.moved("Updating")
        return {"InferenceComponentArn": held.fields["InferenceComponentArn"]}

    def update_inference_component_runtime_config(
        self, params: Answer, forward: Forward
    ) -> Answer | None:
        held = self.changeable(params["InferenceComponentName"])
        with self.state.lock:
            held.fields["RuntimeConfig"]["DesiredCopyCount"] = params["DesiredRuntimeConfig"][
                "CopyCount"
            ]
            held.moved("Updating")
        return {"InferenceComponentArn": held.fields["InferenceComponentArn"]}

    def delete_inference_component(self, params: Answer, forward: Forward) -> Answer | None:
        held = self.held_component(params["InferenceComponentName"])
        with self.state.lock:
            held.moved("Deleting")
        return {}

    def list_inference_components(self, params: Answer, forward: Forward) -> Answer | None:
        filters = {
            "EndpointNameEquals": "EndpointName",
            "StatusEquals": "InferenceComponentStatus",
            "VariantNameEquals": "VariantName",
        }
        keys = (
            "InferenceComponentName",
            "InferenceComponentArn",
            "EndpointName",
            "EndpointArn",
            "VariantName",
            "InferenceComponentStatus",
            "CreationTime",
            "LastModifiedTime",
        )
        with self.state.lock:
            listed = [
                {key: held.fields[key] for key in keys}
                for name, held in self.state.components.items()
                if params.get("NameContains", "") in name
                and all(
                    params.get(given, held.fields[key]) == held.fields[key]
                    for given, key in filters.items()
                )
            ]
        listed.sort(
            key=lambda item: item["CreationTime"], reverse=params.get("SortOrder") != "Ascending"
        )
        return {"InferenceComponents": listed}

    # Application Auto Scaling of a component's copies.

    def ours(self, params: Answer) -> bool:
        return (
            params.get("ServiceNamespace") == "sagemaker"
            and params.get("ScalableDimension") == COPIES
        )

    def absent_target(self, params: Answer) -> Refused:
        return Refused(
            "ObjectNotFoundException",
            f"No scalable target registered for service namespace: {params['ServiceNamespace']}, "
            f"resource ID: {params['ResourceId']}, scalable dimension: "
            f"{params['ScalableDimension']}",
        )

    def register_scalable_target(self, params: Answer, forward: Forward) -> Answer | None:
        if not self.ours(params):
            return None
        resource = params["ResourceId"]
        found = COMPONENT_ID.fullmatch(resource)
        with self.state.lock:
            known = found is not None and found["name"] in self.state.components
        if not known:
            raise invalid(f"The inference component of resource ID {resource} does not exist.")
        with self.state.lock:
            standing = self.state.targets.get(resource)
            if standing is None and ("MinCapacity" not in params or "MaxCapacity" not in params):
                raise invalid(
                    "MinCapacity and MaxCapacity are required to register a new scalable target."
                )
            target = (
                copy.deepcopy(standing)
                if standing
                else {
                    "ServiceNamespace": "sagemaker",
                    "ResourceId": resource,
                    "ScalableDimension": COPIES,
                    "RoleARN": SCALING_ROLE,
                    "CreationTime": time.time(),
                    "SuspendedState": {
                        "DynamicScalingInSuspended": False,
                        "DynamicScalingOutSuspended": False,
                        "ScheduledScalingSuspended": False,
                    },
                    "ScalableTargetARN": (
                        f"arn:aws:application-autoscaling:{self.region}:{ACCOUNT}:scalable-target/"
                        f"{uuid.uuid4().hex}"
                    ),
                }
            )
            for key in ("MinCapacity", "MaxCapacity", "SuspendedState"):
                if key in params:
                    target[key] = copy.deepcopy(params[key])
            if target["MinCapacity"] > target["MaxCapacity"]:
                raise invalid(
                    f"MinCapacity {target['MinCapacity']} is more than MaxCapacity "
                    f"{target['MaxCapacity']}."
                )
            self.state.targets[resource] = target
            return {"ScalableTargetARN": target["ScalableTargetARN"]}

    def put_scaling_policy(self, params: Answer, forward: Forward) -> Answer | None:
        if not self.ours(params):
            return None
        resource, name = params["ResourceId"], params["PolicyName"]
        kind = params.get("PolicyType", "StepScaling")
        settings = {
            "TargetTrackingScaling": "TargetTrackingScalingPolicyConfiguration",
            "StepScaling": "StepScalingPolicyConfiguration",
        }
        if kind not in settings:
            raise invalid(f"PolicyType {kind} is not supported for {COPIES}.")
        if settings[kind] not in params:
            raise invalid(f"{settings[kind]} is required for a policy of type {kind}.")
        with self.state.lock:
            if resource not in self.state.targets:
                raise self.absent_target(params)
            standing = self.state.policies.get((resource, name))
            policy_arn = (
                standing["PolicyARN"]
                if standing
                else (
                    f"arn:aws:autoscaling:{self.region}:{ACCOUNT}:scalingPolicy:{uuid.uuid4()}:"
                    f"resource/sagemaker/{resource}:policyName/{name}"
                )
            )
            alarms = []
            if kind == "TargetTrackingScaling":
                alarms = [
                    {
                        "AlarmName": alarm,
                        "AlarmARN": f"arn:aws:cloudwatch:{self.region}:{ACCOUNT}:alarm:{alarm}",
                    }
                    for alarm in (
                        f"TargetTracking-{resource}-Alarm{side}-{uuid.uuid4()}"
                        for side in ("High", "Low")
                    )
                ]
            policy = {
                "PolicyARN": policy_arn,
                "PolicyName": name,
                "ServiceNamespace": "sagemaker",
                "ResourceId": resource,
                "ScalableDimension": COPIES,
                "PolicyType": kind,
                settings[kind]: copy.deepcopy(params[settings[kind]]),
                "Alarms": alarms,
                "CreationTime": time.time(),
            }
            self.state.policies[(resource, name)] = policy
        answer: Answer = {"PolicyARN": policy_arn}
        if alarms:
            answer["Alarms"] = alarms
        return answer

    def delete_scaling_policy(self, params: Answer, forward: Forward) -> Answer | None:
        if not self.ours(params):
            return None
        key = (params["ResourceId"], params["PolicyName"])
        with self.state.lock:
            if self.state.policies.pop(key, None) is None:
                raise Refused(
                    "ObjectNotFoundException",
                    f"No scaling policy found for service namespace: sagemaker, resource ID: "
                    f"{key[0]}, scalable dimension: {COPIES}, policy name: {key[1]}",
                )
        return {}

    def deregister_scalable_target(self, params: Answer, forward: Forward) -> Answer | None:
        if not self.ours(params):
            return None
        resource = params["ResourceId"]
        with self.state.lock:
            if self.state.targets.pop(resource, None) is None:
                raise Refused(
                    "ObjectNotFoundException",
                    f"No scalable target found for service namespace: sagemaker, resource ID: "
                    f"{resource}, scalable dimension: {COPIES}",
                )
            for key in [key for key in self.state.policies if key[0] == resource]:
                del self.state.policies[key]
        return {}

    def scaling_entries(self, params: Answer, entries: list[Answer]) -> list[Answer] | None:
        """The emulator's entries a Describe call asks for; None: it asks for none of them."""
        if params.get("ServiceNamespace") != "sagemaker":
            return None
        if params.get("ScalableDimension", COPIES) != COPIES:
            return None
        given = params.get("ResourceIds") or (
            [params["ResourceId"]] if "ResourceId" in params else None
        )
        names = params.get("PolicyNames")
        return [
            copy.deepcopy(entry)
            for entry in entries
            if (given is None or entry["ResourceId"] in given)
            and (names is None or entry.get("PolicyName") in names)
        ]

    def describe_scalable_targets(self, params: Answer, forward: Forward) -> Answer | None:
        with self.state.lock:
            ours = self.scaling_entries(params, list(self.state.targets.values()))
        if ours is None:
            return None
        if params.get("ScalableDimension") == COPIES:
            return {"ScalableTargets": ours}
        return _merged(forward, "ScalableTargets", ours, params)

    def describe_scaling_policies(self, params: Answer, forward: Forward) -> Answer | None:
        with self.state.lock:
            ours = self.scaling_entries(params, list(self.state.policies.values()))
        if ours is None:
            return None
        if params.get("ScalableDimension") == COPIES:
            return {"ScalingPolicies": ours}
        return _merged(forward, "ScalingPolicies", ours, params)


ARN_KEYS = ("EndpointConfigArn", "EndpointArn", "InferenceComponentArn")
# The calls the emulator answers (each a method of Emulator; it may give them to moto).
HANDLED = frozenset(
    {
        "CreateEndpointConfig",
        "DescribeEndpointConfig",
        "DeleteEndpointConfig",
        "ListEndpointConfigs",
        "CreateEndpoint",
        "DescribeEndpoint",
        "UpdateEndpoint",
        "DeleteEndpoint",
        "ListEndpoints",
        "ListTags",
        "AddTags",
        "CreateInferenceComponent",
        "DescribeInferenceComponent",
        "UpdateInferenceComponent",
        "UpdateInferenceComponentRuntimeConfig",
        "DeleteInferenceComponent",
        "ListInferenceComponents",
        "RegisterScalableTarget",
        "PutScalingPolicy",
        "DeleteScalingPolicy",
        "DeregisterScalableTarget",
        "DescribeScalableTargets",
        "DescribeScalingPolicies",
    }
)


def _snake(operation: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", operation).lower()


def _check_variant(variant: Answer) -> None:
    """AWS's rules of a variant of an endpoint for components."""
    name = variant["VariantName"]
    if not variant.get("InstanceType"):
        raise invalid(
            f"Production variant {name} needs an InstanceType to host inference components."
        )
    scaling = variant.get("ManagedInstanceScaling")
    if not scaling:
        return
    least, most = scaling.get("MinInstanceCount"), scaling.get("MaxInstanceCount")
    if least == 0 and scaling.get("Status") != "ENABLED":
        raise invalid(
            f"Production variant {name}: MinInstanceCount 0 needs ManagedInstanceScaling "
            "Status ENABLED."
        )
    if least is not None and most is not None and least > most:
        raise invalid(
            f"Production variant {name}: MinInstanceCount {least} is more than "
            f"MaxInstanceCount {most}."
        )


def _merged(forward: Forward, items: str, ours: list[Answer], params: Answer) -> Answer:
    """moto's answer to a List/Describe call with the emulator's items first (on its first page
    only); moto's refusal is raised as it is."""
    reply = forward()
    answer: Answer = reply.json() if reply.content else {}
    if reply.status_code != 200:
        raise Refused(str(answer.get("__type", "InternalFailure")), str(answer.get("message", "")))
    if "NextToken" not in params:
        answer[items] = ours + answer.get(items, [])
    return answer


def _handler(emulator: Emulator) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body leave at once, not 40 ms apart

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            headers = forwarded(self.headers)

            def forward() -> httpx.Response:
                return emulator.http.post(emulator.moto + self.path, content=body, headers=headers)

            scope = SCOPE.search(self.headers.get("Authorization", ""))
            region = scope["region"] if scope else REGION
            try:
                answer = emulator.answer(
                    self.headers.get(TARGET, ""), json.loads(body or b"{}"), region, forward
                )
            except Refused as refusal:
                error = {"__type": refusal.code, "message": refusal.message}
                self.reply(400, json.dumps(error).encode(), {"Content-Type": JSON})
                return
            if answer is not None:
                self.reply(200, json.dumps(answer).encode(), {"Content-Type": JSON})
                return
            reply = forward()
            kept = {
                name: value
                for name, value in reply.headers.items()
                if name.lower() not in HOP_BY_HOP
            }
            self.reply(reply.status_code, reply.content, kept)

        def reply(self, status: int, content: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("x-amzn-RequestId", str(uuid.uuid4()))
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

    return Handler


@contextlib.contextmanager
def components_emulator(moto_url: str) -> Iterator[tuple[str, State]]:
    """The emulator in front of the moto server at `moto_url`: its URL and its State."""
    emulator = Emulator(moto_url)
    with emulator.http, serving(_handler(emulator)) as url:
        yield url, emulator.state
