"""docs/cli.md, the command reference, written from the argparse definitions themselves.

    .venv/bin/python -m tests.support.cli_reference   # rewrite docs/cli.md after a change

`tests/project/test_docs_reference.py` fails while the file differs from what this writes, so a
renamed
option, a new one or a changed default cannot reach the docs late.
"""

import argparse
from collections.abc import Iterator

from tests import ROOT
from vllm_sagemaker.container import cli, serve

PATH = ROOT / "docs" / "cli.md"
# `serve` is documented once, under its own name; this line starts it too.
SERVE_ALIAS = "vllm-sagemaker serve"
HEADER = """# Command reference

Every command and option, written from the commands' own definitions by
`.venv/bin/python -m tests.support.cli_reference` (a test fails when this page and the code differ).
How to use them: [batch files](batch-files.md), [Batch Transform](batch-transform.md),
[deploying](deploy.md), [configuration](configuration.md).

**Errors.** A mistake in a client command (`transform`, `batch`, `deploy ...`): a path that is
missing or cannot be written, AWS credentials that are missing, expired or refused (the line
says what to run, such as `aws sso login --profile NAME` or `aws configure`), an AWS profile the
AWS config does not have, no region, access denied, a URL where nobody answers, is one line on
stderr, `COMMAND: what failed, the value, what to do`, and exit status 1 (2 for a usage error: an
option argparse, or the command before it starts, refuses, such as a `--profile` the AWS config
does not have; each command's own statuses are in its description). An error answer, from AWS,
a container or a proxy between, is told by its message, else by its HTTP status; never printed
whole.
`vllm-sagemaker --debug ...` (the flag anywhere on the line) or `VLLM_SAGEMAKER_DEBUG=1` shows
the traceback instead.

**Ctrl-C.** A client command stops where it is, closes what is in flight and says in one line
what it kept and how to go on (`batch: stopped: 96 lines answered and kept in out.jsonl; run the
same command with --resume to finish`; a `deploy` command waiting for SageMaker names what goes
on there and how to check or delete it), with exit status 130. A second Ctrl-C while it stops
ends it at once, also with one line.

**Dry runs.** Every `deploy` command takes `--dry-run`: it reads what decides the plan, writes
nothing, and prints what the real run would do. Most print AWS calls, a JSON array of
`{"service", "operation", "params"}` (`endpoint`, `transform`, `batch`, `delete`, `dashboard`,
`invoke` to InvokeEndpoint or InvokeEndpointAsync); some print commands or requests instead, as
what they run is not an AWS call: `image` prints its ECR calls, then the builder's commands
(`then: buildah ...`, on stderr); `invoke --openai` prints the HTTP request (method, URL and
body) it would send; `token` prints the `export OPENAI_BASE_URL=...` line (the token itself is
made when it runs); `batch --local` prints the fleet's preview (lines, refused lines, shards).
`serve --dry-run` prints the vLLM command `serve` would start.
"""


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def commands() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(command line, parser) for `serve` and every `vllm-sagemaker` command, depth first."""
    yield "serve", serve.add_arguments(argparse.ArgumentParser(prog="serve"))

    def walk(
        prefix: str, parser: argparse.ArgumentParser
    ) -> Iterator[tuple[str, argparse.ArgumentParser]]:
        children = subcommands(parser)
        if not children:
            yield prefix, parser
        for name, child in children.items():
            if f"{prefix} {name}" != SERVE_ALIAS:
                yield from walk(f"{prefix} {name}", child)

    yield from walk("vllm-sagemaker", cli.build_parser())


def cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def option_row(action: argparse.Action) -> str:
    names = ", ".join(f"`{n}`" for n in action.option_strings) or f"`{action.dest}`"
    if action.option_strings and action.nargs != 0:
        value = action.metavar or (
            "{" + ",".join(map(str, action.choices)) + "}"
            if action.choices
            else action.dest.upper()
        )
        names += f" {cell(value)}"
    required = "required" if action.required else ""
    default = (
        ""
        if action.default in (None, False, argparse.SUPPRESS) or action.nargs == 0
        else f"`{cell(action.default)}`"
    )
    return f"| {names} | {cell(action.help or '')} | {required or default} |"


def render() -> str:
    parts = [HEADER]
    for line, parser in commands():
        title = f"`{line}` (also `{SERVE_ALIAS}`)" if line == "serve" else f"`{line}`"
        parts.append(f"\n## {title}\n")
        if parser.description:
            parts.append(f"\n{parser.description}\n")
        rows = [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]
        if rows:
            parts.append("\n| option | meaning | default |\n| --- | --- | --- |\n")
            parts.append("".join(option_row(a) + "\n" for a in rows))
    return "".join(parts)


if __name__ == "__main__":
    PATH.write_text(render())
    print(f"wrote {PATH}")
