"""The `vllm-sagemaker` command line: `serve` (container.serve, also a command of its own, as
SageMaker runs `docker run IMAGE serve`) and the client's commands, loaded only when asked for."""

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from vllm_sagemaker.container import serve

# Shows the traceback of a client command's error (also VLLM_SAGEMAKER_DEBUG=1).
DEBUG_FLAG = "--debug"
DEBUG_VARIABLE = "VLLM_SAGEMAKER_DEBUG"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vllm-sagemaker",
        description="Serve LLMs with vLLM on Amazon SageMaker, and run batch jobs against them.",
    )
    parser.add_argument(
        DEBUG_FLAG,
        action="store_true",
        help="show the traceback of an error instead of its one line (anywhere on the line; "
        f"also {DEBUG_VARIABLE}=1)",
    )
    # The client's commands: loaded here, never by `serve`, which starts vLLM without them.
    from vllm_sagemaker.deploy.batch import command as batch
    from vllm_sagemaker.deploy.kit import cli as deploy
    from vllm_sagemaker.deploy.transform import command as transform

    subcommands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve.add_arguments(
        subcommands.add_parser(
            "serve",
            help="start vLLM's OpenAI server configured from the environment",
        )
    )
    for name, command in (("transform", transform), ("batch", batch)):
        command.add_options(
            subcommands.add_parser(name, help=command.SUMMARY, description=command.DESCRIPTION)
        )
    deploy.add_arguments(
        subcommands.add_parser(
            "deploy",
            help="deploy to SageMaker: " + ", ".join(subcommand_names(deploy.add_arguments)),
            description="Create SageMaker endpoints and transform jobs with LLM-sized defaults. "
            "Every command takes --dry-run to print its AWS calls as JSON without making them.",
        )
    )
    return parser


def subcommand_names(add_arguments: Callable[[argparse.ArgumentParser], None]) -> list[str]:
    probe = argparse.ArgumentParser()
    add_arguments(probe)
    return [
        name
        for action in probe._actions
        if isinstance(action, argparse._SubParsersAction)
        for name in action.choices
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """For a client command: `... | head` ends it quietly; Ctrl-C and a user's error are one line
    (the traceback only under --debug or VLLM_SAGEMAKER_DEBUG=1)."""
    given = list(sys.argv[1:] if argv is None else argv)
    debug = DEBUG_FLAG in given or os.environ.get(DEBUG_VARIABLE, "") not in ("", "0")
    given = [arg for arg in given if arg != DEBUG_FLAG]
    if given[:1] == ["serve"]:  # vLLM's server, with its own Ctrl-C and errors
        return serve.main(given[1:])
    from vllm_sagemaker.deploy.base import interrupts
    from vllm_sagemaker.deploy.base.errors import client_error

    command = next((arg for arg in given if not arg.startswith("-")), "")
    try:
        with interrupts.handled(command):
            return _run(given)
    except BrokenPipeError:
        # Python's advice: point stdout at devnull so the flush at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt as stop:
        return interrupts.report(command, stop)  # what was kept, how to go on; status 130
    except Exception as error:
        found = None if debug else client_error(error)
        if found is None:
            raise
        print(f"{command}: {found.line}", file=sys.stderr)
        return found.exit_status


def _run(argv: list[str]) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command != "batch" and extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    from vllm_sagemaker.deploy.base import profile, region
    from vllm_sagemaker.deploy.base.errors import stop_at

    # --region, else AWS_REGION, as AWS_DEFAULT_REGION, for every client command.
    region.use_region(getattr(args, "region", None), os.environ)
    # --profile, on every command that calls AWS: boto3 uses it from here on.
    stop_at(profile.use_profile(getattr(args, "profile", None), os.environ))
    from vllm_sagemaker.deploy.base.command import run
    from vllm_sagemaker.deploy.batch import command as batch
    from vllm_sagemaker.deploy.kit import cli as deploy
    from vllm_sagemaker.deploy.transform import command as transform

    args.vllm_args = extra  # `batch --model`'s options for vLLM
    commands = {"batch": batch, "transform": transform}
    command = (
        commands[args.command] if args.command in commands else deploy.COMMANDS[args.deploy_command]
    )
    return run(command, args, os.environ)
