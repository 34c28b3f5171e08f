"""The results of a running batch: its output and error lines, appended as each line finishes.

The two files are the truth of what a batch has done: a line is answered once its result line is
on disk, whole. Each line goes to disk in one unbuffered append, so a killed process leaves whole
lines and at worst one torn last line, which `Results.open` cuts after a crash; what remains says
which custom_ids are answered (never sent to the engine again), the counts and the usage. The
runner fsyncs the files every few seconds, so a power loss costs at most those seconds.
"""

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from vllm_sagemaker.core.batch_lines import Outcome, repair
from vllm_sagemaker.handler.batches.admission import metrics
from vllm_sagemaker.handler.batches.store.usage import add_usage, zero_usage

OUTPUT, ERRORS = "output.jsonl", "errors.jsonl"


@dataclass
class Tallies:
    """What the result lines add up to."""

    completed: int = 0
    failed: int = 0
    usage: dict[str, Any] = field(default_factory=zero_usage)

    def add(self, result: Outcome) -> None:
        if result.succeeded:
            self.completed += 1
        else:
            self.failed += 1
        add_usage(self.usage, result.usage)


class Results:
    """The output (successes) and error (everything else) files of one batch."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.output_path = directory / OUTPUT
        self.errors_path = directory / ERRORS
        self.tallies = Tallies()
        self.answered: set[str] = set()
        self._files: dict[bool, IO[bytes]] = {}

    def open(self) -> None:
        """Read back what earlier runs wrote (repairing a torn last line), then append."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for path in (self.output_path, self.errors_path):
            path.touch()
            for result in repair(str(path)):
                self._count(result)
        self._files = {
            True: self.output_path.open("ab", buffering=0),
            False: self.errors_path.open("ab", buffering=0),
        }

    def _count(self, result: Outcome) -> None:
        self.tallies.add(result)
        if result.custom_id is not None:
            self.answered.add(result.custom_id)

    def write(self, line: bytes, result: Outcome) -> None:
        """Append one finished line: a success to the output, anything else to the errors."""
        self._files[result.succeeded].write(line + b"\n")
        self._count(result)
        metrics.LINES_DONE.inc()

    def sync(self) -> None:
        for sink in self._files.values():
            os.fsync(sink.fileno())

    def close(self) -> None:
        for sink in self._files.values():
            sink.close()
        self._files = {}
