"""`vllm-sagemaker batch` as the batch tests run it: the command, request lines and their
files, a run held mid-run by lines the server refuses, and an environment with no AWS.

Not a test module: the batch, transform, fleet and install tests import these from here.
"""

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tests.support import cli, waiting
from tests.support.json_lines import parse_lines
from vllm_sagemaker.deploy.batch.minibatches import LINES_PER_REQUEST

# The lines a run held mid-run has answered when the test kills it: three whole mini-batches.
REFUSED = 3 * LINES_PER_REQUEST


def batch(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return cli.run("batch", *args, stdin=stdin)


def completion(custom_id: str, prompt: str = "hello", tokens: int = 2) -> dict[str, Any]:
    body = {"prompt": prompt, "max_tokens": tokens}
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/completions", "body": body}


def jsonl(records: list[Any]) -> bytes:
    return b"".join(
        (r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n" for r in records
    )


def read(data: bytes) -> list[dict[str, Any]]:
    return parse_lines(data)


def line_count(path: Path) -> int:
    """Whole lines in a file (0 while it does not exist)."""
    return path.read_bytes().count(b"\n") if path.exists() else 0


def held_mid_run(runner: subprocess.Popen[bytes], written: int, *outputs: Path) -> None:
    """Until the runner has written `written` lines to `outputs`. With the engine frozen and
    the input made by `refused_first`, nothing more can be written until the engine resumes."""

    def written_so_far() -> bool:
        assert runner.poll() is None, f"the runner ended ({runner.returncode}) before the kill"
        return sum(map(line_count, outputs)) >= written

    waiting.until(written_so_far, 300, f"the runner wrote fewer than {written} lines", 0.01)


def refused_first(lines: list[Any], refused: int = REFUSED) -> list[Any]:
    """`lines` with the first `refused` made ones the server refuses without the engine (whole
    mini-batches of them): with the engine frozen, a run answers exactly those and holds."""
    assert refused % LINES_PER_REQUEST == 0
    return [
        {**line, "body": {**line["body"], "max_tokens": 99999}} if i < refused else line
        for i, line in enumerate(lines)
    ]


def no_aws(home: Path) -> dict[str, str]:
    """This process's environment without any AWS setting: no credentials, no region."""
    return {
        **{name: value for name, value in os.environ.items() if not name.startswith("AWS_")},
        "HOME": str(home),
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
    }
