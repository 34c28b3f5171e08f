"""SageMaker instance types and AMIs: the types the API takes (the installed botocore's enums,
`catalog`), the families the kit sizes (botocore 1.44.8's; a newer family warns, never refused)."""

import difflib
import functools
import re
from dataclasses import dataclass

from vllm_sagemaker.deploy.base.errors import Problem

# `ml.<family>.<size>`: `ml.g5.12xlarge`, `ml.p6-b200.48xlarge`, `ml.t2.medium`.
INSTANCE_TYPE = re.compile(r"ml\.([a-z0-9]+(?:-[a-z0-9]+)*)\.([a-z0-9]+(?:-[a-z0-9]+)*)")

# GPUs per instance type for the NVIDIA families SageMaker hosts LLMs on (size -> GPU count).
_G = {"xlarge": 1, "2xlarge": 1, "4xlarge": 1, "8xlarge": 1, "16xlarge": 1, "12xlarge": 4}
_G_LARGE = {**_G, "24xlarge": 4, "48xlarge": 8}
_GPUS_BY_SIZE = {
    "g4dn": _G, "g5": _G_LARGE, "g6": _G_LARGE, "g6e": _G_LARGE,
    "p3": {"2xlarge": 1, "8xlarge": 4, "16xlarge": 8},
    "p4d": {"24xlarge": 8}, "p4de": {"24xlarge": 8},
    "p5": {"4xlarge": 1, "48xlarge": 8}, "p5e": {"48xlarge": 8}, "p5en": {"48xlarge": 8},
}  # fmt: skip
# The families without an NVIDIA GPU that SageMaker hosts on: x86_64 CPUs (Intel and AMD; the
# 7i families are Intel Sapphire Rapids, with AMX), Graviton (arm64, the `g` after the
# generation), and accelerators the image drives neither with vLLM's CUDA build nor its CPU build:
# AWS Inferentia and Trainium (inf, trn: Neuron devices) and Habana Gaudi (dl1). botocore's model
# also lists NVIDIA families left out of _GPUS_BY_SIZE (p2's K80s, which vLLM does not support,
# and g7, g7e, p6-b200, p6-b300, p6e-gb200, whose GPU counts the kit does not hold): they warn.
CPU_FAMILIES = (
    "c4", "c5", "c5d", "c6i", "c6in", "c7i",
    "m4", "m5", "m5d", "m6i", "m7i",
    "r5", "r5d", "r6i", "r7i", "t2",
)  # fmt: skip
GRAVITON_FAMILIES = (
    "c6g", "c6gd", "c6gn", "c7g", "c8g", "m6g", "m6gd", "m8g", "r6g", "r6gd", "r7gd", "r8g",
)  # fmt: skip
# Graviton's families, those SageMaker has and any it adds: a `g` right after the generation.
GRAVITON = re.compile(r"[a-z]\d+g[a-z]*")
ACCELERATOR_FAMILIES = ("inf1", "inf2", "trn1", "trn1n", "trn2", "dl1")
OTHER_FAMILIES = CPU_FAMILIES + GRAVITON_FAMILIES + ACCELERATOR_FAMILIES
GPU_FAMILIES = frozenset(_GPUS_BY_SIZE)
KNOWN_FAMILIES = GPU_FAMILIES | frozenset(OTHER_FAMILIES)

# The inference AMI whose NVIDIA driver (580, CUDA 13.0) runs the vLLM 0.32 image (CUDA 12.9).
INFERENCE_AMI = "al2023-ami-sagemaker-inference-gpu-4-1"
# The shapes of botocore's SageMaker model that list the instance types of endpoints and of
# transform jobs (whose instances only offer NVIDIA drivers 470 and 535, CUDA <= 12.2).
ENDPOINT_SHAPE = "ProductionVariantInstanceType"
TRANSFORM_SHAPE = "TransformInstanceType"
# How alike a type must be to one SageMaker has to be named as what was meant, when its family
# is not one SageMaker has (a new family, or a misspelled one).
CLOSE = 0.85


@dataclass(frozen=True)
class Catalog:
    """The types `accepted` by the API a command calls (`takes`), `known` by any, per `source`."""

    takes: str
    accepted: frozenset[str]
    known: frozenset[str]
    source: str

    def families(self, types: frozenset[str] | None = None) -> set[str]:
        return {family(name) for name in (self.accepted if types is None else types)}

    def meant(self, value: str) -> str | None:
        """The accepted type `value` most likely meant (itself canonical, or the nearest)."""
        wanted = canonical(value)
        if wanted in self.accepted:
            return wanted
        same = [name for name in self.accepted if name.startswith(f"ml.{family(wanted)}.")]
        nearest = difflib.get_close_matches(wanted, same, n=1, cutoff=0) or (
            difflib.get_close_matches(wanted, self.accepted, n=1, cutoff=CLOSE)
        )
        return nearest[0] if nearest else None


