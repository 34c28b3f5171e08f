"""How fast one multi-record /invocations runs N records, side by side on the same model:
- the N records as one JSON Lines mini-batch on /invocations (what Batch Transform sends);
- the same N as concurrent direct HTTP requests to /v1/completions;
- the same N one at a time;
- the same N through vLLM's offline engine (`vllm.LLM`), the engine's own limit.
Every record generates exactly `--tokens` tokens. Mini-batch and concurrent runs alternate for
`--rounds` rounds and their medians are compared; one-at-a-time runs once (it is slow).

The server and the offline engine get the same engine limits (ENGINE): on CPU vLLM's defaults
differ between them (128 sequences for the server, 256 for `vllm.LLM`), which would measure the
setting rather than the serving path.

    .venv/bin/python -m benchmarks.batch_transform [-n 256] [--tokens 48] [--rounds 3]
"""

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tests.support import model_factory, servers

ENGINE = {"max_num_seqs": 256, "max_num_batched_tokens": 4096}


def records(count: int, tokens: int) -> list[dict]:
    return [
        {
            "prompt": f"The quick brown fox number {i}",
            "max_tokens": tokens,
            "min_tokens": tokens,
            "temperature": 0,
        }
        for i in range(count)
    ]


def mini_batch(url: str, batch: list[dict]) -> float:
    body = b"".join(json.dumps(r).encode() + b"\n" for r in batch)
    started = time.perf_counter()
    response = httpx.post(
        url + "/invocations",
        content=body,
        headers={"Content-Type": "application/jsonlines"},
        timeout=600,
    )
    elapsed = time.perf_counter() - started
    lines = response.content.removesuffix(b"\n").split(b"\n")
    assert response.status_code == 200 and len(lines) == len(batch), response.text[:500]
    assert all("choices" in json.loads(line) for line in lines), "a record failed"
    return elapsed


async def _concurrent(url: str, batch: list[dict]) -> float:
    limits = httpx.Limits(max_connections=len(batch), max_keepalive_connections=len(batch))
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        started = time.perf_counter()
        answers = await asyncio.gather(*(client.post("/v1/completions", json=r) for r in batch))
        elapsed = time.perf_counter() - started
    assert all(a.status_code == 200 for a in answers)
    return elapsed


def concurrent(url: str, batch: list[dict]) -> float:
    return asyncio.run(_concurrent(url, batch))


def one_at_a_time(url: str, batch: list[dict]) -> float:
    with httpx.Client(base_url=url, timeout=600) as client:
        started = time.perf_counter()
        for record in batch:
            client.post("/v1/completions", json=record).raise_for_status()
        return time.perf_counter() - started


def offline(model: Path, count: int, tokens: int) -> float:
    """Seconds for vLLM's offline engine on the same records (its own process, after warm-up)."""
    env = {**os.environ, **servers.serve_env(model, 0)}
    script = (
        "import json, sys, time\n"
        "from vllm import LLM, SamplingParams\n"
        "model, count, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])\n"
        f"llm = LLM(model=model, **{ENGINE!r})\n"
        "params = SamplingParams(max_tokens=tokens, min_tokens=tokens, temperature=0)\n"
        "prompts = [f'The quick brown fox number {i}' for i in range(count)]\n"
        "llm.generate(prompts[:32], params, use_tqdm=False)\n"
        "started = time.perf_counter()\n"
        "outputs = llm.generate(prompts, params, use_tqdm=False)\n"
        "elapsed = time.perf_counter() - started\n"
        "assert all(len(o.outputs[0].token_ids) == tokens for o in outputs)\n"
        "print('SECONDS', json.dumps(elapsed))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(model), str(count), str(tokens)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return next(
        float(line.split()[1]) for line in done.stdout.splitlines() if line.startswith("SECONDS ")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", "--records", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    batch = records(args.records, args.tokens)
    with tempfile.TemporaryDirectory() as tmp:
        model = model_factory.make_chat_model(Path(tmp) / "chat")
        engine_env = {f"SM_VLLM_{k.upper()}": str(v) for k, v in ENGINE.items()}
        with servers.running({"chat": model}, Path(tmp), {"chat": engine_env}) as running:
            url = running["chat"].url
            mini_batch(url, batch[:32])
            concurrent(url, batch[:32])
            mini, direct = [], []
            for _ in range(args.rounds):
                mini.append(mini_batch(url, batch))
                direct.append(concurrent(url, batch))
            serial = one_at_a_time(url, batch)
        engine = offline(model, args.records, args.tokens)
    best = statistics.median(mini)
    print(
        f"{args.records} records x {args.tokens} tokens, tiny Llama, {ENGINE}, "
        f"medians of {args.rounds}"
    )
    print(f"{'method':34} {'seconds':>8} {'records/s':>10} {'vs mini-batch':>14}")
    for name, seconds in (
        ("one multi-record /invocations", best),
        ("concurrent direct HTTP", statistics.median(direct)),
        ("one at a time", serial),
        ("vllm.LLM offline engine", engine),
    ):
        print(f"{name:34} {seconds:8.2f} {args.records / seconds:10.1f} {seconds / best:13.2f}x")


if __name__ == "__main__":
    main()
