"""Where a live request's time goes while a batch runs: a stage-by-stage timeline.

A `/v1/batches` batch runs alone for `--alone` seconds; then streaming 8-token chats go through
`/invocations` one at a time, `--gap` seconds apart, until the batch ends (the transient case a
user meets when traffic returns). Each live request is stamped, on the machine-wide monotonic
clock, by the client (sent, first byte), by a probe inside our middleware (vLLM's route called,
its first body byte) and by a probe scheduler in the engine core (added to the scheduler, first
scheduled, first token out), loaded through vLLM's `--middleware` and `--scheduler-cls`
(`benchmarks.timeline_probe`). Beside it, every thread of the server's processes is sampled
from /proc: the CPU time each process gets and the core it runs on.

    .venv/bin/python -m benchmarks.timeline [--lines 3000] [--alone 8] [--gap 1]
        [--env NAME=VALUE ...] [--py-spy SECONDS]

`--env` adds server variables (e.g. SAGEMAKER_BATCH_YIELD=false); `--py-spy` records every
process of the server for that many seconds from the batch's start (py-spy must be on PATH).
"""

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import openai
import psutil

from benchmarks import autogroup
from benchmarks.batch_runner import write_file
from benchmarks.bench import bench
from benchmarks.live_traffic import live_body, streamed
from benchmarks.witness import Witness
from tests.support import servers
from vllm_sagemaker.handler.sagemaker.invocations import INFERENCE_ID

SERVER_ENV = {"SM_VLLM_MAX_NUM_SEQS": "256", "SM_VLLM_MAX_NUM_BATCHED_TOKENS": "4096"}
PROBES = {
    "SM_VLLM_SCHEDULER_CLS": "benchmarks.timeline_probe.TimelineScheduler",
    "SM_VLLM_MIDDLEWARE": "benchmarks.timeline_probe.RouteProbe",
}
LIVE_BODY = live_body("/invocations")
STAGES = (
    ("sent", "route_in", "to vLLM's route"),
    ("route_in", "engine_add", "to the scheduler"),
    ("engine_add", "scheduled", "waiting to be scheduled"),
    ("scheduled", "engine_token", "first token in the engine"),
    ("engine_token", "route_first_byte", "to the route's first byte"),
    ("route_first_byte", "first_byte", "to the client"),
)
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass
class Live:
    id: str
    stamps: dict[str, float] = field(default_factory=dict)


def send_live(url: str, request_id: str) -> Live:
    """One streaming chat through /invocations, its id the SageMaker inference id; the
    client's stamps."""
    stamps = streamed(url, "/invocations", LIVE_BODY, {INFERENCE_ID.decode(): request_id})
    live = Live(request_id)
    live.stamps.update(sent=stamps.sent, first_byte=stamps.first_byte, done=stamps.done)
    return live


class CpuSampler:
    """Every thread of a process tree, every 50 ms: CPU ticks and the core it last ran on."""

    def __init__(self, root_pid: int) -> None:
        self.root = psutil.Process(root_pid)
        self.samples: list[tuple[float, dict[tuple[int, int], tuple[str, int, int]]]] = []
        self.names: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _read(self) -> dict[tuple[int, int], tuple[str, int, int]]:
        seen = {}
        for process in [self.root, *self.root.children(recursive=True)]:
            pid = process.pid
            if pid not in self.names:
                try:
                    self.names[pid] = " ".join(process.cmdline()[:3])[:60] or process.name()
                except psutil.Error:
                    continue
            for task in Path(f"/proc/{pid}/task").glob("*"):
                try:
                    stat = (task / "stat").read_text()
                except OSError:
                    continue
                comm = stat[stat.index("(") + 1 : stat.rindex(")")]
                fields = stat[stat.rindex(")") + 2 :].split()
                ticks = int(fields[11]) + int(fields[12])
                seen[(pid, int(task.name))] = (comm, ticks, int(fields[36]))
        return seen

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            with contextlib.suppress(psutil.Error):
                self.samples.append((time.monotonic(), self._read()))

    def __enter__(self) -> "CpuSampler":
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def shares(self, start: float, end: float) -> list[tuple[str, str, float, dict[int, int]]]:
        """(process, thread, share of one core, samples per core) between `start` and `end`."""
        within = [s for s in self.samples if start <= s[0] <= end]
        if len(within) < 2:
            return []
        (t0, first), (t1, last) = within[0], within[-1]
        cores: dict[tuple[int, int], dict[int, int]] = defaultdict(lambda: defaultdict(int))
        for _, sample in within:
            for key, (_, _, core) in sample.items():
                cores[key][core] += 1
        rows = []
        for key, (comm, ticks, _) in last.items():
            used = (ticks - first.get(key, (comm, ticks, 0))[1]) / CLK_TCK / (t1 - t0)
            if used >= 0.02:
                rows.append((self.names.get(key[0], "?"), comm, used, dict(cores[key])))
        return sorted(rows, key=lambda row: -row[2])


