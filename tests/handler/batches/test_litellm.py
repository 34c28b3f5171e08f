"""LiteLLM's `hosted_vllm` provider against a real server: its proxy probes `GET /files` to
choose passthrough, then uploads (rewritten as its proxy rewrites files), creates, polls and
downloads through LiteLLM's own clients, which validate every answer (`OpenAIFileObject`,
`LiteLLMBatch`). And LiteLLM's own proxy, started as its docs start it (no database), running
the docs' quick start with the docs' batch file."""

import json
import os
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm
from litellm.router_utils.batch_utils import replace_model_in_jsonl

from tests.conftest import API_KEY, LITELLM_MODEL
from tests.handler.batches.test_batches_api import FINAL, chat_line, jsonl
from tests.support import processes, waiting
from tests.support.json_lines import parse_lines
from tests.support.servers import Server, free_port

PROVIDER = {"custom_llm_provider": "hosted_vllm"}


def lacks_files_api(server: Server, key: str | None = None) -> bool:
    """The proxy's probe, `upstream_lacks_files_api` in
    `litellm/proxy/batches_endpoints/litellm_executed_batches.py` (importing it needs the proxy's
    dependencies): only a 404 from `GET {api_base}/files` makes LiteLLM run batches itself."""
    headers = {"Authorization": f"Bearer {key}"} if key else None
    try:
        answer = httpx.get(server.url + "/v1/files", headers=headers, timeout=5)
    except httpx.HTTPError:
        return False
    return answer.status_code == 404


def test_passthrough_upload_create_poll_and_content(chat_server: Server) -> None:
    assert lacks_files_api(chat_server) is False
    api = {**PROVIDER, "api_base": chat_server.url + "/v1", "api_key": "none"}
    lines = [chat_line(f"l{i}") for i in range(6)]
    rewritten = replace_model_in_jsonl(
        ("requests.jsonl", jsonl(lines)), new_model_name=chat_server.model
    )
    assert getattr(rewritten, "name", None) == "modified_file.jsonl"
    uploaded = litellm.create_file(file=rewritten, purpose="batch", **api)
    assert uploaded.purpose == "batch"
    batch = litellm.create_batch(
        completion_window="24h",
        endpoint="/v1/chat/completions",
        input_file_id=uploaded.id,
        metadata={"team": "a"},
        **api,
    )
    assert batch.status == "validating"

    def final() -> Any:
        retrieved = litellm.retrieve_batch(batch_id=batch.id, **api)
        return retrieved if retrieved.status in FINAL else None

    batch = waiting.until(final, 300, f"batch {batch.id} never ended", 0.2)
    assert batch.status == "completed" and batch.output_file_id
    content = litellm.file_content(file_id=batch.output_file_id, **api)
    output = parse_lines(content.content)
    assert sorted(line["custom_id"] for line in output) == [f"l{i}" for i in range(6)]
    assert all(line["response"]["body"]["model"] == chat_server.model for line in output)
    listed = litellm.list_batches(limit=5, **api)
    assert batch.id in [item.id for item in listed.data]


def test_litellm_runs_batches_itself_when_the_api_is_off(embed_server: Server) -> None:
    assert lacks_files_api(embed_server) is True


@pytest.mark.parametrize(("key", "lacks"), [(API_KEY, False), (None, False)])
def test_a_keyed_server_is_never_taken_for_one_without_the_api(
    score_server: Server, key: str | None, lacks: bool
) -> None:
    """With the key LiteLLM passes through; without it the probe gets 401, which LiteLLM also
    reads as passthrough (the README tells operators to give the deployment the key)."""
    assert lacks_files_api(score_server, key) is lacks


LITELLM = str(Path(sys.executable).with_name("litellm"))
MASTER_KEY = "sk-1234"


@pytest.fixture(scope="module")
def proxy(chat_server: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """LiteLLM's proxy with the docs' config (the server named without /v1), plus the `api_key`
    its Files passthrough needs; no database. Its URL."""
    root = tmp_path_factory.mktemp("litellm")
    config = {
        "model_list": [
            {
                "model_name": LITELLM_MODEL,
                "litellm_params": {
                    "model": f"hosted_vllm/{chat_server.model}",
                    "api_base": chat_server.url,
                    "api_key": "none",
                },
            }
        ],
        "general_settings": {"master_key": MASTER_KEY},
    }
    (root / "config.yaml").write_text(json.dumps(config))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [LITELLM, "--config", str(root / "config.yaml"), "--host", "127.0.0.1"]
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    with (root / "proxy.log").open("wb") as log:
        process = processes.spawn(
            [*command, "--port", str(port)],
            env={**env, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
            stdout=log,
            stderr=log,
        )
    try:

        def started() -> bool:
            assert process.poll() is None, (root / "proxy.log").read_text()[-3000:]
            return ready(url + "/health/liveliness")

        waiting.until(started, 300, "the LiteLLM proxy never started", 0.5)
        yield url
    finally:
        processes.stop(process)


def ready(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_litellm_quick_start_as_written_completes_through_the_proxy(proxy: str) -> None:
    """The docs' file names LiteLLM's model_name in every line; the server serves that name too
    (SM_VLLM_SERVED_MODEL_NAME), so every line is answered once."""
    lines = [
        {
            "custom_id": f"request-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": LITELLM_MODEL,
                "messages": [{"role": "user", "content": f"Hello {i}!"}],
                "max_tokens": 4,
            },
        }
        for i in range(1, 21)
    ]
    auth = {"Authorization": f"Bearer {MASTER_KEY}"}
    with httpx.Client(base_url=proxy, headers=auth, timeout=120) as client:
        uploaded = client.post(
            "/v1/files",
            headers={"x-litellm-model": LITELLM_MODEL},
            data={"purpose": "batch"},
            files={"file": ("batch_requests.jsonl", jsonl(lines))},
        )
        assert uploaded.status_code == 200, uploaded.text
        created = client.post(
            "/v1/batches",
            json={
                "input_file_id": uploaded.json()["id"],
                "endpoint": "/v1/chat/completions",
                "completion_window": "24h",
            },
        )
        assert created.status_code == 200, created.text
        batch_id = created.json()["id"]

        def final() -> dict[str, Any] | None:
            retrieved = client.get(f"/v1/batches/{batch_id}").json()
            return retrieved if retrieved["status"] in FINAL else None

        batch = waiting.until(final, 600, f"batch {batch_id} never ended", 0.2)
        assert batch["status"] == "completed", batch
        assert batch["request_counts"] == {"completed": 20, "failed": 0, "total": 20}
        content = client.get(f"/v1/files/{batch['output_file_id']}/content")
        assert content.status_code == 200
    output = parse_lines(content.content)
    assert Counter(line["custom_id"] for line in output) == Counter(
        f"request-{i}" for i in range(1, 21)
    )
    assert {line["response"]["status_code"] for line in output} == {200}
