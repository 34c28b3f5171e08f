"""`serve` as SageMaker starts it: the resolved command, configuration errors, real engines."""

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import psutil
import pytest

from tests.conftest import API_KEY, AUTH
from tests.support import cli, processes, servers, waiting
from tests.support.model_factory import embedder_path
from vllm_sagemaker.container import cgroup, env_args, restarts, serve, system


def run_serve(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SM_VLLM_", "HF_MODEL_ID", "SAGEMAKER_"))
    }
    return processes.run([servers.SERVE, *args], env={**clean, **env}, text=True, timeout=300)


def test_dry_run_prints_the_vllm_command() -> None:
    result = run_serve(
        "serve",
        "--dry-run",
        SM_VLLM_MODEL="/m",
        SM_VLLM_TENSOR_PARALLEL_SIZE="2",
        SM_VLLM_ENABLE_PREFIX_CACHING="true",
        SM_VLLM_DISABLE_LOG_STATS="false",
        SM_VLLM_SERVED_MODEL_NAME="my model",
    )
    assert result.returncode == 0, result.stderr
    command = json.loads(result.stdout)
    assert all(isinstance(arg, str) for arg in command)
    assert command[command.index("--tensor-parallel-size") + 1] == "2"
    assert command[command.index("--port") + 1] == "8080"
    assert command[command.index("--served-model-name") + 1] == "my model"
    assert command[command.index("--middleware") + 1] == env_args.MIDDLEWARE
    assert "--enable-prefix-caching" in command
    assert "--disable-log-stats" not in command