def events(directory: Path) -> list[dict]:
    found = []
    for path in directory.glob("*.jsonl"):
        found += [json.loads(line) for line in path.read_text().splitlines() if line]
    return sorted(found, key=lambda event: event["t"])


def stitch(lives: list[Live], noted: list[dict]) -> None:
    """Add the probes' stamps to each live request (vLLM's ids carry ours inside them)."""
    for live in lives:
        for event in noted:
            kind = event["event"]
            ids = event.get("live", []) + event.get("first_tokens", []) + [event.get("id", "")]
            if not any(re.search(rf"(^|-){live.id}(-|$)", i) for i in ids if i):
                continue
            name = {"step": "scheduled", "step_done": "engine_token"}.get(kind, kind)
            live.stamps.setdefault(name, event["t"])
            if kind == "engine_add":
                live.stamps["queue"] = event["waiting"]
                live.stamps["queue_batch"] = event["waiting_batch"]
                live.stamps["running"] = event["running"]


def steps_between(noted: list[dict], start: float, end: float) -> tuple[int, float, float]:
    """Engine steps that began in [start, end): count, mean and max duration (ms)."""
    began = [e for e in noted if e["event"] == "step" and start <= e["t"] < end]
    done = [e["t"] for e in noted if e["event"] == "step_done"]
    durations = []
    for step in began:
        after = next((t for t in done if t >= step["t"]), None)
        if after is not None:
            durations.append((after - step["t"]) * 1000)
    if not durations:
        return 0, 0.0, 0.0
    return len(durations), statistics.mean(durations), max(durations)


def print_timeline(lives: list[Live], noted: list[dict], witness: Witness) -> None:
    """A row per live request; its last column is the stall witness's latest wake-up while the
    request waited for its first byte, marked STALLED over the witness's threshold."""
    heads = [label for _, _, label in STAGES]
    print("live request timeline (ms per stage; queue = waiting requests at its arrival)")
    print(
        f"{'id':8} {'first byte':>10} "
        + " ".join(f"{h[:12]:>12}" for h in heads)
        + f" {'queue':>6} {'running':>7} {'steps':>5} {'step ms':>7} {'witness':>8}"
    )
    for live in lives:
        s = live.stamps
        cells = []
        for start, end, _ in STAGES:
            ok = start in s and end in s
            cells.append(f"{(s[end] - s[start]) * 1000:12.1f}" if ok else f"{'-':>12}")
        count, mean, _ = (
            steps_between(noted, s["engine_add"], s["scheduled"])
            if "engine_add" in s and "scheduled" in s
            else (0, 0.0, 0.0)
        )
        total = (s["first_byte"] - s["sent"]) * 1000
        seen = witness.between(s["sent"], s["first_byte"])
        print(
            f"{live.id:8} {total:10.1f} "
            + " ".join(cells)
            + f" {s.get('queue', -1):6.0f} {s.get('running', -1):7.0f} {count:5d} {mean:7.1f}"
            + f" {seen.worst_s * 1000:8.0f}{' STALLED' if seen.stalled else ''}"
        )


def print_lag(noted: list[dict], label: str, start: float, end: float) -> None:
    """The API server's event-loop lag (the probe's samples of each second) in [start, end]."""
    lags = [e for e in noted if e["event"] == "loop_lag" and start <= e["t"] <= end]
    if lags:
        mean = statistics.mean(e["mean"] for e in lags) * 1000
        worst = max(e["max"] for e in lags) * 1000
        print(f"event-loop lag, {label}: mean {mean:.1f} ms, max {worst:.1f} ms")


def print_cpu(sampler: CpuSampler, label: str, start: float, end: float) -> None:
    print(f"CPU {label} ({end - start:.1f} s): share of one core per thread, samples per core")
    for process, thread, share, cores in sampler.shares(start, end)[:14]:
        print(f"  {share:5.0%}  {thread:16} {process:60} {cores}")


