"""`serve` weighs the model against the container's memory wherever its files are: on the Hub
(`HF_MODEL_ID`, read from a local stand-in at HF_ENDPOINT) or at an S3 prefix its weights stream
from (moto). A model that cannot fit stops `serve` at once with the documented line, before any
download or engine start; one that fits starts with the KV cache its weights leave; a read that
fails says so in one line and the start goes on.

`serve` runs in its own process with the cgroup's memory cap given (this machine has none) and
vLLM's start replaced by a line of its command: no engine starts here.
"""

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import boto3
import pytest

from tests.container.rules.test_fit_table import BGE_BASE, QWEN_3B, QWEN_15B, HubModel
from tests.support import processes
from tests.support.hub import SHA, Hub, Repo, hub
from vllm_sagemaker.container import cgroup, serve, system
from vllm_sagemaker.container.memory import KV_BYTES_FLAG, MIB, STREAMER

# `serve` under a memory cap of argv[1] MiB, printing vLLM's command instead of starting it.
CAPPED_SERVE = """
import json, sys
from vllm_sagemaker.container import cgroup, serve, supervisor
cap = int(sys.argv[1]) * 1024**2
cgroup.read = lambda *args: cgroup.Limits(memory_bytes=cap)
supervisor.Supervisor.run = lambda self: print(json.dumps(self.command), flush=True) or 0
sys.exit(serve.main([]))
"""
DOES_NOT_FIT = "serve: the model does not fit in the container's"
NOT_CHECKED = "serve: whether the model fits in memory is not checked: "
# A model whose one sequence of context (720 MiB of KV cache) fits 2048 MiB beside vLLM's
# processes and the headroom with 4 MiB of weights, and not with 32 MiB.
BORDER_CONFIG = {
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "hidden_size": 256,
    "max_position_embeddings": 720 * MIB // (2 * 4 * 4 * 64 * 2),
    "torch_dtype": "bfloat16",
}


def capped_serve(cap_mib: int, model_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SM_VLLM_", "HF_", "SAGEMAKER_", "PROCESS_", "VLLM_"))
    }
    return processes.run(
        [sys.executable, "-c", CAPPED_SERVE, str(cap_mib)],
        env={**clean, "SAGEMAKER_MODEL_DIR": str(model_dir), **env},
        text=True,
        timeout=300,
    )


def stopped(result: subprocess.CompletedProcess[str]) -> str:
    """The one line of a model that does not fit; nothing started."""
    assert result.returncode == 2, result.stderr
    assert result.stdout == "", "vLLM was started"
    (line,) = [line for line in result.stderr.splitlines() if line.startswith(DOES_NOT_FIT)]
    assert line == result.stderr.splitlines()[-1]
    return line


def started(result: subprocess.CompletedProcess[str]) -> list[str]:
    """vLLM's command, which `serve` would have started."""
    assert result.returncode == 0, result.stderr
    assert DOES_NOT_FIT not in result.stderr
    command: list[str] = json.loads(result.stdout)
    return command


def hub_repo(model: HubModel, token: str | None = None) -> Repo:
    """A model on the stand-in: its config and indexes as files, its other files as sizes."""
    files: dict[str, bytes | int] = {
        **model.files,
        "config.json": json.dumps(model.config).encode(),
    }
    for name, shards in model.indexes.items():
        files[name] = json.dumps(
            {"weight_map": {f"w{i}": s for i, s in enumerate(shards)}}
        ).encode()
    return Repo(files, token)


@pytest.fixture(scope="module")
def stand_in() -> Iterator[Hub]:
    with hub(
        {
            "Qwen/Qwen2.5-1.5B-Instruct": hub_repo(QWEN_15B),
            "BAAI/bge-base-en-v1.5": hub_repo(BGE_BASE),
            "acme/private-1.5b": hub_repo(QWEN_15B, token="hf_secret"),
            # Its shards, and a whole copy of them beside them that its index does not name.
            "acme/sharded-3b": hub_repo(
                replace(QWEN_3B, files={**QWEN_3B.files, "model.safetensors": 6_171_926_992})
            ),
        }
    ) as running:
        yield running


@pytest.fixture
def no_model(tmp_path: Path) -> Path:
    """An empty model directory: the model comes from HF_MODEL_ID or SM_VLLM_MODEL."""
    return tmp_path / "no-model"


