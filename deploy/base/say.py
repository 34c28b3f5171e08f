"""The one prefix of the deploy kit's notes on stderr: `say` writes `deploy: <text>` (a failure
is a `deploy.base.errors.ClientError`, printed by the top). No boto3 here."""

import sys

PREFIX = "deploy: "


def say(text: str) -> None:
    print(PREFIX + text, file=sys.stderr, flush=True)