def py_spy(pids: list[int], seconds: float, out: Path) -> list[subprocess.Popen]:
    tool = shutil.which("py-spy")
    if tool is None:
        raise SystemExit("--py-spy: py-spy is not on PATH (pip install py-spy)")
    return [
        subprocess.Popen(
            [
                tool,
                "record",
                "--pid",
                str(pid),
                "--duration",
                str(int(seconds)),
                "--rate",
                "200",
                "--format",
                "speedscope",
                "--output",
                str(out / f"py-spy-{pid}.json"),
                "--threads",
                "--idle",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for pid in pids
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=3000)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--alone", type=float, default=8.0)
    parser.add_argument("--gap", type=float, default=1.0)
    parser.add_argument("--quiet", type=float, default=11.0)
    parser.add_argument("--env", nargs="*", default=[])
    parser.add_argument("--py-spy", type=float, default=0.0)
    parser.add_argument("--keep", type=Path, help="copy the probes' events and py-spy files here")
    autogroup.add_argument(parser)
    args = parser.parse_args()
    with bench(args.autogroup, args.lines, args.tokens) as setup:
        root, model, source, witness = setup.root, setup.model, setup.source, setup.witness
        warm = root / "warm.jsonl"
        write_file(warm, 200, args.tokens)
        noted_dir = root / "events"
        noted_dir.mkdir()
        repo = str(Path(__file__).resolve().parent.parent)
        env = {
            **SERVER_ENV,
            **PROBES,
            "TIMELINE_DIR": str(noted_dir),
            "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")])),
            **dict(item.split("=", 1) for item in args.env),
        }
        with servers.running({"chat": model}, root, {"chat": env}) as running:
            server = running["chat"]
            sdk = openai.OpenAI(base_url=server.url + "/v1", api_key="none")
            for i in range(3):
                send_live(server.url, f"warm{i}")
            idle = [send_live(server.url, f"live-i{i}") for i in range(5)]
            _ = sdk.batches.create(
                input_file_id=sdk.files.create(file=warm.open("rb"), purpose="batch").id,
                endpoint="/v1/chat/completions",
                completion_window="24h",
            )
            server.wait_idle(600)
            # The batch starts once live traffic has been quiet long enough for it to have
            # the whole window (SAGEMAKER_BATCH_QUIET_SECONDS): what traffic returning meets.
            time.sleep(args.quiet)
            uploaded = sdk.files.create(file=source.open("rb"), purpose="batch")
            lives: list[Live] = []
            with CpuSampler(server.process.pid) as sampler:
                batch = sdk.batches.create(
                    input_file_id=uploaded.id,
                    endpoint="/v1/chat/completions",
                    completion_window="24h",
                )
                created = time.monotonic()
                spies = []
                if args.py_spy:
                    family = psutil.Process(server.process.pid).children(recursive=True)
                    spies = py_spy(
                        [server.process.pid, *(p.pid for p in family)], args.py_spy, root
                    )
                time.sleep(args.alone)
                first_live = time.monotonic()
                number = 0
                while sdk.batches.retrieve(batch.id).status in ("validating", "in_progress"):
                    lives.append(send_live(server.url, f"live-a{number}"))
                    number += 1
                    time.sleep(args.gap)
                ended = time.monotonic()
                for spy in spies:
                    spy.wait()
            final = sdk.batches.retrieve(batch.id)
            noted = events(noted_dir)
        stitch(idle + lives, noted)
        print(f"{args.lines} lines x {args.tokens} tokens; env {args.env or 'defaults'}")
        print(f"batch {final.status}: {final.request_counts}, {ended - created:.1f} s")
        print_timeline(idle + lives, noted, witness)
        print(f"batch alone: {witness.between(created, first_live)}")
        print(f"batch with live traffic: {witness.between(first_live, ended)}")
        print_lag(noted, "batch alone", created + 1, first_live)
        print_lag(noted, "batch with live traffic", first_live, ended)
        print_cpu(sampler, "batch alone", created + 1, first_live)
        print_cpu(sampler, "batch with live traffic", first_live, ended)
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            for path in [*noted_dir.glob("*"), *root.glob("py-spy-*.json"), root / "chat.log"]:
                shutil.copy(path, args.keep / path.name)


if __name__ == "__main__":
    main()
