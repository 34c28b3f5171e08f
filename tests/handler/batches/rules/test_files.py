"""The Files API's store, upload parsing and parameter rules, without a server."""

import asyncio
from pathlib import Path

import pytest

from vllm_sagemaker.core.errors import RequestError
from vllm_sagemaker.handler.batches.api import files as files_api
from vllm_sagemaker.handler.batches.api import paging, routes
from vllm_sagemaker.handler.batches.api.uploads import receive_upload
from vllm_sagemaker.handler.batches.store.sqlite import Store
from vllm_sagemaker.handler.batches.store.types import StoredFile

BOUNDARY = "b0undary"
CONTENT_TYPE = f"multipart/form-data; boundary={BOUNDARY}"


def multipart(*parts: tuple[str, str | None, bytes]) -> bytes:
    """(name, filename or None, value) parts as a multipart/form-data body."""
    out = b""
    for name, filename, value in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        out += f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n\r\n".encode()
        out += value + b"\r\n"
    return out + f"--{BOUNDARY}--\r\n".encode()


def upload(body: bytes, destination: Path, max_bytes: int = 1 << 20, chunk: int = 7):
    """Feed `body` in small chunks, as a client's packets arrive."""
    chunks = [body[i : i + chunk] for i in range(0, len(body), chunk)] or [b""]
    messages = iter(
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
        for i, c in enumerate(chunks)
    )

    async def receive() -> dict:
        return next(messages)

    def check(filename: str, fields: dict[str, str]) -> None:
        files_api.check_batch_file(filename, fields.get("purpose"))

    return asyncio.run(receive_upload(receive, CONTENT_TYPE, destination, max_bytes, check))


LINES = b'{"custom_id": "a"}\n{"custom_id": "b"}\n'


@pytest.mark.parametrize(
    "parts",
    [
        [("purpose", None, b"batch"), ("file", "in.jsonl", LINES)],
        [("file", "in.jsonl", LINES), ("purpose", None, b"batch")],
    ],
)
def test_parts_in_any_order(tmp_path: Path, parts: list) -> None:
    destination = tmp_path / "body"
    got = upload(multipart(*parts), destination)
    assert got.fields == {"purpose": "batch"}
    assert (got.filename, got.size) == ("in.jsonl", len(LINES))
    assert destination.read_bytes() == LINES


@pytest.mark.parametrize(
    ("parts", "status", "code"),
    [
        ([("purpose", None, b"batch")], 400, "missing_required_parameter"),
        ([("purpose", None, b"batch"), ("file", "in.csv", LINES)], 400, "invalid_file_format"),
        ([("file", "a.jsonl", LINES), ("file", "b.jsonl", LINES)], 400, "invalid_file"),
        ([("file", "big.jsonl", b"x" * 2000)], 413, "file_too_large"),
    ],
)
def test_bad_uploads_store_nothing(tmp_path: Path, parts: list, status: int, code: str) -> None:
    destination = tmp_path / "body"
    with pytest.raises(RequestError) as error:
        upload(multipart(*parts), destination, max_bytes=1000)
    assert (error.value.status, error.value.code) == (status, code)
    assert not destination.exists()


def test_a_truncated_body_stores_nothing(tmp_path: Path) -> None:
    body = multipart(("file", "in.jsonl", LINES))
    with pytest.raises(RequestError):
        upload(body[: len(body) // 2 + 20], tmp_path / "body")
    assert not (tmp_path / "body").exists()


@pytest.mark.parametrize(
    ("fields", "purpose", "expected"),
    [
        ({}, "batch", 1000 + 30 * 24 * 3600),
        ({}, "user_data", None),
        ({"expires_after[anchor]": "created_at", "expires_after[seconds]": "3600"}, "batch", 4600),
    ],
)
def test_expiry(fields: dict[str, str], purpose: str, expected: int | None) -> None:
    assert files_api.expires_at(fields, purpose, 1000) == expected


@pytest.mark.parametrize(
    "fields",
    [
        {"expires_after[anchor]": "now", "expires_after[seconds]": "3600"},
        {"expires_after[anchor]": "created_at", "expires_after[seconds]": "59"},
        {"expires_after[anchor]": "created_at"},
    ],
)
def test_bad_expiry_is_400(fields: dict[str, str]) -> None:
    with pytest.raises(RequestError) as error:
        files_api.expires_at(fields, "batch", 0)
    assert error.value.param == "expires_after"


@pytest.mark.parametrize(
    ("fields", "param"), [({}, "purpose"), ({"purpose": "batch_output"}, "purpose")]
)
def test_purpose_is_checked(fields: dict[str, str], param: str) -> None:
    with pytest.raises(RequestError) as error:
        files_api.checked_purpose(fields)
    assert error.value.param == param


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (b"", (None, 10_000, True, None)),
        (b"purpose=batch&limit=2&order=asc&after=file-1", ("batch", 2, False, "file-1")),
    ],
)
def test_list_query(query: bytes, expected: tuple) -> None:
    assert files_api.list_query(query) == expected


