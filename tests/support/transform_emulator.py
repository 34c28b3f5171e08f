"""Transform jobs that do their work, in front of moto (whose jobs are `Completed` at once and
write nothing), played from SageMaker's documented behaviour, not from the project's runner.

Every SageMaker API call is forwarded to the moto server. A `CreateTransformJob` that moto
accepts is also run, on a thread, against one of the given containers (in turn), reading and
writing moto's S3, as the CreateTransformJob, TransformInput/Output and ModelClientConfig
references and "Custom Inference Code with Batch Transform" describe: wait for `GET /ping` 200;
read `GET /execution-parameters` if there is one (the job's MaxConcurrentTransforms,
MaxPayloadInMB and BatchStrategy first, then the container's, then SageMaker's defaults); cut
each object under the S3Uri prefix into whole lines (SplitType Line), sent with their LF, as
many as fit in MaxPayloadInMB (MultiRecord) or one (SingleRecord) a request; POST them to
`/invocations` with the job's ContentType and Accept, at most MaxConcurrentTransforms in flight,
each tried up to InvocationsMaxRetries more times on a non-2xx or no answer; write
`<input-name>.out` under S3OutputPath only when all of an object's requests succeeded, the
answers in input order, each of their lines followed by LF (AssembleWith Line). Until it ends,
`DescribeTransformJob` says `InProgress`, then `Completed`, or `Failed` with a `FailureReason`
(an object failed). A job whose input names a shard in `fail` fails without output, as a job
whose container failed does. `on_create` is called with each job's name before it runs.
"""

import contextlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import boto3
import httpx

from tests.support.local_http import Rewrite, in_front_of_moto, serving

MB = 1024 * 1024
DEFAULTS: dict[str, Any] = {
    "MaxConcurrentTransforms": 1,
    "MaxPayloadInMB": 6,
    "BatchStrategy": "MultiRecord",
}
MAX_RETRIES = 3  # ModelClientConfig's defaults
TIMEOUT_S = 600
PING_WAIT_S = 120


class JobFailed(Exception):
    """The job's FailureReason."""


