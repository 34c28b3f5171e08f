"""The shared S3 store against the embedded SQLite store: the same batch through `/v1/batches`
on one server with each, side by side in one run, and what the S3 store costs in requests.

S3 is a local moto server; every request it serves is one line of its log, so the requests are
counted there: per 1,000 lines of a batch, by kind, and per second on an idle server.

    .venv/bin/python -m benchmarks.s3_store [--lines 3000] [--tokens 16] [--runs 3]
"""

import argparse
import os
import re
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

import boto3
import httpx
import openai

from benchmarks.batch_runner import write_file
from benchmarks.batches_api import SERVER_ENV, run_batch_api
from tests import aws, model_factory, servers

BUCKET = "bench-store"
REQUEST = re.compile(rb'"(GET|PUT|POST|DELETE|HEAD) (\S+) HTTP')
IDLE_S = 20.0


def requests_in(log: Path, start: int) -> Counter[str]:
    """The S3 requests moto logged after byte `start` of its log, by kind."""
    with log.open("rb") as source:
        source.seek(start)
        text = source.read()
    kinds: Counter[str] = Counter()
    for method, path in REQUEST.findall(text):
        if method == b"GET" and b"list-type=2" in path:
            kinds["LIST"] += 1
        else:
            kinds[method.decode()] += 1
    return kinds


def timed_batch(server: servers.Server, source: Path) -> tuple[float, int]:
    """Seconds from create to completed, and how many status polls (GETs) the client made."""
    methods: list[str] = []
    hooks = {"request": [lambda request: methods.append(request.method)]}
    sdk = openai.OpenAI(
        base_url=server.url + "/v1", api_key="none", http_client=httpx.Client(event_hooks=hooks)
    )
    _, seconds = run_batch_api(sdk, source)
    return seconds, methods.count("GET")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=3000)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        log = root / "moto.log"
        with aws.moto_server(log) as url:
            os.environ.update(aws.aws_env(url))
            boto3.client("s3").create_bucket(Bucket=BUCKET)
            model = model_factory.make_chat_model(root / "chat")
            source = root / "in.jsonl"
            write_file(source, args.lines, args.tokens)
            env = {
                "local": {**SERVER_ENV, "SAGEMAKER_BATCH_STORE": str(root / "store")},
                "s3": {**SERVER_ENV, "SAGEMAKER_BATCH_STORE": f"s3://{BUCKET}/store/"},
            }
            print(f"{args.lines} chat lines x {args.tokens} tokens, tiny Llama; S3 is moto")
            seconds: dict[str, list[float]] = {"local": [], "s3": []}
            spent: Counter[str] = Counter()
            polls = 0
            with servers.running(dict.fromkeys(env, model), root, env) as running:
                mark = log.stat().st_size
                time.sleep(IDLE_S)
                idle = requests_in(log, mark)
                for run in range(args.runs + 1):
                    for name, server in running.items():
                        mark = log.stat().st_size
                        took, gets = timed_batch(server, source)
                        if run == 0:
                            continue
                        seconds[name].append(took)
                        if name == "s3":
                            spent += requests_in(log, mark)
                            polls += gets
    local, s3 = (statistics.median(seconds[name]) for name in ("local", "s3"))
    print(f"\n{'store':8} {'median s':>9} {'lines/s':>8}   (runs after a warm-up: {args.runs})")
    for name, median in (("SQLite", local), ("S3", s3)):
        print(f"{name:8} {median:9.1f} {args.lines / median:8.1f}")
    print(f"S3 / SQLite lines/s: {local / s3:.2f}x")
    lines = args.lines * args.runs
    per_thousand = {kind: count * 1000 / lines for kind, count in spent.items()}
    total = sum(per_thousand.values())
    kinds = ", ".join(f"{kind} {count:.1f}" for kind, count in sorted(per_thousand.items()))
    print(f"S3 requests per 1,000 lines, upload to completed: {total:.1f} ({kinds})")
    print(
        f"  of which the client's status polls (one GET each, every 0.1 s): "
        f"{polls * 1000 / lines:.1f}; the store's own work: {total - polls * 1000 / lines:.1f}"
    )
    print(f"an idle server: {sum(idle.values()) / IDLE_S:.2f} S3 requests/s ({dict(idle)})")


if __name__ == "__main__":
    main()
