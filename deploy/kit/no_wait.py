"""What `--no-wait` says as it returns: what it made, and the AWS CLI command that checks it
(the one a Ctrl-C during the wait names: `interrupts.WAITS`)."""

from vllm_sagemaker.deploy.base.calls import Call
from vllm_sagemaker.deploy.base.interrupts import WAITS
from vllm_sagemaker.deploy.base.profile import given_profile
from vllm_sagemaker.deploy.base.region import run_region
from vllm_sagemaker.deploy.base.say import say


def not_waited(describe: Call) -> None:
    """Say that what `describe` reads goes on in SageMaker unwaited, and how to check it."""
    kind, key, check, _ = WAITS[describe.operation]
    name = describe.params[key]
    region, profile = run_region(), given_profile()
    where = (f" --region {region}" if region else "") + (f" --profile {profile}" if profile else "")
    say(
        f"{kind} {name} goes on in SageMaker (--no-wait); "
        f"check it with {check.format(name=name)}{where}"
    )
