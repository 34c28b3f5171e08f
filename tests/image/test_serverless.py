"""The CPU image run as SageMaker Serverless Inference may run it (../shared/reference/
serverless.md, docs/serverless.md): any non-root uid, a read-only root with only /tmp
writable, no /dev/shm, memory as a hard cap with no swap, one CPU of quota (the host's CPUs and
memory still show in `nproc` and /proc/meminfo), the model read-only, no network, and the
environment `deploy endpoint --serverless` gives the model.

`make test` builds the image first (`make image`); these tests run what it built.
"""

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support import containers, model_factory
from tests.support.containers import Container

# Serverless Inference's ceilings: the first /ping 200 within 3 minutes of the start, each
# invocation within 60 s (the request from inside the container gives up after 60 s).
COLD_START_S = 180
SERVERLESS_BODY_BYTES = 4 * 1024 * 1024
RESTARTED = "starting it again"
# What podman itself adds to a container's root: the model's mount point and its parents, and
# /etc (the user's passwd entry, hosts).
PODMAN_OWN = {"/etc", "/opt", "/opt/ml", containers.MODEL_DIR}


@contextmanager
def serving(model: Path, memory_mb: int) -> Iterator[Container]:
    """The image serving `model` in the sandbox, ready within Serverless's 3 minutes."""
    with containers.running(
        model, containers.serverless_env(), options=containers.serverless_sandbox(memory_mb)
    ) as container:
        container.wait_ready()
        # A deadline that is the behaviour (Serverless's 3 minutes), with a margin that holds on
        # a machine several times slower: 16-18 s on the suite's 2 cores, 41 s with another
        # suite busy beside it (docs/serverless.md, "Cold start").
        assert time.monotonic() - container.started < COLD_START_S, container.logs()[-4000:]
        yield container
        assert container.stop() == 0, container.logs()[-4000:]
        log = container.logs()
        assert "serve: SIGTERM: stopping vLLM" in log
        assert RESTARTED not in log and "killing it" not in log
        # Nothing was written outside /tmp (the root is read-only; this says nothing was
        # even tried where it would have failed).
        assert "Read-only file system" not in log and "Permission denied" not in log, log
        changed = containers.podman("diff", container.name).stdout.split()[1::2]
        assert set(changed) <= PODMAN_OWN, changed


def oversized(container: Container) -> tuple[int, str]:
    """A request that says it is one byte over Serverless's 4 MB, made inside the container:
    (status, body) of the answer, which comes before any of the body is sent."""
    script = (
        "import http.client, json\n"
        "connection = http.client.HTTPConnection('127.0.0.1', 8080, timeout=60)\n"
        "connection.putrequest('POST', '/invocations')\n"
        "connection.putheader('Content-Type', 'application/json')\n"
        f"connection.putheader('Content-Length', '{SERVERLESS_BODY_BYTES + 1}')\n"
        "connection.endheaders()\n"
        "answer = connection.getresponse()\n"
        "print(json.dumps([answer.status, answer.read().decode()]))\n"
    )
    done = containers.podman("exec", container.name, "python3", "-c", script)
    assert done.returncode == 0, done.stderr
    status, text = json.loads(done.stdout)
    return int(status), str(text)


def test_the_embedder_serves_in_2048_mb(models: dict[str, Path]) -> None:
    """Embeddings through /invocations; a body over Serverless's 4 MB is 413; the KV cache
    and the threads were sized from the cgroup, the caches went to /tmp, and the engine ran in
    one process with no /dev/shm."""
    with serving(models["embed"], 2048) as container:
        status, body = container.inside("/invocations", {"input": ["A cat sits on the mat"]})
        assert status == 200, body
        assert len(json.loads(body)["data"][0]["embedding"]) == 384
        status, body = oversized(container)
        assert status == 413, body
        error = json.loads(body)["error"]
        assert error["code"] == "payload_too_large" and "4 MiB" in error["message"], body
        log = container.logs()
    assert "memory is capped at 2,048 MiB (its cgroup), so the KV cache gets" in log
    assert "HOME=/tmp" in log and "VLLM_ENABLE_V1_MULTIPROCESSING=0" in log
    assert "no_shm path=/dev/shm lock=threading.Lock" in log


def test_a_chat_model_serves_in_6144_mb(models: dict[str, Path], tmp_path: Path) -> None:
    """Chat and a streamed chat through /invocations."""
    chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "min_tokens": 4}
    with serving(model_factory.copy_with_mode(models["chat"], tmp_path, 0o644), 6144) as container:
        status, body = container.inside("/invocations", chat)
        assert status == 200, body
        assert json.loads(body)["usage"]["completion_tokens"] == 4
        status, body = container.inside("/invocations", {**chat, "stream": True})
        assert status == 200, body
        events = [line for line in body.splitlines() if line.startswith("data: ")]
        assert events[-1] == "data: [DONE]", body
        assert len(events) >= 3, body


def test_a_model_this_user_cannot_read_is_one_line(models: dict[str, Path], tmp_path: Path) -> None:
    """The tiny chat model with owner-only files, run as another user: serve names a file and
    the fix, and exits 2 before vLLM starts."""
    private = model_factory.copy_with_mode(models["chat"], tmp_path, 0o600)
    with containers.running(
        private, containers.serverless_env(), options=containers.serverless_sandbox(2048)
    ) as container:
        status = container.wait_exit(timeout=COLD_START_S)
        log = container.logs()
    assert status == 2, log
    (said,) = [line for line in log.splitlines() if "cannot read the model's" in line]
    assert "uid 12345" in said and "config.json" in said and "chmod -R a+rX" in said
    assert RESTARTED not in log


def test_a_model_that_does_not_fit_stops_at_once_with_one_line(
    models: dict[str, Path],
) -> None:
    """1024 MB cannot hold vLLM's two processes: one line naming what the container has, what
    the model needs and the size that would work; exit 2, no restart."""
    with containers.running(
        models["embed"], containers.serverless_env(), options=containers.serverless_sandbox(1024)
    ) as container:
        status = container.wait_exit(timeout=COLD_START_S)
        log = container.logs()
    assert status == 2, log
    said = [line for line in log.splitlines() if "does not fit in the container's" in line]
    assert len(said) == 1, log
    assert "1,024 MiB" in said[0] and "MemorySizeInMB 2048 or more" in said[0]
    assert RESTARTED not in log and "APIServer" not in log


@pytest.mark.parametrize("memory_mb", [256])
def test_a_kernel_oom_kill_is_named_in_one_line(memory_mb: int, tmp_path: Path) -> None:
    """serve's supervisor over a process the kernel kills for memory inside the cgroup (a
    stand-in for an engine that outgrew its estimate): one line says so."""
    script = (
        "from vllm_sagemaker.container.supervisor import Supervisor\n"
        "from vllm_sagemaker.core.restart_policy import RestartPolicy\n"
        "import os, sys\n"
        "command = [sys.executable, '-c', 'x = bytearray(1 << 30)']\n"
        "sys.exit(Supervisor(command, dict(os.environ), RestartPolicy(max_restarts=0)).run())\n"
    )
    done = containers.podman(
        "run",
        "--rm",
        *containers.PODMAN_RUN[2:],
        "--network",
        "none",
        *containers.serverless_sandbox(memory_mb),
        "--entrypoint",
        "python3",
        containers.IMAGE,
        "-c",
        script,
        cwd=tmp_path,
    )
    said = [line for line in done.stderr.splitlines() if "OOM killer" in line]
    assert done.returncode == 1, done.stderr
    assert len(said) == 1, done.stderr
    assert f"do not fit in its limit of {memory_mb:,} MiB" in said[0]
