"""Which instance types `deploy` accepts, and which image each takes: SageMaker's own lists
(botocore's model of its API, read when a command checks its options), with the type that was
most likely meant, and the family tables the kit sizes with."""

import botocore
import pytest

from vllm_sagemaker.deploy.kit.plans import instances
from vllm_sagemaker.deploy.kit.plans.instances import Catalog

ENDPOINTS = instances.catalog(transform=False)
TRANSFORMS = instances.catalog(transform=True)
LISTED = f"(botocore {botocore.__version__}'s list)"
PARALLELISM = "so it sets no tensor parallelism"


@pytest.mark.parametrize(
    ("value", "catalog", "problem", "warning"),
    [
        ("ml.g5.12xlarge", ENDPOINTS, None, None),
        ("ml.p5.4xlarge", ENDPOINTS, None, None),
        ("ml.c7i.2xlarge", ENDPOINTS, None, None),
        ("ml.inf2.xlarge", ENDPOINTS, None, None),
        ("ml.t2.medium", ENDPOINTS, None, None),
        ("ml.g5.2xlarge", TRANSFORMS, None, None),
        # Case, `ml.` and a misspelled size: what SageMaker would refuse, and what was meant.
        (
            "ML.G5.2XLARGE",
            ENDPOINTS,
            "--instance-type 'ML.G5.2XLARGE': SageMaker instance types are in lower case: did "
            "you mean ml.g5.2xlarge?",
            None,
        ),
        ("ml.G5.12xlarge", TRANSFORMS, "lower case: did you mean ml.g5.12xlarge?", None),
        (
            "ml.g5.12xlarg",
            ENDPOINTS,
            f"--instance-type 'ml.g5.12xlarg': not an instance type SageMaker endpoints take "
            f"{LISTED}: did you mean ml.g5.12xlarge?",
            None,
        ),
        ("ml.g6e.12xlarg", TRANSFORMS, "transform jobs take", None),
        ("ml.g5.96xlarge", ENDPOINTS, "did you mean ml.g5.16xlarge?", None),
        (
            "g5.12xlarge",
            ENDPOINTS,
            "--instance-type 'g5.12xlarge': SageMaker instance types start with 'ml.': did you "
            "mean ml.g5.12xlarge?",
            None,
        ),
        ("G5.2XLARGE", ENDPOINTS, "start with 'ml.': did you mean ml.g5.2xlarge?", None),
        ("g9.mega", ENDPOINTS, "start with 'ml.': did you mean ml.g9.mega?", None),
        ("", ENDPOINTS, "--instance-type '': SageMaker instance types start with 'ml.' (", None),
        ("ml.g5", ENDPOINTS, "not of the form ml.<family>.<size> (ml.g5.12xlarge)", None),
        ("ml.g5.12xlarge.extra", ENDPOINTS, "not of the form", None),
        # A family SageMaker has, but not for transform jobs.
        (
            "ml.p4d.24xlarge",
            TRANSFORMS,
            f"--instance-type ml.p4d.24xlarge: transform jobs do not run on ml.p4d {LISTED}; the "
            "families they run on: c4, c5,",
            None,
        ),
        ("ml.c7g.xlarge", TRANSFORMS, "transform jobs do not run on ml.c7g", None),
        ("ml.p4d.24xlarge", ENDPOINTS, None, None),
        # A family SageMaker does not have (yet): a warning, naming a type close to it if any.
        ("ml.g9.mega", ENDPOINTS, None, f"the kit does not know family g9, {PARALLELISM}"),
        (
            "ml.g5x.2xlarge",
            ENDPOINTS,
            None,
            f"the kit does not know family g5x (botocore {botocore.__version__} does not list "
            f"it either: did you mean ml.g5.2xlarge?), {PARALLELISM}",
        ),
        # One SageMaker has and the kit cannot size.
        ("ml.p6-b200.48xlarge", ENDPOINTS, None, f"does not know family p6-b200, {PARALLELISM}"),
    ],
)
def test_instance_types(
    value: str, catalog: Catalog, problem: str | None, warning: str | None
) -> None:
    found = instances.instance_type_problem(value, catalog)
    assert (found is None) is (problem is None), found
    if problem:
        assert found is not None and problem in found, found
        assert found.startswith((f"--instance-type {value!r}: ", f"--instance-type {value}: "))
        return
    told = instances.instance_type_warning(value, catalog)
    assert (told is None) is (warning is None), told
    if warning:
        assert told is not None and warning in told and "SM_VLLM_TENSOR_PARALLEL_SIZE" in told


