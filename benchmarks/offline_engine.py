"""vLLM's offline engine (`vllm.LLM`) on a batch file's lines: the limit `benchmarks.engine_speed`
holds every batch path to. Run as a process of its own, it starts one engine, then answers one
command a line on stdin (`chat|generate|embed INPUT OUTPUT`) with one `RESULT {json}` line on
stdout (vLLM logs there too): the seconds the engine call took (`seconds`, generation alone), the
seconds of reading the input and writing the answers around it (`io_seconds`), and the engine's
counters over the call. Given the command as arguments, it runs it once and exits (a whole
process, as a user would run it).

    python -m benchmarks.offline_engine MODEL '{"max_num_seqs": 256}' [chat INPUT OUTPUT]
"""

import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from vllm import LLM, SamplingParams
from vllm.v1.metrics.reader import Counter, Histogram

READY, RESULT = "READY", "RESULT "


def bodies(path: Path) -> Iterator[dict[str, Any]]:
    """The request bodies of a batch file's lines, or of a JSON Lines file of bodies."""
    with path.open() as lines:
        for line in lines:
            record = json.loads(line)
            yield record.get("body", record)


def sampling(body: dict[str, Any]) -> SamplingParams:
    return SamplingParams(
        max_tokens=body.get("max_tokens", 16),
        min_tokens=body.get("min_tokens", 0),
        temperature=body.get("temperature", 1.0),
    )


def counters(llm: LLM) -> dict[str, float]:
    """Tokens generated, engine steps and prompt tokens so far (the same counters as /metrics)."""
    found: dict[str, float] = {}
    for metric in llm.get_metrics():
        if isinstance(metric, Counter) and metric.name in (
            "vllm:generation_tokens",
            "vllm:prompt_tokens",
        ):
            found[metric.name] = found.get(metric.name, 0) + metric.value
        elif isinstance(metric, Histogram) and metric.name == "vllm:iteration_tokens_total":
            found["steps"] = found.get("steps", 0) + metric.count
    return found


def chat(llm: LLM, path: Path) -> tuple[list[Any], Callable[[], list[Any]]]:
    items = list(bodies(path))
    return items, lambda: llm.chat(
        [b["messages"] for b in items], [sampling(b) for b in items], use_tqdm=False
    )


def generate(llm: LLM, path: Path) -> tuple[list[Any], Callable[[], list[Any]]]:
    items = list(bodies(path))
    return items, lambda: llm.generate(
        [b["prompt"] for b in items], [sampling(b) for b in items], use_tqdm=False
    )


def embed(llm: LLM, path: Path) -> tuple[list[Any], Callable[[], list[Any]]]:
    items = list(bodies(path))
    return items, lambda: llm.embed([b["input"] for b in items], use_tqdm=False)


def answer(output: Any) -> dict[str, Any]:
    if hasattr(output.outputs, "embedding"):
        return {"embedding": output.outputs.embedding}
    return {"text": output.outputs[0].text, "tokens": len(output.outputs[0].token_ids)}


CALLS = {"chat": chat, "generate": generate, "embed": embed}


def run(llm: LLM, command: str, source: Path, target: Path) -> dict[str, Any]:
    started = time.perf_counter()
    items, call = CALLS[command](llm, source)
    before = counters(llm)
    engine_started = time.perf_counter()
    outputs = call()
    seconds = time.perf_counter() - engine_started
    after = counters(llm)
    with target.open("w") as out:
        for output in outputs:
            out.write(json.dumps(answer(output)) + "\n")
    return {
        "lines": len(items),
        "seconds": seconds,
        "io_seconds": time.perf_counter() - started - seconds,
        "counters": {name: after[name] - before.get(name, 0) for name in after},
    }


def main() -> None:
    model, engine = sys.argv[1], json.loads(sys.argv[2])
    llm = LLM(model=model, disable_log_stats=False, **engine)
    if len(sys.argv) > 3:
        command, source, target = sys.argv[3:6]
        print(RESULT + json.dumps(run(llm, command, Path(source), Path(target))), flush=True)
        return
    print(READY, flush=True)
    for line in sys.stdin:
        command, source, target = line.split()
        print(RESULT + json.dumps(run(llm, command, Path(source), Path(target))), flush=True)


if __name__ == "__main__":
    main()
