"""The image run as SageMaker runs it, for tests: `podman run IMAGE serve` as root, the model
read-only at /opt/ml/model, configuration by environment only, podman's default 64 MB /dev/shm,
SIGTERM to PID 1 and SIGKILL 30 s later.

`make test` builds the image first (`make image`). podman runs it with runc: this machine's
default runtime (crun) cannot set its resource limits, and runc takes limits no higher than the
host's.
"""

import contextlib
import json
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support import waiting
from tests.support.servers import START_TIMEOUT_S
from vllm_sagemaker.deploy.image import build
from vllm_sagemaker.deploy.kit.plans.endpoint import endpoint_calls
from vllm_sagemaker.deploy.kit.plans.model import ModelSource
from vllm_sagemaker.deploy.kit.plans.scaling import metrics_env
from vllm_sagemaker.deploy.kit.plans.serverless import Serverless

# What `make image` builds (podman names a local image under localhost/).
IMAGE = "localhost/" + build.default_name("cpu")
# Small engines: the suite's other servers share the machine. Nothing says the hub is out of
# reach (no HF_HUB_OFFLINE): with no network, the model in /opt/ml/model must be enough.
ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}
PODMAN_RUN = [
    "podman",
    "run",
    "--runtime",
    "runc",
    "--ulimit",
    "nofile=20000:20000",
    "--ulimit",
    "nproc=8192:8192",
]
MODEL_DIR = "/opt/ml/model"
SAGEMAKER_PORT = 8080
# SageMaker's time between SIGTERM and SIGKILL.
STOP_GRACE_S = 30
# The embedder answers small requests; a model in the image's first start has more to do.
EXEC_TIMEOUT_S = 300
# A request made from inside the container (with no network, only its loopback reaches it):
# prints the status and the body.
_REQUEST = """
import json, sys, urllib.error, urllib.request
port, path, body = sys.argv[1], sys.argv[2], sys.argv[3]
data = body.encode() if body else None
request = urllib.request.Request(f"http://127.0.0.1:{port}" + path, data=data,
                                 headers={"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(request, timeout=60) as answer:
        status, text = answer.status, answer.read().decode()
except urllib.error.HTTPError as error:
    status, text = error.code, error.read().decode()
except OSError as error:
    status, text = 0, str(error)
print(json.dumps([status, text]))
"""


def serverless_sandbox(memory_mb: int) -> list[str]:
    """podman's options for SageMaker Serverless Inference's strictest sandbox (docs/
    serverless.md): any non-root uid, a read-only root with only /tmp writable, no /dev/shm,
    `memory_mb` as a hard cap with no swap, one CPU of quota."""
    return [
        "--read-only",
        "--read-only-tmpfs=false",
        "--tmpfs",
        "/tmp:rw,mode=1777",
        "--user",
        "12345:12345",
        "--ipc",
        "none",
        "--memory",
        f"{memory_mb}m",
        "--memory-swap",
        f"{memory_mb}m",
        "--cpus",
        "1",
    ]


def serverless_env() -> dict[str, str]:
    """The model's environment as `deploy endpoint --serverless 2048 --model-data ...` plans it
    (the model unpacked in /opt/ml/model, as here)."""
    name = "serverless-test"
    source = ModelSource(model_data="s3://bucket/model.tar.gz")
    env = metrics_env({}, name, None)
    create_model, *_ = endpoint_calls(name, IMAGE, source, Serverless(2048), env, "role")
    environment: dict[str, str] = create_model.params["PrimaryContainer"]["Environment"]
    return environment


def podman(
    *args: str, timeout: float = EXEC_TIMEOUT_S, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """podman with `args`; in `cwd` where it may leave a file (conmon writes `oom` in its working
    directory when the kernel killed a process of the container)."""
    return subprocess.run(
        ["podman", *args], capture_output=True, text=True, timeout=timeout, cwd=cwd
    )


@dataclass
class Container:
    """One container of the image, by name."""

    name: str
    # The host port it serves on when it shares the host's network (None: no network).
    port: int | None
    # When `podman run` was asked to start it (monotonic seconds).
    started: float

    @property
    def url(self) -> str:
        assert self.port is not None, f"{self.name} has no network"
        return f"http://127.0.0.1:{self.port}"

    def logs(self) -> str:
        done = podman("logs", self.name)
        return done.stdout + done.stderr

    def state(self) -> dict[str, Any]:
        found: list[dict[str, Any]] = json.loads(podman("inspect", self.name).stdout)
        state: dict[str, Any] = found[0]["State"]
        return state

    def inside(self, path: str, body: Any = None) -> tuple[int, str]:
        """A request to the container's port from inside it: (status, body); status 0 when
        nothing answered."""
        payload = json.dumps(body) if body is not None else ""
        port = str(self.port or SAGEMAKER_PORT)
        done = podman("exec", self.name, "python3", "-c", _REQUEST, port, path, payload)
        assert done.returncode == 0, done.stderr
        status, text = json.loads(done.stdout)
        return int(status), str(text)

    def wait_ready(self) -> None:
        """Until /ping answers 200 inside (fails when the container exits, with its log)."""

        def ready() -> bool:
            if not self.state()["Running"]:
                raise AssertionError(f"{self.name} exited:\n{self.logs()[-4000:]}")
            return self.inside("/ping")[0] == 200

        waiting.until(ready, START_TIMEOUT_S, lambda: f"{self.name} not ready:\n{self.logs()}", 1)

    def wait_exit(self, timeout: float) -> int:
        """Until the container exits by itself: its exit status."""
        waiting.until(lambda: not self.state()["Running"], timeout, f"{self.name} still runs", 0.5)
        return int(self.state()["ExitCode"])

    def stop(self) -> int:
        """SIGTERM to PID 1, SIGKILL STOP_GRACE_S later, as SageMaker stops a container: the exit
        status (137 when it had to be killed)."""
        podman("stop", "--time", str(STOP_GRACE_S), self.name, timeout=STOP_GRACE_S + 60)
        return int(self.state()["ExitCode"])


@contextlib.contextmanager
def running(
    model: Path,
    env: Mapping[str, str],
    *,
    port: int | None = None,
    options: Sequence[str] = (),
    entrypoint: Sequence[str] = (),
    image: str = IMAGE,
) -> Iterator[Container]:
    """A container of the image started as SageMaker starts one (`IMAGE serve`), `model`
    read-only at /opt/ml/model; with `port`, on the host's network serving there, else with no
    network at all. `entrypoint` replaces the image's (a test that changes the image first);
    `image` is the CPU image unless named. Removed at the end."""
    name = f"vllm-sagemaker-test-{uuid.uuid4().hex[:8]}"
    variables = dict(env)
    network = ["--network", "none"]
    if port is not None:
        network = ["--network", "host"]
        variables["SAGEMAKER_BIND_TO_PORT"] = str(port)
    argv = [*PODMAN_RUN, "-d", "--name", name, *network, "-v", f"{model}:{MODEL_DIR}:ro"]
    for key, value in variables.items():
        argv += ["-e", f"{key}={value}"]
    if entrypoint:
        argv += ["--entrypoint", json.dumps(list(entrypoint))]
    started = time.monotonic()
    try:
        done = subprocess.run([*argv, *options, image, "serve"], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        yield Container(name, port, started)
    finally:
        podman("rm", "-f", "--time", "0", name)
