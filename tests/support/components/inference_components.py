"""SageMaker's inference components, which moto 5.2.5 lacks, on the endpoints for components of
`endpoints`, from AWS's API reference and developer guide: Create (the endpoint must exist and
be one for components, InService, the variant one of its own; `Specification` names a model moto
holds or a `Container`, and has `ComputeResourceRequirements` unless it names a
`BaseInferenceComponentName`), Describe (with `RuntimeConfig` `DesiredCopyCount` and
`CurrentCopyCount`, its copies all current once InService), Update, UpdateRuntimeConfig, Delete
and List (its filters). A CopyCount of 0 is taken on any endpoint for components: that AWS wants
MinInstanceCount 0 for it was not confirmed, so it is not enforced.

Ours, by analogy with AWS's confirmed words of endpoints (`endpoints`): the same words for
models and components (`Could not find inference component "<arn>".`); unconfirmed: the messages
of a component on an endpoint with models or not InService and of a variant it lacks.
"""

import copy
import time

from tests.support.components.common import Answer, Forward, Held, arn, invalid
from tests.support.components.endpoints import Endpoints


class SageMaker(Endpoints):
    """The calls of SageMaker's control plane the emulator answers: endpoint configs, endpoints
    and tags (`Endpoints`), and inference components."""

    OPERATIONS = Endpoints.OPERATIONS | {
        "CreateInferenceComponent",
        "DescribeInferenceComponent",
        "UpdateInferenceComponent",
        "UpdateInferenceComponentRuntimeConfig",
        "DeleteInferenceComponent",
        "ListInferenceComponents",
    }

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
