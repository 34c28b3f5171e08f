"""The rules `serve` applies to customer code before anything starts: handler specs read from
source without running it, and the pip command for requirements.txt."""

import pytest

from vllm_sagemaker.container import requirements
from vllm_sagemaker.core import handler_specs

SCRIPT = """
import json
from fastapi import Request as FastRequest

LIMIT = 3
handler_alias = json.dumps


async def invocations(request):
    return {}


def ping():
    return {}


class Handlers:
    def ping(self):
        return {}
"""
FILES = {
    "/code/model.py": SCRIPT,
    "/code/other.py": "def fn():\n    return 1\n",
    "/abs/elsewhere.py": "def fn():\n    return 1\n",
    "/code/broken.py": "def fn(:\n",
}
ENV = {"SAGEMAKER_MODEL_PATH": "/code"}


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("", None),
        ("   ", None),
        ("/invocations", None),  # a router path: MHCS keeps the framework's own handler
        ("model.py:invocations", None),
        ("model.py:ping", None),
        ("model:invocations", None),  # `model` is the customer script
        ("model.py:Handlers.ping", None),  # a class method: the class must exist
        ("model.py:LIMIT", None),
        ("model.py:handler_alias", None),
        ("model.py:FastRequest", None),
        ("other.py:fn", None),
        ("/abs/elsewhere.py:fn", None),
        ("package.module:fn", None),  # a module spec is left to MHCS (finding it imports it)
        ("model.py", "names no function"),
        ("model.py:", "names no function"),
        ("model.py:a b", "names no function"),
        ("a:b:c", "names no function"),
        ("model.py:missing", "/code/model.py defines no 'missing' (it defines FastRequest, "),
        ("model:missing", "/code/model.py defines no 'missing'"),
        ("model.py:Missing.ping", "defines no 'Missing'"),
        ("gone.py:fn", "there is no file /code/gone.py"),
        ("/abs/gone.py:fn", "there is no file /abs/gone.py"),
        ("broken.py:fn", "/code/broken.py line 1: "),
    ],
)
def test_handler_spec_problems(spec: str, problem: str | None) -> None:
    found = handler_specs.spec_problem("CUSTOM_FASTAPI_PING_HANDLER", spec, ENV, FILES.get)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert problem in found
        assert found.startswith(f"CUSTOM_FASTAPI_PING_HANDLER={spec.strip()!r}")


def test_the_script_and_its_directory_follow_the_environment() -> None:
    assert handler_specs.script_path({}) == "/opt/ml/model/model.py"
    assert handler_specs.script_path({"SAGEMAKER_MODEL_DIR": "/m"}) == "/m/model.py"
    env = {
        "SAGEMAKER_MODEL_DIR": "/m",
        "SAGEMAKER_MODEL_PATH": "/c",
        "CUSTOM_SCRIPT_FILENAME": "x.py",
    }
    assert handler_specs.script_path(env) == "/c/x.py"
    renamed = {**ENV, "CUSTOM_SCRIPT_FILENAME": "other.py"}
    assert handler_specs.spec_problem("V", "model:fn", renamed, FILES.get) is None


def test_both_variables_are_checked() -> None:
    env = {
        **ENV,
        "CUSTOM_FASTAPI_PING_HANDLER": "model.py:nope",
        "CUSTOM_FASTAPI_INVOCATION_HANDLER": "gone.py:fn",
    }
    found = handler_specs.problems(env, FILES.get)
    assert [problem.split("=")[0] for problem in found] == list(handler_specs.HANDLER_VARIABLES)


PIP = ["py", "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]


@pytest.mark.parametrize(
    ("env", "has_requirements", "has_wheels", "command"),
    [
        ({}, False, False, None),
        ({}, False, True, None),
        ({}, True, False, [*PIP, "-r", "/code/requirements.txt"]),
        (
            {},
            True,
            True,
            [
                *PIP,
                "--no-index",
                "--find-links",
                "/code/requirements",
                "-r",
                "/code/requirements.txt",
            ],
        ),
        ({"STANDARD_AUTO_INSTALL_REQ": "false"}, True, True, None),
        ({"STANDARD_AUTO_INSTALL_REQ": "0"}, True, False, None),
        ({"STANDARD_AUTO_INSTALL_REQ": "No"}, True, False, None),
        (
            {"STANDARD_AUTO_INSTALL_REQ": "TRUE"},
            True,
            False,
            [*PIP, "-r", "/code/requirements.txt"],
        ),
        ({"STANDARD_AUTO_INSTALL_REQ": "on"}, True, False, [*PIP, "-r", "/code/requirements.txt"]),
        # STANDARD_PIP_ARGS replaces auto-discovery, with or without a requirements.txt.
        (
            {"STANDARD_PIP_ARGS": "-r /x/req.txt --index-url 'https://i/simple'"},
            True,
            True,
            [*PIP, "-r", "/x/req.txt", "--index-url", "https://i/simple"],
        ),
        ({"STANDARD_PIP_ARGS": "tiny-pkg==1.0"}, False, False, [*PIP, "tiny-pkg==1.0"]),
        ({"STANDARD_PIP_ARGS": "  "}, True, False, [*PIP, "-r", "/code/requirements.txt"]),
        ({"STANDARD_PIP_ARGS": "x", "STANDARD_AUTO_INSTALL_REQ": "false"}, True, False, None),
    ],
)
def test_requirements_install_command(
    env: dict[str, str], has_requirements: bool, has_wheels: bool, command: list[str] | None
) -> None:
    assert requirements.install_command(env, "py", "/code", has_requirements, has_wheels) == command
