"""One word per concept (docs/glossary.md): no forbidden synonym among the identifiers and module
paths of `core/` and `deploy/` nor among the CLI's options; every name the glossary gives exists;
no class is defined twice; and an exit status is a type of its own, never an HTTP status."""

import argparse
import ast
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import ROOT
from vllm_sagemaker.container.cli import build_parser
from vllm_sagemaker.deploy.base import errors, invocations

GLOSSARY = ROOT / "docs" / "glossary.md"
CHECKED = ("core", "deploy")
# A name of a row's cell: `name`, and for a forbidden one, where it is checked: `name` (deploy/).
NAME = re.compile(r"`([^`]+)`(?: \((\w+)/\))?")


def rows() -> list[list[str]]:
    """The glossary's table: word, meaning, in the code, on the command line, forbidden."""
    lines = [line for line in GLOSSARY.read_text().splitlines() if line.startswith("| **")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


def names(folder: str) -> set[str]:
    """Every identifier of `folder`'s modules (defined, used, imported, as an attribute or a
    keyword), and each module's dotted path (`deploy.base.invocations`)."""
    found: set[str] = set()
    for path in (ROOT / folder).rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found.add(module.removesuffix(".__init__"))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Name):
                found.add(node.id)
            elif isinstance(node, ast.Attribute):
                found.add(node.attr)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found.add(node.name)
            elif isinstance(node, ast.arg | ast.keyword) and node.arg:
                found.add(node.arg)
            elif isinstance(node, ast.alias):
                found.update(filter(None, (*node.name.split("."), node.asname)))
            elif isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module.removeprefix("vllm_sagemaker."))
    return found


def cli_words() -> set[str]:
    """Every option string and dest of `vllm-sagemaker` and its commands."""
    found: set[str] = set()

    def walk(parser: argparse.ArgumentParser) -> None:
        for action in parser._actions:
            found.update([*action.option_strings, action.dest])
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found.add(name)
                    walk(sub)

    walk(build_parser())
    return found


def forbidden() -> Iterator[tuple[str, str, tuple[str, ...]]]:
    """(word, forbidden synonym, the folders it is checked in)."""
    for word, *_, banned in rows():
        for name, folder in NAME.findall(banned):
            yield word, name, (folder,) if folder else CHECKED


def test_the_glossary_has_its_rows() -> None:
    assert len(rows()) >= 20 and all(len(row) == 5 for row in rows())


@pytest.mark.parametrize(("word", "synonym", "folders"), list(forbidden()))
def test_no_forbidden_synonym_is_used(word: str, synonym: str, folders: tuple[str, ...]) -> None:
    used = [folder for folder in folders if synonym in names(folder)]
    if synonym.startswith("-") or "." not in synonym:
        used += ["the CLI"] if synonym in cli_words() else []
    assert not used, f"{synonym} is used in {used}: the glossary's word for it is {word}"


def test_every_name_the_glossary_gives_exists() -> None:
    known = names("core") | names("deploy") | cli_words() | {"vllm-sagemaker"}
    given = {
        name.split()[-1] if name.startswith(("deploy ", "vllm-sagemaker ")) else name
        for _, _, code, cli, _ in rows()
        for name, _ in NAME.findall(f"{code} {cli}")
    }
    assert sorted(given - known) == []


def test_no_class_is_defined_in_two_modules() -> None:
    defined: dict[str, list[str]] = defaultdict(list)
    for folder in CHECKED:
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.ClassDef):
                    defined[node.name].append(str(path.relative_to(ROOT)))
    assert {name: where for name, where in defined.items() if len(where) > 1} == {}


def test_an_exit_status_is_never_an_http_status() -> None:
    """A not-retryable answer keeps its HTTP status apart: the run it fails exits 1."""
    final = invocations.NotRetryable(invocations.HttpStatus(422), "too long")
    assert final.http_status == 422
    assert final.exit_status is errors.ExitStatus.FAILED
    assert not hasattr(errors.ClientError("x"), "status")
    assert errors.UsageError("x").exit_status is errors.ExitStatus.USAGE_ERROR


def test_the_docs_link_the_glossary() -> None:
    for doc in ("README.md", "docs/development.md"):
        assert "glossary.md" in Path(ROOT / doc).read_text(), doc
