"""`deploy delete`'s calls: the endpoint NAME, the scaling policies and scalable targets of its
variants, and every endpoint config and model named NAME or `NAME-<UTC time>` (the kit's versions
of it) that no other endpoint runs on; nothing else (`NAME-prod` is another's)."""

from vllm_sagemaker.deploy.base.calls import Call
from vllm_sagemaker.deploy.base.reads import Reads
from vllm_sagemaker.deploy.kit.plans.names import is_version_of
from vllm_sagemaker.deploy.kit.plans.scaling import owned_by, scaling_deletions, standing


def _runs_on(reads: Reads, endpoint: str) -> list[tuple[str, str]] | None:
    """What an endpoint runs on, as (kind, name): its config, that config's models; None when the
    endpoint does not exist."""
    found = reads.describe(Call("sagemaker", "DescribeEndpoint", {"EndpointName": endpoint}))
    if not found:
        return None
    config = found["EndpointConfigName"]
    read = Call("sagemaker", "DescribeEndpointConfig", {"EndpointConfigName": config})
    variants = (reads.describe(read) or {}).get("ProductionVariants", [])
    return [("endpoint config", config), *(("model", v["ModelName"]) for v in variants)]


def delete_plan(reads: Reads, name: str) -> tuple[list[Call], list[str]]:
    """What `deploy delete --name NAME` removes, and what it keeps (not its, or in use)."""
    used = _runs_on(reads, name)
    kept = [
        f"keeps {kind} {taken}: endpoint {name} uses it, but the name is not {name}'s"
        for kind, taken in used or []
        if not is_version_of(name, taken)
    ]
    configs, models = (
        [
            found
            for found in dict.fromkeys(reads.names(operation, items, key, NameContains=name))
            if is_version_of(name, found)
        ]
        for operation, items, key in (
            ("ListEndpointConfigs", "EndpointConfigs", "EndpointConfigName"),
            ("ListModels", "Models", "ModelName"),
        )
    )
    others = [e for e in reads.names("ListEndpoints", "Endpoints", "EndpointName") if e != name]
    for other in others if configs or models else []:
        for kind, taken in _runs_on(reads, other) or []:
            names = configs if kind == "endpoint config" else models
            if taken in names:
                names.remove(taken)
                kept.append(f"keeps {kind} {taken}: endpoint {other} runs on it")
    # The endpoint first: while it stands (its deletion refused), it keeps its scaling.
    return [
        *([Call("sagemaker", "DeleteEndpoint", {"EndpointName": name})] if used else []),
        *scaling_deletions(owned_by(name), *standing(reads, owned_by(name))),
        *(Call("sagemaker", "DeleteEndpointConfig", {"EndpointConfigName": c}) for c in configs),
        *(Call("sagemaker", "DeleteModel", {"ModelName": m}) for m in models),
    ], kept
