"""The CPU image, run as SageMaker runs it (tests/support/containers.py): no network, the model
read-only,
podman's default 64 MB /dev/shm, SIGTERM to PID 1; whatever the image lacks is one line at start.

`make test` builds the image first (`make image`); these tests run what it built.
"""

import hashlib
import json
import sys
from pathlib import Path

import httpx
import pytest

from tests.support import cli, containers, make_image, processes
from tests.support.containers import ENGINE_ENV
from tests.support.json_lines import parse_lines
from tests.support.servers import free_port

RESTARTED = "starting it again"
KEYED = {"SM_VLLM_API_KEY": "image-test-key"}
# What SageMaker's scraper finds: vLLM's own series (AWS's dashboards read them) and ours.
SCRAPED = (
    "vllm:num_requests_waiting",
    "vllm_sagemaker:batch_window",
    "vllm_sagemaker:server_restarts",
)


def test_the_embedder_with_no_network_and_64_mb_of_shared_memory(models: dict[str, Path]) -> None:
    """The embedder of `make serve`, from /opt/ml/model alone, with an API key: inside the
    container, on port 8080, what SageMaker calls without a key answers (/ping,
    /execution-parameters, and /metrics as its scraper reads it, vLLM's series and ours) and
    /invocations refuses a caller without the key (Serverless's image test has the embedding
    answered); SIGTERM stops it by itself within 30 s."""
    with containers.running(models["embed"], {**ENGINE_ENV, **KEYED}) as container:
        container.wait_ready()
        status, body = container.inside("/invocations", {"input": ["A cat sits on the mat"]})
        assert status == 401, body
        status, body = container.inside("/metrics")
        assert status == 200, body
        for series in SCRAPED:
            assert f"\n{series}" in body, f"{series} not on /metrics"
        status, body = container.inside("/execution-parameters")
        assert status == 200, body
        assert json.loads(body)["BatchStrategy"] == "MULTI_RECORD"
        log = container.logs()
        # What the image lacks is said once at start and taken care of: no compiler (eager),
        # /dev/shm too small for the multiprocess executor's queues (one process).
        assert "serve: no C++ compiler" in log
        assert "serve: /dev/shm has" in log and "(VLLM_ENABLE_V1_MULTIPROCESSING=0)" in log
        assert container.stop() == 0, container.logs()[-4000:]
        log = container.logs()
    assert "serve: SIGTERM: stopping vLLM" in log
    assert "killing it" not in log and RESTARTED not in log


def test_a_chat_model_answers_and_runs_a_transform_job(
    models: dict[str, Path], tmp_path: Path
) -> None:
    """The tiny chat model on the host's network: chat with logprobs (vLLM compiles their count
    with torch.compile, which has no compiler in the image), then a Batch Transform job with the
    client's `transform`, lines in order."""
    port = free_port()
    with containers.running(models["chat"], ENGINE_ENV, port=port) as container:
        container.wait_ready()
        chat = {
            "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 4,
            "logprobs": True,
            "top_logprobs": 2,
        }
        answer = httpx.post(container.url + "/invocations", json=chat, timeout=120)
        assert answer.status_code == 200, answer.text
        assert len(answer.json()["choices"][0]["logprobs"]["content"]) == 4
        records = [{"prompt": f"Record {i}", "max_tokens": 3, "min_tokens": 3} for i in range(40)]
        (tmp_path / "in").mkdir()
        (tmp_path / "in" / "records.jsonl").write_text(
            "".join(json.dumps(record) + "\n" for record in records)
        )
        done = cli.run(
            "transform",
            "--endpoint",
            container.url,
            *cli.options(
                input=str(tmp_path / "in"),
                output=str(tmp_path / "out"),
                content_type="application/jsonlines",
                split_type="Line",
                assemble_with="Line",
                batch_strategy="MultiRecord",
            ),
            text=True,
        )
        assert done.returncode == 0, done.stderr
        out = parse_lines((tmp_path / "out" / "records.jsonl.out").read_text())
        assert len(out) == 40
        assert all(line["usage"]["completion_tokens"] == 3 for line in out)
        assert container.stop() == 0, container.logs()[-4000:]


@pytest.mark.parametrize(
    ("case", "env", "entrypoint", "line"),
    [
        (
            "a library the image lacks",
            {},
            ["sh", "-c", "rm /usr/lib/*/libnuma.so.1* && exec serve serve"],
            "serve: vLLM's CPU engine needs libnuma.so.1, which the loader cannot find: "
            "install libnuma1 (Debian, Ubuntu)",
        ),
        (
            "two CPU workers in 64 MB of /dev/shm",
            {"SM_VLLM_TENSOR_PARALLEL_SIZE": "2"},
            [],
            "MiB for 2 CPU workers: give the container more shared memory (docker run "
            "--shm-size), or run one worker",
        ),
    ],
)
def test_what_the_image_lacks_is_one_line_and_an_exit(
    models: dict[str, Path], case: str, env: dict[str, str], entrypoint: list[str], line: str
) -> None:
    """Before vLLM starts: one line naming what to install or pass, a non-zero exit, no restart."""
    with containers.running(
        models["embed"], {**ENGINE_ENV, **env}, entrypoint=entrypoint
    ) as container:
        status = container.wait_exit(timeout=120)
        log = container.logs()
    assert status == 2, log
    said = [text for text in log.splitlines() if line in text]
    assert len(said) == 1, f"{case}:\n{log}"
    assert RESTARTED not in log and "APIServer" not in log


def test_the_image_keeps_none_of_the_build_s_pip_settings() -> None:
    """The machine's pip settings were lent to the build, not copied into the image: pip there
    has no settings; a folder the build was lent is absent or an empty mount point, and a file
    is absent, empty or the image's own (the CA bundle of its base)."""
    listing = processes.run([sys.executable, "-m", "pip", "config", "list"], text=True).stdout
    _, lent = make_image.pip_settings(listing)
    script = (
        'pip config list; for p in "$@"; do if [ -d "$p" ]; then ls -A "$p"; '
        'elif [ -s "$p" ]; then sha256sum "$p" | cut -d" " -f1; fi; done'
    )
    done = containers.podman(
        "run",
        "--rm",
        *containers.PODMAN_RUN[2:],
        "--entrypoint",
        "sh",
        containers.IMAGE,
        "-c",
        script,
        "sh",
        *lent,
    )
    assert done.returncode == 0, done.stderr
    files = [Path(path) for path in lent if Path(path).is_file()]
    on_host = {hashlib.sha256(path.read_bytes()).hexdigest() for path in files}
    said = done.stdout.splitlines()
    # Nothing but the digests of files of the image's own: no pip setting, nothing in a lent
    # folder, no lent file's bytes.
    assert all(len(line) == 64 for line in said), said
    assert not set(said) & on_host