@pytest.mark.parametrize("query", [b"limit=0", b"limit=10001", b"limit=x", b"order=up"])
def test_bad_list_query_is_400(query: bytes) -> None:
    with pytest.raises(RequestError):
        files_api.list_query(query)


def stored(store: Store, index: int, purpose: str = "batch", expires: int | None = None) -> str:
    file_id = f"file-{index}"
    store.partial_path(file_id).write_bytes(b"x" * index)
    store.add_file(StoredFile(file_id, index, 1000 + index, f"{index}.jsonl", purpose, expires))
    return file_id


def test_store_pages_in_a_stable_order(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    ids = [stored(store, i, "batch" if i % 2 else "user_data") for i in range(1, 8)]
    pages, after = [], None
    while True:
        page = store.files(None, 3, False, after)
        pages.append([f.id for f in page.items])
        if not page.has_more:
            break
        after = page.items[-1].id
    assert pages == [ids[0:3], ids[3:6], ids[6:7]]
    newest_first = store.files(None, 100, True, None)
    assert [f.id for f in newest_first.items] == ids[::-1]
    assert [f.id for f in store.files("batch", 100, False, None).items] == ids[0::2]
    assert [f.id for f in store.files(None, 2, True, ids[3]).items] == [ids[2], ids[1]]


def test_store_survives_a_reopen_and_deletes(tmp_path: Path) -> None:
    file_id = stored(Store(str(tmp_path)), 5)
    reopened = Store(str(tmp_path))
    found = reopened.file(file_id)
    assert found is not None and found.bytes == 5
    assert reopened.delete_file(file_id)
    assert reopened.file(file_id) is None and not reopened.body_path(file_id).exists()
    assert not reopened.delete_file(file_id)


def test_expired_files_are_gone(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    file_id = stored(store, 3, expires=2000)
    assert store.file(file_id, now=1999) is not None
    assert store.file(file_id, now=2000) is None
    store.sweep_expired(now=2000)
    assert not store.body_path(file_id).exists()


@pytest.mark.parametrize(
    ("path", "named"),
    [
        ("/v1/files", paging.ObjectPath()),
        ("/v1/files/file-ab_1", paging.ObjectPath("file-ab_1")),
        ("/v1/files/", None),
        ("/v1/files/file-ab/", None),
        ("/v1/files/file-ab/content", paging.ObjectPath("file-ab", "content")),
        ("/v1/files/../../etc/passwd/content", None),
        ("/v1/files/..", None),
        ("/v1/files/.", None),
        ("/v1/files//content", None),
        ("/v1/files/file-ab//", None),
        ("/v1/files/file-ab/content/more", None),
        ("/v1/files/file-ab/contents", None),
        ("/v1/files/file-" + "a" * 200, None),
        ("/v1/files/file a", None),
        ("/v1/files/file-\x00", None),
        ("/v1/files/-file", None),
    ],
)
def test_a_path_names_the_collection_an_object_or_an_action_or_nothing(
    path: str, named: paging.ObjectPath | None
) -> None:
    if named is not None:
        assert paging.object_path(path, "/v1/files", ("content",)) == named
        return
    with pytest.raises(RequestError) as refused:
        paging.object_path(path, "/v1/files", ("content",))
    assert (refused.value.status, refused.value.code) == (404, "not_found")
    assert len(refused.value.message) < 300


@pytest.mark.parametrize(
    ("path", "full"),
    [
        ("/v1/files", "/v1/files"),
        ("/files", "/v1/files"),
        ("/files/file-a/content", "/v1/files/file-a/content"),
        ("/batches/batch_a/cancel", "/v1/batches/batch_a/cancel"),
        ("/v1/batches", "/v1/batches"),
        ("/filesx", None),
        ("/v1/filesx", None),
        ("/v1/chat/completions", None),
        ("/v2/files", None),
        ("/", None),
    ],
)
def test_the_files_and_batches_routes_answer_with_or_without_v1(
    path: str, full: str | None
) -> None:
    assert routes.canonical(path) == full


def test_a_store_it_creates_is_private(tmp_path: Path) -> None:
    """Uploaded files are users' data: a store directory the server makes is its user's alone
    (0700); one that exists already keeps its mode."""
    Store(str(tmp_path / "new" / "store"))
    assert (tmp_path / "new" / "store").stat().st_mode & 0o777 == 0o700
    existing = tmp_path / "shared"
    existing.mkdir(mode=0o755)
    existing.chmod(0o755)
    Store(str(existing))
    assert existing.stat().st_mode & 0o777 == 0o755