@functools.cache
def catalog(transform: bool) -> Catalog:
    import botocore  # Here: `vllm-sagemaker --help` loads no botocore.
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    endpoints = frozenset(model.shape_for(ENDPOINT_SHAPE).enum)
    transforms = frozenset(model.shape_for(TRANSFORM_SHAPE).enum)
    return Catalog(
        "transform jobs" if transform else "endpoints",
        transforms if transform else endpoints,
        endpoints | transforms,
        f"botocore {botocore.__version__}",
    )


def canonical(value: str) -> str:
    lower = value.lower()
    return lower if lower.startswith("ml.") else "ml." + lower


def family(instance_type: str) -> str:
    """`ml.g5.12xlarge` -> "g5"; "" for anything not of that shape."""
    return family_and_size(instance_type)[0]


def family_and_size(instance_type: str) -> tuple[str, str]:
    """`ml.g5.12xlarge` -> ("g5", "12xlarge"); ("", "") for anything not of that shape."""
    match = INSTANCE_TYPE.fullmatch(instance_type)
    return (match[1], match[2]) if match else ("", "")


def gpu_count(instance_type: str) -> int:
    """GPUs of `ml.g5.12xlarge` and the like; 0 for CPU or unknown types."""
    family, size = family_and_size(instance_type)
    return _GPUS_BY_SIZE.get(family, {}).get(size, 0)


def graviton(instance_type: str) -> bool:
    return bool(GRAVITON.fullmatch(family(instance_type)))


def image_engine(instance_type: str) -> str | None:
    """The engine (`deploy image --target`) an instance type takes; None for Graviton (the kit's
    images are x86_64), accelerators and families the kit does not know."""
    kind = family(instance_type)
    return "gpu" if kind in GPU_FAMILIES else "cpu" if kind in CPU_FAMILIES else None


def instance_type_problem(value: str, catalog: Catalog) -> Problem | None:
    """Why SageMaker would refuse `value` for what `catalog` takes (one line), or None."""
    if value in catalog.accepted:
        return None
    kind = family(canonical(value))
    listed = f"{catalog.source}'s list"
    if not value.lower().startswith("ml."):
        why = "SageMaker instance types start with 'ml.'"
    elif value != value.lower():
        why = "SageMaker instance types are in lower case"
    elif not kind:
        why = "not of the form ml.<family>.<size>"
    elif kind in catalog.families():
        why = f"not an instance type SageMaker {catalog.takes} take ({listed})"
    elif kind in catalog.families(catalog.known):
        why = f"{catalog.takes} do not run on ml.{kind} ({listed}); the families they run on: "
        return Problem("--instance-type", why + ", ".join(sorted(catalog.families())), value)
    else:
        return None
    wanted = canonical(value)
    meant = catalog.meant(value) or (wanted if family(wanted) else None)
    meaning = f": did you mean {meant}?" if meant else " (ml.g5.12xlarge)"
    return Problem("--instance-type", why + meaning, repr(value))


def instance_type_warning(value: str, catalog: Catalog) -> Problem | None:
    """An instance type the kit cannot size: an unknown family, or a GPU size it does not hold."""
    family, size = family_and_size(value)
    sized = family in KNOWN_FAMILIES and (family not in GPU_FAMILIES or gpu_count(value))
    if not family or sized:
        return None
    unknown = f"family {family}" if family not in KNOWN_FAMILIES else f"size {size}"
    meant = None if value in catalog.known else catalog.meant(value)
    unlisted = (
        f" ({catalog.source} does not list it either: did you mean {meant}?)" if meant else ""
    )
    why = (
        f"the kit does not know {unknown}{unlisted}, so it sets no tensor parallelism and no "
        "inference AMI; with several GPUs, add --env SM_VLLM_TENSOR_PARALLEL_SIZE=<GPUs>"
    )
    return Problem("--instance-type", why, value)


def instance_image_warning(value: str) -> Problem | None:
    """What neither image is made for: Graviton's arm64 CPUs, and accelerators."""
    if graviton(value):
        why = (
            "Graviton (arm64); the CPU image runs there only if it was built for arm64 (a builder "
            "builds for the machine it runs on), which nobody has tried yet"
        )
        return Problem("--instance-type", why, value)
    if family(value) in ACCELERATOR_FAMILIES:
        why = (
            "neither image drives its accelerators (Inferentia, Trainium, Gaudi); the CPU image "
            "would run on its host CPUs only"
        )
        return Problem("--instance-type", why, value)
    return None
