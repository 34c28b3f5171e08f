"""The GPU image's pin check: its one install step, `pip install "./[server]"` on the GPU base,
moves none of the base's packages, above all none that vLLM pins (torch). pip's resolver runs
twice as a dry run for the base's platform, for vLLM alone and beside our `[server]` extra, on
the base's Python 3.12: pip 23 evaluates markers and Requires-Python with the Python that runs
it, whatever `--python-version` says (pypa/pip#11664). Both use today's index, not the base's.

    .venv/bin/python -m tests.support.pins [CHECKOUT] [--extra REQ]... [--python PYTHON]
"""

import argparse
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tests import ROOT

# The vLLM release of the GPU base (Dockerfile's GPU_BASE) and of the CPU build (pyproject.toml).
VLLM_VERSION: Final = "0.32.0"
VLLM: Final = f"vllm=={VLLM_VERSION}"
# The GPU base's Python, machine and C library (Ubuntu 22.04: glibc 2.35).
BASE_ENVIRONMENT: Final = {
    "python_version": "3.12",
    "sys_platform": "linux",
    "platform_machine": "x86_64",
}
BASE_PYTHON: Final = f"python{BASE_ENVIRONMENT['python_version']}"
# Where pyenv keeps the Pythons it installed (`pyenv root`'s default).
PYENV_VERSIONS: Final = Path.home() / ".pyenv" / "versions"
BASE_GLIBC_MINOR: Final = 35
# manylinux's legacy names, by the glibc minor they stand for (PEP 600).
LEGACY_MANYLINUX: Final = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
# A requirement that pins one version, as groups name, version and marker: `torch==2.13.0`,
# `a[b]==1; extra == "c"`.
PIN: Final = re.compile(
    r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*==\s*([^\s;,]+)\s*(;.*)?"
)

Report = dict[str, Any]


@dataclass(frozen=True)
class Resolution:
    """pip's report for one set of requirements (None when it failed) and what it printed."""

    report: Report | None
    output: str


def platforms(glibc_minor: int = BASE_GLIBC_MINOR, machine: str = "x86_64") -> list[str]:
    """The wheel platforms pip accepts on a glibc 2.`glibc_minor` system, newest first."""
    tags = []
    for minor in range(glibc_minor, 4, -1):
        tags.append(f"manylinux_2_{minor}_{machine}")
        if minor in LEGACY_MANYLINUX:
            tags.append(f"{LEGACY_MANYLINUX[minor]}_{machine}")
    return tags


