"""The engine step while a live request waits for its first token: it runs without batch work.

`serve` passes this scheduler to vLLM through its public seam `--scheduler-cls` whenever batch
lines run at a lower priority (`SAGEMAKER_BATCH_PRIORITY`) and batch work yields
(`SAGEMAKER_BATCH_YIELD`, on by default). It is vLLM's own scheduler with one rule added: in a
step where a live request (a priority more urgent than the batch's) is waiting or still in its
prefill, every batch request sits that step out: running batch sequences keep their KV cache and
their place, waiting batch lines stay queued. The live request's prefill then runs alone, in a
step as short as on an idle server, instead of sharing a step with up to
`max_num_batched_tokens` of batch prefill and every batch sequence's decode. Once it has its
first token the batch steps again, beside it: a live request costs the batch about one step.

The timeline behind it (benchmarks/timeline.py) and the measured effect are in
docs/batches-api.md, "Live requests while a batch runs".
"""

import os
from typing import Any

from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request

from vllm_sagemaker.handler.core.config import batch_priority


def is_batch(request: Request, priority: int) -> bool:
    """Batch work: a request at the batch priority or a less urgent one."""
    return request.priority >= priority


def awaits_first_token(request: Request, priority: int) -> bool:
    """A live request that has not finished its prefill yet."""
    return (
        not is_batch(request, priority) and request.num_computed_tokens < request.num_prompt_tokens
    )


class LiveFirstScheduler(Scheduler):
    """vLLM's scheduler; batch requests sit out the steps that prefill a live request."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batch_priority = batch_priority(os.environ)

    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        priority = self.batch_priority
        if priority is None or not self._live_prefill(priority):
            return super().schedule(*args, **kwargs)
        # vLLM skips a running request until `next_decode_eligible_step`; `schedule` counts the
        # step before it looks, so current_step + 2 skips this step alone (as vLLM's own
        # DiffusionAsyncScheduler does). The request keeps its slot and its KV cache.
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

    def _live_prefill(self, priority: int) -> bool:
        """A live request waits (the queues serve the most urgent first) or is in its
        prefill."""
        return any(
            awaits_first_token(queue.peek_request(), priority)
            for queue in (self.waiting, self.kv_holding_waiting)
            if queue
        ) or any(awaits_first_token(r, priority) for r in self.running)
