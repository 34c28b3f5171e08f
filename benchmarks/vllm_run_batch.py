"""vLLM's own offline batch runner (`vllm run_batch`, `vllm.entrypoints.launchers.run_batch`,
which `python -m vllm.entrypoints.openai.run_batch` also runs) on batch files, driven in-process
so that its engine starts once: the third side `benchmarks.engine_speed` sets beside our paths
and `vllm.LLM`. It speaks `benchmarks.offline_engine`'s protocol, so `engine_runs.Offline` drives
it: READY once the engine is up, then for each `COMMAND INPUT OUTPUT` line on stdin (the command
is ignored: each line's `url` says its kind) one `RESULT {json}` line on stdout.

Each command is vLLM's `run_batch(engine_client, args)`, as its CLI calls it after starting the
engine, on that input and output: it builds its serving objects (`init_app_state`), reads and
validates every line, hands them all to the serving objects at once, gathers the answers and
writes the file. `seconds` is the processing alone: from the serving objects built to the last
answer in (reading and validating the lines included; building the serving objects, which
run_batch does once per file, and writing the file left out, as `vllm.LLM`'s `seconds` leaves
out reading and writing; they are `setup_seconds` and `io_seconds`). The process is the
runner's API server: the engine core runs in a child.

vLLM 0.32's run_batch serves `/v1/chat/completions`, `/v1/embeddings`, score, rerank and audio
lines; not `/v1/completions`.

    python -m benchmarks.vllm_run_batch MODEL '{"max_num_seqs": 256, "enforce_eager": true}'
"""

import asyncio
import json
import sys
import time
from argparse import Namespace
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from vllm.entrypoints.launchers import run_batch as runner
from vllm.entrypoints.launchers.api_server.entry import build_async_engine_client
from vllm.usage.usage_lib import UsageContext
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.v1.metrics.reader import get_metrics_snapshot

from benchmarks.offline_engine import READY, RESULT, counters


class Metrics:
    """The process's engine metrics, read as `vllm.LLM.get_metrics` reads them."""

    @staticmethod
    def get_metrics() -> list[Any]:
        return get_metrics_snapshot()


def cli_args(model: str, engine: dict[str, Any]) -> Namespace:
    """run_batch's own arguments, parsed by its own parser, for `model` and the engine limits."""
    flags = ["-i", "-", "-o", "-", "--model", model]
    for name, value in engine.items():
        flag = "--" + name.replace("_", "-")
        flags += [flag] if value is True else [flag, str(value)]
    return runner.make_arg_parser(FlexibleArgumentParser()).parse_args(flags)


def marked(marks: dict[str, float]) -> None:
    """run_batch's steps noted in `marks` when they start and end: building the serving objects
    (`setup`) and writing the answers (`write`, once the last one is in)."""
    runner.build_endpoint_registry = marking(marks, "setup", runner.build_endpoint_registry)
    runner.write_file = marking(marks, "write", runner.write_file)


def marking(marks: dict[str, float], name: str, call: Callable[..., Awaitable[Any]]) -> Any:
    """`call`, noting in `marks` when it starts (`name`) and returns (`name_done`)."""

    async def noted(*args: Any, **kwargs: Any) -> Any:
        marks[name] = time.perf_counter()
        result = await call(*args, **kwargs)
        marks[name + "_done"] = time.perf_counter()
        return result

    return noted


async def run(
    engine: Any, args: Namespace, marks: dict[str, float], source: str, target: str
) -> dict[str, Any]:
    """One file through vLLM's `run_batch`, its times read from `marks` (`marked`)."""
    before = counters(Metrics())  # type: ignore[arg-type]
    files = {"input_file": source, "output_file": target}
    await runner.run_batch(engine, Namespace(**{**vars(args), **files}))
    after = counters(Metrics())  # type: ignore[arg-type]
    return {
        "lines": sum(1 for _ in Path(target).open()),
        "seconds": marks["write"] - marks["setup_done"],
        "setup_seconds": marks["setup_done"] - marks["setup"],
        "io_seconds": marks["write_done"] - marks["write"],
        "counters": {name: after[name] - before.get(name, 0) for name in after},
    }


async def serve(model: str, engine: dict[str, Any]) -> None:
    args = cli_args(model, engine)
    runner.validate_run_batch_args(args)
    marks: dict[str, float] = {}
    marked(marks)
    async with build_async_engine_client(
        args, usage_context=UsageContext.OPENAI_BATCH_RUNNER
    ) as client:
        print(READY, flush=True)
        while line := await asyncio.to_thread(sys.stdin.readline):
            _, source, target = line.split()
            print(RESULT + json.dumps(await run(client, args, marks, source, target)), flush=True)


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], json.loads(sys.argv[2])))
