"""`deploy`'s pure rules for images (as `deploy.kit.checks`'s): --image (in ECR, in the run's
region, tagged for what the instance takes) and `deploy image`'s --repository, --tag, --context."""

import os
import re

from vllm_sagemaker.deploy.base.errors import Problem
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


def image_problem(value: str) -> Problem | None:
    if _ECR_IMAGE.fullmatch(value):
        return None
    why = (
        "SageMaker pulls images from Amazon ECR only: give <account>.dkr.ecr.<region>."
        "amazonaws.com/<repository>[:tag]; `vllm-sagemaker deploy image` pushes the image there "
        "and prints that URI"
    )
    return Problem("--image", why, repr(value))


def repository_problem(value: str) -> Problem | None:
    least, most = _REPOSITORY_LENGTH
    host, _, name = value.partition("/")
    if _ECR_HOST.fullmatch(host):
        why = (
            f"give the repository's name ({name or 'vllm-sagemaker'}), not its URI: the registry "
            "is your account's in the region"
        )
        return Problem("--repository", why, repr(value))
    if re.fullmatch(_REPOSITORY, value) and least <= len(value) <= most:
        return None
    why = (
        f"ECR repository names are {least}-{most} lowercase letters, digits and . _ - /, each "
        "part between slashes starting and ending with a letter or digit"
    )
    return Problem("--repository", why, repr(value))


def image_name_problem(repository: str, region: str) -> Problem | None:
    """A repository whose image name, with the region's registry host, a builder's `-t` refuses."""
    room = MAX_IMAGE_NAME - len(f"123456789012.dkr.ecr.{region}.amazonaws.com/")
    if len(repository) <= room:
        return None
    why = (
        f"{len(repository)} characters; with the registry of {region} the image's name passes "
        f"the {MAX_IMAGE_NAME} characters a builder takes: give at most {room}"
    )
    return Problem("--repository", why)


def image_region_problem(image: str, region: str | None) -> Problem | None:
    """An --image in another region's ECR: SageMaker pulls from its own region only."""
    found = _ECR_HOST.match(image)
    if region is None or found is None or found["region"] == region:
        return None
    held = found["region"]
    why = (
        f"it is in ECR in {held}, and this run deploys to {region}, where SageMaker cannot pull "
        f"it (only from its own region): give --region {held}, or push the image to {region} "
        f"(`vllm-sagemaker deploy image --region {region}`)"
    )
    return Problem("--image", why, image)


def tag_problem(value: str) -> Problem | None:
    if re.fullmatch(_TAG, value):
        return None
    why = (
        "image tags are 1-128 letters, digits, underscores, dots and hyphens, not starting with "
        "a dot or hyphen"
    )
    return Problem("--tag", why, repr(value))


def named_engine(tag: str) -> str | None:
    """The engine (`deploy image --target`) a tag names as one of its words: `cpu`, `cpu-v2`
    and `v2.gpu` name one; `v1`, `latest` and a tag naming both name none."""
    named = {word for word in re.split(r"[-_.]", tag.lower()) if word in ENGINES}
    return named.pop() if len(named) == 1 else None


def image_tag(image: str) -> str | None:
    if "@" in image:
        return None
    return image.rsplit("/", 1)[-1].partition(":")[2] or None


def engine_tag_problem(tag: str, engine: str) -> Problem | None:
    named = named_engine(tag)
    if named is None or named == engine:
        return None
    why = (
        f"names the {named} image, but --target is {engine}: give --target {named}, or a tag "
        f"that does not name the {named} image"
    )
    return Problem("--tag", why, repr(tag), sep=" ")


def context_problem(context: str) -> Problem | None:
    if os.path.isfile(os.path.join(context, "Dockerfile")):
        return None
    why = (
        "no Dockerfile there; run the command in the checkout of this repository, or give "
        "--context with the checkout's path"
    )
    return Problem("--context", why, repr(context))


def image_instance_problem(image: str, instance_type: str) -> Problem | None:
    if instances.graviton(instance_type):
        return wrong_image_problem(image, "cpu", f"{instance_type} is Graviton (arm64), no GPU")
    wanted = instances.image_engine(instance_type)
    if wanted is None:
        return None
    has = "has no GPU" if wanted == "cpu" else "has NVIDIA GPUs"
    return wrong_image_problem(image, wanted, f"{instance_type} {has}")


def wrong_image_problem(image: str, wanted: str, why: str) -> Problem | None:
    tag = image_tag(image)
    named = named_engine(tag) if tag else None
    if named is None or named == wanted:
        return None
    why = (
        f"its tag names the {named} image, and {why}: give the {wanted} image (`vllm-sagemaker "
        f"deploy image --target {wanted}` builds it and prints its URI)"
    )
    return Problem("--image", why, image)


def no_image_problem(instance_type: str) -> Problem | None:
    if instances.image_engine(instance_type):
        return None
    why = (
        f"not given, and the kit cannot tell whether {instance_type} takes the cpu or the gpu "
        "image; give --image"
    )
    return Problem("--image", why)
