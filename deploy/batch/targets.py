"""Where `vllm-sagemaker batch` sends its mini-batches: a container it reaches over HTTP, or a
SageMaker endpoint through the runtime API (`InvokeEndpoint`: SigV4, boto3's usual credentials).

Both send one JSON Lines mini-batch and return the container's JSON Lines answer. Every call is
marked as batch work (the custom attribute `priority=batch`), so the container runs its records
at batch priority and does not count them as live traffic. The error rules are the same for
both: a model's refusal of the whole call (a 4xx other than 408 and 429) raises `invoke.Refused`
and its lines become error lines; a 429 (the container keeps its engine for live traffic) or the
service's throttling is waited out and halves the calls in flight (`deploy.base.pace`), never a
failure; a model not ready, timeouts and 5xx are retried with backoff; `invoke.InvocationFailed`
(retries used up, or a call the service refused) ends the run, which `--resume` finishes. A 401
(the container wants an API key) raises `invoke.KeyRefused`, which ends the run with one line: a
container is sent its key by the client `invoke.client` makes; InvokeEndpoint cannot send one.
"""

import asyncio
import concurrent.futures
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from vllm_sagemaker.deploy.base import error_answers, invoke
from vllm_sagemaker.deploy.base.pace import Pace
from vllm_sagemaker.handler.core.config import API_KEY_VAR
from vllm_sagemaker.handler.core.content_types import JSON_LINES
from vllm_sagemaker.handler.core.routing import BATCH_WORK_ATTRIBUTE

if TYPE_CHECKING:
    import botocore.exceptions

CONTAINER_HEADERS = {
    "Content-Type": JSON_LINES,
    "X-Amzn-SageMaker-Custom-Attributes": BATCH_WORK_ATTRIBUTE,
}
# InvokeEndpoint carries at most 6 MB, and a container refuses more than its
# SAGEMAKER_MAX_PAYLOAD_IN_MB (6 MiB by default): a mini-batch stays under both.
MAX_REQUEST_BYTES = 6 * 1000 * 1000
# Errors of the runtime API worth another try: the service or the model is busy or starting.
RETRY_ERRORS = frozenset(
    {
        "ThrottlingException",
        "ModelNotReadyException",
        "ServiceUnavailable",
        "InternalFailure",
        "InternalDependencyException",
    }
)
SERVING = frozenset({"InService", "Updating", "SystemUpdating"})


class Target(Protocol):
    """Where mini-batches go: a `Container` or an `Endpoint`."""

    async def ready(self) -> None:
        """Return once the target can take calls; `invoke.NotReady` if it never will."""

    async def invoke(self, body: bytes) -> bytes:
        """The answer to one JSON Lines mini-batch."""

    def close(self) -> None:
        """Release what the target holds."""


@dataclass
class Container:
    """A container at a URL (`--endpoint`, or the engine `--model` started)."""

    client: httpx.AsyncClient
    retries: int
    timeout_s: float
    pace: Pace | None = None
    # How long a container that answers but is not ready yet is waited for (`--wait-ready`).
    wait_s: float = invoke.READY_WAIT_S

    async def ready(self) -> None:
        await invoke.wait_ready(self.client, self.wait_s, "batch")

    async def invoke(self, body: bytes) -> bytes:
        return await invoke.post(
            self.client,
            "/invocations",
            body,
            CONTAINER_HEADERS,
            self.retries,
            self.timeout_s,
            self.pace,
        )

    def close(self) -> None:
        pass


def classify(error: "botocore.exceptions.ClientError") -> Exception:
    """What an InvokeEndpoint error means for the mini-batch: retry it (`invoke.Retryable`),
    answer its lines with errors (`invoke.Refused`), or stop the run (`invoke.InvocationFailed`;
    `invoke.KeyRefused` for a container that wants an API key)."""
    response: dict[str, Any] = error.response
    code = response.get("Error", {}).get("Code", "")
    status_code = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    message = error_answers.message(
        str(response.get("Error", {}).get("Message", ""))
    ) or error_answers.said("", status_code)
    if code == "ModelError":
        status = int(response.get("OriginalStatusCode") or 0)
        original = error_answers.message(str(response.get("OriginalMessage") or "")) or message
        if status == 429:
            return invoke.Throttled(f"the model answered HTTP 429: {original}")
        if status == 401:
            return invoke.KeyRefused(
                "the endpoint's container wants an API key (HTTP 401), which InvokeEndpoint "
                f"cannot send: on SageMaker, leave {API_KEY_VAR} unset (SigV4 guards the endpoint)"
            )
        if status in invoke.RETRY_STATUSES or status == 0:
            return invoke.Retryable(f"the model answered HTTP {status}: {original}")
        return invoke.Refused(status, original)
    if code == "ThrottlingException":
        return invoke.Throttled(f"{code}: {message}")
    if code in RETRY_ERRORS:
        return invoke.Retryable(f"{code}: {message}")
    return invoke.InvocationFailed(f"{code}: {message}")


