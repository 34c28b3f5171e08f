"""How an image is built: the builder's command line (`deploy image`, and `make image`'s
`tests.support.make_image`, which lends the machine's pip settings read-only)."""

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# The images one Dockerfile builds (its ENGINE build argument).
ENGINES = ("cpu", "gpu")
REPOSITORY = "vllm-sagemaker"
# Where pip inside a build finds the settings lent to it (pip reads it on every Linux).
BUILD_PIP_CONF = "/etc/pip.conf"
# Builders that run without a Docker engine, and that can lend files to RUN steps (`-v`).
DAEMONLESS = ("buildah", "podman")


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
