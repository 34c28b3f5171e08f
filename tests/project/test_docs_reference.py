"""The docs against the code: every variable the code reads is in the configuration reference
and nothing more, the command reference is what argparse defines, and every link resolves."""

import ast
import re
from pathlib import Path

import pytest

from tests import FOLDERS, ROOT
from tests.support import cli_reference
from vllm_sagemaker.core.kinds import KINDS

DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS]
CONFIGURATION = ROOT / "docs" / "configuration.md"
# Variables of ours by name: SageMaker's, the AWS images', MHCS's, and the vLLM, OpenMP and
# Python ones we set.
OURS = re.compile(
    r"^(?:(?:SAGEMAKER|SM|STANDARD|CUSTOM|PROCESS|VLLM|HF|TORCHDYNAMO|OMP)_[A-Z0-9_]*[A-Z0-9]"
    r"|PYTHON[A-Z]+|LD_PRELOAD)$"
)
ENV_NAMES = {"env", "environ"}
# vLLM's own options pass through as SM_VLLM_<NAME>: one rule row, not a row each.
PASS_THROUGH = "SM_VLLM_"


def _is_env(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id in ENV_NAMES) or (
        isinstance(node, ast.Attribute) and node.attr in ENV_NAMES
    )


def _docstrings(tree: ast.Module) -> set[int]:
    kinds = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, kinds)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def variables_in(source: str) -> set[str]:
    """Names of environment variables in code: strings named like ours (docstrings aside), and
    any string read from a mapping called `env` or `environ` (`env.get("X")`, `env["X"]`,
    `"X" in env`, `f(env, "X")`)."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    found = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and OURS.match(node.value)
        ):
            found.add(node.value)
        read: list[ast.expr] = []
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and _is_env(func.value) and func.attr == "get":
                read = node.args[:1]
            elif any(_is_env(arg) for arg in node.args):
                read = list(node.args)
        elif isinstance(node, ast.Subscript) and _is_env(node.value):
            read = [node.slice]
        elif isinstance(node, ast.Compare) and any(_is_env(c) for c in node.comparators):
            read = [node.left]
        found.update(
            arg.value
            for arg in read
            if isinstance(arg, ast.Constant)
            and isinstance(arg.value, str)
            and re.fullmatch(r"[A-Z][A-Z0-9_]+", arg.value)
        )
    return found


def code_variables() -> set[str]:
    return {
        name
        for folder in FOLDERS
        for path in (ROOT / folder).rglob("*.py")
        for name in variables_in(path.read_text())
    }


def documented_variables(markdown: str) -> set[str]:
    """The names in the first cell of the reference's table rows (`<NAME>` rules included)."""
    names = set()
    for line in markdown.splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1]
            names.update(re.findall(r"`([A-Z][A-Z0-9_<>]*)`", first))
    return names


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('env.get("SAGEMAKER_X", "1")', {"SAGEMAKER_X"}),
        ('os.environ["CUDA_VISIBLE_DEVICES"]', {"CUDA_VISIBLE_DEVICES"}),
        ('"XDG_DATA_HOME" in env', {"XDG_DATA_HOME"}),
        ('flag(env, "STANDARD_AUTO_INSTALL_REQ", True)', {"STANDARD_AUTO_INSTALL_REQ"}),
        ('MARKER = "SAGEMAKER_ASYNC_INFERENCE"', {"SAGEMAKER_ASYNC_INFERENCE"}),
        ('def f():\n    """Reads SM_VLLM_MODEL."""', set()),
        ('headers.get("CONTENT_TYPE")', set()),
        ('PREFIX = "SM_VLLM_"', set()),
        ('{"PYTHONFAULTHANDLER": "1"}', {"PYTHONFAULTHANDLER"}),
        ('PRELOAD = "LD_PRELOAD"', {"LD_PRELOAD"}),
    ],
)
def test_how_variables_are_found_in_code(source: str, expected: set[str]) -> None:
    assert variables_in(source) == expected


def test_the_configuration_reference_lists_exactly_what_the_code_reads() -> None:
    documented = documented_variables(CONFIGURATION.read_text())
    assert f"{PASS_THROUGH}<NAME>" in documented
    in_code = code_variables()
    assert sorted(in_code - documented) == [], "read by the code, missing in configuration.md"
    rules = {name for name in documented if "<" in name}
    assert sorted(documented - rules - in_code) == [], "in configuration.md, read by nothing"


def test_the_command_reference_is_what_the_commands_define() -> None:
    """Regenerate with `.venv/bin/python -m tests.support.cli_reference` after a command
    changes."""
    assert cli_reference.PATH.read_text() == cli_reference.render()


def slug(heading: str) -> str:
    """The anchor the repository host gives a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    return {slug(m) for m in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)}


def links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    return re.findall(r"\]\(([^)\s]+)\)", text)


def test_every_link_resolves() -> None:
    broken = []
    for page in PAGES:
        for target in links(page):
            if re.match(r"[a-z]+://", target):
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert broken == []


def test_the_link_check_can_fail(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# A title\n\n[ok](#a-title) [gone](#b-title) [file](missing.md)\n")
    assert links(page) == ["#a-title", "#b-title", "missing.md"]
    assert anchors(page) == {"a-title"}


def test_the_kinds_table_is_the_routing_table() -> None:
    """real-time.md lists the request kinds in the order `/invocations` tries them."""
    text = (ROOT / "docs" / "real-time.md").read_text()
    table = text[text.index("| kind | shape | vLLM route |") :].split("\n\n")[0]
    rows = [line.split("|") for line in table.splitlines()[2:]]
    documented = [
        (re.sub(r"\s*/\s*", "/", cells[1].strip()), re.findall(r"`(/[^`]*)`", cells[3])[0])
        for cells in rows
    ]
    assert documented == [(kind.name, kind.route) for kind in KINDS]