def s3_parts(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


def lines(body: bytes) -> list[bytes]:
    """The lines of `body` without their LF (a last LF ends a line, it starts none)."""
    parts = body.split(b"\n")
    return parts[:-1] if parts[-1] == b"" else parts


def mini_batches(records: list[bytes], limit: int, multi_record: bool) -> list[bytes]:
    """Request bodies of whole records, each followed by LF, none over `limit` bytes."""
    bodies: list[bytearray] = []
    for record in (line + b"\n" for line in records):
        if len(record) > limit:
            raise JobFailed(f"a record of {len(record)} bytes is over MaxPayloadInMB")
        if bodies and multi_record and len(bodies[-1]) + len(record) <= limit:
            bodies[-1] += record
        else:
            bodies.append(bytearray(record))
    return [bytes(body) for body in bodies]


def execution_parameters(client: httpx.Client) -> dict[str, Any]:
    """The container's /execution-parameters, or nothing when it has none."""
    with contextlib.suppress(httpx.HTTPError, ValueError):
        reply = client.get("/execution-parameters", timeout=10)
        answer = reply.json() if reply.status_code == 200 else None
        if isinstance(answer, dict):
            return answer
    return {}


def wait_for_ping(client: httpx.Client) -> None:
    deadline = time.monotonic() + PING_WAIT_S
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if client.get("/ping", timeout=2).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise JobFailed("ClientError: the container did not pass the ping health check")
        time.sleep(0.5)


def run_job(params: dict[str, Any], container: str, moto: str) -> None:
    """Run one CreateTransformJob's `params` against `container`; JobFailed when it fails."""
    s3 = boto3.session.Session().client("s3", endpoint_url=moto)
    source, output = params["TransformInput"], params["TransformOutput"]
    bucket, prefix = s3_parts(source["DataSource"]["S3DataSource"]["S3Uri"])
    out_bucket, out_prefix = s3_parts(output["S3OutputPath"])
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    keys = [item["Key"] for page in pages for item in page.get("Contents", [])]
    if not keys:
        raise JobFailed(f"ClientError: no input object under s3://{bucket}/{prefix}")
    config = params.get("ModelClientConfig", {})
    timeout = config.get("InvocationsTimeoutInSeconds", TIMEOUT_S)
    retries = config.get("InvocationsMaxRetries", MAX_RETRIES)
    headers = {"Content-Type": source.get("ContentType"), "Accept": output.get("Accept")}
    headers = {name: value for name, value in headers.items() if value}
    failed: list[str] = []
    with httpx.Client(base_url=container.rstrip("/"), timeout=timeout) as client:
        wait_for_ping(client)
        answered = execution_parameters(client)
        chosen = {name: params.get(name) or answered.get(name) or d for name, d in DEFAULTS.items()}

        def invoke(body: bytes) -> bytes:
            problem = ""
            for _ in range(retries + 1):
                try:
                    reply = client.post("/invocations", content=body, headers=headers)
                except httpx.HTTPError as error:
                    problem = f"{type(error).__name__}: {error}"
                    continue
                if reply.is_success:
                    return reply.content
                problem = f"the container answered {reply.status_code}: {reply.text[:300]}"
            raise JobFailed(problem)

        with ThreadPoolExecutor(int(chosen["MaxConcurrentTransforms"])) as pool:
            for key in keys:
                body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
                limit = int(chosen["MaxPayloadInMB"]) * MB
                multi = chosen["BatchStrategy"] == "MultiRecord"
                try:
                    split = source.get("SplitType") == "Line"
                    requests = mini_batches(lines(body), limit, multi) if split else [body]
                    answers = list(pool.map(invoke, requests))
                except JobFailed as error:
                    failed.append(f"s3://{bucket}/{key}: {error}")
                    continue
                if output.get("AssembleWith") == "Line":
                    answers = [b"".join(line + b"\n" for line in lines(a)) for a in answers]
                relative = key[prefix.rfind("/") + 1 :]
                target = f"{out_prefix.rstrip('/')}/{relative}.out".lstrip("/")
                s3.put_object(Bucket=out_bucket, Key=target, Body=b"".join(answers))
    if failed:
        raise JobFailed("ClientError: " + "; ".join(failed))


@dataclass
class Fleet:
    moto: str
    containers: list[str]
    fail: set[str] = field(default_factory=set)
    on_create: Callable[[str], None] | None = None
    created: Counter[str] = field(default_factory=Counter)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, params: dict[str, Any]) -> None:
        name = params["TransformJobName"]
        source = params["TransformInput"]["DataSource"]["S3DataSource"]["S3Uri"]
        shard = source.rstrip("/").rsplit("/", 1)[-1]
        with self.lock:
            slot = sum(self.created.values())
            self.created[shard] += 1
            self.jobs[name] = {
                "TransformJobStatus": "InProgress",
                "TransformStartTime": time.time(),
            }
        container = self.containers[slot % len(self.containers)]

        def work() -> None:
            reason = None
            try:
                if shard in self.fail:
                    raise JobFailed("ClientError: the container failed (injected by the test)")
                run_job(params, container, self.moto)
            except JobFailed as error:
                reason = str(error)
            except Exception as error:  # an emulator bug: say so rather than hang the test
                reason = f"InternalServerError: the emulator failed: {error!r}"
            ended: dict[str, Any] = {
                "TransformJobStatus": "Failed" if reason else "Completed",
                "TransformEndTime": time.time(),
                **({"FailureReason": reason} if reason else {}),
            }
            with self.lock:
                self.jobs[name].update(ended)

        if self.on_create is not None:
            self.on_create(name)
        threading.Thread(target=work, daemon=True).start()


def _rewrite(fleet: Fleet) -> Rewrite:
    """What the emulator adds to moto's answers: a transform job that runs, and its state."""

    def rewrite(operation: str, params: dict[str, Any], status: int, content: bytes) -> bytes:
        if status == 200 and operation == "CreateTransformJob":
            fleet.start(params)
        elif status == 200 and operation == "DescribeTransformJob":
            with fleet.lock:
                state = dict(fleet.jobs.get(params["TransformJobName"], {}))
            content = json.dumps({**json.loads(content), **state}).encode()
        return content

    return rewrite


def transform_emulator(fleet: Fleet) -> contextlib.AbstractContextManager[str]:
    """`fleet` served on a free port of 127.0.0.1; entering gives its URL."""
    return serving(in_front_of_moto(fleet.moto, _rewrite(fleet)))
