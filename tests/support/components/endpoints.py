"""SageMaker's endpoint configs and endpoints for inference components (moto holds only those
with models), and the tags of what the emulator holds, from AWS's API reference and developer
guide:

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
  moto's, ListTags and AddTags of its ARNs); an endpoint is deleted at once, as moto's are, and
  not while it still has components.

AWS's words confirmed in public issues: `Could not find endpoint "<arn>".` and `Cannot create
already existing endpoint "<arn>".`. Ours, by analogy or unconfirmed: the same words for
configs, and the messages of an endpoint deleted with its components, of a config mixing
variants, and of a missing role or instance type.
"""

import copy
import time
from typing import Any

import boto3
import botocore.exceptions

from tests.support.components.common import (
    Answer,
    Calls,
    Forward,
    Held,
    State,
    arn,
    invalid,
    merged,
    snake,
)

ARN_KEYS = ("EndpointConfigArn", "EndpointArn", "InferenceComponentArn")


class Endpoints(Calls):
    """The calls of SageMaker's endpoint configs, endpoints and tags; what moto holds is looked
    up with boto3 at `moto`."""

    OPERATIONS = frozenset(
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
        }
    )

    def __init__(self, state: State, moto: str) -> None:
        super().__init__(state)
        self.moto = moto
        self.clients: dict[tuple[str, str], Any] = {}

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
            answer: Answer = getattr(client, snake(operation))(**params)
        except botocore.exceptions.ClientError:
            return None
        return answer

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
            check_variant(variant)
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
        return merged(forward, "EndpointConfigs", ours, params)

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
        return merged(forward, "Endpoints", ours, params)

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


def check_variant(variant: Answer) -> None:
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
