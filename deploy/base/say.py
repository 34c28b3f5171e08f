"""The one prefix of the deploy kit's lines on stderr: `say` writes a note, `stopped` is the
SystemExit (exit status 1) of a failure, both as `deploy: <text>`.

In the base because the plan machinery (`deploy.base.run`) writes such lines too; the commands
take `say` from `deploy.kit.options`. No boto3 here: `deploy.kit.cli` says before any command
runs.
"""

import sys

PREFIX = "deploy: "


def say(text: str) -> None:
    print(PREFIX + text, file=sys.stderr, flush=True)


def stopped(text: str) -> SystemExit:
    """The exit of a run that failed (status 1), with its one line."""
    return SystemExit(PREFIX + text)


def unprefixed(line: str) -> str:
    """A line as said, without its prefix (a line said elsewhere, to be said again as part of
    another)."""
    return line.removeprefix(PREFIX)
