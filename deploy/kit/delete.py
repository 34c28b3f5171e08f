"""`deploy delete`: what `deploy.kit.plans.delete` plans, one call at a time, each said as it is
removed: a failed deletion is said and the rest go on, except that nothing of a standing
endpoint is deleted after its own deletion failed."""

import argparse

import botocore.exceptions

from vllm_sagemaker.deploy.base.errors import ClientError, explain
from vllm_sagemaker.deploy.base.reads import Reads
from vllm_sagemaker.deploy.base.region import run_region
from vllm_sagemaker.deploy.base.run import call_failed, execute
from vllm_sagemaker.deploy.kit.options import say
from vllm_sagemaker.deploy.kit.plans.delete import delete_plan
from vllm_sagemaker.deploy.kit.plans.rollback import touched


def main(args: argparse.Namespace) -> int:
    calls, kept = delete_plan(Reads(args.dry_run), args.name)
    for line in kept:
        say(line)
    if not calls:
        raise ClientError(
            f"nothing to delete in {run_region() or '<region>'}: no endpoint, endpoint config or "
            f"model named {args.name} or {args.name}-<UTC time>"
        )
    if args.dry_run:
        execute(calls, True)
        return 0
    failed = 0
    for call in calls:
        try:
            execute([call], False)
        except botocore.exceptions.ClientError as error:
            line = call_failed(call, explain(error) or str(error))
            if call.operation == "DeleteEndpoint":
                raise ClientError(
                    f"{line}; its scaling, endpoint configs and models are kept while it stands"
                ) from error
            failed += 1
            say(line)
        else:
            say(f"removed {touched(call)}")
    if failed:
        raise ClientError(
            f"{failed} of {len(calls)} deletions failed; run the same command again to retry"
        )
    return 0