# SageMaker as an older botocore lists it: g6e, not yet g7e.
OLDER = Catalog(
    "endpoints",
    frozenset({"ml.g6e.2xlarge", "ml.g6e.12xlarge"}),
    frozenset({"ml.g6e.2xlarge", "ml.g6e.12xlarge"}),
    "botocore 1.34.0",
)


@pytest.mark.parametrize(
    ("value", "problem", "warning"),
    [
        ("ml.g6e.2xlarge", None, None),
        (
            "ml.g6e.2xlarg",
            "--instance-type 'ml.g6e.2xlarg': not an instance type SageMaker endpoints take "
            "(botocore 1.34.0's list): did you mean ml.g6e.2xlarge?",
            None,
        ),
        # Newer than the list: a warning, never a refusal.
        (
            "ml.g7e.2xlarge",
            None,
            "--instance-type ml.g7e.2xlarge: the kit does not know family g7e (botocore 1.34.0 "
            "does not list it either: did you mean ml.g6e.2xlarge?), so it sets no tensor "
            "parallelism and no inference AMI; with several GPUs, add --env "
            "SM_VLLM_TENSOR_PARALLEL_SIZE=<GPUs>",
        ),
        ("ml.x9.mega", None, "--instance-type ml.x9.mega: the kit does not know family x9, so"),
    ],
)
def test_a_family_newer_than_botocores_list_is_a_warning(
    value: str, problem: str | None, warning: str | None
) -> None:
    assert instances.instance_type_problem(value, OLDER) == problem
    if problem is None:  # `deploy` prints the warnings only when nothing is refused
        told = instances.instance_type_warning(value, OLDER)
        assert (told is None) is (warning is None), told
        assert told is None or (warning is not None and told.startswith(warning)), told


def test_the_known_families_are_botocores() -> None:
    """The table's source: every family the kit knows is one SageMaker hosts on (botocore's
    model of its API), and the kit can size every type of its GPU families that SageMaker
    lists."""
    assert ENDPOINTS.families() >= instances.KNOWN_FAMILIES
    assert TRANSFORMS.accepted <= ENDPOINTS.known == ENDPOINTS.accepted | TRANSFORMS.accepted
    sized = {name for name in ENDPOINTS.known if instances.family(name) in instances.GPU_FAMILIES}
    assert all(instances.gpu_count(name) for name in sized)


@pytest.mark.parametrize(
    ("instance_type", "target", "warning"),
    [
        ("ml.g5.12xlarge", "gpu", None),
        ("ml.p4d.24xlarge", "gpu", None),
        ("ml.g4dn.xlarge", "gpu", None),
        ("ml.c7i.8xlarge", "cpu", None),
        ("ml.m7i.4xlarge", "cpu", None),
        ("ml.r7i.2xlarge", "cpu", None),
        ("ml.c6i.2xlarge", "cpu", None),
        ("ml.m5.xlarge", "cpu", None),
        ("ml.t2.medium", "cpu", None),
        ("ml.c7g.4xlarge", None, "Graviton (arm64); the CPU image runs there only if"),
        ("ml.r7gd.xlarge", None, "Graviton (arm64)"),
        ("ml.inf2.xlarge", None, "neither image drives its accelerators"),
        ("ml.trn1.2xlarge", None, "neither image drives its accelerators"),
        ("ml.dl1.24xlarge", None, "neither image drives its accelerators"),
        ("ml.g9.mega", None, None),
        ("ml.p6-b200.48xlarge", None, None),
        ("g5.12xlarge", None, None),
    ],
)
def test_which_image_an_instance_type_takes(
    instance_type: str, target: str | None, warning: str | None
) -> None:
    assert instances.image_engine(instance_type) == target
    told = instances.instance_image_warning(instance_type)
    assert (told is None) is (warning is None), told
    if warning:
        assert told is not None and told.startswith(f"--instance-type {instance_type}: " + warning)


def test_the_families_are_sorted_once() -> None:
    """Every family without an NVIDIA GPU is a CPU, Graviton or accelerator family, once."""
    groups = (instances.CPU_FAMILIES, instances.GRAVITON_FAMILIES, instances.ACCELERATOR_FAMILIES)
    every = [family for group in groups for family in group]
    assert len(every) == len(set(every)) and not set(every) & instances.GPU_FAMILIES
