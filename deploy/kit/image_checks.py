"""`deploy`'s pure rules for images (as `deploy.kit.checks`'s): --image (in ECR, in the run's
region, tagged for what the instance takes) and `deploy image`'s --repository, --tag, --context."""

import os
import re

from vllm_sagemaker.deploy.image.build import ENGINES
from vllm_sagemaker.deploy.kit.plans import instances

# Private ECR, the only registry SageMaker pulls from (besides a VPC registry the kit does not
# use): <account>.dkr.ecr[-fips].<region>.amazonaws.com[.cn]/<repository>[:tag|@sha256:digest].
# ECR's repository names (2-256 characters) and the tags a builder's `-t` takes.
_REPOSITORY = r"([a-z0-9]+([._-][a-z0-9]+)*/)*[a-z0-9]+([._-][a-z0-9]+)*"
_REPOSITORY_LENGTH = (2, 256)
_TAG = r"[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,127}"
_ECR_IMAGE = re.compile(
    r"\d{12}\.dkr\.ecr(-fips)?\.[a-z0-9-]+\.amazonaws\.com(\.cn)?"
    rf"/{_REPOSITORY}(:{_TAG}|@sha256:[0-9a-f]{{64}})?"
)
# The region of an image in private ECR, and of a registry host given where a repository's name
# belongs.
_ECR_HOST = re.compile(r"\d{12}\.dkr\.ecr(-fips)?\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?")
# The longest image name (registry host, `/`, repository) a builder's `-t` takes: the
# reference grammar of Docker's and Podman's image libraries.
MAX_IMAGE_NAME = 255


def image_problem(value: str) -> str | None:
    if _ECR_IMAGE.fullmatch(value):
        return None
    return (
        f"--image {value!r}: SageMaker pulls images from Amazon ECR only: give "
        "<account>.dkr.ecr.<region>.amazonaws.com/<repository>[:tag]; `vllm-sagemaker deploy "
        "image` pushes the image there and prints that URI"
    )


def repository_problem(value: str) -> str | None:
    least, most = _REPOSITORY_LENGTH
    host, _, name = value.partition("/")
    if _ECR_HOST.fullmatch(host):
        return (
            f"--repository {value!r}: give the repository's name ({name or 'vllm-sagemaker'}), "
            "not its URI: the registry is your account's in the region"
        )
    if re.fullmatch(_REPOSITORY, value) and least <= len(value) <= most:
        return None
    return (
        f"--repository {value!r}: ECR repository names are {least}-{most} lowercase letters, "
        "digits and . _ - /, each part between slashes starting and ending with a letter or digit"
    )


def image_name_problem(repository: str, region: str) -> str | None:
    """A repository whose image name, with the region's registry host, a builder's `-t` refuses."""
    room = MAX_IMAGE_NAME - len(f"123456789012.dkr.ecr.{region}.amazonaws.com/")
    if len(repository) <= room:
        return None
    return (
        f"--repository: {len(repository)} characters; with the registry of {region} the "
        f"image's name passes the {MAX_IMAGE_NAME} characters a builder takes: give at most {room}"
    )


def image_region_problem(image: str, region: str | None) -> str | None:
    """An --image in another region's ECR: SageMaker pulls from its own region only."""
    found = _ECR_HOST.match(image)
    if region is None or found is None or found["region"] == region:
        return None
    held = found["region"]
    return (
        f"--image {image}: it is in ECR in {held}, and this run deploys to {region}, where "
        f"SageMaker cannot pull it (only from its own region): give --region {held}, or push "
        f"the image to {region} (`vllm-sagemaker deploy image --region {region}`)"
    )


def tag_problem(value: str) -> str | None:
    if re.fullmatch(_TAG, value):
        return None
    return (
        f"--tag {value!r}: image tags are 1-128 letters, digits, underscores, dots and hyphens, "
        "not starting with a dot or hyphen"
    )


def named_target(tag: str) -> str | None:
    """The image (`deploy image --target`) a tag names as one of its words: `cpu`, `cpu-v2` and
    `v2.gpu` name one; `v1`, `latest` and a tag naming both name none."""
    named = {word for word in re.split(r"[-_.]", tag.lower()) if word in ENGINES}
    return named.pop() if len(named) == 1 else None


def image_tag(image: str) -> str | None:
    if "@" in image:
        return None
    return image.rsplit("/", 1)[-1].partition(":")[2] or None


def target_tag_problem(tag: str, target: str) -> str | None:
    named = named_target(tag)
    if named is None or named == target:
        return None
    return (
        f"--tag {tag!r} names the {named} image, but --target is {target}: give --target "
        f"{named}, or a tag that does not name the {named} image"
    )


def context_problem(context: str) -> str | None:
    if os.path.isfile(os.path.join(context, "Dockerfile")):
        return None
    return (
        f"--context {context!r}: no Dockerfile there; run the command in the checkout of this "
        "repository, or give --context with the checkout's path"
    )


def image_instance_problem(image: str, instance_type: str) -> str | None:
    if instances.graviton(instance_type):
        return wrong_image_problem(image, "cpu", f"{instance_type} is Graviton (arm64), no GPU")
    wanted = instances.image_target(instance_type)
    if wanted is None:
        return None
    has = "has no GPU" if wanted == "cpu" else "has NVIDIA GPUs"
    return wrong_image_problem(image, wanted, f"{instance_type} {has}")


def wrong_image_problem(image: str, wanted: str, why: str) -> str | None:
    tag = image_tag(image)
    named = named_target(tag) if tag else None
    if named is None or named == wanted:
        return None
    return (
        f"--image {image}: its tag names the {named} image, and {why}: give the {wanted} image "
        f"(`vllm-sagemaker deploy image --target {wanted}` builds it and prints its URI)"
    )


def no_image_problem(instance_type: str) -> str | None:
    if instances.image_target(instance_type):
        return None
    return (
        f"--image: not given, and the kit cannot tell whether {instance_type} takes the cpu or "
        "the gpu image; give --image"
    )
