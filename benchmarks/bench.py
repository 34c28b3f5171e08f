"""What the latency benchmarks set up alike: the kernel's autogroup as asked (and said), a
scratch folder holding the tiny test Llama and a batch input file, and the stall witness."""

import contextlib
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks import autogroup
from benchmarks.batch_runner import write_file
from benchmarks.witness import Witness
from tests.support import model_factory


@dataclass(frozen=True)
class Bench:
    root: Path
    model: Path
    # `lines` chat lines of `tokens` tokens each.
    source: Path
    witness: Witness


@contextlib.contextmanager
def bench(grouping: str, lines: int, tokens: int) -> Iterator[Bench]:
    with (
        autogroup.autogroup(grouping) as setting,
        tempfile.TemporaryDirectory() as tmp,
        Witness() as witness,
    ):
        print(autogroup.described(setting))
        root = Path(tmp)
        model = model_factory.make_chat_model(root / "chat")
        source = root / "batch.jsonl"
        write_file(source, lines, tokens)
        print(f"tiny Llama, {os.cpu_count()} cores; {lines} batch lines of {tokens} tokens")
        yield Bench(root, model, source, witness)
