"""`deploy delete`: what `deploy.kit.plans.delete` plans, one call at a time, each said as it is
removed: a failed deletion is said and the rest go on, except that nothing of a standing
endpoint is deleted after its own deletion failed."""

import argparse

from vllm_sagemaker.deploy.base.errors import ClientError, explain
from vllm_sagemaker.deploy.base.reads import Reads
from vllm_sagemaker.deploy.base.region import run_region
from vllm_sagemaker.deploy.base.run import call_failed, execute
from vllm_sagemaker.deploy.kit import checks
from vllm_sagemaker.deploy.kit.options import add_name, say
from vllm_sagemaker.deploy.kit.plans.delete import delete_plan
from vllm_sagemaker.deploy.kit.plans.rollback import touched

SUMMARY = "delete what deploy created"
DESCRIPTION = (
    "Delete the endpoint NAME and every endpoint config and model named NAME or NAME-<UTC time>; "
    "nothing else."
)
CHECKS = (checks.REGION, checks.NAME)


def add_options(parser: argparse.ArgumentParser) -> None:
    add_name(parser, "delete", "the endpoint to delete, with its configs and models")


def main(args: argparse.Namespace) -> int:
    import botocore.exceptions  # here, not at the top: `--help` loads this module

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
