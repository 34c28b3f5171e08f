"""The runs of `benchmarks.engine_speed` in the order they ran (a palindrome: ABBA for two
sides), and its tables: one per kind, as text and as markdown."""

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.engine_runs import Run

# The ways records reach vLLM, as the rows name them.
WAYS = {"route": "before: route", "serving": "after: serving"}
LLM = "vllm.LLM"
# Our paths, as the rows name them and in the order the tables show them.
PATHS = ["transform", "/v1/batches", "batch --model"]


@dataclass
class Side:
    """One side's runs."""

    runs: list[Run] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return sum(run.seconds for run in self.runs)

    def each(self) -> str:
        return " / ".join(f"{run.seconds:.1f}" for run in self.runs)

    def served_s(self) -> float | None:
        served = [run.served_s for run in self.runs]
        return None if None in served else sum(s for s in served if s is not None)

    def front_ms(self, records: int) -> float | None:
        """CPU milliseconds of the front end per record (None when it was not told apart)."""
        fronts = [run.front_cpu_s for run in self.runs]
        if not fronts or None in fronts:
            return None
        return sum(f for f in fronts if f is not None) / (records * len(fronts)) * 1000

    def per_step(self) -> str:
        steps = sum(run.counters.get("steps", 0) for run in self.runs)
        tokens = sum(
            run.counters.get("vllm:generation_tokens", 0)
            + run.counters.get("vllm:prompt_tokens", 0)
            for run in self.runs
        )
        if not steps:
            return "-"
        return f"{steps / len(self.runs):.0f} x {tokens / steps:.0f}"


def palindrome(sides: dict[str, Callable[[], Run]]) -> dict[str, Side]:
    """Each side run twice, in the given order then back (A B B A; A B C C B A), so that what
    drifts linearly over the run falls on every side alike."""
    found = {name: Side() for name in sides}
    for name in [*sides, *reversed(sides)]:
        found[name].runs.append(sides[name]())
    return found


# (header, text width); the text table right-aligns every column but the first.
COLUMNS = [
    ("path", 14), ("API servers", 3), ("way", 15), ("ours s", 11), ("LLM s", 11),
    ("ratio", 6), ("ratio in server", 6), ("ours rec/s", 7), ("LLM rec/s", 7),
    ("API-server CPU ms/rec", 6), ("rec/s one API core feeds", 7), ("LLM front CPU ms/rec", 6),
    ("engine steps x tokens a step, ours / LLM", 22),
]  # fmt: skip
SHORT = ["path", "API", "way", "ours s", "LLM s", "ratio", "in srv", "ours/s", "LLM/s",
         "API ms", "/core", "LLM ms", "steps x tok: ours / LLM"]  # fmt: skip


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


@dataclass
class Row:
    """One of our paths, one way, beside `vllm.LLM`, over `records` records a run."""

    path: str
    api_servers: int
    way: str
    records: int
    ours: Side
    llm: Side

    def cells(self) -> list[str]:
        ours, llm, records = self.ours, self.llm, self.records
        served = ours.served_s()
        front = ours.front_ms(records)
        return [
            self.path, str(self.api_servers), WAYS[self.way], ours.each(), llm.each(),
            f"{llm.seconds / ours.seconds:.2f}",
            "-" if served is None else f"{llm.seconds / served:.2f}",
            f"{records * len(ours.runs) / ours.seconds:.0f}",
            f"{records * len(llm.runs) / llm.seconds:.0f}",
            _ms(front), "-" if not front else f"{1000 / front:.0f}",
            _ms(llm.front_ms(records)), f"{ours.per_step()} / {llm.per_step()}",
        ]  # fmt: skip


def text_line(cells: list[str]) -> str:
    first, *rest = cells
    widths = [width for _, width in COLUMNS]
    return f"{first:{widths[0]}} " + " ".join(
        f"{cell:>{width}}" for cell, width in zip(rest, widths[1:], strict=True)
    )


@dataclass
class Table:
    """One kind's rows, under a title that says what was run."""

    kind: str
    title: str
    rows: list[Row] = field(default_factory=list)

    def ordered(self) -> list[Row]:
        """Rows by path, then API servers, then way (they ran by API servers first)."""
        return sorted(
            self.rows,
            key=lambda row: (PATHS.index(row.path), row.api_servers, list(WAYS).index(row.way)),
        )

    def text(self) -> str:
        lines = [f"\n{self.kind}: {self.title}", text_line(SHORT)]
        return "\n".join([*lines, *(text_line(row.cells()) for row in self.ordered())])

    def markdown(self) -> str:
        header = [name for name, _ in COLUMNS]
        lines = [
            f"**{self.kind}**: {self.title}",
            "",
            "| " + " | ".join(header) + " |",
            "|" + " --- |" * len(header),
        ]
        rows = ("| " + " | ".join(row.cells()) + " |" for row in self.ordered())
        return "\n".join([*lines, *rows])


LEGEND = """\
Each row: one of our paths, one way records reach vLLM (before: its HTTP routes in-process,
after: its serving objects), against `vllm.LLM` on the same records, run as a palindrome
(ways then the engine, then back). Seconds of each run; ratio = the engine's seconds over
ours (ratio in server: over the job's invocations as the server logged them); records/s;
CPU ms per record of our API-server process(es) (their sum with several) and of `vllm.LLM`'s
own process (its front end, the file's reading and writing included); the records/s one
API-server core can feed (1000 / its ms); the engine's steps a run and tokens a step."""


def markdown(tables: list[Table]) -> str:
    return "\n\n".join([LEGEND, *(table.markdown() for table in tables if table.rows)]) + "\n"


def write(tables: list[Table], path: Path | None) -> None:
    if path is not None:
        path.write_text(markdown(tables))
