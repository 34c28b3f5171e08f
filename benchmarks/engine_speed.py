"""Every batch path beside vLLM's offline engine (`vllm.LLM`), on the same model, engine limits
and records, in one run, each way records reach vLLM: before (`route`: vLLM's HTTP routes,
called in-process, as every record went before 38c7ecd) and after (`serving`: vLLM's serving
objects, as its own `run_batch` calls them; the default since). The ratio is the engine's
seconds over ours (1.00: as fast as `vllm.LLM`, above: faster).

Kinds (`--kinds`): `chat` (chat messages, against `LLM.chat`), `completion` (`{"prompt"}`
bodies, against `LLM.generate`), both on the tiny Llama with `--tokens` generated tokens, and
`embed` (all-MiniLM-L6-v2, against `LLM.embed`). Paths (`--paths`):

1. `transform`: a Batch Transform job through a running container (`vllm-sagemaker transform`,
   MultiRecord, 6 MB mini-batches) of `--records` records, against the engine call alone on
   the same bodies; beside it, the ratio over the job's invocations as the server logged them
   (what a SageMaker job spends in the container, without our local runner's own start).
2. `batches`: the server's `/v1/batches` of `--lines` lines, steady state (`in_progress` to
   `completed`), against the engine call alone.
3. `whole`: `vllm-sagemaker batch --model` against a script that reads the same file into the
   engine and writes the answers: whole processes, engine start included (one API server;
   its CPU is not told apart from the engine's there, so its columns are `-`).
4. `run_batch`: vLLM's own offline batch runner (`vllm run_batch`, the serving objects called
   from one asyncio process, no HTTP) on the Transform job's records as a batch file, against
   the engine call alone: the ceiling of the serving objects on this machine. Its engine
   starts once (`benchmarks.vllm_run_batch` drives vLLM's `run_batch` in-process); its seconds
   run from its serving objects built to its last answer in (its lines' reading and
   validation included, its file's writing not, as `vllm.LLM`'s leave theirs out). It joins
   the Transform palindrome of the one-API-server pass (way `serving`, ours, run_batch, the
   engine, then back) and alone runs it without `transform`. vLLM 0.32's run_batch takes
   chat and embedding lines, not `/v1/completions`: no completion row.

How the two ways run side by side. Transform: on one server, the `route` runs send the custom
attribute `dispatch=route` with every call (the `transform` command has no option for it, so
the benchmark adds the header to its job; the `serving` runs go through the same wrapper
without it), so both ways share one engine. `/v1/batches` takes no attribute: two servers of
this tree run side by side, one with SAGEMAKER_RECORD_DISPATCH=route (the old in-process HTTP
route path), one with the default. `whole`: SAGEMAKER_RECORD_DISPATCH=route in `batch
--model`'s environment. Every (path, API-server count) runs each way and the engine in a
palindrome, e.g. route, serving, LLM, LLM, serving, route: ABBA for every pair, so what drifts
over the run falls on each side alike. First, a few records through each server each way (and
a small batch through `/v1/batches`) and each engine call once, so no side's first measured
run pays what a fresh start pays.

Beside each: CPU milliseconds per record of the API-server process(es) (the process running
vLLM's CLI; with `--api-server-count N` its `VLLM::APIServer_*` processes, summed; never the
engine core `VLLM::EngineCore`, its worker, nor `serve`, the supervisor) over the whole run
(upload and polling included for `/v1/batches`); the records per second one API-server core
can feed, 1000 / that (the front end's ceiling a GPU user meets, whose engine no longer
waits; with N API servers on N free cores, N times that); the same of `vllm.LLM`'s process
(its front end, reading and writing the files included; its engine core runs in a child),
and of vLLM's run_batch process (its API server, the same way);
the engine's steps and tokens per step (a queue that runs dry shows as more steps with fewer
tokens each). `--api-servers 1 2` runs the server paths with one API server, then two
(SM_VLLM_API_SERVER_COUNT=2); the engine has its own process in both. Real-time overhead
(/invocations against the direct route) is `benchmarks.invocations_overhead`'s.

    .venv/bin/python -m benchmarks.engine_speed [--lines 12000] [--records 4000] [--tokens 32]
        [--kinds chat completion embed] [--paths transform batches whole run_batch]
        [--ways route serving] [--api-servers 1 2] [--env NAME=VALUE ...] [--markdown PATH]
        [--autogroup keep|on|off]

`--env` adds settings to the servers' environment (`batch --model`'s engine and the running
containers alike), e.g. `SAGEMAKER_BATCH_YIELD=false` to see what the batch window costs.
"""

import argparse
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from unittest import mock

from benchmarks import autogroup, engine_runs
from benchmarks.engine_runs import (
    DISPATCH_VAR,
    ENGINE,
    ENV,
    KINDS,
    OFFLINE,
    ROUTE_ATTRIBUTE,
    SERVE_ARGS,
    SERVER_ENV,
    VLLM_SAGEMAKER,
    Kind,
    Offline,
    Run,
    api_servers,
    batches_api,
    line_files,
    measured_on,
    transform,
    warm,
    whole_process,
)
from benchmarks.engine_speed_table import (
    LEGEND,
    LLM,
    PATHS,
    Row,
    Table,
    palindrome,
    text_line,
    write,
)
from tests.support import model_factory, servers

