"""`vllm-sagemaker deploy ...`: each command's module is a `deploy.base.command.Command` (its
help, options, checks before any AWS call and its plan); here they become subcommands, which
`deploy.base.command.run` checks, plans and applies. The commands load boto3 only when they run
(`--help` stays quick)."""

import argparse
from collections.abc import Mapping

from vllm_sagemaker.deploy.base import profile
from vllm_sagemaker.deploy.base.command import Command, checked
from vllm_sagemaker.deploy.kit import (
    batch,
    component,
    dashboard,
    delete,
    endpoint,
    image,
    invoke,
    token,
    transform_job,
)

COMMANDS: dict[str, Command] = {
    "image": image,
    "endpoint": endpoint,
    "component": component,
    "transform": transform_job,
    "batch": batch,
    "invoke": invoke,
    "token": token,
    "delete": delete,
    "dashboard": dashboard,
}
EXIT_STATUSES = (
    "Exit status: 0 when done, 1 when AWS or the run failed, 2 when an option is refused "
    "(checked before any AWS call, in a dry run too)."
)


def check(args: argparse.Namespace, environ: Mapping[str, str]) -> list[str]:
    """The command's checks: refused at the first problem, else its warnings."""
    return checked(COMMANDS[args.deploy_command].CHECKS, args, environ)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="deploy_command", required=True, metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--dry-run",
        action="store_true",
        help="read what decides the plan, print the calls a real run makes as JSON, write nothing",
    )
    common.add_argument(
        "--region",
        help="the AWS region (default: $AWS_REGION, else $AWS_DEFAULT_REGION, else the AWS "
        "profile's)",
    )
    profile.add_profile_argument(common)
    for name, command in COMMANDS.items():
        command.add_options(
            commands.add_parser(
                name,
                parents=[common],
                help=command.SUMMARY,
                description=f"{command.DESCRIPTION} {EXIT_STATUSES}",
            )
        )
