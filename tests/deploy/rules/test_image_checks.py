"""Which image `deploy` accepts: an ECR URI whose tag, when it names the cpu or gpu image,
fits the instance type; and ECR's repository and tag names for `deploy image`."""

from collections.abc import Callable

import pytest

from tests.deploy.deploying import ECR, IMAGE
from vllm_sagemaker.deploy.kit import image_checks


@pytest.mark.parametrize(
    ("tag", "target"),
    [
        ("cpu", "cpu"),
        ("gpu", "gpu"),
        ("cpu-v2", "cpu"),
        ("v2.gpu", "gpu"),
        ("2026_01_GPU", "gpu"),
        ("v1", None),
        ("latest", None),
        ("cpus", None),
        ("gpu-and-cpu", None),
    ],
)
def test_which_image_a_tag_names(tag: str, target: str | None) -> None:
    assert image_checks.named_engine(tag) == target


@pytest.mark.parametrize(
    ("image", "tag"),
    [
        (IMAGE, "latest"),
        ("123456789012.dkr.ecr.us-east-1.amazonaws.com/team/vllm-sagemaker:cpu", "cpu"),
        ("123456789012.dkr.ecr.us-east-1.amazonaws.com/vllm-sagemaker", None),
        ("123456789012.dkr.ecr.us-east-1.amazonaws.com/vllm@sha256:" + "a" * 64, None),
    ],
)
def test_image_tags(image: str, tag: str | None) -> None:
    assert image_checks.image_tag(image) == tag


@pytest.mark.parametrize(
    ("image", "instance_type", "problem"),
    [
        (f"{ECR}:cpu", "ml.c7i.8xlarge", None),
        (f"{ECR}:gpu", "ml.g5.2xlarge", None),
        (f"{ECR}:v1", "ml.c7i.8xlarge", None),
        (f"{ECR}:latest", "ml.g5.2xlarge", None),
        (f"{ECR}@sha256:" + "a" * 64, "ml.c7i.8xlarge", None),
        (f"{ECR}:gpu", "ml.inf2.xlarge", None),
        (f"{ECR}:cpu", "ml.g9.mega", None),
        (
            f"{ECR}:gpu",
            "ml.c7i.8xlarge",
            "its tag names the gpu image, and ml.c7i.8xlarge has no GPU: give the cpu image "
            "(`vllm-sagemaker deploy image --target cpu` builds it",
        ),
        (f"{ECR}:gpu-v2", "ml.m7i.xlarge", "--target cpu"),
        (f"{ECR}:cpu", "ml.g5.12xlarge", "has NVIDIA GPUs: give the gpu image"),
        (f"{ECR}:v1.cpu", "ml.p5.48xlarge", "--target gpu"),
        (f"{ECR}:cpu", "ml.c7g.xlarge", None),
        (
            f"{ECR}:gpu",
            "ml.m7g.2xlarge",
            "its tag names the gpu image, and ml.m7g.2xlarge is Graviton (arm64), no GPU: give the "
            "cpu image",
        ),
    ],
)
def test_the_image_must_fit_the_instance(
    image: str, instance_type: str, problem: str | None
) -> None:
    found = image_checks.image_instance_problem(image, instance_type)
    if problem is None:
        assert found is None
        return
    assert found is not None and found.startswith(f"--image {image}: ") and problem in found


@pytest.mark.parametrize(
    ("check", "value", "problem"),
    [
        (image_checks.repository_problem, "vllm-sagemaker", None),
        (image_checks.repository_problem, "team/vllm_sagemaker.v2", None),
        (image_checks.repository_problem, "Vllm", "--repository 'Vllm': ECR repository names are"),
        (image_checks.repository_problem, "vllm sagemaker", "--repository"),
        (image_checks.repository_problem, "x", "2-256"),
        (image_checks.repository_problem, "team//vllm", "--repository"),
        (image_checks.repository_problem, "vllm-", "--repository"),
        (image_checks.repository_problem, "a" * 257, "2-256"),
        (image_checks.tag_problem, "cpu", None),
        (image_checks.tag_problem, "v1.2_rc-3", None),
        (image_checks.tag_problem, "x" * 128, None),
        (image_checks.tag_problem, "x" * 129, "--tag 'xxxx"),
        (image_checks.tag_problem, ".v1", "not starting with a dot or hyphen"),
        (image_checks.tag_problem, "v1:2", "--tag 'v1:2': image tags are 1-128"),
        (image_checks.tag_problem, "", "--tag '': image tags"),
    ],
)
def test_repository_and_tag_names(
    check: Callable[[str], str | None], value: str, problem: str | None
) -> None:
    found = check(value)
    if problem is None:
        assert found is None
        return
    assert found is not None and problem in found, found


