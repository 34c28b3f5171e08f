"""Validation: a batch's input file checked with the project's batch-line rules
(`core.batch_lines.validate`, every bad line listed) before any line reaches the
engine; the batch then runs, cut into the store's chunks, or fails."""

import asyncio
import json
import time
from typing import Any

from vllm_sagemaker.core.batch_lines import Validation, validate
from vllm_sagemaker.core.jsonlines import iter_records
from vllm_sagemaker.handler.batches.running.context import RunEnded, Runtime
from vllm_sagemaker.handler.batches.running.status import BatchStatus
from vllm_sagemaker.handler.batches.store.chunking import measured
from vllm_sagemaker.handler.batches.store.types import StoredFile


class InputCheck:
    """The input file of one run's batch: found (or the batch fails) and checked."""

    def __init__(self, runtime: Runtime, status: BatchStatus) -> None:
        self.runtime = runtime
        self.store = runtime.store
        self.status = status

    async def input_file(self) -> StoredFile | None:
        """The batch's input file; when it is gone (deleted, expired), the batch fails."""
        file_id = self.status.batch["input_file_id"]
        stored = await asyncio.to_thread(self.store.file, file_id)
        if stored is None:
            error = {
                "code": "invalid_request",
                "message": f"Cannot find file {file_id}.",
                "param": "input_file_id",
                "line": None,
            }
            await self.fail([error])
        return stored

    async def validate(self) -> None:
        """Check the whole input file: the batch runs (its lines are claimed next, as the
        store cuts them) or fails."""
        stored = await self.input_file()
        if stored is None:
            return
        served = await self.runtime.pipeline.served(self.runtime.scope, self.runtime.headers)
        models = await self.models()
        lengths: list[int] = []
        found = await asyncio.to_thread(self._checked, stored.id, served, models, lengths)
        if found.errors:
            await self.fail(found.errors)
            return
        await asyncio.to_thread(self.store.add_chunks, self.status.held.batch_id, lengths)
        model = found.model or (models[0] if models else None)
        await self.status.start(model, found.total, int(time.time()))

    def _checked(
        self, file_id: str, served: frozenset[str], models: list[str], lengths: list[int]
    ) -> Validation:
        """The input file checked line by line, noting each physical line's length."""
        with self.store.open_body(file_id) as source:
            return validate(
                iter_records(measured(source, lengths)),
                self.status.batch["endpoint"],
                served,
                models,
            )

    async def models(self) -> list[str]:
        """The models this server serves (the base model and its adapters), from /v1/models."""
        reply = await self.runtime.call("GET", "/v1/models")
        if reply.status != 200:
            raise RunEnded(f"/v1/models answered {reply.status}; the batch is checked later")
        return [item["id"] for item in json.loads(reply.body).get("data", [])]

    async def fail(self, errors: list[dict[str, Any]]) -> None:
        await self.status.fail(errors, int(time.time()))
