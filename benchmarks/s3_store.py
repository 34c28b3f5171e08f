"""The shared S3 store against the embedded SQLite store: the same batch through `/v1/batches`
on one server with each, side by side in one run, and what the S3 store costs in requests. Then
a batch on several replicas sharing one S3 store, cut into chunks of 1,000 lines (what every
batch got before chunks were sized, now SAGEMAKER_BATCH_CHUNK_LINES=1000) and into chunks sized
for the replicas present, one set of replicas after the other in one run: S3 requests per 1,000
lines and how many lines each replica answered.

S3 is a local moto server; every request it serves is one line of its log, so the requests are
counted there: per 1,000 lines of a batch, by kind, and per second on idle servers.

    .venv/bin/python -m benchmarks.s3_store [--lines 3000] [--tokens 16] [--runs 3]
        [--replicas 3] [--replica-lines 900] [--only stores|replicas]
"""

import argparse
import json
import os
import re
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import boto3
import httpx
import openai

from benchmarks.batch_runner import write_file
from benchmarks.batches_api import SERVER_ENV, run_batch_api
from tests.support import aws, model_factory, servers

BUCKET = "bench-store"
REQUEST = re.compile(rb'"(GET|PUT|POST|DELETE|HEAD) (\S+) HTTP')
IDLE_S = 20.0
SUCCESSES = "vllm:request_success_total"
# Several engines on one machine: a small KV cache each, as the replica tests give theirs.
REPLICA_ENV = {**SERVER_ENV, "SM_VLLM_KV_CACHE_MEMORY_BYTES": str(256 * 2**20)}
CHUNKINGS = {
    "1,000 lines (before)": {"SAGEMAKER_BATCH_CHUNK_LINES": "1000"},
    "sized (after)": {},
}


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


def idle_requests(log: Path) -> Counter[str]:
    """The S3 requests of the running servers over IDLE_S seconds with no batch."""
    mark = log.stat().st_size
    time.sleep(IDLE_S)
    return requests_in(log, mark)


def timed_batch(server: servers.Server, source: Path) -> tuple[str, float, int]:
    """The batch's id, seconds from create to completed, and how many status polls (GETs) the
    client made."""
    methods: list[str] = []
    hooks = {"request": [lambda request: methods.append(request.method)]}
    sdk = openai.OpenAI(
        base_url=server.url + "/v1", api_key="none", http_client=httpx.Client(event_hooks=hooks)
    )
    batch_id, seconds = run_batch_api(sdk, source)
    return batch_id, seconds, methods.count("GET")


@dataclass
class Spent:
    """The S3 requests of `lines` batch lines, by kind, and the client's status polls among
    them."""

    lines: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    polls: int = 0

    def per_thousand(self) -> float:
        return sum(self.kinds.values()) * 1000 / self.lines

    def store_per_thousand(self) -> float:
        return self.per_thousand() - self.polls * 1000 / self.lines

    def __str__(self) -> str:
        kinds = ", ".join(
            f"{kind} {count * 1000 / self.lines:.1f}" for kind, count in sorted(self.kinds.items())
        )
        return (
            f"{self.per_thousand():.1f} ({kinds}); client polls "
            f"{self.polls * 1000 / self.lines:.1f}, the store's own {self.store_per_thousand():.1f}"
        )


def idle_rate(idle: Counter[str]) -> str:
    return f"{sum(idle.values()) / IDLE_S:.2f} S3 requests/s ({dict(idle)})"


def compare_stores(root: Path, log: Path, model: Path, args: argparse.Namespace) -> None:
    """One server with each store, the same batch on each in turn."""
    source = root / "in.jsonl"
    write_file(source, args.lines, args.tokens)
    env = {
        "local": {**SERVER_ENV, "SAGEMAKER_BATCH_STORE": str(root / "store")},
        "s3": {**SERVER_ENV, "SAGEMAKER_BATCH_STORE": f"s3://{BUCKET}/store/"},
    }
    print(f"{args.lines} chat lines x {args.tokens} tokens, tiny Llama; S3 is moto")
    seconds: dict[str, list[float]] = {"local": [], "s3": []}
    spent = Spent()
    with servers.running(dict.fromkeys(env, model), root, env) as running:
        idle = idle_requests(log)
        for run in range(args.runs + 1):
            for name, server in running.items():
                mark = log.stat().st_size
                _, took, gets = timed_batch(server, source)
                if run == 0:
                    continue
                seconds[name].append(took)
                if name == "s3":
                    spent.kinds += requests_in(log, mark)
                    spent.polls += gets
                    spent.lines += args.lines
    local, s3 = (statistics.median(seconds[name]) for name in ("local", "s3"))
    print(f"\n{'store':8} {'median s':>9} {'lines/s':>8}   (runs after a warm-up: {args.runs})")
    for name, median in (("SQLite", local), ("S3", s3)):
        print(f"{name:8} {median:9.1f} {args.lines / median:8.1f}")
    print(f"S3 / SQLite lines/s: {local / s3:.2f}x")
    print(f"S3 requests per 1,000 lines, upload to completed: {spent}")
    print(f"an idle server: {idle_rate(idle)}")