ROUTE_ENV = {DISPATCH_VAR: "route"}
# Records (and batch lines) of each kind every side runs before it is measured.
WARM = 16
# vLLM's run_batch, as its rows name it, and the kinds it takes (not `/v1/completions`).
RUN_BATCH, RUN_BATCH_KINDS = "vllm run_batch", ("chat", "embed")
RUN_BATCH_ENGINE = [sys.executable, "-m", "benchmarks.vllm_run_batch"]


def run_batch_engine(model: Path) -> Offline:
    """vLLM's run_batch on one started engine (`benchmarks.vllm_run_batch`, which speaks
    `benchmarks.offline_engine`'s protocol), driven as `vllm.LLM` is."""
    with mock.patch.object(engine_runs, "OFFLINE", RUN_BATCH_ENGINE):
        return Offline(model)


class Bench:
    """One model's kinds: their files, tables and the runs of every path."""

    def __init__(self, kinds: list[Kind], root: Path, args: argparse.Namespace) -> None:
        self.kinds, self.root, self.args = kinds, root, args
        # Each kind's batch file, Transform input, and that input as a batch file (run_batch's).
        self.files = {
            kind.name: (
                line_files(kind, root, args.lines, args.tokens, kind.name)[0],
                *reversed(line_files(kind, root, args.records, args.tokens, kind.name + "-t")),
            )
            for kind in kinds
        }
        self.warm = {
            kind.name: line_files(kind, root, WARM, args.tokens, kind.name + "-w") for kind in kinds
        }

    def add(self, table: Table, row: Row, all_tables: list[Table]) -> None:
        table.rows.append(row)
        print(f"{table.kind:10} " + text_line(row.cells()), flush=True)
        write(all_tables, self.args.markdown)

    def whole(self, kind: Kind, model: Path, table: Table, tables: list[Table]) -> None:
        batch, _, _ = self.files[kind.name]
        out = self.root / f"{kind.name}-out.jsonl"
        ours = [VLLM_SAGEMAKER, "batch", "-i", str(batch), "-o", str(out), "--model",
                str(model), *SERVE_ARGS]  # fmt: skip
        theirs = [*OFFLINE, str(model), json.dumps(ENGINE), kind.call, str(batch), str(out)]
        env = {"serving": {}, "route": ROUTE_ENV, LLM: {}}
        sides: dict[str, Callable[[], Run]] = {
            way: partial(
                whole_process, theirs if way == LLM else ours, out, self.args.lines, env[way]
            )
            for way in [*self.args.ways, LLM]
        }
        runs = palindrome(sides)
        for way in self.args.ways:
            row = Row("batch --model", 1, way, self.args.lines, runs[way], runs[LLM])
            self.add(table, row, tables)

    def on_servers(
        self,
        kind: Kind,
        count: int,
        running: dict[str, servers.Server],
        offline: Offline,
        runner: Offline | None,
        table: Table,
        tables: list[Table],
    ) -> None:
        """The server paths of one kind with `count` API servers, and vLLM's run_batch (`runner`,
        when it runs) in the Transform palindrome of the one-API-server pass."""
        batch, records, record_lines = self.files[kind.name]
        out = self.root / f"{kind.name}-out.jsonl"
        fronts = {way: api_servers(server, count) for way, server in running.items()}
        ways = self.args.ways
        if "batches" in self.args.paths:
            sides: dict[str, Callable[[], Run]] = {
                way: partial(
                    measured_on,
                    running[way],
                    fronts[way],
                    partial(batches_api, running[way], batch, kind.url, self.args.lines),
                )
                for way in ways
            }
            sides[LLM] = partial(offline.run, kind.call, batch, out)
            runs = palindrome(sides)
            for way in ways:
                row = Row("/v1/batches", count, way, self.args.lines, runs[way], runs[LLM])
                self.add(table, row, tables)
        run_batch = runner is not None and count == 1 and kind.name in RUN_BATCH_KINDS
        transforms = ways if "transform" in self.args.paths else []
        if transforms or run_batch:
            server = running["serving"]
            attribute = {"serving": "", "route": ROUTE_ATTRIBUTE}
            target = self.root / f"{kind.name}-t-out"
            jobs = {
                way: partial(transform, server, records, target, self.args.records, attribute[way])
                for way in transforms
            }
            sides = {
                way: partial(measured_on, server, fronts["serving"], jobs[way])
                for way in transforms
            }
            if runner is not None and run_batch:
                sides[RUN_BATCH] = partial(runner.run, kind.call, record_lines, out)
            sides[LLM] = partial(offline.run, kind.call, records, out)
            runs = palindrome(sides)
            for way in transforms:
                row = Row("transform", count, way, self.args.records, runs[way], runs[LLM])
                self.add(table, row, tables)
            if run_batch:
                row = Row(RUN_BATCH, 1, "serving", self.args.records, runs[RUN_BATCH], runs[LLM])
                self.add(table, row, tables)


