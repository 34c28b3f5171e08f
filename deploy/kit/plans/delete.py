"""`deploy delete`'s calls: the endpoint NAME, the scaling policies and scalable targets of its
variants, and every endpoint config and model named NAME or `NAME-<UTC time>` (the kit's versions
of it) that no other endpoint runs on; nothing else (`NAME-prod` is another's)."""

from vllm_sagemaker.deploy.base.calls import Call
from vllm_sagemaker.deploy.base.reads import Reads
from vllm_sagemaker.deploy.kit.plans.names import is_version_of
from vllm_sagemaker.deploy.kit.plans.scaling import scaling_deletions, standing


def _runs_on(reads: Reads, endpoint: str) -> tuple[str, list[str]]:
    """The endpoint config an endpoint runs on, and that config's models."""
    found = reads.describe(Call("sagemaker", "DescribeEndpoint", {"EndpointName": endpoint}))
    config = (found or {}).get("EndpointConfigName", "")
    read = Call("sagemaker", "DescribeEndpointConfig", {"EndpointConfigName": config})
    variants = (reads.describe(read) or {}).get("ProductionVariants", []) if config else []
    return config, [variant["ModelName"] for variant in variants]


def delete_plan(reads: Reads, name: str) -> tuple[list[Call], list[str]]:
    """What `deploy delete --name NAME` removes, and what it keeps (not its, or in use)."""
    endpoint = reads.describe(Call("sagemaker", "DescribeEndpoint", {"EndpointName": name}))
    kept: list[str] = []
    if endpoint:
        config, models = _runs_on(reads, name)
        kept = [
            f"keeps {kind} {used}: endpoint {name} uses it, but the name is not {name}'s"
            for kind, used in [("endpoint config", config), *(("model", m) for m in models)]
            if not is_version_of(name, used)
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
        config, used = _runs_on(reads, other)
        for kind, names, held in (("endpoint config", configs, [config]), ("model", models, used)):
            for taken in [n for n in names if n in held]:
                names.remove(taken)
                kept.append(f"keeps {kind} {taken}: endpoint {other} runs on it")
    # The endpoint first: while it stands (its deletion refused), it keeps its scaling.
    return [
        *([Call("sagemaker", "DeleteEndpoint", {"EndpointName": name})] if endpoint else []),
        *scaling_deletions(name, *standing(reads, name)),
        *(Call("sagemaker", "DeleteEndpointConfig", {"EndpointConfigName": c}) for c in configs),
        *(Call("sagemaker", "DeleteModel", {"ModelName": m}) for m in models),
    ], kept
