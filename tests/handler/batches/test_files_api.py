"""OpenAI's Files API on a real server, driven by the official `openai` SDK."""

import http.client
import json

import httpx
import openai
import pytest
from openai.types import FileObject

from tests.conftest import API_KEY, AUTH
from tests.support.servers import Server

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


# Every Files and Batches route with an id in it, and path parts that are not ids. They are sent
# as raw bytes (http.client), because httpx would resolve the dot segments itself.
ROUTES = [
    ("GET", "/v1/files/{}"),
    ("DELETE", "/v1/files/{}"),
    ("GET", "/v1/files/{}/content"),
    ("GET", "/v1/batches/{}"),
    ("POST", "/v1/batches/{}/cancel"),
]
NOT_IDS = ["..", ".", "..%2F..%2Fetc%2Fpasswd", "%2e%2e", "a%2Fb", "", "%00", "x" * 5000, "a b"]


@pytest.mark.parametrize(("method", "route"), ROUTES)
@pytest.mark.parametrize("part", NOT_IDS)
def test_path_parts_that_are_not_ids_are_404_on_every_route(
    chat_server: Server, method: str, route: str, part: str
) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", chat_server.port, timeout=60)
    try:
        connection.request(method, route.format(part.replace(" ", "%20")))
        answer = connection.getresponse()
        body = json.loads(answer.read())
    finally:
        connection.close()
    assert answer.status in (400, 404), (answer.status, body)
    assert set(body["error"]) == {"message", "type", "param", "code"}


def test_an_unknown_id_is_404_as_openai_words_it(chat_server: Server) -> None:
    answer = httpx.get(chat_server.url + "/v1/files/file-nope")
    assert answer.status_code == 404
    assert answer.json()["error"]["message"] == "No such File object: file-nope"


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