@dataclass
class OnReplicas:
    """One way of cutting batches, measured on a set of replicas."""

    label: str
    seconds: list[float] = field(default_factory=list)
    spent: Spent = field(default_factory=Spent)
    answered: Counter[str] = field(default_factory=Counter)
    chunks: int = 0
    idle: Counter[str] = field(default_factory=Counter)


def chunks_of(prefix: str, batch_id: str) -> int:
    """How many chunks the batch was cut into, from its chunks in S3."""
    key = f"{prefix}batches/{batch_id}/chunks.json"
    return len(json.load(boto3.client("s3").get_object(Bucket=BUCKET, Key=key)["Body"])["chunks"])


def on_replicas(
    root: Path,
    log: Path,
    model: Path,
    args: argparse.Namespace,
    label: str,
    extra: dict[str, str],
) -> OnReplicas:
    """`args.replicas` servers on an S3 prefix of their own, with `extra` in their environment;
    the same batch created through the first of them, `args.runs` times after a warm-up."""
    slug = re.sub(r"\W+", "-", label).strip("-")
    prefix = f"{slug}/"
    names = [f"{slug}-{n}" for n in range(args.replicas)]
    env = {**REPLICA_ENV, "SAGEMAKER_BATCH_STORE": f"s3://{BUCKET}/{prefix}", **extra}
    measured = OnReplicas(label)
    with servers.running(dict.fromkeys(names, model), root, dict.fromkeys(names, env)) as running:
        replicas = list(running.values())
        measured.idle = idle_requests(log)
        for run in range(args.runs + 1):
            before = {replica.name: replica.metric(SUCCESSES) for replica in replicas}
            mark = log.stat().st_size
            batch_id, took, gets = timed_batch(replicas[0], root / "replica-in.jsonl")
            if run == 0:
                continue
            # Read before the chunks are: that GET is the benchmark's, not the store's.
            measured.spent.kinds += requests_in(log, mark)
            measured.spent.polls += gets
            measured.spent.lines += args.replica_lines
            measured.seconds.append(took)
            measured.chunks = chunks_of(prefix, batch_id)
            for index, replica in enumerate(replicas):
                done = replica.metric(SUCCESSES) - before[replica.name]
                measured.answered[f"replica {index}"] += int(done)
    return measured


def compare_chunkings(root: Path, log: Path, model: Path, args: argparse.Namespace) -> None:
    """The same batch on `args.replicas` replicas, cut the old way and sized, one set of
    replicas after the other."""
    write_file(root / "replica-in.jsonl", args.replica_lines, args.tokens)
    results = [
        on_replicas(root, log, model, args, label, extra) for label, extra in CHUNKINGS.items()
    ]
    print(
        f"\n{args.replica_lines} chat lines x {args.tokens} tokens on {args.replicas} replicas "
        f"sharing one S3 store (moto); medians of {args.runs} runs after a warm-up"
    )
    print(
        f"{'chunks of':22} {'chunks':>6} {'median s':>9} {'lines/s':>8} "
        f"{'S3 req/1,000 lines':>19} {'store own':>10}   lines per replica"
    )
    for result in results:
        median = statistics.median(result.seconds)
        spread = " / ".join(str(count // args.runs) for count in result.answered.values())
        print(
            f"{result.label:22} {result.chunks:>6} {median:9.1f} "
            f"{args.replica_lines / median:8.1f} {result.spent.per_thousand():19.1f} "
            f"{result.spent.store_per_thousand():10.1f}   {spread}"
        )
    for result in results:
        print(f"{result.label}: S3 requests per 1,000 lines, upload to completed: {result.spent}")
        print(f"  {args.replicas} idle replicas: {idle_rate(result.idle)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=3000)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--replica-lines", type=int, default=900)
    parser.add_argument("--only", choices=("stores", "replicas"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        log = root / "moto.log"
        with aws.moto_server(log) as url:
            os.environ.update(aws.aws_env(url))
            boto3.client("s3").create_bucket(Bucket=BUCKET)
            model = model_factory.make_chat_model(root / "chat")
            if args.only != "replicas":
                compare_stores(root, log, model, args)
            if args.only != "stores":
                compare_chunkings(root, log, model, args)


if __name__ == "__main__":
    main()
