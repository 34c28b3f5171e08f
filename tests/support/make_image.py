"""`make image`: build the CPU image with buildah where there is no Docker engine nor registry,
on a base made once from Debian's packages (mmdebstrap), the machine's pip settings lent
read-only; an image whose content label matches is kept. It builds from this checkout, so it
lives beside the suite that runs the image rather than in the client users install.

    python -m tests.support.make_image [--engine cpu] [--tag vllm-sagemaker:cpu]
"""

import argparse
import ast
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from vllm_sagemaker.deploy.image import build

# The checkout: the build context.
CHECKOUT = Path(__file__).resolve().parents[2]
# The label that records what an image was built from (`content_key`).
CONTENT_LABEL = "org.vllm-sagemaker.content"
# What the Dockerfile copies (with itself and .dockerignore): a change here is a new image.
BUILD_INPUTS = (
    *("Dockerfile", ".dockerignore", "pyproject.toml", "README.md"),
    *("core", "container", "handler", "deploy"),
)
# Image sizes in GB, as registries and `docker images` tell them.
GB = 1000**3
# pip settings a build is not given: where the host's own configuration file is.
SKIPPED_PIP_SETTINGS = frozenset({"config-file"})
# What the Dockerfile's CPU stage needs of a Python image, from Debian bookworm (Python 3.11).
DEBIAN_BASE = "localhost/vllm-sagemaker-base:bookworm"
DEBIAN_SUITE = "bookworm"
DEBIAN_PACKAGES = ("python3", "python3-venv", "ca-certificates")


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


def _run(argv: Sequence[str]) -> None:
    print(f"+ {build.shown(argv)}", file=sys.stderr, flush=True)
    subprocess.run(argv, check=True)


def _inspect(image: str) -> dict[str, object] | None:
    done = subprocess.run(["podman", "image", "inspect", image], capture_output=True, text=True)
    if done.returncode != 0:
        return None
    found: list[dict[str, object]] = json.loads(done.stdout)
    return found[0] if found else None


def debian_base() -> None:
    """Make DEBIAN_BASE from Debian's packages, unless it exists."""
    if _inspect(DEBIAN_BASE) is not None:
        return
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as scratch:
        rootfs = os.path.join(scratch, "rootfs.tar")
        packages = "--include=" + ",".join(DEBIAN_PACKAGES)
        _run(["mmdebstrap", "--variant=minbase", packages, DEBIAN_SUITE, rootfs])
        _run(["podman", "import", "--change", 'CMD ["/bin/bash"]', rootfs, DEBIAN_BASE])
    print(f"image: base {DEBIAN_BASE} made in {time.monotonic() - started:.0f} s", flush=True)


def lent_pip_settings(scratch: str) -> tuple[str, list[str]]:
    """This machine's pip settings as a file in `scratch`, and the paths they name that exist."""
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout
    text, paths = pip_settings(listing)
    conf = os.path.join(scratch, "pip.conf")
    Path(conf).write_text(text)
    return conf, [path for path in paths if os.path.exists(path)]


def build_arg(text: str) -> tuple[str, str]:
    """`KEY=VALUE`, as --build-arg takes it."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def main(argv: Sequence[str] | None = None) -> int:
    """Build the image unless it is up to date; print its size and the time taken."""
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.make_image",
        description="Build the CPU image with buildah from a base of Debian's packages.",
    )
    parser.add_argument("--engine", choices=["cpu"], default="cpu", help="the image to build")
    parser.add_argument("--tag", help="the image's name (default: vllm-sagemaker:<engine>)")
    arg = "a build argument of the Dockerfile (repeatable), e.g. TORCH_INDEX=<url>"
    parser.add_argument(
        "--build-arg", action="append", type=build_arg, default=[], metavar="KEY=VALUE", help=arg
    )
    args = parser.parse_args(argv)
    try:
        return make(args.engine, args.tag or build.default_name(args.engine), dict(args.build_arg))
    except subprocess.CalledProcessError as error:
        line = f"{build.shown(error.cmd)} failed with status {error.returncode}"
    except OSError as error:
        line = f"{error.strerror}: {error.filename} (make image installs the tools as root)"
    print(f"image: {line}", file=sys.stderr)
    return 1


def make(engine: str, tag: str, given: dict[str, str]) -> int:
    """Build `tag` unless its content label says it is up to date."""
    started = time.monotonic()
    debian_base()
    build_args = {"CPU_BASE": DEBIAN_BASE, "TORCH_INDEX": "", **given}
    base = _inspect(DEBIAN_BASE) or {}
    key = content_key(CHECKOUT, engine, {**build_args, "base": str(base.get("Id"))})
    found = _inspect(tag)
    labels = (found or {}).get("Labels")
    if found is not None and isinstance(labels, dict) and labels.get(CONTENT_LABEL) == key:
        print(f"image: {tag} is up to date ({key}), {_size(found)}")
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        conf, lent = lent_pip_settings(scratch)
        labels = {CONTENT_LABEL: key}
        spec = build.Build(engine, tag, CHECKOUT, build_args, lent, conf, labels, "chroot")
        _run(build.command("buildah", spec))
    built = _inspect(tag) or {}
    print(f"image: {tag} built in {time.monotonic() - started:.0f} s, {_size(built)}")
    return 0


def _size(info: dict[str, object]) -> str:
    size = info.get("Size")
    return f"{size / GB:.2f} GB" if isinstance(size, int) else "size unknown"


if __name__ == "__main__":
    sys.exit(main())