@pytest.mark.parametrize(
    ("target", "tag", "problem"),
    [
        ("cpu", "cpu", None),
        ("cpu", "v1", None),
        ("gpu", "gpu-2026", None),
        ("cpu", "gpu", "--tag 'gpu' names the gpu image, but --target is cpu: give --target gpu"),
        ("gpu", "v1-cpu", "--tag 'v1-cpu' names the cpu image, but --target is gpu"),
    ],
)
def test_a_tag_names_the_image_it_tags(target: str, tag: str, problem: str | None) -> None:
    found = image_checks.engine_tag_problem(tag, target)
    if problem is None:
        assert found is None
        return
    assert found is not None and found.startswith(problem), found


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        (IMAGE, True),
        ("123456789012.dkr.ecr.us-east-1.amazonaws.com/team/vllm-sagemaker", True),
        ("123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn/vllm:v1", True),
        ("123456789012.dkr.ecr-fips.us-gov-west-1.amazonaws.com/vllm:v1", True),
        ("123456789012.dkr.ecr.us-east-1.amazonaws.com/vllm@sha256:" + "a" * 64, True),
        ("vllm-sagemaker:v1", False),
        ("docker.io/vllm/vllm-openai:latest", False),
        ("public.ecr.aws/abc/vllm:latest", False),
        ("12345.dkr.ecr.us-east-1.amazonaws.com/vllm:v1", False),
        ("123456789012.dkr.ecr.us-east-1.amazonaws.com/Vllm:v1", False),
        ("123456789012.dkr.ecr.us-east-1.amazonaws.com/vllm:", False),
    ],
)
def test_images(value: str, ok: bool) -> None:
    found = image_checks.image_problem(value)
    assert (found is None) is ok, found
    if not ok:
        assert found is not None and "deploy image" in found and value in found


@pytest.mark.parametrize(
    ("image", "region", "problem"),
    [
        (IMAGE, "us-east-1", None),
        (IMAGE, None, None),
        ("123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn/vllm:v1", "cn-north-1", None),
        (
            IMAGE,
            "eu-west-1",
            f"--image {IMAGE}: it is in ECR in us-east-1, and this run deploys to eu-west-1, "
            "where SageMaker cannot pull it (only from its own region): give --region us-east-1, "
            "or push the image to eu-west-1 (`vllm-sagemaker deploy image --region eu-west-1`)",
        ),
        (
            "123456789012.dkr.ecr-fips.us-gov-west-1.amazonaws.com/vllm:v1",
            "us-gov-east-1",
            "it is in ECR in us-gov-west-1, and this run deploys to us-gov-east-1",
        ),
    ],
)
def test_an_image_in_another_regions_ecr(
    image: str, region: str | None, problem: str | None
) -> None:
    """SageMaker pulls images from the ECR of its own region only."""
    found = image_checks.image_region_problem(image, region)
    assert (found is None) is (problem is None), found
    assert problem is None or (found is not None and problem in found), found


@pytest.mark.parametrize(
    ("repository", "region", "problem"),
    [
        ("vllm-sagemaker", "us-east-1", None),
        ("a" * 210, "us-east-1", None),
        (
            "a" * 211,
            "us-east-1",
            "--repository: 211 characters; with the registry of us-east-1 the image's name "
            "passes the 255 characters a builder takes: give at most 210",
        ),
        ("a" * 210, "ap-southeast-4", "give at most 205"),
    ],
)
def test_a_repository_too_long_for_a_builder(
    repository: str, region: str, problem: str | None
) -> None:
    """ECR takes 256 characters; a builder's `-t` takes 255 for the registry and name."""
    found = image_checks.image_name_problem(repository, region)
    assert (found is None) is (problem is None), found
    assert problem is None or (found is not None and found.endswith(problem)), found


def test_a_repository_given_as_its_uri() -> None:
    assert image_checks.repository_problem(ECR) == (
        f"--repository '{ECR}': give the repository's name (vllm-sagemaker), not its URI: the "
        "registry is your account's in the region"
    )