class Endpoint:
    """A SageMaker real-time endpoint, called with boto3's `sagemaker-runtime` client.

    boto3's own retries are off: throttling and the rest are retried here, with the same
    backoff as the container's calls, on threads of a pool as large as the calls in flight.
    boto3 loads when an endpoint is made, not with this module: `vllm-sagemaker --help` builds
    this command's parser without it.
    """

    def __init__(
        self,
        name: str,
        region: str | None,
        inference_component: str | None,
        retries: int,
        timeout_s: float,
        connections: int,
        pace: Pace | None = None,
    ) -> None:
        import boto3
        import botocore.config
        import botocore.exceptions

        from vllm_sagemaker.deploy.base import aws_lines

        config = botocore.config.Config(
            region_name=region,
            read_timeout=timeout_s,
            connect_timeout=10,
            retries={"total_max_attempts": 1},
            max_pool_connections=connections,
        )
        self.name = name
        try:
            self.runtime = boto3.client("sagemaker-runtime", config=config)
            self.control = boto3.client("sagemaker", config=config)
        except botocore.exceptions.BotoCoreError as error:
            raise invoke.NotReady(f"endpoint {name}: {aws_lines.aws_line(error)}") from error
        self.component = inference_component
        self.retries = retries
        self.pace = pace
        self.pool = concurrent.futures.ThreadPoolExecutor(connections, "invoke-endpoint")

    async def ready(self) -> None:
        """The endpoint must exist and serve (DescribeEndpoint), else nothing is sent."""
        import botocore.exceptions

        from vllm_sagemaker.deploy.base import aws_errors, aws_lines

        try:
            answer = await self._call(self.control.describe_endpoint, EndpointName=self.name)
        except Exception as error:
            if isinstance(error, botocore.exceptions.ClientError) and aws_errors.missing(error):
                where = self.control.meta.region_name
                raise invoke.NotReady(aws_lines.no_endpoint(self.name, where)) from None
            told = aws_lines.aws_line(error)
            if told is None:
                raise
            raise invoke.NotReady(f"endpoint {self.name}: {told}") from None
        status = answer["EndpointStatus"]
        if status not in SERVING:
            raise invoke.NotReady(f"endpoint {self.name} is {status}, not InService")

    async def invoke(self, body: bytes) -> bytes:
        params = {
            "EndpointName": self.name,
            "Body": body,
            "ContentType": JSON_LINES,
            "Accept": JSON_LINES,
            "CustomAttributes": BATCH_WORK_ATTRIBUTE,
        }
        if self.component:
            params["InferenceComponentName"] = self.component
        import botocore.exceptions

        from vllm_sagemaker.deploy.base import aws_lines, credentials

        async def attempt() -> bytes:
            try:
                answer = await self._call(self.runtime.invoke_endpoint, **params)
                return await asyncio.get_running_loop().run_in_executor(
                    self.pool, answer["Body"].read
                )
            except Exception as error:
                if credentials.cannot_ask(error):  # none, refused, or expired during the run
                    raise invoke.InvocationFailed(str(aws_lines.aws_line(error))) from None
                if isinstance(error, botocore.exceptions.ClientError):
                    raise classify(error) from None
                if isinstance(
                    error,
                    (botocore.exceptions.ConnectionError, botocore.exceptions.HTTPClientError),
                ):
                    raise invoke.Retryable(str(error)) from None
                raise

        return await invoke.with_retries(attempt, self.retries, self.pace)

    async def _call(self, operation: Any, **params: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(
            self.pool, lambda: operation(**params)
        )

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