@contextlib.contextmanager
def started(
    model: Path, count: int, root: Path, args: argparse.Namespace
) -> Iterator[dict[str, servers.Server]]:
    """The servers the paths need, by way: `serving` (the default; Transform runs both ways on
    it) and, for `/v1/batches` the old way, `route` (SAGEMAKER_RECORD_DISPATCH=route)."""
    env = {**SERVER_ENV, **({"SM_VLLM_API_SERVER_COUNT": str(count)} if count > 1 else {})}
    wanted = {}
    if {"transform", "run_batch"} & set(args.paths) or "serving" in args.ways:
        wanted["serving"] = env
    if "batches" in args.paths and "route" in args.ways:
        wanted["route"] = {**env, **ROUTE_ENV}
    names = {way: f"{model.name}-{count}-{way}" for way in wanted}
    with servers.running(
        {names[way]: model for way in wanted},
        root,
        {names[way]: extra for way, extra in wanted.items()},
    ) as running:
        yield {way: running[names[way]] for way in wanted}


def bench_model(
    name: str, model: Path, kinds: list[Kind], root: Path, args: argparse.Namespace,
    tables: list[Table],
) -> None:  # fmt: skip
    bench = Bench(kinds, root, args)
    mine = {}
    for kind in kinds:
        what = f"x {args.tokens} generated tokens, tiny Llama"
        what = what if name == "llama" else "all-MiniLM-L6-v2"
        title = (
            f"{args.lines} batch lines / {args.records} Transform records {what}, "
            f"engine {ENGINE}, {os.cpu_count()} cores"
        )
        mine[kind.name] = Table(kind.name, title)
        tables.append(mine[kind.name])
    if "whole" in args.paths:
        for kind in kinds:
            bench.whole(kind, model, mine[kind.name], tables)
    if not {"batches", "transform", "run_batch"} & set(args.paths):
        return
    offline = Offline(model)
    taken = [kind for kind in kinds if kind.name in RUN_BATCH_KINDS]
    runner = run_batch_engine(model) if "run_batch" in args.paths and taken else None
    try:
        for kind in kinds:
            offline.run(kind.call, bench.warm[kind.name][1], root / "warm.jsonl")
        for kind in taken if runner is not None else []:
            runner.run(kind.call, bench.warm[kind.name][0], root / "warm.jsonl")
        for count in args.api_servers:
            with started(model, count, root, args) as running:
                for server in running.values():
                    for kind in kinds:
                        lines, records = bench.warm[kind.name]
                        warm(server, records)
                        if "batches" in args.paths:
                            batches_api(server, lines, kind.url, WARM)
                for kind in kinds:
                    bench.on_servers(kind, count, running, offline, runner, mine[kind.name], tables)
    finally:
        offline.close()
        if runner is not None:
            runner.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=12000, help="lines of each batch")
    parser.add_argument("--records", type=int, default=4000, help="records of each job")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--kinds", nargs="+", choices=list(KINDS), default=list(KINDS))
    parser.add_argument(
        "--paths", nargs="+", choices=["transform", "batches", "whole", "run_batch"],
        default=["transform", "batches", "whole", "run_batch"],
    )  # fmt: skip
    parser.add_argument(
        "--ways", nargs="+", choices=["route", "serving"], default=["route", "serving"],
        help="route: before (vLLM's HTTP routes in-process); serving: after (the default)",
    )  # fmt: skip
    parser.add_argument(
        "--api-servers", type=int, nargs="+", default=[1, 2], metavar="N",
        help="the server paths with each API-server count (SM_VLLM_API_SERVER_COUNT)",
    )  # fmt: skip
    parser.add_argument("--env", nargs="*", default=[], metavar="NAME=VALUE")
    parser.add_argument("--markdown", type=Path, help="also write the tables here, as markdown")
    autogroup.add_argument(parser)
    args = parser.parse_args()
    ENV.update(pair.split("=", 1) for pair in args.env)
    SERVER_ENV.update(pair.split("=", 1) for pair in args.env)
    # run_batch's rows sort after ours (the table module knows our paths only).
    PATHS.append(RUN_BATCH)
    tables: list[Table] = []
    with autogroup.autogroup(args.autogroup) as setting, tempfile.TemporaryDirectory() as tmp:
        print(autogroup.described(setting))
        root = Path(tmp)
        models = {"llama": lambda: model_factory.make_chat_model(root / "model"),
                  "embedder": model_factory.embedder_path}  # fmt: skip
        for name, model in models.items():
            kinds = [KINDS[kind] for kind in args.kinds if KINDS[kind].model == name]
            if kinds:
                bench_model(name, model(), kinds, root, args, tables)
    print("\n" + LEGEND)
    for table in tables:
        print(table.text())
    write(tables, args.markdown)


if __name__ == "__main__":
    main()
