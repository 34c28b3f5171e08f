"""`deploy delete`: the scaling policies and scalable targets of the endpoint NAME's variants
(`deploy endpoint --autoscale`'s), the endpoint NAME and every endpoint config and model named
NAME or `NAME-<UTC time>` (`deploy.kit.plans.delete`), one call at a time, each said as it is
removed: a failed deletion is said and the rest go on, except that nothing of a standing
endpoint is deleted after its own deletion failed."""

import argparse

import botocore.exceptions

from vllm_sagemaker.deploy.base.errors import ClientError, explain
from vllm_sagemaker.deploy.base.reads import Reads
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
            f"nothing to delete: no endpoint, endpoint config or model named {args.name} or "
            f"{args.name}-<UTC time>"
        )
    if args.dry_run:
        execute(calls, True)
        return 0
    failed = 0
    for call in calls:
        try:
            execute([call], False)
        except botocore.exceptions.ClientError as error:
            failed += 1
            say(call_failed(call, explain(error) or str(error)))
            if call.operation == "DeleteEndpoint":
                say("its endpoint configs and models are kept while the endpoint stands")
                return 1
        else:
            say(f"removed {touched(call)}")
    if failed:
        say(f"{failed} of {len(calls)} deletions failed; run the same command again to retry")
        return 1
    return 0
