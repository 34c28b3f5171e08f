"""Transform jobs that do their work, in front of moto (whose jobs are `Completed` at once and
write nothing).

Every SageMaker API call is forwarded to the moto server. A `CreateTransformJob` that moto
accepts is also run, on a thread, by the local transform runner against one of the given
containers (in turn), reading and writing moto's S3; until it ends, `DescribeTransformJob` says
`InProgress`, then `Completed`, or `Failed` with a reason. A job whose input names a shard in
`fail` fails without output, as a transform job whose container failed does. `on_create` is
called with each job's name once it exists, before it runs.
"""

import asyncio
import contextlib
import http.server
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.support.local_http import serving
from vllm_sagemaker.deploy.fleet.jobs import TransformSettings, transform_job
from vllm_sagemaker.deploy.transform.runner import transform_all

TARGET = "X-Amz-Target"


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
        output = params["TransformOutput"]["S3OutputPath"]
        shard = source.rstrip("/").rsplit("/", 1)[-1]
        with self.lock:
            slot = sum(self.created.values())
            self.created[shard] += 1
            self.jobs[name] = {
                "TransformJobStatus": "InProgress",
                "TransformStartTime": time.time(),
            }
        endpoint = self.containers[slot % len(self.containers)]
        settings = TransformSettings(params["MaxPayloadInMB"], params["MaxConcurrentTransforms"])
        job = transform_job(endpoint, source, output, settings)

        def work() -> None:
            if shard in self.fail:
                failed = {source: "ClientError: the container failed (injected by the test)"}
            else:
                failed = asyncio.run(transform_all(job, quiet=True))
            ended: dict[str, Any] = {
                "TransformJobStatus": "Failed" if failed else "Completed",
                "TransformEndTime": time.time(),
            }
            if failed:
                ended["FailureReason"] = "; ".join(failed.values())
            with self.lock:
                self.jobs[name].update(ended)

        if self.on_create is not None:
            self.on_create(name)
        threading.Thread(target=work, daemon=True).start()


def _handler(fleet: Fleet) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
            reply = httpx.post(fleet.moto + self.path, content=body, headers=headers, timeout=60)
            content = reply.content
            operation = self.headers.get(TARGET, "").rsplit(".", 1)[-1]
            params = json.loads(body or b"{}")
            if reply.status_code == 200 and operation == "CreateTransformJob":
                fleet.start(params)
            elif reply.status_code == 200 and operation == "DescribeTransformJob":
                with fleet.lock:
                    state = dict(fleet.jobs.get(params["TransformJobName"], {}))
                content = json.dumps({**json.loads(content), **state}).encode()
            self.send_response(reply.status_code)
            for name in ("Content-Type", "x-amzn-RequestId"):
                if name in reply.headers:
                    self.send_header(name, reply.headers[name])
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

    return Handler


def transform_emulator(fleet: Fleet) -> contextlib.AbstractContextManager[str]:
    """`fleet` served on a free port of 127.0.0.1; entering gives its URL."""
    return serving(_handler(fleet))
