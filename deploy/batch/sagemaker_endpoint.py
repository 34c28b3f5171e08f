"""`vllm-sagemaker batch --sagemaker-endpoint`: mini-batches through InvokeEndpoint (boto3's
credentials) with the container's rules (`deploy.base.invocations`)."""

import asyncio
import concurrent.futures
from typing import Any

import boto3
import botocore.config
import botocore.exceptions

from vllm_sagemaker.core.config import API_KEY_VAR
from vllm_sagemaker.core.content_types import JSON_LINES
from vllm_sagemaker.core.routing import BATCH_WORK_ATTRIBUTE
from vllm_sagemaker.deploy.base import credentials, error_answers, invocations
from vllm_sagemaker.deploy.base.errors import line_of
from vllm_sagemaker.deploy.base.pace import Pace

# Errors of the runtime API worth another try: the service or the model is busy or starting.
RETRY_ERRORS = frozenset(
    {"ThrottlingException", "ModelNotReadyException", "ServiceUnavailable", "InternalFailure"}
    | {"InternalDependencyException"}
)
# Failures of the connection worth another try.
TRANSIENT = (botocore.exceptions.ConnectionError, botocore.exceptions.HTTPClientError)
SERVING = frozenset({"InService", "Updating", "SystemUpdating"})


def classify(error: botocore.exceptions.ClientError) -> Exception:
    """An InvokeEndpoint error as `invoke`'s: retry, answer with error lines, or stop."""
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
            return invocations.Throttled(f"the model answered HTTP 429: {original}")
        if status == 401:
            return invocations.Unauthorized(
                "the endpoint's container wants an API key (HTTP 401), which InvokeEndpoint "
                f"cannot send: on SageMaker, leave {API_KEY_VAR} unset (SigV4 guards the endpoint)"
            )
        if status in invocations.RETRY_STATUSES or status == 0:
            return invocations.Retryable(f"the model answered HTTP {status}: {original}")
        return invocations.NotRetryable(invocations.HttpStatus(status), original)
    if code == "ThrottlingException":
        return invocations.Throttled(f"{code}: {message}")
    if error_answers.no_capacity(message):
        return invocations.NoCapacity(f"{code}: {message}")
    if code in RETRY_ERRORS:
        return invocations.Retryable(f"{code}: {message}")
    return invocations.InvocationFailed(f"{code}: {message}")


class Endpoint:
    """A SageMaker endpoint (or one inference component on it) through `sagemaker-runtime`,
    boto3's retries off: retried as the container's calls are, on a pool of threads as large as
    `pace` lets calls be in flight; a component scaling from zero is waited for."""

    def __init__(
        self,
        name: str,
        region: str | None,
        inference_component: str | None,
        retries: int,
        timeout_s: float,
        pace: Pace,
    ) -> None:
        config = botocore.config.Config(
            region_name=region,
            read_timeout=timeout_s,
            connect_timeout=10,
            retries={"total_max_attempts": 1},
            max_pool_connections=pace.most,
        )
        self.name = name
        try:
            self.runtime = boto3.client("sagemaker-runtime", config=config)
            self.control = boto3.client("sagemaker", config=config)
        except botocore.exceptions.BotoCoreError as error:
            raise invocations.NotReady(f"endpoint {name}: {line_of(error)}") from error
        self.component = inference_component
        self.from_zero = invocations.FromZero(error_answers.from_zero(name, inference_component))
        self.retries = retries
        self.pace = pace
        self.pool = concurrent.futures.ThreadPoolExecutor(pace.most, "invoke-endpoint")

    async def ready(self) -> None:
        """The endpoint must exist and serve (DescribeEndpoint), else nothing is sent."""
        try:
            answer = await self._call(self.control.describe_endpoint, EndpointName=self.name)
        except Exception as error:
            if isinstance(error, botocore.exceptions.ClientError) and error_answers.missing(error):
                where = self.control.meta.region_name
                raise invocations.NotReady(error_answers.no_endpoint(self.name, where)) from None
            told = line_of(error)
            if told is None:
                raise
            raise invocations.NotReady(f"endpoint {self.name}: {told}") from None
        status = answer["EndpointStatus"]
        if status not in SERVING:
            raise invocations.NotReady(f"endpoint {self.name} is {status}, not InService")

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

        async def attempt() -> bytes:
            try:
                answer = await self._call(self.runtime.invoke_endpoint, **params)
                return await self._call(answer["Body"].read)
            except Exception as error:
                if credentials.cannot_ask(error):  # none, refused, or expired during the run
                    raise invocations.InvocationFailed(str(line_of(error))) from None
                if isinstance(error, botocore.exceptions.ClientError):
                    raise classify(error) from None
                if isinstance(error, TRANSIENT):
                    raise invocations.Retryable(str(error)) from None
                raise

        return await invocations.with_retries(attempt, self.retries, self.pace, self.from_zero)

    async def _call(self, operation: Any, **params: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(
            self.pool, lambda: operation(**params)
        )

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
