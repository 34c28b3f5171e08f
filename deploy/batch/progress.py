"""How `vllm-sagemaker batch` shows its progress: a bar on a terminal, a plain line every
LOG_EVERY_S otherwise."""

import sys
import time
from typing import IO

from tqdm import tqdm

from vllm_sagemaker.deploy.base.results import Summary

LOG_EVERY_S = 10.0


def count_lines(source: IO[bytes]) -> int | None:
    """The number of lines of a seekable input (for the progress bar's ETA), None for a pipe."""
    if not source.seekable():
        return None
    lines = sum(block.count(b"\n") for block in iter(lambda: source.read(1 << 20), b""))
    source.seek(0)
    return lines


class Progress:
    """A progress bar on a terminal, a plain log line every LOG_EVERY_S otherwise."""

    def __init__(self, total: int | None, done: int) -> None:
        self.interactive = sys.stderr.isatty()
        self.bar = tqdm(
            total=total, initial=done, unit=" lines", disable=not self.interactive, desc="batch"
        )
        self.started = self.last_log = time.monotonic()

    def update(self, summary: Summary, lines: int) -> None:
        self.bar.update(lines)
        now = time.monotonic()
        if not self.interactive and now - self.last_log >= LOG_EVERY_S:
            self.last_log = now
            print(f"batch: {summary.line(now - self.started)}", file=sys.stderr, flush=True)

    def close(self) -> float:
        self.bar.close()
        return time.monotonic() - self.started
