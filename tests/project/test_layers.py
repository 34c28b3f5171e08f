"""Imports point one way: core <- container, server, client (docs/development.md, "Layers").

The walk reads every import of `container/`, `handler/` and `deploy/` (also those inside
functions) and fails on an arrow against the layers, or on a package a layer must not load.
"""

import ast
import json
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import ROOT

NAMESPACE = "vllm_sagemaker"
FOLDERS = ("container", "handler", "deploy")

# The longest prefix names a module's layer.
LAYER_PREFIXES = {
    "vllm_sagemaker.handler.core": "core",
    "vllm_sagemaker.container": "container",
    "vllm_sagemaker.container.cli": "entry",
    "vllm_sagemaker.container.__main__": "entry",
    "vllm_sagemaker.handler": "server",
    "vllm_sagemaker.deploy": "client",
}
# Which layers each layer may import. The entry is the `vllm-sagemaker` command: it dispatches
# to `serve` and to the client's commands.
MAY_IMPORT = {
    "core": {"core"},
    "container": {"core", "container"},
    "server": {"core", "server"},
    "client": {"core", "client"},
    "entry": {"core", "container", "client", "entry"},
}
# What a layer may import beside the standard library and our own modules (None: anything the
# server install brings). The client's list is its install's dependencies (pyproject.toml).
THIRD_PARTY = {
    "core": frozenset(),
    "container": frozenset({"vllm"}),
    "client": frozenset({"boto3", "botocore", "httpx", "tqdm"}),
    "entry": frozenset(),
    "server": None,
}


def layer(module: str) -> str:
    """The layer of one of our modules."""
    matches = [p for p in LAYER_PREFIXES if module == p or module.startswith(p + ".")]
    if not matches:
        raise ValueError(f"{module} is in no layer")
    return LAYER_PREFIXES[max(matches, key=len)]


def wrong_import(importer: str, imported: str) -> str | None:
    """Why `importer` must not import `imported`, or None when the arrow is allowed."""
    source = layer(importer)
    top = imported.split(".")[0]
    if top == NAMESPACE:
        target = layer(imported)
        if target not in MAY_IMPORT[source]:
            return f"{source} -> {target}"
        return None
    if top in FOLDERS:
        return f"bare `{top}`: import it as {NAMESPACE}.{imported}"
    allowed = THIRD_PARTY[source]
    if allowed is None or top in sys.stdlib_module_names or top in allowed:
        return None
    return f"{source} must not import {top}"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((NAMESPACE, *parts))


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) for every import in a file, function-level ones included."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                yield node.lineno, "." * node.level + (node.module or "")
            else:
                assert node.module is not None
                yield node.lineno, node.module


def our_files() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize(
    ("importer", "imported", "why"),
    [
        ("vllm_sagemaker.deploy.batch.runner", "vllm_sagemaker.handler.core.jsonlines", None),
        (
            "vllm_sagemaker.deploy.io.storage",
            "vllm_sagemaker.handler.records.messages",
            "client -> server",
        ),
        (
            "vllm_sagemaker.handler.batches.routes",
            "vllm_sagemaker.deploy.io.storage",
            "server -> client",
        ),
        (
            "vllm_sagemaker.handler.core.config",
            "vllm_sagemaker.container.env_args",
            "core -> container",
        ),
        (
            "vllm_sagemaker.handler.core.kinds",
            "vllm_sagemaker.handler.records.pipeline",
            "core -> server",
        ),
        ("vllm_sagemaker.container.serve", "vllm_sagemaker.handler.core.config", None),
        (
            "vllm_sagemaker.container.serve",
            "vllm_sagemaker.handler.middleware",
            "container -> server",
        ),
        (
            "vllm_sagemaker.container.serve",
            "vllm_sagemaker.deploy.aws.commands",
            "container -> client",
        ),
        ("vllm_sagemaker.container.cli", "vllm_sagemaker.deploy.aws.commands", None),
        ("vllm_sagemaker.container.cli", "vllm_sagemaker.handler.middleware", "entry -> server"),
        ("vllm_sagemaker.handler.middleware", "starlette.types", None),
        ("vllm_sagemaker.handler.core.routing", "json", None),
        ("vllm_sagemaker.handler.core.routing", "boto3", "core must not import boto3"),
        ("vllm_sagemaker.deploy.aws.commands", "boto3", None),
        ("vllm_sagemaker.deploy.batch.runner", "starlette", "client must not import starlette"),
        ("vllm_sagemaker.deploy.batch.runner", "vllm.entrypoints", "client must not import vllm"),
        ("vllm_sagemaker.container.vllm_cli", "vllm.entrypoints.cli.main", None),
        ("vllm_sagemaker.container.serve", "boto3", "container must not import boto3"),
        (
            "vllm_sagemaker.handler.middleware",
            "handler.config",
            "bare `handler`: import it as vllm_sagemaker.handler.config",
        ),
    ],
)
def test_the_layer_rules(importer: str, imported: str, why: str | None) -> None:
    assert wrong_import(importer, imported) == why


