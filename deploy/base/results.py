"""What the client's runs count and show: the progress bar of `transform` and `batch`, the
summary of `batch` and `deploy batch`, and the output and error files they append to."""

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from tqdm import tqdm

from vllm_sagemaker.core import usage
from vllm_sagemaker.core.batch_lines import Outcome


@dataclass
class Summary:
    lines: int = 0
    succeeded: int = 0
    failed: int = 0
    resumed: int = 0
    throttled: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # Lines no model answered, by why (`deploy batch`: a job failed or never started).
    not_run: dict[str, int] = field(default_factory=dict)

    def skip(self, why: str) -> None:
        self.not_run[why] = self.not_run.get(why, 0) + 1

    def count(self, result: Outcome) -> None:
        self.lines += 1
        if result.succeeded:
            self.succeeded += 1
        else:
            self.failed += 1
        prompt, completion = usage.prompt_completion(result.usage)
        self.prompt_tokens += prompt
        self.completion_tokens += completion

    def counts(self) -> str:
        """Lines and tokens, what every summary (of `batch` or of a fleet) starts with."""
        skipped = "".join(f", {count} lines not run ({why})" for why, count in self.not_run.items())
        return (
            f"{self.lines} lines answered ({self.succeeded} succeeded, {self.failed} failed"
            f"{f', {self.resumed} from before' if self.resumed else ''}){skipped}, "
            f"{self.prompt_tokens} prompt + {self.completion_tokens} completion tokens"
        )

    def line(self, seconds: float) -> str:
        rate = self.lines / seconds if seconds > 0 else 0.0
        waited = f", {self.throttled} calls throttled for live traffic" if self.throttled else ""
        return f"{self.counts()}, {seconds:.1f} s, {rate:.1f} lines/s{waited}"


LOG_EVERY_S = 10.0


class Progress:
    """A bar on a terminal (unless `quiet`); elsewhere, `log(seconds)` every LOG_EVERY_S."""

    def __init__(
        self,
        desc: str,
        total: int | None,
        unit: str,
        initial: int = 0,
        quiet: bool = False,
        log: Callable[[float], str] | None = None,
    ) -> None:
        self.interactive = sys.stderr.isatty() and not quiet
        self.bar = tqdm(
            total=total,
            initial=initial,
            unit=unit,
            unit_scale=unit == "B",
            desc=desc,
            disable=not self.interactive,
        )
        self.desc, self.log = desc, log
        self.started = self.last_log = time.monotonic()

    def update(self, amount: int, failed: int = 0) -> None:
        self.bar.update(amount)
        if failed:
            self.bar.set_postfix(failed=failed)
        now = time.monotonic()
        if self.log and not self.interactive and now - self.last_log >= LOG_EVERY_S:
            self.last_log = now
            print(f"{self.desc}: {self.log(now - self.started)}", file=sys.stderr, flush=True)

    def close(self) -> float:
        self.bar.close()
        return time.monotonic() - self.started


class Writer(Protocol):
    """An open file, or a `deploy.batch.staging.Sink` that opens its file at the first answer."""

    def write(self, data: bytes, /) -> object: ...

    def flush(self) -> None: ...


@dataclass
class Sinks:
    """The output file and the optional error file, appended to as lines finish."""

    output: Writer
    errors: Writer | None

    def write(self, line: bytes, result: Outcome) -> None:
        sink = self.errors if self.errors is not None and not result.succeeded else self.output
        sink.write(line + b"\n")

    def flush(self) -> None:
        for sink in (self.output, self.errors):
            if sink is not None:
                sink.flush()
