"""Probes that `benchmarks.timeline` loads into a server: they note, on the machine-wide monotonic
clock, where a live request is at each stage. Only the benchmark loads them, through vLLM's
public seams (`--scheduler-cls`, `--middleware`); each process appends JSON lines to
`$TIMELINE_DIR/<pid>.jsonl`.

- `TimelineScheduler` (engine core; ours, or vLLM's with TIMELINE_PLAIN=1): a live request added
  to the scheduler, each engine step (how many sequences and tokens, how many of them batch
  work, which live requests it started; when its output came back), a live request's first
  token. tests/handler/test_live_first.py reads the same notes.
- `RouteProbe` (API server, inside our middleware): the call of vLLM's route for a live request,
  the route's first body byte, and each second the event loop's lag (`loop_lag`).

A live request is one whose id contains `live` (the benchmark sends it as the SageMaker
inference id, which becomes vLLM's request id).
"""

import asyncio
import json
import os
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.engine import EngineCoreOutputs
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request

from vllm_sagemaker.core.config import batch_priority
from vllm_sagemaker.handler.engine.live_first import LiveFirstScheduler

MARK = "live"
_files: dict[int, Any] = {}


def note(event: str, **fields: Any) -> None:
    """One event, stamped now, in this process's file."""
    pid = os.getpid()
    if pid not in _files:
        path = os.path.join(os.environ["TIMELINE_DIR"], f"{pid}.jsonl")
        _files[pid] = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
    _files[pid].write(json.dumps({"t": time.monotonic(), "event": event, **fields}) + "\n")


# The scheduler `serve` would pass (ours), or vLLM's own with TIMELINE_PLAIN=1.
Base = Scheduler if os.environ.get("TIMELINE_PLAIN") == "1" else LiveFirstScheduler


class TimelineScheduler(Base):  # type: ignore[valid-type,misc]
    """The scheduler under test, unchanged, noting live requests and every step."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._first_token: set[str] = set()
        self._batch_priority = batch_priority(os.environ)

    def add_request(self, request: Request) -> None:
        if MARK in request.request_id:
            waiting_batch = sum(1 for r in self.waiting if r.priority > request.priority)
            note(
                "engine_add",
                id=request.request_id,
                running=len(self.running),
                waiting=len(self.waiting),
                waiting_batch=waiting_batch,
            )
        super().add_request(request)

    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        output = super().schedule(*args, **kwargs)
        priority = self._batch_priority
        note(
            "step",
            seqs=len(output.num_scheduled_tokens),
            batch=sum(
                1
                for request_id in output.num_scheduled_tokens
                if priority is not None and self.requests[request_id].priority >= priority
            ),
            tokens=output.total_num_scheduled_tokens,
            live=[r.req_id for r in output.scheduled_new_reqs if MARK in r.req_id],
            running=len(self.running),
            waiting=len(self.waiting),
        )
        return output

    def update_from_output(
        self, scheduler_output: SchedulerOutput, model_runner_output: ModelRunnerOutput
    ) -> dict[int, EngineCoreOutputs]:
        outputs = super().update_from_output(scheduler_output, model_runner_output)
        firsts = [
            out.request_id
            for engine_outputs in outputs.values()
            for out in engine_outputs.outputs
            if MARK in out.request_id
            and out.new_token_ids
            and out.request_id not in self._first_token
        ]
        self._first_token.update(firsts)
        note("step_done", first_tokens=firsts)
        return outputs


async def loop_lag(every_s: float = 0.01) -> None:
    """The API server's event-loop lag: how late a `sleep(every_s)` wakes, noted as the mean
    and the maximum of each second."""
    loop = asyncio.get_running_loop()
    late: list[float] = []
    second = loop.time()
    while True:
        asked = loop.time()
        await asyncio.sleep(every_s)
        late.append(loop.time() - asked - every_s)
        if loop.time() - second >= 1.0:
            note("loop_lag", mean=sum(late) / len(late), max=max(late))
            late, second = [], loop.time()


class RouteProbe:
    """Inside our middleware: notes when vLLM's route is called for a live request, and when
    the route sends its first body byte."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._lag: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._lag is None and scope["type"] == "http":
            self._lag = asyncio.create_task(loop_lag())
        headers = dict(scope.get("headers", [])) if scope["type"] == "http" else {}
        request_id = headers.get(b"x-request-id", b"").decode()
        if MARK not in request_id:
            await self.app(scope, receive, send)
            return
        note("route_in", id=request_id, path=scope["path"])
        first = True

        async def noting(message: Message) -> None:
            nonlocal first
            if first and message["type"] == "http.response.body" and message.get("body"):
                first = False
                note("route_first_byte", id=request_id)
            await send(message)

        await self.app(scope, receive, noting)
