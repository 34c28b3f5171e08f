"""`make image`: build the CPU image with buildah where there is no Docker engine nor registry,
on a base made once from Debian's packages (mmdebstrap), the machine's pip settings lent
read-only; an image whose content label matches is kept.

    python -m vllm_sagemaker.deploy.image [--engine cpu] [--tag vllm-sagemaker:cpu]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from vllm_sagemaker.deploy.image import build
from vllm_sagemaker.deploy.image.build import GB

# What the Dockerfile's CPU stage needs of a Python image, from Debian bookworm (Python 3.11).
DEBIAN_BASE = "localhost/vllm-sagemaker-base:bookworm"
DEBIAN_SUITE = "bookworm"
DEBIAN_PACKAGES = ("python3", "python3-venv", "ca-certificates")


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


def pip_settings(scratch: str) -> tuple[str, list[str]]:
    """This machine's pip settings as a file in `scratch`, and the paths they name that exist."""
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout
    text, paths = build.pip_settings(listing)
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
        prog="python -m vllm_sagemaker.deploy.image",
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
    key = build.content_key(build.CHECKOUT, engine, {**build_args, "base": str(base.get("Id"))})
    found = _inspect(tag)
    labels = (found or {}).get("Labels")
    if found is not None and isinstance(labels, dict) and labels.get(build.CONTENT_LABEL) == key:
        print(f"image: {tag} is up to date ({key}), {_size(found)}")
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        conf, lent = pip_settings(scratch)
        labels = {build.CONTENT_LABEL: key}
        spec = build.Build(engine, tag, build.CHECKOUT, build_args, lent, conf, labels, "chroot")
        _run(build.command("buildah", spec))
    built = _inspect(tag) or {}
    print(f"image: {tag} built in {time.monotonic() - started:.0f} s, {_size(built)}")
    return 0


def _size(info: dict[str, object]) -> str:
    size = info.get("Size")
    return f"{size / GB:.2f} GB" if isinstance(size, int) else "size unknown"


if __name__ == "__main__":
    sys.exit(main())
