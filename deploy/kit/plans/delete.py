"""`deploy delete`'s calls: the endpoint NAME, the scaling policies, scalable targets and wake
alarm of its variants, and every endpoint config and model named NAME or `NAME-<UTC time>` (the
kit's versions of it) that no other endpoint runs on; an endpoint for inference components
loses its components first. A component (`--component`) goes with its scaling, its wake alarm
and its models (named after it) that no other component runs. Nothing else (`NAME-prod` is
another's)."""

from typing import Any

from vllm_sagemaker.deploy.base.calls import Call
from vllm_sagemaker.deploy.base.errors import ClientError
from vllm_sagemaker.deploy.base.reads import Reads
from vllm_sagemaker.deploy.kit.plans import component as components
from vllm_sagemaker.deploy.kit.plans.names import is_version_of
from vllm_sagemaker.deploy.kit.plans.scaling import (
    alarm_deletion,
    owned_by,
    scaling_deletions,
    standing,
    standing_alarms,
    variant,
)


def _variants(reads: Reads, endpoint: str) -> tuple[str, list[Any]] | None:
    """An endpoint's config and that config's variants; None when the endpoint does not exist."""
    found = reads.describe(Call("sagemaker", "DescribeEndpoint", {"EndpointName": endpoint}))
    if not found:
        return None
    config = found["EndpointConfigName"]
    read = Call("sagemaker", "DescribeEndpointConfig", {"EndpointConfigName": config})
    return config, (reads.describe(read) or {}).get("ProductionVariants", [])


def _runs_on(found: tuple[str, list[Any]] | None) -> list[tuple[str, str]] | None:
    """What an endpoint runs on (`_variants`), as (kind, name): its config, that config's
    models; None when the endpoint does not exist."""
    if found is None:
        return None
    config, variants = found
    models = [("model", v["ModelName"]) for v in variants if "ModelName" in v]
    return [("endpoint config", config), *models]


def _components(reads: Reads, endpoint: str, found: tuple[str, list[Any]] | None) -> list[str]:
    """The inference components on `endpoint` (`found`: its variants), read only for an
    endpoint for components (its variants run no model)."""
    if found is None or any("ModelName" in v for v in found[1]):
        return []
    listed = reads.items(
        "sagemaker", "ListInferenceComponents", "InferenceComponents", EndpointNameEquals=endpoint
    )
    return [item["InferenceComponentName"] for item in listed]


def _read(name: str) -> Call:
    return Call("sagemaker", "DescribeInferenceComponent", {"InferenceComponentName": name})


def _users(reads: Reads, endpoints: list[str], skip: str = "") -> dict[tuple[str, str], str]:
    """Who runs what of `endpoints`, by (kind, name): each endpoint its config and its variants'
    models; on an endpoint for components, each component (but `skip`) its model."""
    users: dict[tuple[str, str], str] = {}
    for endpoint in endpoints:
        found = _variants(reads, endpoint)
        for held in _runs_on(found) or []:
            users.setdefault(held, f"endpoint {endpoint}")
        for component in _components(reads, endpoint, found):
            spec = (reads.describe(_read(component)) or {}).get("Specification", {})
            if component != skip and spec.get("ModelName"):
                users.setdefault(("model", spec["ModelName"]), f"inference component {component}")
    return users


def _endpoints(reads: Reads) -> list[str]:
    return reads.names("ListEndpoints", "Endpoints", "EndpointName")


def component_plan(reads: Reads, endpoint: str, name: str) -> list[Call]:
    """The component `name` of `endpoint`: first the component (while it stands, its deletion
    refused, it keeps its scaling), then its scaling and wake alarm, then its models that no
    other component or endpoint runs."""
    found = reads.describe(_read(name))
    if found and found.get("EndpointName") != endpoint:
        raise ClientError(
            f"inference component {name} runs on endpoint {found.get('EndpointName')}, not "
            f"{endpoint}: give --name {found.get('EndpointName')}"
        )
    target = components.copies_of(name)
    models = [
        model
        for model in dict.fromkeys(
            reads.names("ListModels", "Models", "ModelName", NameContains=name)
        )
        if is_version_of(name, model)
    ]
    users = _users(reads, _endpoints(reads), name) if models else {}
    return [
        *(
            [Call("sagemaker", "DeleteInferenceComponent", {"InferenceComponentName": name})]
            if found
            else []
        ),
        *scaling_deletions(target.holds, *standing(reads, target.holds)),
        *alarm_deletion(standing_alarms(reads, [target])),
        *(
            Call("sagemaker", "DeleteModel", {"ModelName": m})
            for m in models
            if ("model", m) not in users
        ),
    ]


def delete_plan(reads: Reads, name: str) -> tuple[list[Call], list[str]]:
    """What `deploy delete --name NAME` removes, and what it keeps (not its, or in use)."""
    found = _variants(reads, name)
    used = _runs_on(found)
    kept = [
        f"keeps {kind} {taken}: endpoint {name} uses it, but the name is not {name}'s"
        for kind, taken in used or []
        if not is_version_of(name, taken)
    ]
    # Its components first, with their models, then the endpoint: while it stands (its deletion
    # refused), it keeps its scaling.
    parts = [
        call
        for each in _components(reads, name, found)
        for call in component_plan(reads, name, each)
    ]
    gone = {call.params.get("ModelName") for call in parts}
    configs, models = (
        [
            held
            for held in dict.fromkeys(reads.names(operation, items, key, NameContains=name))
            if is_version_of(name, held) and held not in gone
        ]
        for operation, items, key in (
            ("ListEndpointConfigs", "EndpointConfigs", "EndpointConfigName"),
            ("ListModels", "Models", "ModelName"),
        )
    )
    others = [e for e in _endpoints(reads) if e != name] if configs or models else []
    for (kind, taken), who in _users(reads, others).items():
        names = configs if kind == "endpoint config" else models
        if taken in names:
            names.remove(taken)
            kept.append(f"keeps {kind} {taken}: {who} runs on it")
    return [
        *parts,
        *([Call("sagemaker", "DeleteEndpoint", {"EndpointName": name})] if used else []),
        *scaling_deletions(owned_by(name), *standing(reads, owned_by(name))),
        *alarm_deletion(standing_alarms(reads, [variant(name)])),
        *(Call("sagemaker", "DeleteEndpointConfig", {"EndpointConfigName": c}) for c in configs),
        *(Call("sagemaker", "DeleteModel", {"ModelName": m}) for m in models),
    ], kept
