"""The image a plan runs when no --image is given: the one `deploy image` pushes to ECR."""

from vllm_sagemaker.deploy.base.calls import Call
from vllm_sagemaker.deploy.base.errors import ClientError, Problem, UsageError
from vllm_sagemaker.deploy.base.reads import Reads
from vllm_sagemaker.deploy.base.region import run_region
from vllm_sagemaker.deploy.image import build
from vllm_sagemaker.deploy.kit.plans.endpoint import Instances
from vllm_sagemaker.deploy.kit.plans.instances import image_engine
from vllm_sagemaker.deploy.kit.plans.serverless import Serverless


def default_image(reads: Reads, hosted: Instances | Serverless) -> str:
    """The image for an endpoint given no --image: `deploy image --target T`'s (cpu on
    Serverless), which ECR must hold in the region (a dry run that cannot read ECR assumes it
    does)."""
    instance_type = hosted.instance_type
    engine = image_engine(instance_type) if instance_type else "cpu"
    if engine is None:  # refused before (checks.no_image_problem)
        raise UsageError(
            Problem("--image", f"not given, and {instance_type} takes no image the kit knows")
        )
    repository, tag = build.REPOSITORY, build.default_tag(engine)
    first = f"run `vllm-sagemaker deploy image --target {engine}` first, or give --image"
    assumed = len(reads.assumed)
    found = reads.describe(
        Call("ecr", "DescribeRepositories", {"repositoryNames": [repository]}),
        f"the plan assumes ECR holds {repository}:{tag} (what `deploy image --target "
        f"{engine}` pushes)",
    )
    if len(reads.assumed) > assumed:
        return f"<account>.dkr.ecr.<region>.amazonaws.com/{repository}:{tag}"
    where = run_region()
    if found is None:
        raise ClientError(
            f"no --image given, and ECR holds no repository {repository} in {where}: " + first
        )
    images = Call(
        "ecr", "DescribeImages", {"repositoryName": repository, "imageIds": [{"imageTag": tag}]}
    )
    if reads.describe(images) is None:
        raise ClientError(
            f"no --image given, and ECR's {repository} in {where} holds no image tagged {tag}: "
            + first
        )
    uri = f"{found['repositories'][0]['repositoryUri']}:{tag}"
    reads.note(f"image: {uri} (no --image given)")
    return uri
