"""OpenAI's Files API on a real server, driven by the official `openai` SDK."""

import httpx
import openai
import pytest
from openai.types import FileObject

from tests.conftest import API_KEY, AUTH
from tests.servers import Server

LINES = b"".join(
    b'{"custom_id": "r%d", "method": "POST", "url": "/v1/chat/completions", "body": {}}\n' % i
    for i in range(3)
)


def client(server: Server, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)


def test_upload_retrieve_download_delete(chat_server: Server) -> None:
    sdk = client(chat_server)
    created = sdk.files.create(
        file=("requests.jsonl", LINES, "application/jsonl"),
        purpose="batch",
        expires_after={"anchor": "created_at", "seconds": 3600},
    )
    assert FileObject.model_validate(created.model_dump())
    assert (created.filename, created.bytes, created.purpose) == (
        "requests.jsonl",
        len(LINES),
        "batch",
    )
    assert created.expires_at == created.created_at + 3600
    assert sdk.files.retrieve(created.id) == created
    assert sdk.files.content(created.id).content == LINES
    deleted = sdk.files.delete(created.id)
    assert (deleted.id, deleted.deleted) == (created.id, True)
    with pytest.raises(openai.NotFoundError) as missing:
        sdk.files.retrieve(created.id)
    assert missing.value.body["message"] == f"No such File object: {created.id}"


def test_auto_pagination_ends_and_sees_every_file(chat_server: Server) -> None:
    sdk = client(chat_server)
    ids = [
        sdk.files.create(file=(f"{i}.jsonl", LINES, "application/jsonl"), purpose="batch").id
        for i in range(5)
    ]
    listed = [f.id for f in sdk.files.list(purpose="batch", limit=2, order="asc")]
    assert [i for i in listed if i in ids] == ids
    newest = [f.id for f in sdk.files.list(purpose="batch", limit=2)]
    assert [i for i in newest if i in ids] == ids[::-1]
    for file_id in ids:
        sdk.files.delete(file_id)


@pytest.mark.parametrize(
    ("name", "purpose", "size", "status"),
    [
        ("requests.csv", "batch", 10, 400),
        ("requests.jsonl", "batch_output", 10, 400),
        ("requests.jsonl", "batch", 3 * 1024 * 1024, 413),
        ("notes.txt", "user_data", 5 * 1024 * 1024, 413),
    ],
)
def test_bad_uploads_are_refused(
    chat_server: Server, name: str, purpose: str, size: int, status: int
) -> None:
    files = {"file": (name, b"{}\n" * (size // 3), "application/jsonl")}
    answer = httpx.post(
        chat_server.url + "/v1/files", data={"purpose": purpose}, files=files, timeout=60
    )
    assert answer.status_code == status
    assert answer.json()["error"]["message"]


@pytest.mark.parametrize(
    "path",
    [
        "/v1/files/../../etc/passwd",
        "/v1/files/file-" + "a" * 500,
        "/v1/files/%00",
        "/v1/files/file-x/content",
        "/v1/files/file-nope",
    ],
)
def test_hostile_ids_are_404(chat_server: Server, path: str) -> None:
    answer = httpx.get(chat_server.url + path)
    assert answer.status_code == 404


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/json", b'{"purpose": "batch"}'),
        ("multipart/form-data; boundary=x", b"--x\r\nbad"),
    ],
)
def test_non_multipart_or_broken_bodies_are_400(
    chat_server: Server, content_type: str, body: bytes
) -> None:
    answer = httpx.post(
        chat_server.url + "/v1/files", content=body, headers={"Content-Type": content_type}
    )
    assert answer.status_code == 400


def test_files_need_the_api_key(score_server: Server) -> None:
    assert httpx.get(score_server.url + "/v1/files").status_code == 401
    assert httpx.get(score_server.url + "/v1/files", headers=AUTH).status_code == 200
    with pytest.raises(openai.AuthenticationError):
        client(score_server).files.list()
    assert client(score_server, API_KEY).files.list().data is not None


def test_switched_off_files_api_is_404(embed_server: Server) -> None:
    assert httpx.get(embed_server.url + "/v1/files").status_code == 404
    assert (
        httpx.post(embed_server.url + "/v1/files", files={"file": ("a.jsonl", b"{}")}).status_code
        == 404
    )
