"""LiteLLM's `hosted_vllm` provider against a real server: its proxy probes `GET /files` to
choose passthrough, then uploads (rewritten as its proxy rewrites files), creates, polls and
downloads through LiteLLM's own clients, which validate every answer (`OpenAIFileObject`,
`LiteLLMBatch`)."""

import os
import time

import httpx
import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm
from litellm.router_utils.batch_utils import replace_model_in_jsonl

from tests.conftest import API_KEY
from tests.json_lines import parse_lines
from tests.servers import Server
from tests.test_batches_api import FINAL, chat_line, jsonl

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
    deadline = time.monotonic() + 300
    while batch.status not in FINAL:
        assert time.monotonic() < deadline
        time.sleep(0.2)
        batch = litellm.retrieve_batch(batch_id=batch.id, **api)
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
