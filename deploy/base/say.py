"""The deploy kit's notes on stderr, as `deploy: <text>` (failures are `ClientError`s)."""

import sys

PREFIX = "deploy: "


def say(text: str) -> None:
    print(PREFIX + text, file=sys.stderr, flush=True)
