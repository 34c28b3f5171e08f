"""The engine step while a live request waits for its first token: it runs without batch work.

`serve` passes this scheduler to vLLM through its public seam `--scheduler-cls` whenever batch
lines run at a lower priority (`SAGEMAKER_BATCH_PRIORITY`) and batch work yields
(`SAGEMAKER_BATCH_YIELD`, on by default). It is vLLM's own scheduler with two rules added:

- **Live prefill alone.** In a step where a live request (a priority more urgent than the
  batch's) is in its prefill, or waits with a running slot free for it, every batch request sits
  the step out: running batch sequences keep their KV cache and their slot, waiting batch lines
  stay queued. The live prefill runs in a step as short as on an idle server instead of beside
  up to `max_num_batched_tokens` of batch prefill and every batch sequence's decode. From its
  first token on the batch steps beside it again: a live request costs the batch about a step.
  With no slot free the batch steps as usual, so that its lines finish and free one (holding it
  then would stall both).
- **Slots kept for live requests.** Batch lines are admitted only while a `1/RESERVE_SHARE` of
  the running slots (at least one) stays free, so a live request that arrives finds one: vLLM
  does not preempt for priority when every slot is taken, and a live request then waited for
  batch lines to finish (5 s in benchmarks/live_first.py at 2 and 8 requests/s).

The timeline behind it (benchmarks/timeline.py) and the measured effect are in
docs/batches-api.md, "Where a live request's time goes".
"""

import os
from typing import Any

from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request

from vllm_sagemaker.core.config import batch_priority

RESERVE_SHARE = 16


def is_batch(request: Request, priority: int) -> bool:
    """Batch work: a request at the batch priority or a less urgent one."""
    return request.priority >= priority


def awaits_first_token(request: Request, priority: int) -> bool:
    """A live request that has not finished its prefill yet."""
    return (
        not is_batch(request, priority) and request.num_computed_tokens < request.num_prompt_tokens
    )


def holds_batch(live_waiting: bool, live_prefilling: bool, free_slots: int) -> bool:
    """Whether batch requests sit this step out: a live request is in its prefill, or waits
    and a slot is free for it."""
    return live_prefilling or (live_waiting and free_slots > 0)


def reserve(max_running: int) -> int:
    """Running slots batch lines leave free for live requests."""
    return max(1, max_running // RESERVE_SHARE)


class LiveFirstScheduler(Scheduler):
    """vLLM's scheduler; batch requests sit out the steps that prefill a live request, and
    leave slots free for live requests."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batch_priority = batch_priority(os.environ)

    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        priority = self.batch_priority
        if priority is None:
            return super().schedule(*args, **kwargs)
        live_waiting = any(
            awaits_first_token(queue.peek_request(), priority)
            for queue in (self.waiting, self.kv_holding_waiting)
            if queue
        )
        live_prefilling = any(awaits_first_token(r, priority) for r in self.running)
        free_slots = self.max_num_active_reqs - len(self.running)
        if holds_batch(live_waiting, live_prefilling, free_slots):
            return self._live_step(priority, *args, **kwargs)
        if live_waiting:
            return super().schedule(*args, **kwargs)
        # Only batch lines wait: they may take the running slots but the reserve.
        active = self.max_num_active_reqs
        self.max_num_active_reqs = active - reserve(self.max_num_running_reqs)
        try:
            return super().schedule(*args, **kwargs)
        finally:
            self.max_num_active_reqs = active

    def _live_step(self, priority: int, *args: Any, **kwargs: Any) -> SchedulerOutput:
        """A step without batch work. vLLM skips a running request until its
        `next_decode_eligible_step`; `schedule` counts the step before it looks, so
        current_step + 2 skips this step alone (as vLLM's own DiffusionAsyncScheduler does)."""
        for request in self.running:
            if is_batch(request, priority):
                request.next_decode_eligible_step = max(
                    request.next_decode_eligible_step, self.current_step + 2
                )
        held = [r for r in self.waiting if is_batch(r, priority)]
        self.waiting.remove_requests(held)
        try:
            return super().schedule(*args, **kwargs)
        finally:
            for request in held:
                self.waiting.add_request(request)