def model_requests(stand_in: Hub, since: int) -> list[tuple[str, str, str]]:
    """The requests for models (huggingface_hub also asks the Hub for its own telemetry's
    /api/agent-harnesses when it builds its headers)."""
    return [
        request
        for request in stand_in.requests[since:]
        if request[1].startswith("/api/models/") or "/resolve/" in request[1]
    ]


def test_a_hub_model_too_big_stops_serve_before_any_download(stand_in: Hub, no_model: Path) -> None:
    """Qwen2.5-1.5B (2,944 MiB of weights, docs/serverless.md's table) in 4096 MiB."""
    since = len(stand_in.requests)
    result = capped_serve(
        4096, no_model, HF_MODEL_ID="Qwen/Qwen2.5-1.5B-Instruct", HF_ENDPOINT=stand_in.url
    )
    line = stopped(result)
    assert "weights 2,944 MiB" in line
    assert "Serverless Inference's MemorySizeInMB 6144 or more" in line
    assert [path for _, path, _ in model_requests(stand_in, since)] == [
        "/api/models/Qwen/Qwen2.5-1.5B-Instruct",
        f"/Qwen/Qwen2.5-1.5B-Instruct/resolve/{SHA}/config.json",
    ]


def test_a_hub_model_that_fits_starts_with_its_weights_counted_once(
    stand_in: Hub, no_model: Path
) -> None:
    """bge-base-en-v1.5 ships model.safetensors and pytorch_model.bin: counted once, it gets
    the table's 320 MiB of KV cache at 2048 MiB."""
    result = capped_serve(
        2048, no_model, HF_MODEL_ID="BAAI/bge-base-en-v1.5", HF_ENDPOINT=stand_in.url
    )
    command = started(result)
    assert command[command.index(KV_BYTES_FLAG) + 1] == str(320 * MIB)
    assert "weights 417 MiB" in result.stderr
    assert NOT_CHECKED not in result.stderr


def test_a_sharded_hub_model_counts_the_shards_its_index_names(
    stand_in: Hub, no_model: Path
) -> None:
    since = len(stand_in.requests)
    result = capped_serve(6144, no_model, HF_MODEL_ID="acme/sharded-3b", HF_ENDPOINT=stand_in.url)
    assert "weights 5,886 MiB" in stopped(result)
    paths = [path for _, path, _ in model_requests(stand_in, since)]
    assert f"/acme/sharded-3b/resolve/{SHA}/model.safetensors.index.json" in paths


@pytest.mark.parametrize(
    ("token", "refused"),
    [("hf_secret", True), (None, False)],
)
def test_a_private_model_is_read_with_hf_token(
    stand_in: Hub, no_model: Path, token: str | None, refused: bool
) -> None:
    since = len(stand_in.requests)
    env = {"HF_MODEL_ID": "acme/private-1.5b", "HF_ENDPOINT": stand_in.url}
    result = capped_serve(4096, no_model, **env, **({"HF_TOKEN": token} if token else {}))
    if refused:
        stopped(result)
        assert {auth for _, _, auth in model_requests(stand_in, since)} == {"Bearer hf_secret"}
    else:
        started(result)
        (line,) = [line for line in result.stderr.splitlines() if line.startswith(NOT_CHECKED)]
        assert "no such model, or a private one this token may not read (HF_TOKEN)" in line


@pytest.mark.parametrize(
    ("env", "why"),
    [
        ({"HF_MODEL_ID": "acme/nothing-here"}, "no such model"),
        ({"HF_MODEL_ID": "Qwen/Qwen2.5-1.5B-Instruct", "SM_VLLM_REVISION": "v9"}, "no revision v9"),
        (
            {"HF_MODEL_ID": "Qwen/Qwen2.5-1.5B-Instruct", "HF_HUB_OFFLINE": "1"},
            "HF_HUB_OFFLINE is on, so nothing is read from the Hub",
        ),
    ],
)
def test_a_hub_read_that_fails_is_one_line_and_the_start_goes_on(
    stand_in: Hub, no_model: Path, env: dict[str, str], why: str
) -> None:
    since = len(stand_in.requests)
    result = capped_serve(4096, no_model, HF_ENDPOINT=stand_in.url, **env)
    started(result)
    (line,) = [line for line in result.stderr.splitlines() if line.startswith(NOT_CHECKED)]
    assert why in line
    if "HF_HUB_OFFLINE" in env:
        assert stand_in.requests[since:] == []