def test_no_import_points_against_the_layers() -> None:
    """Every import of the three folders, checked; the list of offences must be empty."""
    offences = []
    for path in our_files():
        importer = module_name(path)
        for line, imported in imports(path):
            if imported.startswith("."):
                offences.append(f"{path.relative_to(ROOT)}:{line}: relative import {imported}")
                continue
            why = wrong_import(importer, imported)
            if why:
                offences.append(f"{path.relative_to(ROOT)}:{line}: {imported} ({why})")
    assert offences == []


def test_tests_and_benchmarks_import_the_namespace() -> None:
    """`import handler` would load a second copy of a module under another name."""
    bare = [
        f"{path.relative_to(ROOT)}:{line}: {imported}"
        for folder in ("tests", "benchmarks")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line, imported in imports(path)
        if imported.split(".")[0] in FOLDERS
    ]
    assert bare == []


def test_the_wheel_lists_every_package_folder() -> None:
    """pyproject.toml lists packages by hand (package-dir): a new folder must be listed too."""
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {
        module_name(init.parent / "__init__.py")
        for folder in FOLDERS
        for init in (ROOT / folder).rglob("__init__.py")
    }
    assert set(settings["packages"]) == folders
    assert settings["package-dir"] == {f"{NAMESPACE}.{f}": f for f in FOLDERS}


def test_the_handler_package_loads_nothing() -> None:
    """Importing the core loads `vllm_sagemaker.handler` first: it must stay empty."""
    assert list(imports(ROOT / "handler" / "__init__.py")) == []


def loaded_after(code: str) -> list[str]:
    """Our modules and the top-level packages a fresh interpreter holds after running `code`
    (`vllm_sagemaker.handler`, the empty parent of the core, left out)."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd="/"
    )
    loaded = json.loads(done.stdout.splitlines()[-1])
    return [m for m in loaded if m not in (NAMESPACE, f"{NAMESPACE}.handler")]


def test_serve_loads_nothing_of_the_handler_or_the_client() -> None:
    """`serve` resolves vLLM's command without the middleware, the deploy kit or boto3."""
    loaded = loaded_after(
        "from vllm_sagemaker.container import serve, system\n"
        "serve.server_command({'SM_VLLM_MODEL': 'm'}, [], system.on_this_machine({}))"
    )
    ours = [m for m in loaded if m.startswith(NAMESPACE + ".")]
    assert ours
    assert [m for m in ours if layer(m) not in ("core", "container")] == []
    assert [m for m in loaded if m.split(".")[0] in ("boto3", "starlette", "vllm", "httpx")] == []


def test_the_client_commands_load_nothing_of_the_server() -> None:
    """`vllm-sagemaker --help` builds every client command's parser without the server."""
    loaded = loaded_after(
        "from vllm_sagemaker.container import cli\ncli.build_parser().format_help()"
    )
    ours = [m for m in loaded if m.startswith(NAMESPACE + ".")]
    assert f"{NAMESPACE}.deploy.aws.commands" in ours
    assert [m for m in ours if layer(m) == "server"] == []
    assert [m for m in loaded if m.split(".")[0] in ("starlette", "fastapi", "vllm", "torch")] == []
