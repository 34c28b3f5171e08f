"""`deploy delete`'s calls: the scaling policies and scalable targets of the endpoint NAME's
variants, the endpoint NAME, and every endpoint config and model named NAME or `NAME-<UTC time>`
(the kit's versions of it); nothing else (`NAME-prod` is another's)."""

from collections.abc import Sequence

from vllm_sagemaker.deploy.base.calls import Call
from vllm_sagemaker.deploy.base.reads import Reads
from vllm_sagemaker.deploy.kit.plans.names import is_version_of
from vllm_sagemaker.deploy.kit.plans.scaling import scaling_deletions, standing


def delete_calls(endpoint: str | None, configs: Sequence[str], models: Sequence[str]) -> list[Call]:
    """What `deploy delete` removes: the endpoint (None: there is none), then the endpoint
    configs and models, each once, in the order given."""
    return [
        *([Call("sagemaker", "DeleteEndpoint", {"EndpointName": endpoint})] if endpoint else []),
        *(
            Call("sagemaker", "DeleteEndpointConfig", {"EndpointConfigName": c})
            for c in dict.fromkeys(configs)
        ),
        *(Call("sagemaker", "DeleteModel", {"ModelName": m}) for m in dict.fromkeys(models)),
    ]


def delete_plan(reads: Reads, name: str) -> tuple[list[Call], list[str]]:
    """What `deploy delete --name NAME` removes, and what it keeps that the endpoint uses under
    another name."""
    endpoint = reads.describe(Call("sagemaker", "DescribeEndpoint", {"EndpointName": name}))
    kept: list[str] = []
    if endpoint:
        current = endpoint["EndpointConfigName"]
        config = reads.describe(
            Call("sagemaker", "DescribeEndpointConfig", {"EndpointConfigName": current})
        )
        used = [("endpoint config", current)] + [
            ("model", variant["ModelName"])
            for variant in (config or {}).get("ProductionVariants", [])
        ]
        kept = [
            f"keeps {kind} {used_name}: endpoint {name} uses it, but the name is not {name}'s"
            for kind, used_name in used
            if not is_version_of(name, used_name)
        ]
    configs, models = (
        [
            found
            for found in reads.names(operation, items, key, NameContains=name)
            if is_version_of(name, found)
        ]
        for operation, items, key in (
            ("ListEndpointConfigs", "EndpointConfigs", "EndpointConfigName"),
            ("ListModels", "Models", "ModelName"),
        )
    )
    scaled = scaling_deletions(name, *standing(reads, name))
    return scaled + delete_calls(name if endpoint else None, configs, models), kept