def test_an_unreachable_hub_is_one_line_and_the_start_goes_on(no_model: Path) -> None:
    result = capped_serve(4096, no_model, HF_MODEL_ID="org/model", HF_ENDPOINT="http://127.0.0.1:9")
    started(result)
    (line,) = [line for line in result.stderr.splitlines() if line.startswith(NOT_CHECKED)]
    assert "the Hub (http://127.0.0.1:9) did not give org/model's files: ConnectError" in line


def s3_prefix(files: dict[str, bytes]) -> str:
    """`files` under a new prefix of a bucket on moto; its s3:// URI."""
    s3 = boto3.client("s3")
    bucket = "fit-models"
    s3.create_bucket(Bucket=bucket)
    prefix = f"m-{uuid.uuid4().hex[:8]}"
    for name, content in files.items():
        s3.put_object(Bucket=bucket, Key=f"{prefix}/{name}", Body=content)
    return f"s3://{bucket}/{prefix}/"


CONFIG = json.dumps(BORDER_CONFIG).encode()


@pytest.mark.usefixtures("aws")
def test_streamed_weights_too_big_stop_serve_before_the_engine(no_model: Path) -> None:
    uri = s3_prefix({"config.json": CONFIG, "model.safetensors": bytes(32 * MIB)})
    line = stopped(capped_serve(2048, no_model, SM_VLLM_MODEL=uri))
    assert "weights 32 MiB" in line
    assert "a KV cache for one sequence of 184,320 tokens (720 MiB)" in line


@pytest.mark.usefixtures("aws")
def test_streamed_weights_that_fit_start_counting_only_the_safetensors(no_model: Path) -> None:
    """The streamer loads the safetensors alone: the .bin beside them is not counted."""
    files = {
        "config.json": CONFIG,
        "model.safetensors": bytes(4 * MIB),
        "pytorch_model.bin": bytes(32 * MIB),
    }
    result = capped_serve(2048, no_model, SM_VLLM_MODEL=s3_prefix(files))
    command = started(result)
    assert command[command.index("--load-format") + 1] == STREAMER
    assert command[command.index(KV_BYTES_FLAG) + 1] == str(720 * MIB)
    assert "weights 4 MiB" in result.stderr


@pytest.mark.usefixtures("aws")
def test_an_s3_read_that_fails_is_one_line_and_the_start_goes_on(no_model: Path) -> None:
    result = capped_serve(2048, no_model, SM_VLLM_MODEL="s3://no-such-bucket/model/")
    started(result)
    (line,) = [line for line in result.stderr.splitlines() if line.startswith(NOT_CHECKED)]
    assert "S3 did not list s3://no-such-bucket/model/: NoSuchBucket: " in line


FACTS = system.System((), True, 8 * 1024**3)


@pytest.mark.parametrize(
    ("env", "why"),
    [
        ({"SM_VLLM_MODEL": "gs://bucket/model/"}, "gs:// listings are not read by this check"),
        (
            {"SM_VLLM_LOAD_FORMAT": "dummy"},
            "vLLM's --load-format dummy loads weights this check does not count",
        ),
    ],
)
def test_weights_this_check_cannot_count_are_one_line(
    env: dict[str, str], why: str, tmp_path: Path
) -> None:
    (tmp_path / "config.json").write_text(json.dumps(BORDER_CONFIG))
    (tmp_path / "model.safetensors").write_bytes(bytes(1024))
    _, _, said = serve.server_command(
        {"SAGEMAKER_MODEL_DIR": str(tmp_path), **env}, [], FACTS, cgroup.Limits(2048 * MIB)
    )
    assert said[0] == f"{NOT_CHECKED.removeprefix('serve: ')}{why}"


def test_nothing_is_read_from_the_hub_without_a_memory_cap(stand_in: Hub) -> None:
    """On an instance (no cap) the fit is not weighed, so the Hub is not asked."""
    since = len(stand_in.requests)
    env = {"HF_MODEL_ID": "Qwen/Qwen2.5-1.5B-Instruct", "HF_ENDPOINT": stand_in.url}
    _, added, said = serve.server_command(env, [], FACTS, cgroup.Limits())
    assert stand_in.requests[since:] == []
    assert "VLLM_CPU_KVCACHE_SPACE" in added
    assert not [line for line in said if "fits in memory" in line]
