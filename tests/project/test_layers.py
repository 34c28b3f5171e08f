"""Imports point one way: core <- container, server, client (docs/development.md, "Layers"),
and inside the client: base <- batch, transform, image <- kit.

The walk reads every import of `container/`, `handler/` and `deploy/` (also those inside
functions) and fails on an arrow against the layers, on a package a layer must not load, or on
folders that import each other round a cycle.
"""

import ast
import collections
import json
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import pytest

from tests import FOLDERS, ROOT

NAMESPACE = "vllm_sagemaker"

# The longest prefix names a module's layer.
LAYER_PREFIXES = {
    "vllm_sagemaker.core": "core",
    "vllm_sagemaker.container": "container",
    "vllm_sagemaker.container.cli": "entry",
    "vllm_sagemaker.container.__main__": "entry",
    "vllm_sagemaker.handler": "server",
    "vllm_sagemaker.deploy": "client",
    "vllm_sagemaker.deploy.base": "client.base",
    "vllm_sagemaker.deploy.batch": "client.batch",
    "vllm_sagemaker.deploy.transform": "client.transform",
    "vllm_sagemaker.deploy.image": "client.image",
    "vllm_sagemaker.deploy.kit": "client.kit",
}
# The client's layers: `base` the pieces every command shares; `batch`, `transform` and `image`
# the commands and tools that stand on it alone; `kit` the deploy kit, whose `--local` jobs run
# the local transform and whose `deploy image` builds the image.
CLIENT = {"client", "client.base", "client.batch", "client.transform", "client.image", "client.kit"}
# Which layers each layer may import. The entry is the `vllm-sagemaker` command: it dispatches
# to `serve` and to the client's commands.
MAY_IMPORT = {
    "core": {"core"},
    "container": {"core", "container"},
    "server": {"core", "server"},
    "client": {"core", "client"},
    "client.base": {"core", "client.base"},
    "client.batch": {"core", "client.base", "client.batch"},
    "client.transform": {"core", "client.base", "client.transform"},
    "client.image": {"core", "client.base", "client.image"},
    "client.kit": {"core", "client.base", "client.transform", "client.image", "client.kit"},
    "entry": {"core", "container", "entry", *CLIENT},
}
# What a layer may import beside the standard library and our own modules (None: anything the
# server install brings). The client's list is its install's dependencies (pyproject.toml).
THIRD_PARTY: dict[str, frozenset[str] | None] = {
    "core": frozenset(),
    # `serve` reads a model's files' sizes from the Hub and S3 before vLLM starts (the fit
    # check, container/model_reads.py), with the clients vLLM brings and uses for the same files.
    "container": frozenset({"vllm", "huggingface_hub", "boto3", "botocore"}),
    **{
        client: frozenset({"boto3", "botocore", "httpx", "smart_open", "tqdm"}) for client in CLIENT
    },
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
        ("vllm_sagemaker.deploy.batch.run", "vllm_sagemaker.core.jsonlines", None),
        (
            "vllm_sagemaker.deploy.base.storage",
            "vllm_sagemaker.handler.records.messages",
            "client.base -> server",
        ),
        (
            "vllm_sagemaker.handler.batches.api.routes",
            "vllm_sagemaker.deploy.base.storage",
            "server -> client.base",
        ),
        (
            "vllm_sagemaker.core.config",
            "vllm_sagemaker.container.env_args",
            "core -> container",
        ),
        (
            "vllm_sagemaker.core.kinds",
            "vllm_sagemaker.handler.records.pipeline",
            "core -> server",
        ),
        ("vllm_sagemaker.container.serve", "vllm_sagemaker.core.config", None),
        (
            "vllm_sagemaker.container.serve",
            "vllm_sagemaker.handler.middleware",
            "container -> server",
        ),
        (
            "vllm_sagemaker.container.serve",
            "vllm_sagemaker.deploy.kit.cli",
            "container -> client.kit",
        ),
        ("vllm_sagemaker.container.cli", "vllm_sagemaker.deploy.kit.cli", None),
        ("vllm_sagemaker.container.cli", "vllm_sagemaker.deploy.batch.command", None),
        ("vllm_sagemaker.container.cli", "vllm_sagemaker.handler.middleware", "entry -> server"),
        ("vllm_sagemaker.handler.middleware", "starlette.types", None),
        ("vllm_sagemaker.core.routing", "json", None),
        ("vllm_sagemaker.core.routing", "boto3", "core must not import boto3"),
        ("vllm_sagemaker.deploy.kit.endpoint", "boto3", None),
        (
            "vllm_sagemaker.deploy.batch.run",
            "starlette",
            "client.batch must not import starlette",
        ),
        (
            "vllm_sagemaker.deploy.base.invocations",
            "vllm.entrypoints",
            "client.base must not import vllm",
        ),
        # Inside the client: base <- batch, transform, image <- kit.
        ("vllm_sagemaker.deploy.batch.run", "vllm_sagemaker.deploy.base.invocations", None),
        (
            "vllm_sagemaker.deploy.base.invocations",
            "vllm_sagemaker.deploy.batch.run",
            "client.base -> client.batch",
        ),
        ("vllm_sagemaker.deploy.transform.job", "vllm_sagemaker.deploy.base.storage", None),
        (
            "vllm_sagemaker.deploy.transform.job",
            "vllm_sagemaker.deploy.batch.sagemaker_endpoint",
            "client.transform -> client.batch",
        ),
        ("vllm_sagemaker.deploy.image.build", "vllm_sagemaker.deploy.base.run", None),
        (
            "vllm_sagemaker.deploy.image.build",
            "vllm_sagemaker.deploy.kit.cli",
            "client.image -> client.kit",
        ),
        ("vllm_sagemaker.deploy.kit.fleet.jobs", "vllm_sagemaker.deploy.transform.job", None),
        (
            "vllm_sagemaker.deploy.kit.batch",
            "vllm_sagemaker.deploy.batch.run",
            "client.kit -> client.batch",
        ),
        ("vllm_sagemaker.deploy.kit.image", "vllm_sagemaker.deploy.image.build", None),
        (
            "vllm_sagemaker.deploy.transform.job",
            "vllm_sagemaker.deploy.kit.fleet.jobs",
            "client.transform -> client.kit",
        ),
        ("vllm_sagemaker.deploy.kit.cli", "vllm_sagemaker.deploy.base.region", None),
        (
            "vllm_sagemaker.deploy.base.errors",
            "vllm_sagemaker.deploy.kit.checks",
            "client.base -> client.kit",
        ),
        (
            "vllm_sagemaker.deploy.kit.cli",
            "vllm_sagemaker.container.cli",
            "client.kit -> entry",
        ),
        ("vllm_sagemaker.container.vllm_cli", "vllm.entrypoints.cli.main", None),
        ("vllm_sagemaker.container.model_reads", "boto3", None),
        ("vllm_sagemaker.container.serve", "httpx", "container must not import httpx"),
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


def is_ours(module: str) -> bool:
    """Whether `module` names one of our modules or packages."""
    parts = module.split(".")
    if parts[0] != NAMESPACE or len(parts) < 2:
        return False
    path = ROOT.joinpath(*parts[1:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def folder(module: str) -> str:
    """The folder (package) one of our modules is in; a package is its own folder."""
    path = ROOT.joinpath(*module.split(".")[1:])
    return module if (path / "__init__.py").is_file() else module.rpartition(".")[0]


def our_imports(path: Path) -> Iterator[str]:
    """Our modules a file imports, function-level ones included: `from P import m` imports the
    module P.m when there is one, else P."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            module = node.module
            found = [
                f"{module}.{alias.name}" if is_ours(f"{module}.{alias.name}") else module
                for alias in node.names
            ]
        else:
            continue
        yield from (name for name in found if is_ours(name))


def cycle(edges: Mapping[str, Iterable[str]]) -> list[str] | None:
    """One cycle of a graph, as its nodes in order with the first again at the end; None when
    there is none."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        path.append(node)
        for after in sorted(edges.get(node, ())):
            found = visit(after)
            if found:
                return found
        path.pop()
        done.add(node)
        return None

    for node in sorted(edges):
        found = visit(node)
        if found:
            return found
    return None


@pytest.mark.parametrize(
    ("edges", "found"),
    [
        ({"a": {"b"}, "b": {"c"}}, None),
        ({"a": {"b", "c"}, "b": {"c"}}, None),
        ({"a": {"b"}, "b": {"a"}}, ["a", "b", "a"]),
        ({"a": {"b"}, "b": {"c"}, "c": {"b"}}, ["b", "c", "b"]),
    ],
)
def test_a_cycle_is_found(edges: dict[str, set[str]], found: list[str] | None) -> None:
    assert cycle(edges) == found


def test_no_folders_import_each_other_round_a_cycle() -> None:
    """Between the folders (packages) of the three, imports form no cycle: a folder that imports
    a module of another is never imported back by it, directly or round others (a package's
    own modules and its subpackages' count as two folders)."""
    edges: dict[str, set[str]] = collections.defaultdict(set)
    for path in our_files():
        importer = folder(module_name(path))
        for imported in our_imports(path):
            if folder(imported) != importer:
                edges[importer].add(folder(imported))
    found = cycle(edges)
    assert found is None, "folders import each other round a cycle: " + " -> ".join(found or [])


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
    assert f"{NAMESPACE}.deploy.kit.cli" in ours
    assert [m for m in ours if layer(m) == "server"] == []
    assert [m for m in loaded if m.split(".")[0] in ("starlette", "fastapi", "vllm", "torch")] == []
