"""SageMaker inference components (control plane) and their Application Auto Scaling, which
moto 5.2.5 lacks, served in front of moto: boto3 reaches it through AWS_ENDPOINT_URL_SAGEMAKER
and AWS_ENDPOINT_URL_APPLICATION_AUTO_SCALING, every other service still goes to moto.

Every call to either service is checked first against botocore's own service model
(`service_model`), as AWS checks it: 400 `{"__type": "ValidationException", "message": ...}`,
which botocore reads as the error code. Then the service's handlers answer it (SageMaker's:
`inference_components` and `endpoints`; Application Auto Scaling's: `autoscaling`), or moto
does. `State` (`common`) is what the emulator holds, every call it received (operation,
parameters), and `fail_next` makes the next call of an operation fail with a given AWS error.
"""

import contextlib
import copy
import http.server
import json
import re
import uuid
from collections.abc import Iterator

import httpx

from tests.support.aws import REGION
from tests.support.components.autoscaling import AutoScaling
from tests.support.components.common import Answer, Calls, Forward, Refused, State, invalid
from tests.support.components.inference_components import SageMaker
from tests.support.local_http import HOP_BY_HOP, TARGET, forwarded, serving
from tests.support.service_model import request_problem

# A request's region, from its SigV4 credential scope.
SCOPE = re.compile(r"Credential=[^/]+/\d{8}/(?P<region>[^/]+)/")
JSON = "application/x-amz-json-1.1"


class Emulator:
    """Both services' handlers over one State, and a client to moto (its connections kept)."""

    def __init__(self, moto: str) -> None:
        self.moto = moto
        self.state = State()
        # By the X-Amz-Target prefix of each service's calls (botocore's `targetPrefix`): its
        # name in botocore and its handlers.
        self.services: dict[str, tuple[str, Calls]] = {
            "SageMaker": ("sagemaker", SageMaker(self.state, moto)),
            "AnyScaleFrontendService": ("application-autoscaling", AutoScaling(self.state)),
        }
        self.http = httpx.Client(timeout=60)

    def answer(self, target: str, params: Answer, region: str, forward: Forward) -> Answer | None:
        """The emulator's answer to the call, or None when moto's answer is the answer."""
        prefix, _, operation = target.rpartition(".")
        service, calls = self.services[prefix]
        with self.state.lock:
            self.state.calls.append((operation, copy.deepcopy(params)))
            failure = self.state.failures.pop(operation, None)
        if failure is not None:
            raise failure
        problem = request_problem(service, operation, params)
        if problem is not None:
            raise invalid(problem)
        calls.region = region
        return calls.handle(operation, params, forward)


def _handler(emulator: Emulator) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body leave at once, not 40 ms apart

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            headers = forwarded(self.headers)

            def forward() -> httpx.Response:
                return emulator.http.post(emulator.moto + self.path, content=body, headers=headers)

            scope = SCOPE.search(self.headers.get("Authorization", ""))
            region = scope["region"] if scope else REGION
            try:
                answer = emulator.answer(
                    self.headers.get(TARGET, ""), json.loads(body or b"{}"), region, forward
                )
            except Refused as refusal:
                error = {"__type": refusal.code, "message": refusal.message}
                self.reply(400, json.dumps(error).encode(), {"Content-Type": JSON})
                return
            if answer is not None:
                self.reply(200, json.dumps(answer).encode(), {"Content-Type": JSON})
                return
            reply = forward()
            kept = {
                name: value
                for name, value in reply.headers.items()
                if name.lower() not in HOP_BY_HOP
            }
            self.reply(reply.status_code, reply.content, kept)

        def reply(self, status: int, content: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("x-amzn-RequestId", str(uuid.uuid4()))
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

    return Handler


@contextlib.contextmanager
def components_emulator(moto_url: str) -> Iterator[tuple[str, State]]:
    """The emulator in front of the moto server at `moto_url`: its URL and its State."""
    emulator = Emulator(moto_url)
    with emulator.http, serving(_handler(emulator)) as url:
        yield url, emulator.state
