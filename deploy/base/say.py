"""The one prefix of the deploy kit's notes on stderr: `say` writes one as `deploy: <text>` (a
failure is a `deploy.base.errors.ClientError`, printed with the same prefix by the top).

In the base because the plan machinery (`deploy.base.run`) writes such lines too; the commands
take `say` from `deploy.kit.options`. No boto3 here: `deploy.kit.cli` says before any command
runs.
"""

import sys

PREFIX = "deploy: "


def say(text: str) -> None:
    print(PREFIX + text, file=sys.stderr, flush=True)
