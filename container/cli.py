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
    transform.add_arguments(
        subcommands.add_parser(
            "transform",
            help="run a Batch Transform job locally against a running container",
            description="Run a SageMaker Batch Transform job against a running container (local "
            "or remote), the way SageMaker drives it: /ping, /execution-parameters, then "
            "mini-batches on /invocations. Inputs and outputs are local paths or s3:// prefixes. "
            "Exit status: 0 when every file was transformed, 1 when some failed, 2 when the job "
            "could not start.",
        )
    )
    batch.add_arguments(
        subcommands.add_parser(
            "batch",
            help="run an OpenAI batch file through the container's record pipeline",
            description="Run an OpenAI batch file (custom_id/method/url/body lines) through a "
            "running container (--endpoint) or one started for the run (--model; unknown options "
            "go to vLLM). Streams the input, keeps at most --max-inflight lines in flight, appends "
            "answers in input order as they finish, and --resume finishes an interrupted run. "
            "Exit status: 0 when every line was answered (bad lines get error lines), 1 when the "
            "run stopped (unreadable input, no engine, unwritable output).",
        )
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
        return found.status


def _run(argv: list[str]) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command != "batch" and extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    from vllm_sagemaker.deploy.base import profile, region
    from vllm_sagemaker.deploy.base.errors import refuse

    # AWS_REGION counts as AWS_DEFAULT_REGION for every client command (deploy's --region too).
    region.use_region(None, os.environ)
    # --profile, on every command that calls AWS: boto3 uses it from here on.
    refuse(profile.use_profile(getattr(args, "profile", None), os.environ))
    if args.command == "batch":
        from vllm_sagemaker.deploy.batch import command as batch

        return batch.main(args, extra)
    if args.command == "transform":
        from vllm_sagemaker.deploy.transform import command as transform

        return transform.main(args)
    from vllm_sagemaker.deploy.kit import cli as deploy

    return deploy.main(args)
