"""What `deploy` checks of `--instance-type` before it calls AWS, against the types SageMaker
takes (`plans.instances.Catalog`, botocore's lists) and the families the kit can size.

A type SageMaker would refuse is refused (exit status 2) with the type it most likely meant: one
in upper case, without `ml.`, a size its family does not have, or a family the command's API does
not take. A family SageMaker does not have at all is only a warning, as is one the kit cannot
size: SageMaker adds families before botocore lists them.
"""

from vllm_sagemaker.deploy.kit.plans import instances
from vllm_sagemaker.deploy.kit.plans.instances import Catalog


def instance_type_problem(value: str, catalog: Catalog) -> str | None:
    """Why SageMaker would refuse `value` for what `catalog` takes (one line), or None."""
    if value in catalog.accepted:
        return None
    family = instances.family(instances.canonical(value))
    listed = f"{catalog.source}'s list"
    if not value.lower().startswith("ml."):
        why = "SageMaker instance types start with 'ml.'"
    elif value != value.lower():
        why = "SageMaker instance types are in lower case"
    elif not family:
        why = "not of the form ml.<family>.<size>"
    elif family in catalog.families():
        why = f"not an instance type SageMaker {catalog.takes} take ({listed})"
    elif family in catalog.families(catalog.known):
        return (
            f"--instance-type {value}: {catalog.takes} do not run on ml.{family} ({listed}); "
            f"the families they run on: {', '.join(sorted(catalog.families()))}"
        )
    else:
        return None
    wanted = instances.canonical(value)
    meant = catalog.meant(value) or (wanted if instances.family(wanted) else None)
    return f"--instance-type {value!r}: {why}" + (
        f": did you mean {meant}?" if meant else " (ml.g5.12xlarge)"
    )


def instance_type_warning(value: str, catalog: Catalog) -> str | None:
    """What the kit cannot size for a well-formed instance type: an unknown family, or a size
    of a GPU family whose GPU count it does not hold; for a type SageMaker does not have, the one
    close to it that it has."""
    parts = instances.family_and_size(value)
    if parts is None:
        return None
    family, size = parts
    if family in instances.KNOWN_FAMILIES and (
        family not in instances.GPU_FAMILIES or instances.gpu_count(value)
    ):
        return None
    unknown = f"family {family}" if family not in instances.KNOWN_FAMILIES else f"size {size}"
    meant = None if value in catalog.known else catalog.meant(value)
    unlisted = (
        f" ({catalog.source} does not list it either: did you mean {meant}?)" if meant else ""
    )
    return (
        f"--instance-type {value}: the kit does not know {unknown}{unlisted}, so it sets no "
        "tensor parallelism and no inference AMI; with several GPUs, add --env "
        "SM_VLLM_TENSOR_PARALLEL_SIZE=<GPUs>"
    )


def instance_image_warning(value: str) -> str | None:
    """What neither image is made for: Graviton's arm64 CPUs, and accelerators."""
    if instances.graviton(value):
        return (
            f"--instance-type {value}: Graviton (arm64); the CPU image runs there only if it was "
            "built for arm64 (a builder builds for the machine it runs on), which nobody has "
            "tried yet"
        )
    if instances.family(value) in instances.ACCELERATOR_FAMILIES:
        return (
            f"--instance-type {value}: neither image drives its accelerators (Inferentia, "
            "Trainium, Gaudi); the CPU image would run on its host CPUs only"
        )
    return None
