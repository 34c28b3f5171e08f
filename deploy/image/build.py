"""How an image is built: the builder's command line, the machine's pip settings lent to a build
read-only, and the content key that says an image is up to date (`__main__`, `deploy image`)."""

import ast
import hashlib
import os
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# The checkout this package runs from (an editable install): the build context.
CHECKOUT = Path(__file__).resolve().parents[2]
# The images one Dockerfile builds (its ENGINE build argument).
ENGINES = ("cpu", "gpu")
REPOSITORY = "vllm-sagemaker"
# The label that records what an image was built from (`content_key`).
CONTENT_LABEL = "org.vllm-sagemaker.content"
# What the Dockerfile copies (with itself and .dockerignore): a change here is a new image.
BUILD_INPUTS = (
    *("Dockerfile", ".dockerignore", "pyproject.toml", "README.md"),
    *("core", "container", "handler", "deploy"),
)
# Where pip inside a build finds the settings lent to it (pip reads it on every Linux).
BUILD_PIP_CONF = "/etc/pip.conf"
# Image sizes in GB, as registries and `docker images` tell them.
GB = 1000**3
# Builders that run without a Docker engine, and that can lend files to RUN steps (`-v`).
DAEMONLESS = ("buildah", "podman")
# pip settings a build is not given: where the host's own configuration file is.
SKIPPED_PIP_SETTINGS = frozenset({"config-file"})


@dataclass(frozen=True)
class Build:
    engine: str
    tag: str
    context: Path
    build_args: Mapping[str, str] = field(default_factory=dict)
    # Host paths lent read-only to RUN steps at the same path (never copied into the image).
    lent: Sequence[str] = ()
    # A pip configuration lent at BUILD_PIP_CONF.
    pip_conf: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    # buildah's and podman's RUN isolation (None: the default; `chroot` needs no user namespaces).
    isolation: str | None = None


def default_tag(engine: str) -> str:
    """An image's tag unless one is given: its engine's name."""
    return engine


def default_name(engine: str) -> str:
    """`vllm-sagemaker:cpu` or `vllm-sagemaker:gpu`."""
    return f"{REPOSITORY}:{default_tag(engine)}"


def command(tool: str, build: Build) -> list[str]:
    """The command line that builds `build` with `tool` (docker cannot lend files to RUN steps)."""
    name = Path(tool).name
    args = [tool, "bud" if name == "buildah" else "build"]
    if name in DAEMONLESS:
        # --layers keeps each step's result, so a later build redoes only what changed.
        args.append("--layers")
        if build.isolation:
            args += ["--isolation", build.isolation]
        mounts = [f"{path}:{path}:ro" for path in build.lent]
        if build.pip_conf:
            mounts.append(f"{build.pip_conf}:{BUILD_PIP_CONF}:ro")
        for mount in mounts:
            args += ["-v", mount]
    elif build.lent or build.pip_conf or build.isolation:
        raise ValueError(f"{name} cannot lend files to a build nor choose its isolation")
    for key, value in {"ENGINE": build.engine, **build.build_args}.items():
        args += ["--build-arg", f"{key}={value}"]
    for key, value in build.labels.items():
        args += ["--label", f"{key}={value}"]
    return [*args, "-t", build.tag, str(build.context)]


def shown(argv: Sequence[str]) -> str:
    """A command line as a user would type it."""
    return shlex.join(argv)


def pip_settings(listing: str) -> tuple[str, list[str]]:
    """The machine's pip settings (`pip config list`'s `section.key=<Python literal>` lines, where
    `:env:`'s PIP_* variables win over every file's) as one configuration file but the setting
    naming a file, and the local paths the build must be lent for them (indexes, wheels, the CA
    bundle; a package index `.../simple` whole: its pages link to files beside `simple/`)."""
    sections: dict[str, dict[str, str]] = {}
    from_env: dict[str, str] = {}
    for line in listing.splitlines():
        name, sep, literal = line.partition("=")
        section, dot, key = name.rpartition(".")
        if not sep or not dot or key in SKIPPED_PIP_SETTINGS:
            continue
        try:
            value = str(ast.literal_eval(literal))
        except (SyntaxError, ValueError):
            value = literal.strip()
        value = " ".join(value.split())
        if section == ":env:":
            from_env[key] = value
        else:
            sections.setdefault(section, {})[key] = value
    for key, value in from_env.items():
        for items in sections.values():
            items.pop(key, None)
        sections.setdefault("global", {})[key] = value
    paths: list[str] = []
    for items in sections.values():
        for word in " ".join(items.values()).split():
            path = word.removeprefix("file://").rstrip("/")
            path = path.removesuffix("/simple")
            if path.startswith("/") and path not in paths:
                paths.append(path)
    text = "".join(
        f"[{section}]\n" + "".join(f"{key} = {value}\n" for key, value in items.items())
        for section, items in sections.items()
        if items
    )
    return text, paths


def content_key(root: Path, engine: str, build_args: Mapping[str, str]) -> str:
    """A digest of the build inputs' files (names and bytes) and the build's arguments."""
    digest = hashlib.sha256(f"{engine}\0{sorted(build_args.items())}\0".encode())
    for path in sorted(_files(root, BUILD_INPUTS)):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _files(root: Path, names: Iterable[str]) -> Iterable[Path]:
    for name in names:
        path = root / name
        if path.is_file():
            yield path
        for folder, dirs, files in os.walk(path):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            yield from (Path(folder) / f for f in files if not f.endswith(".pyc"))
