"""`deploy delete`: what `deploy.kit.plans.delete` plans, one call at a time, each said as it is
removed: a failed deletion is said and the rest go on, except that nothing of a standing
endpoint or component is deleted after its own deletion failed."""

import argparse

from vllm_sagemaker.deploy.base.errors import ClientError
from vllm_sagemaker.deploy.base.plan import OneByOne, Plan, Step
from vllm_sagemaker.deploy.base.reads import Reads
from vllm_sagemaker.deploy.base.region import run_region
from vllm_sagemaker.deploy.kit import checks
from vllm_sagemaker.deploy.kit.options import add_name
from vllm_sagemaker.deploy.kit.plans.delete import component_plan, delete_plan
from vllm_sagemaker.deploy.kit.plans.rollback import touched

SUMMARY = "delete what deploy created"
DESCRIPTION = (
    "Delete the endpoint NAME (its inference components first) and every endpoint config and "
    "model named NAME or NAME-<UTC time>, or with --component only that component; nothing else."
)
CHECKS = (checks.REGION, checks.NAME)
# Deletions whose refusal stops the run: what it kept while it stands.
STANDS = {
    "DeleteEndpoint": "its scaling, endpoint configs and models are kept while it stands",
    "DeleteInferenceComponent": "its scaling, alarm and models are kept while it stands",
}


def add_options(parser: argparse.ArgumentParser) -> None:
    add_name(parser, "delete", "the endpoint to delete, with its components, configs and models")
    parser.add_argument(
        "--component",
        metavar="NAME",
        help="delete only this inference component of the endpoint, with its scaling, its "
        "alarm and its models (NAME, NAME-<UTC time>) that no other component runs",
    )


def plan(args: argparse.Namespace, reads: Reads) -> Plan:
    if args.component:
        calls = component_plan(reads, args.name, args.component)
    else:
        calls, kept = delete_plan(reads, args.name)
        reads.notes += kept
    if not calls:
        named = args.component or args.name
        what = (
            "inference component, scaling or model"
            if args.component
            else ("endpoint, endpoint config or model")
        )
        raise ClientError(
            f"nothing to delete in {run_region() or '<region>'}: no {what} named {named} or "
            f"{named}-<UTC time>"
        )
    return Plan((Step(tuple(calls)),), one_by_one=OneByOne(touched, STANDS))
