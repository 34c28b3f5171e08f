"""What runs one shard of `deploy batch`: a SageMaker transform job, or a local one against a
running container (`--local URL...`), both as JSON Lines, Line split, MultiRecord, assembled."""

import asyncio
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from vllm_sagemaker.core.content_types import JSON_LINES
from vllm_sagemaker.core.execution_parameters import DEFAULT_CONCURRENCY, DEFAULT_PAYLOAD_MB
from vllm_sagemaker.deploy.base.calls import POLL_S, Call
from vllm_sagemaker.deploy.base.calls import client as aws_client
from vllm_sagemaker.deploy.base.error_answers import missing
from vllm_sagemaker.deploy.base.errors import ClientError
from vllm_sagemaker.deploy.kit.fleet.state import Job
from vllm_sagemaker.deploy.kit.plans.transform import (
    TRANSFORM_INVOCATION_TIMEOUT_S,
    TRANSFORM_RETRIES,
    transform_call,
)
from vllm_sagemaker.deploy.transform import job as transform

ENDED = frozenset({"Completed", "Failed", "Stopped"})


@dataclass(frozen=True)
class JobSpec:
    name: str
    input: str
    output: str
    slot: int


class Jobs(Protocol):
    # Shards at once, and whether an earlier run's job can be waited for instead of started.
    slots: int
    can_attach: bool

    async def run(self, spec: JobSpec, job: Job, started: Callable[[], None]) -> None:
        """Run (or wait for) the shard's job, filling in `job`; `started()` once it exists."""


@dataclass(frozen=True)
class TransformSettings:
    max_payload_mb: int = DEFAULT_PAYLOAD_MB
    max_concurrent_transforms: int = DEFAULT_CONCURRENCY


@dataclass
class SageMakerJobs:
    """One CreateTransformJob per shard on `instance_type`, `slots` at a time, polled until done."""

    model: str
    instance_type: str
    slots: int
    settings: TransformSettings
    poll_s: float = POLL_S
    client: Any = field(default_factory=lambda: aws_client("sagemaker"))
    can_attach: bool = field(default=True, init=False)

    def call(self, spec: JobSpec) -> Call:
        return transform_call(
            spec.name,
            spec.input,
            spec.output,
            self.instance_type,
            1,
            self.settings.max_payload_mb,
            self.settings.max_concurrent_transforms,
            False,
            model=self.model,
        )

    async def run(self, spec: JobSpec, job: Job, started: Callable[[], None]) -> None:
        describe = functools.partial(self.client.describe_transform_job, TransformJobName=spec.name)
        try:
            answer: dict[str, Any] = await asyncio.to_thread(describe)
        except self.client.exceptions.ClientError as error:
            if not missing(error):
                raise
            await asyncio.to_thread(self.client.create_transform_job, **self.call(spec).params)
            started()
            answer = await asyncio.to_thread(describe)
        while (status := answer["TransformJobStatus"]) not in ENDED:
            await asyncio.sleep(self.poll_s)
            answer = await asyncio.to_thread(describe)
        job.status = status
        job.reason = answer.get("FailureReason") if status != "Completed" else None
        begun, ended = answer.get("TransformStartTime"), answer.get("TransformEndTime")
        job.seconds = (ended - begun).total_seconds() if begun and ended else 0.0


class LocalJobs:
    """Local transform jobs against running containers, one shard per container."""

    can_attach = False

    def __init__(
        self, endpoints: Sequence[str], settings: TransformSettings, api_key: str | None = None
    ) -> None:
        self.endpoints = list(endpoints)
        self.slots = len(self.endpoints)
        self.settings = settings
        self.api_key = api_key  # as resolved from --api-key or VLLM_API_KEY

    async def run(self, spec: JobSpec, job: Job, started: Callable[[], None]) -> None:
        started()
        begun = time.monotonic()
        shard_job = transform.TransformJob(
            endpoint=self.endpoints[spec.slot % self.slots],
            input=spec.input,
            output=spec.output,
            content_type=JSON_LINES,
            accept=JSON_LINES,
            split_lines=True,
            batch_strategy="MultiRecord",
            max_payload_mb=self.settings.max_payload_mb,
            max_concurrent_transforms=self.settings.max_concurrent_transforms,
            assemble_lines=True,
            max_retries=TRANSFORM_RETRIES,
            timeout_s=TRANSFORM_INVOCATION_TIMEOUT_S,
            api_key=self.api_key,
        )
        outcome = transform.FileResults()
        try:
            await transform.transform_all(shard_job, outcome, quiet=True)
            failed = outcome.failed
        except ClientError as error:
            failed = {spec.input: error.line}
        job.seconds = time.monotonic() - begun
        job.status = "Failed" if failed else "Completed"
        job.reason = "; ".join(failed.values()) if failed else None
