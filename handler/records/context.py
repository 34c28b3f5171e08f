"""What the record pipeline needs to run records, in one object: `RecordContext`.

A context carries no client connection: a real-time request, a Batch Transform mini-batch and a
batch line that the server runs on its own each build one. `Tally` counts what the records did,
for the invocation's log line.
"""

import asyncio
from dataclasses import dataclass, field

from starlette.types import Scope

from vllm_sagemaker.core import usage
from vllm_sagemaker.core.dispatch import Way
from vllm_sagemaker.core.routing import Target
from vllm_sagemaker.handler.records.asgi_call import Headers
from vllm_sagemaker.handler.records.minibatch import Stop


@dataclass
class Tally:
    """Records answered, records that failed (and of those, with a server error), kinds and
    routes seen, tokens used."""

    records: int = 0
    failed: int = 0
    server_errors: int = 0
    kinds: set[str] = field(default_factory=set)
    routes: set[str] = field(default_factory=set)
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def count(self, target: Target | None, status: int, body: bytes) -> None:
        """One record's outcome: its target (None when it never got one), status and body."""
        self.records += 1
        if status >= 400:
            self.failed += 1
        if status >= 500:
            self.server_errors += 1
        if target is not None:
            self.kinds.add(target.kind)
            self.routes.add(target.route)
        self.add_usage(body)

    def add_usage(self, body: bytes) -> None:
        prompt, completion = usage.tokens(body)
        self.prompt_tokens += prompt
        self.completion_tokens += completion


@dataclass(frozen=True)
class RecordContext:
    """Where and how records run.

    `scope` is the ASGI scope in-process calls are built from (it carries the app and its
    state); `headers` go to vLLM with every record (the client's, or only the API key for a
    batch the server runs itself); `adapter` names the LoRA adapter that answers every record;
    `priority` is the engine priority of batch lines (vLLM's priority scheduling); `batch_work`
    marks records that run in the batch window (`priority=batch`), beside live traffic;
    `dispatch` is the way the invocation asked its records to reach vLLM (`core.dispatch`).
    """

    scope: Scope
    headers: Headers
    request_id: str
    route_hint: str | None = None
    adapter: str | None = None
    priority: int | None = None
    batch_work: bool = False
    dispatch: Way | None = None
    stop: Stop = field(default_factory=Stop)
    tally: Tally = field(default_factory=Tally)

    @property
    def disconnected(self) -> asyncio.Event:
        """Set when the records must be given up: vLLM aborts what is running."""
        return self.stop.event
