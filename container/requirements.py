"""`requirements.txt` beside the model, installed into the server's Python before vLLM starts.

The switches are those of AWS's standard-supervisor (MHCS `dependency_manager`):
`STANDARD_AUTO_INSTALL_REQ` (default true) turns the install on or off, and `STANDARD_PIP_ARGS`
replaces auto-discovery with exactly its arguments. Unlike MHCS, a `requirements/` directory
beside the file makes the install offline (`--no-index --find-links`), as DJL LMI does: an
endpoint in a VPC without internet cannot reach PyPI, and pip would hang trying.
"""

import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence

from vllm_sagemaker.core.environment import AUTO_INSTALL_VAR, auto_install

FILENAME = "requirements.txt"
WHEELS = "requirements"


def install_command(
    env: Mapping[str, str],
    python: str,
    code_dir: str,
    has_requirements: bool,
    has_wheels: bool,
) -> list[str] | None:
    """The pip command to run before the server starts, or None when there is nothing to do."""
    if not auto_install(env):
        return None
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
    explicit = env.get("STANDARD_PIP_ARGS", "").strip()
    if explicit:
        return [*pip, *shlex.split(explicit)]
    if not has_requirements:
        return None
    offline = ["--no-index", "--find-links", os.path.join(code_dir, WHEELS)] if has_wheels else []
    return [*pip, *offline, "-r", os.path.join(code_dir, FILENAME)]


def for_directory(env: Mapping[str, str], code_dir: str) -> list[str] | None:
    """`install_command` for this interpreter and what `code_dir` holds."""
    return install_command(
        env,
        sys.executable,
        code_dir,
        os.path.isfile(os.path.join(code_dir, FILENAME)),
        os.path.isdir(os.path.join(code_dir, WHEELS)),
    )


def install(command: Sequence[str]) -> int:
    """Run pip with its output on ours (its progress and its error are the user's to read);
    0 when it succeeded, else 1 with a line saying what to do."""
    print("serve: installing requirements: " + shlex.join(command), file=sys.stderr, flush=True)
    status = subprocess.run(command, stdout=sys.stderr, check=False).returncode
    if status == 0:
        return 0
    print(
        f"serve: installing the requirements failed (pip exited with {status}, its error is "
        "above); fix requirements.txt, ship the wheels in a requirements/ directory beside it, "
        f"or set {AUTO_INSTALL_VAR}=false",
        file=sys.stderr,
    )
    return 1