@pytest.mark.parametrize("command", [[servers.SERVE], [cli.VLLM_SAGEMAKER, "serve"]])
def test_serve_help_describes_serve(command: list[str]) -> None:
    """`serve --help` says what serve does and that other arguments go to vLLM."""
    result = processes.run([*command, "--help"], text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    usage, _, description = result.stdout.partition("\n\n")
    assert usage.endswith("serve [-h] [--dry-run] [VLLM_OPTION ...]"), usage
    said = " ".join(description.split())
    assert "each SM_VLLM_* variable is one of vLLM's options" in said
    assert "Arguments this command does not know pass through to vLLM" in said


def test_vllm_sagemaker_serve_passes_extra_arguments() -> None:
    result = processes.run(
        [cli.VLLM_SAGEMAKER, "serve", "--dry-run", "--max-model-len", "512"],
        env={**os.environ, "HF_MODEL_ID": "org/model", "SAGEMAKER_BIND_TO_PORT": "9005"},
        text=True,
        timeout=300,
    )
    command = json.loads(result.stdout)
    assert command[command.index("--model") + 1] == "org/model"
    assert command[command.index("--port") + 1] == "9005"
    assert command[command.index("--max-model-len") + 1] == "512"


# `serve` with its supervisor replaced by a line of what it would give vLLM: the command and
# VLLM_API_KEY.
WHAT_VLLM_GETS = """
import json, sys
from vllm_sagemaker.container import serve, supervisor
supervisor.Supervisor.run = lambda self: print(
    json.dumps([self.command, self.env.get("VLLM_API_KEY")]), flush=True
) or 0
sys.exit(serve.main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    ("key", "args", "vllm_env"),
    [
        ("k-1", [], "k-1"),
        ('["k-1", "k-2"]', ["--api-key", "k-1", "k-2"], "other"),
    ],
)
def test_one_api_key_reaches_vllm_in_its_environment_not_its_command_line(
    key: str, args: list[str], vllm_env: str
) -> None:
    """Any local user can read a command line (`ps`): one key goes to vLLM as VLLM_API_KEY
    (over the one the user set, which the handler would not check), several as `--api-key`.
    Neither the dry run nor a start prints a key."""
    env = {"SM_VLLM_MODEL": "/m", "SM_VLLM_API_KEY": key, "VLLM_API_KEY": "other"}
    dry = run_serve("--dry-run", **env)
    assert dry.returncode == 0, dry.stderr
    command = json.loads(dry.stdout)
    assert ("--api-key" in command) == bool(args)
    tail = command[command.index("--api-key") :] if args else []
    assert tail[: len(args)] == args
    assert ("k-1" in dry.stdout) == bool(args)
    (would_set,) = [line for line in dry.stderr.splitlines() if "would set" in line]
    assert ("VLLM_API_KEY=<from SM_VLLM_API_KEY>" in would_set) == (not args)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SM_VLLM_", "PROCESS_"))}
    started = processes.run(
        [sys.executable, "-c", WHAT_VLLM_GETS], env={**clean, **env}, text=True, timeout=300
    )
    assert started.returncode == 0, started.stderr
    assert json.loads(started.stdout) == [command, vllm_env]
    if not args:
        assert "serve: VLLM_API_KEY=<from SM_VLLM_API_KEY> (off vLLM's command line)" in (
            started.stderr.splitlines()
        )
    for output in (dry.stderr, started.stderr):
        assert "k-1" not in output and "k-2" not in output


def test_model_directory_wins_over_hf_model_id(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    result = run_serve("--dry-run", HF_MODEL_ID="org/m", SAGEMAKER_MODEL_DIR=str(tmp_path))
    command = json.loads(result.stdout)
    assert command[command.index("--model") + 1] == str(tmp_path)


def test_no_model_fails_with_one_clear_message(tmp_path: Path) -> None:
    result = run_serve("serve", SAGEMAKER_MODEL_DIR=str(tmp_path / "missing"))
    assert result.returncode != 0
    assert result.stdout == ""
    for source in ("SM_VLLM_MODEL", "/opt/ml/model", "HF_MODEL_ID"):
        assert source in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# `serve` with vLLM's start replaced by a line saying how it would have started it.
HOW_IT_STARTS = """
import os, sys
from vllm_sagemaker.container import serve, supervisor
os.execve = lambda *args: (print("exec", flush=True), os._exit(0))
supervisor.Supervisor.run = lambda self: print("supervised", self.policy.max_restarts) or 0
sys.exit(serve.main([]))
"""


@pytest.mark.parametrize(
    ("env", "started"),
    [
        ({}, "supervised 3"),
        ({"PROCESS_MAX_START_RETRIES": "0"}, "supervised 0"),
        ({"PROCESS_AUTO_RECOVERY": "false"}, "exec"),
    ],
)
def test_auto_recovery_decides_whether_serve_supervises_or_execs(
    env: dict[str, str], started: str
) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SM_VLLM_", "PROCESS_"))}
    result = processes.run(
        [sys.executable, "-c", HOW_IT_STARTS],
        env={**clean, "SM_VLLM_MODEL": "/m", **env},
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [started]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"PROCESS_MAX_START_RETRIES": "101"},
            "PROCESS_MAX_START_RETRIES must be a whole number from 0 to 100, got '101'",
        ),
        ({"SM_VLLM_API_KEY": "true"}, "SM_VLLM_API_KEY='true' holds no API key: set it to"),
    ],
)
def test_a_bad_setting_stops_serve_with_one_line_before_vllm(
    env: dict[str, str], message: str
) -> None:
    result = run_serve("serve", SM_VLLM_MODEL="/m", **env)
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"serve: {message}")


def test_vllm_refusing_its_arguments_is_not_restarted() -> None:
    """vLLM itself rejects the value (argparse, exit status 2): one start, then one line."""
    result = run_serve("serve", SM_VLLM_MODEL="/m", SM_VLLM_MAX_MODEL_LEN="notanumber")
    assert result.returncode == restarts.USAGE_ERROR
    lines = result.stderr.splitlines()
    assert result.stderr.count("usage: vllm serve") == 1, "vLLM started once"
    refused = lines.index(f"serve: {restarts.USAGE_ERROR_MESSAGE}")
    assert "error: argument --max-model-len" in lines[refused - 1]
    assert refused == len(lines) - 1
    assert "starting it again" not in result.stderr


def test_chat_model_answers(chat_server: servers.Server) -> None:
    assert httpx.get(chat_server.url + "/ping").status_code == 200
    client = openai.OpenAI(base_url=chat_server.url + "/v1", api_key="unused")
    answer = client.chat.completions.create(
        model=chat_server.model,
        messages=[{"role": "user", "content": "Hello"}],
        max_tokens=5,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert answer.choices[0].finish_reason == "length"
    assert answer.usage is not None and answer.usage.completion_tokens == 5


def test_embedder_gives_real_embeddings(embed_server: servers.Server) -> None:
    client = openai.OpenAI(base_url=embed_server.url + "/v1", api_key="unused")
    texts = [
        "A cat sits on the mat",
        "A kitten is resting on a rug",
        "The stock market fell sharply today",
    ]
    vectors = [
        d.embedding for d in client.embeddings.create(model=embed_server.model, input=texts).data
    ]

    def cosine(a: list[float], b: list[float]) -> float:
        dot = sum(x * y for x, y in zip(a, b, strict=True))
        return dot / (sum(x * x for x in a) ** 0.5 * sum(y * y for y in b) ** 0.5)

    assert len(vectors[0]) == 384
    assert cosine(vectors[0], vectors[1]) > 0.5
    assert cosine(vectors[0], vectors[2]) < 0.3


def test_cross_encoder_reranks(score_server: servers.Server) -> None:
    response = httpx.post(
        score_server.url + "/rerank",
        headers=AUTH,
        json={"query": "cat", "documents": ["a cat sits", "the stock market", "hello"]},
    )
    assert response.status_code == 200
    assert sorted(r["index"] for r in response.json()["results"]) == [0, 1, 2]


def test_the_api_key_is_in_no_command_line(score_server: servers.Server) -> None:
    """Every local user can read every process's command line (/proc/PID/cmdline, `ps`): the
    score server's key is in none of its processes' (`serve`, vLLM's API server, its engine),
    only in the API server's environment (readable by its owner alone), which is where vLLM
    and the handler take it from: a call without it is refused, one with it answered."""
    api_server = score_server.vllm_process("vllm_cli serve")
    family = score_server.family()
    assert api_server in family and score_server.engine_core() in family
    for process in family:
        assert API_KEY.encode() not in Path(f"/proc/{process.pid}/cmdline").read_bytes()
    assert api_server.environ()["VLLM_API_KEY"] == API_KEY
    assert httpx.get(score_server.url + "/v1/models").status_code == 401
    assert httpx.get(score_server.url + "/v1/models", headers=AUTH).status_code == 200


def test_ping_is_not_in_the_access_log(embed_server: servers.Server) -> None:
    def read_log() -> str:
        return embed_server.log_path.read_text()

    for _ in range(3):
        assert httpx.get(embed_server.url + "/ping").status_code == 200
    httpx.get(embed_server.url + "/v1/models")
    # The access log is written in the order requests end: once the last one is in, so would
    # the pings be.
    log = waiting.until(
        lambda: text if '"GET /v1/models HTTP/1.1" 200' in (text := read_log()) else None,
        60,
        "the access log never showed /v1/models",
    )
    assert '"GET /ping HTTP/1.1"' not in log


@pytest.fixture(scope="module")
def disposable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, servers.Server]]:
    """Two embedders the tests below stop, started together."""
    model = embedder_path()
    with servers.running(
        {"term": model, "clean": model}, tmp_path_factory.mktemp("disposable")
    ) as running:
        yield running


def test_sigterm_stops_the_server_and_its_engine(disposable: dict[str, servers.Server]) -> None:
    server = disposable["term"]
    family = server.family()
    assert server.engine_core() in family
    server.process.terminate()
    # SageMaker sends SIGKILL 30 s after SIGTERM: the stop must be done well before.
    assert server.process.wait(timeout=30) == 0, "a requested stop is a clean exit"
    _, alive = psutil.wait_procs(family, timeout=30)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    assert "serve: SIGTERM: stopping vLLM" in server.log_path.read_text()


def test_a_clean_exit_of_vllm_is_not_restarted(disposable: dict[str, servers.Server]) -> None:
    """vLLM stopped by a SIGTERM of its own (not through `serve`) exits 0: `serve` ends with
    it instead of starting it again."""
    server = disposable["clean"]
    [vllm] = psutil.Process(server.process.pid).children()
    assert "vllm_cli" in " ".join(vllm.cmdline())
    family = server.family()
    vllm.terminate()
    assert server.process.wait(timeout=120) == 0
    assert not [p for p in family[1:] if p.is_running()]
    assert "starting it again" not in server.log_path.read_text()


def test_ping_is_empty(embed_server: servers.Server) -> None:
    answer = httpx.get(embed_server.url + "/ping")
    assert (answer.status_code, answer.content) == (200, b"")


@pytest.mark.parametrize(
    ("env", "kv_value"),
    [
        ({"SM_VLLM_KV_CACHE_MEMORY_BYTES": "1G"}, "1G"),
        ({}, None),
    ],
)
def test_a_capped_container_gets_one_kv_cache_size(
    env: dict[str, str], kv_value: str | None, tmp_path: Path
) -> None:
    """Under a cgroup's memory cap, the size the user gave (in vLLM's spelling) is the only one
    on vLLM's command line; without one, serve's own is."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 512}))
    facts = system.System((), True, 8 * 1024**3)
    command, _, said = serve.server_command(
        {"SM_VLLM_MODEL": str(model), **env}, [], facts, cgroup.Limits(memory_bytes=4 * 1024**3)
    )
    assert command.count("--kv-cache-memory-bytes") == 1
    value = command[command.index("--kv-cache-memory-bytes") + 1]
    assert value == kv_value if kv_value else int(value) > 0
    assert any("memory is capped at" in line for line in said)