def resolver_command(python: str, requirements: Sequence[str], scratch: Path) -> list[str]:
    """pip's resolver for the GPU base, installing nothing: a dry run whose JSON report lands in
    `scratch`. pip 23 takes `--platform` only with `--target` (which a dry run leaves empty)."""
    pip = [python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--only-binary=:all:"]
    places = [f"--report={scratch / 'report.json'}", f"--target={scratch / 'target'}"]
    return [*pip, *places, *(f"--platform={tag}" for tag in platforms()), *requirements]


def base_pythons(given: str | None) -> list[str]:
    """The Pythons to try for pip: the one given, else the base's on PATH, then pyenv's."""
    if given:
        return [given]
    version = BASE_ENVIRONMENT["python_version"]
    return [BASE_PYTHON, *map(str, sorted(PYENV_VERSIONS.glob(f"{version}.*/bin/{BASE_PYTHON}")))]


def runs_pip(python: str) -> bool:
    """Whether `python` starts and imports pip (a pyenv shim of a version not chosen does not)."""
    try:
        done = subprocess.run([python, "-c", "import pip"], capture_output=True, check=False)
    except OSError:
        return False
    return done.returncode == 0


def resolve(python: str, requirements: Sequence[str]) -> Resolution:
    """pip's resolution of `requirements` for the GPU base."""
    with tempfile.TemporaryDirectory(prefix="pins-") as scratch:
        command = resolver_command(python, requirements, Path(scratch))
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        report = Path(scratch, "report.json")
        return Resolution(
            json.loads(report.read_text()) if not done.returncode else None, done.stdout
        )


def normalized(name: str) -> str:
    """A distribution's name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def versions(report: Report) -> dict[str, tuple[str, str]]:
    """The packages a report installs: normalized name -> (name as published, version)."""
    metadata = [item["metadata"] for item in report["install"]]
    return {normalized(meta["name"]): (meta["name"], meta["version"]) for meta in metadata}


def vllm_pins(report: Report) -> dict[str, str]:
    """What vLLM pins with `==` that the report installs at that version (name -> version)."""
    installed = {name: version for name, (_, version) in versions(report).items()}
    vllm = next(item for item in report["install"] if item["metadata"]["name"] == "vllm")
    pins = {}
    for requirement in vllm["metadata"].get("requires_dist", []):
        match = PIN.fullmatch(requirement)
        if not match or "extra" in (match[3] or ""):
            continue
        name, version = normalized(match[1]), match[2]
        if installed.get(name, "").split("+")[0] == version:
            pins[name] = version
    return pins


def moved(base: Report, ours: Report) -> list[str]:
    """One line per package of `base` that `ours` installs at another version, vLLM's pins first."""
    pins = vllm_pins(base)
    after = versions(ours)
    pinned, others = [], []
    for key, (name, version) in sorted(versions(base).items()):
        if key not in after or after[key][1] == version:
            continue
        new = after[key][1]
        if key in pins:
            pinned.append(f"vLLM pins {name}=={pins[key]}; ours would install {new}")
        else:
            others.append(f"{name} moves: {VLLM} alone installs {version}, ours {new}")
    return pinned + others


def pip_errors(output: str) -> list[str]:
    """pip's error lines, with the lines under "The conflict is caused by:" indented below."""
    lines, in_conflict = [], False
    for line in output.splitlines():
        if line.startswith("ERROR:"):
            lines.append(line)
        elif line.strip() == "The conflict is caused by:":
            in_conflict = True
        elif in_conflict and line.startswith(" ") and line.strip():
            lines.append(f"  {line.strip()}")
        else:
            in_conflict = False
    return lines


def verdict(base: Resolution, ours: Resolution) -> tuple[int, list[str]]:
    """Exit status and lines: 0 nothing moves, 1 a package moves or conflicts, 2 pip cannot tell."""
    if base.report is None:
        return 2, [f"pip cannot resolve {VLLM} alone:", *pip_errors(base.output)]
    environment = base.report["environment"]  # what pip evaluated markers for
    wrong = [
        f"{key} {environment[key]} (the base's: {value})"
        for key, value in BASE_ENVIRONMENT.items()
        if environment[key] != value
    ]
    if wrong:
        return 2, [
            f"pip evaluated markers for {', '.join(wrong)}: run it with the base's "
            f"Python {BASE_ENVIRONMENT['python_version']} on Linux x86_64 (--python)"
        ]
    if ours.report is None:
        if "ResolutionImpossible" in ours.output:
            return 1, [f"ours conflicts with {VLLM}'s pins:", *pip_errors(ours.output)]
        return 2, [f"pip cannot resolve {VLLM} beside ours:", *pip_errors(ours.output)]
    lines = moved(base.report, ours.report)
    if lines:
        return 1, lines
    return 0, [f"nothing of {VLLM}'s {len(base.report['install'])} packages moves"]


def main(argv: Sequence[str] | None = None) -> int:
    """Resolve vLLM alone and beside ours, print the verdict; its exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.pins",
        description=f"Check that installing CHECKOUT[server] beside {VLLM} (the GPU image's one "
        "install step) moves none of vLLM's packages, with pip's resolver as a dry run.",
    )
    add = parser.add_argument
    project = "the project (default: %(default)s)"
    add("checkout", nargs="?", type=Path, default=ROOT, help=project)
    beside = "a requirement installed beside the extra (repeatable)"
    add("--extra", action="append", default=[], metavar="REQ", help=beside)
    add(
        "--python",
        help=f"the Python {BASE_ENVIRONMENT['python_version']} that runs pip (default: "
        f"{BASE_PYTHON} on PATH, else pyenv's)",
    )
    args = parser.parse_args(argv)
    python = next((p for p in base_pythons(args.python) if runs_pip(p)), None)
    if python is None:
        print(f"pins: no {BASE_PYTHON} with pip found: give one with --python", file=sys.stderr)
        return 2
    ours = [VLLM, f"{args.checkout.resolve()}[server]", *args.extra]
    status, lines = verdict(resolve(python, [VLLM]), resolve(python, ours))
    print("\n".join(lines), file=sys.stderr if status == 2 else sys.stdout)
    return status


if __name__ == "__main__":
    sys.exit(main())
