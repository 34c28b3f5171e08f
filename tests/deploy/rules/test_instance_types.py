"""Which instance types `deploy` accepts, and which image each takes, from family tables that
are SageMaker's own (botocore's model of its API)."""

import botocore.session
import pytest

from vllm_sagemaker.deploy.kit import checks
from vllm_sagemaker.deploy.kit.plans import instances


@pytest.mark.parametrize(
    ("value", "problem", "warning"),
    [
        ("ml.g5.12xlarge", None, None),
        ("ml.p5.4xlarge", None, None),
        ("ml.c7i.2xlarge", None, None),
        ("ml.inf2.xlarge", None, None),
        ("ml.t2.medium", None, None),
        ("g5.12xlarge", "start with 'ml.' (ml.g5.12xlarge?)", None),
        ("ml.g5", "not of the form ml.<family>.<size>", None),
        ("ml.g5.12xlarge.extra", "not of the form", None),
        ("ml.G5.12xlarge", "not of the form", None),
        ("", "start with 'ml.'", None),
        ("ml.g9.mega", None, "does not know family g9, so it sets no tensor parallelism"),
        ("ml.p6-b200.48xlarge", None, "does not know family p6-b200"),
        ("ml.g5.96xlarge", None, "does not know size 96xlarge"),
    ],
)
def test_instance_types(value: str, problem: str | None, warning: str | None) -> None:
    found = checks.instance_type_problem(value)
    assert (found is None) is (problem is None), found
    if problem:
        assert found is not None and problem in found and value in found
    told = checks.instance_type_warning(value)
    assert (told is None) is (warning is None), told
    if warning:
        assert told is not None and warning in told and "SM_VLLM_TENSOR_PARALLEL_SIZE" in told


def families(enum: str) -> set[str]:
    model = botocore.session.get_session().get_service_model("sagemaker")
    return {value.split(".")[1] for value in model.shape_for(enum).enum}


def test_the_known_families_are_botocores() -> None:
    """The table's source: every family the kit knows is one SageMaker hosts on (botocore's
    model of its API), and transform jobs offer every GPU family the kit allows them."""
    assert families("ProductionVariantInstanceType") >= instances.KNOWN_FAMILIES
    assert set(instances.TRANSFORM_FAMILIES) <= families("TransformInstanceType")


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
    assert instances.image_target(instance_type) == target
    told = checks.instance_image_warning(instance_type)
    assert (told is None) is (warning is None), told
    if warning:
        assert told is not None and told.startswith(f"--instance-type {instance_type}: " + warning)


def test_the_families_are_sorted_once() -> None:
    """Every family without an NVIDIA GPU is a CPU, Graviton or accelerator family, once."""
    groups = (instances.CPU_FAMILIES, instances.GRAVITON_FAMILIES, instances.ACCELERATOR_FAMILIES)
    every = [family for group in groups for family in group]
    assert len(every) == len(set(every)) and not set(every) & instances.GPU_FAMILIES
