"""The commands the docs show, run against the suite's real servers.

Every `sh` and `python` block of README.md and docs/ runs here, unless an HTML comment right
above it says `<!-- not run: why -->` (the test is skipped with that reason). A block runs in a
fresh directory holding the files the docs name (`requests.jsonl`, `data/`), with
`localhost:8080` pointing at the chat server, or at the embedder after `<!-- run: embedder -->`.
`curl` fails on an HTTP error, so a documented call that stops working fails its block; the
Python blocks of one page run in order as one program, as a reader pastes them.
"""

import json
import os
import re
import shutil
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import ROOT
from tests.support import processes
from tests.support.servers import Server

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(
    r"(?:<!-- (?P<marker>[^>]*?) -->\n)?^```(?P<lang>sh|python)\n(?P<body>.*?)^```",
    re.DOTALL | re.MULTILINE,
)
DOCUMENTED_URL = "localhost:8080"
VENV_BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    body: str
    marker: str

    @property
    def skip_reason(self) -> str | None:
        return (
            self.marker.removeprefix("not run:").strip()
            if self.marker.startswith("not run:")
            else None
        )

    @property
    def server(self) -> str:
        return "embedder" if self.marker == "run: embedder" else "chat"


def blocks() -> list[Block]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in BLOCK.finditer(text):
            found.append(
                Block(
                    page=str(page.relative_to(ROOT)),
                    line=text.count("\n", 0, match.start("body")),
                    lang=match["lang"],
                    body=match["body"],
                    marker=match["marker"] or "",
                )
            )
    return found


def units() -> list[list[Block]]:
    """What runs as one test: an `sh` block, or all runnable Python blocks of a page."""
    found: list[list[Block]] = []
    python: dict[str, list[Block]] = {}
    for block in blocks():
        if block.lang == "python" and block.skip_reason is None:
            if block.page not in python:
                python[block.page] = []
                found.append(python[block.page])
            python[block.page].append(block)
        else:
            found.append([block])
    return found


def seeded(directory: Path) -> Path:
    """The files the docs' commands name."""
    lines = [
        {
            "custom_id": f"request-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"messages": [{"role": "user", "content": f"say {i}"}], "max_tokens": 4},
        }
        for i in range(3)
    ]
    (directory / "requests.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (directory / "data").mkdir()
    records = [{"id": f"r{i}", "input": f"sentence {i}"} for i in range(5)]
    (directory / "data" / "part-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    # curl as documented, but an HTTP error status fails the block.
    shims = directory / ".shims"
    shims.mkdir()
    curl = shims / "curl"
    curl.write_text(f'#!/bin/sh\nexec {shutil.which("curl")} --fail-with-body "$@"\n')
    curl.chmod(curl.stat().st_mode | stat.S_IXUSR)
    return shims


@pytest.mark.parametrize("unit", units(), ids=lambda unit: f"{unit[0].page}:{unit[0].line}")
def test_documented_block(
    unit: list[Block], chat_server: Server, embed_server: Server, tmp_path: Path
) -> None:
    first = unit[0]
    if first.skip_reason is not None:
        pytest.skip(first.skip_reason)
    server = embed_server if first.server == "embedder" else chat_server
    address = f"127.0.0.1:{server.port}"
    shims = seeded(tmp_path)
    env = {**os.environ, "PATH": f"{shims}:{VENV_BIN}:{os.environ['PATH']}"}
    if first.lang == "sh":
        script = first.body.replace(DOCUMENTED_URL, address)
        done = processes.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=tmp_path,
            env=env,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
        assert done.stdout or list(tmp_path.iterdir())
        return
    program = "\n".join(block.body for block in unit).replace(DOCUMENTED_URL, address)
    done = processes.run(
        [sys.executable, "-c", program],
        cwd=tmp_path,
        env=env,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr


def test_every_block_is_found() -> None:
    """The block pattern reads a marker only when it sits right above the fence."""
    found = blocks()
    fences = [
        line
        for page in PAGES
        for line in page.read_text().splitlines()
        if line in ("```sh", "```python")
    ]
    assert len(found) == len(fences)
    assert all(b.marker in ("", "run: embedder") or b.skip_reason for b in found)
