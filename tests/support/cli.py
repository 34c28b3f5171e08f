"""Running the `vllm-sagemaker` command as a user would, from tests."""

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support import processes

VLLM_SAGEMAKER = str(Path(sys.executable).with_name("vllm-sagemaker"))


def options(**named: str) -> list[str]:
    """`content_type="x"` -> ["--content-type", "x"]."""
    return [arg for name, value in named.items() for arg in ("--" + name.replace("_", "-"), value)]


def run(
    *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None, text: bool = False
) -> subprocess.CompletedProcess[Any]:
    """`vllm-sagemaker ARGS` with the test's environment (plus `env`); output as str if `text`."""
    return processes.run(
        [VLLM_SAGEMAKER, *args], stdin=stdin, text=text, env={**os.environ, **(env or {})}
    )
