"""The S3 store without an engine, against a moto server: the same answers as the embedded
store for files and batches, chunks, claims of the three kinds of work, and assembly."""

import concurrent.futures
import io
import uuid

import boto3
import pytest

from tests.support.servers import free_port
from vllm_sagemaker.core.jsonlines import iter_records
from vllm_sagemaker.handler.batches.store.chunking import Chunk, cut, measured
from vllm_sagemaker.handler.batches.store.s3.chunks import Chunks
from vllm_sagemaker.handler.batches.store.s3.store import S3Store
from vllm_sagemaker.handler.batches.store.types import StoredFile, StoreUnavailable, Work
from vllm_sagemaker.handler.batches.store.usage import zero_usage


@pytest.mark.parametrize(
    ("lengths", "per_chunk", "expected"),
    [
        ([], 2, []),
        ([5], 2, [Chunk(0, 1, 0, 5)]),
        ([5, 6], 2, [Chunk(0, 1, 0, 11)]),
        ([5, 6, 7], 2, [Chunk(0, 1, 0, 11), Chunk(1, 3, 11, 18)]),
        ([1, 1, 1, 1], 2, [Chunk(0, 1, 0, 2), Chunk(1, 3, 2, 4)]),
        ([3, 3, 3], 1, [Chunk(0, 1, 0, 3), Chunk(1, 2, 3, 6), Chunk(2, 3, 6, 9)]),
    ],
)
def test_cut(lengths: list[int], per_chunk: int, expected: list[Chunk]) -> None:
    assert cut(lengths, per_chunk) == expected


def test_chunks_read_back_every_line_once_with_its_number() -> None:
    """Cut while the lines are read (CRLF, a blank line, no final newline), then read each
    chunk's byte range: the lines and their numbers are the whole file's."""
    body = b'{"a":1}\r\n\n{"b":2}\n{"c":3}\n{"d":4}'
    lengths: list[int] = []
    whole = list(enumerate(iter_records(measured(io.BytesIO(body).readlines(), lengths)), 1))
    chunks = cut(lengths, 2)
    again = [
        (number, record)
        for chunk in chunks
        for number, record in enumerate(
            iter_records(io.BytesIO(body[chunk.start : chunk.end]).readlines()), chunk.first_line
        )
    ]
    assert again == whole and len(chunks) == 3


@pytest.fixture
def store(aws: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> S3Store:
    name = f"store-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=name)
    return S3Store(f"s3://{name}/p/", str(tmp_path_factory.mktemp("staging")), chunk_lines=2)


def add_file(store: S3Store, file_id: str, body: bytes, purpose: str = "batch") -> StoredFile:
    store.partial_path(file_id).write_bytes(body)
    stored = StoredFile(file_id, len(body), 1000, f"{file_id}.jsonl", purpose, None)
    store.add_file(stored)
    return stored


def test_files_are_listed_in_upload_order_and_paged(store: S3Store) -> None:
    for n in range(5):
        add_file(store, f"file-{n}", b"x" * n, "batch" if n % 2 else "fine-tune")
    assert not store.partial_path("file-0").exists()
    ids = lambda page: [item.id for item in page.items]  # noqa: E731
    assert ids(store.files(None, 10, False, None)) == [f"file-{n}" for n in range(5)]
    assert ids(store.files(None, 2, True, None)) == ["file-4", "file-3"]
    page = store.files(None, 2, True, "file-3")
    assert ids(page) == ["file-2", "file-1"] and page.has_more
    assert ids(store.files("batch", 10, False, None)) == ["file-1", "file-3"]
    assert store.delete_file("file-3") and not store.delete_file("file-3")
    assert store.file("file-3") is None
    assert ids(store.files("batch", 10, False, None)) == ["file-1"]


def test_a_file_body_streams_back_whole_or_by_chunk(store: S3Store) -> None:
    add_file(store, "file-b", b"0123456789")
    assert store.open_body("file-b").read() == b"0123456789"
    assert store.open_body("file-b", Chunk(1, 3, 2, 6)).read() == b"2345"
    with pytest.raises(FileNotFoundError):
        store.open_body("file-none")


def test_an_expired_file_is_gone(store: S3Store) -> None:
    store.partial_path("file-e").write_bytes(b"x")
    store.add_file(StoredFile("file-e", 1, 1000, "e.jsonl", "batch", 2000))
    assert store.file("file-e", now=1999) is not None
    assert store.file("file-e", now=2000) is None
    assert store.files(None, 10, False, None).items == []


def batch(batch_id: str) -> dict:
    return {
        "id": batch_id,
        "status": "validating",
        "request_counts": {"total": 0, "completed": 0, "failed": 0},
        "usage": zero_usage(),
    }


def test_batches_page_newest_first(store: S3Store) -> None:
    for n in range(4):
        store.add_batch(batch(f"batch_{n}"))
    items, more = store.batches(2, None)
    assert [b["id"] for b in items] == ["batch_3", "batch_2"] and more
    items, more = store.batches(2, "batch_2")
    assert [b["id"] for b in items] == ["batch_1", "batch_0"] and not more
    assert store.batch("batch_9") is None


def test_concurrent_changes_are_all_kept(store: S3Store) -> None:
    """Eight threads add to the counts at once: If-Match makes each read again, none is lost."""
    store.add_batch(batch("batch_c"))

    def add_one(_: int) -> None:
        def change(b: dict) -> dict:
            b["request_counts"]["completed"] += 1
            return b

        store.change_batch("batch_c", change)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(add_one, range(24)))
    assert store.batch("batch_c")["request_counts"]["completed"] == 24


def test_work_is_claimed_validation_then_chunks_then_assembly(store: S3Store) -> None:
    """A validating batch is claimed whole by one runner; once cut, each chunk by one runner;
    once every chunk is finished, the batch again by one, which joins the results in order."""
    store.add_batch(batch("batch_w"))
    validation = store.claim("a", 30, 4)
    assert validation is not None and validation.chunk is None
    assert validation.work is Work.VALIDATE
    assert store.claim("b", 30, 4) is None
    store.add_chunks("batch_w", [10, 10, 10, 10, 10])
    store.change_batch("batch_w", lambda b: {**b, "status": "in_progress"}, "a")
    store.release(validation)

    claims = [store.claim(owner, 30, 4) for owner in ("a", "b", "a")]
    assert sorted(c.chunk.index for c in claims if c and c.chunk) == [0, 1, 2]
    assert {c.work for c in claims if c} == {Work.LINES}
    assert store.claim("b", 30, 4) is None
    for claim in reversed(claims):
        assert claim is not None and claim.chunk is not None
        directory = store.results_dir(claim)
        directory.mkdir(parents=True)
        files = {}
        for kind in ("output", "errors"):
            files[kind] = directory / kind
            files[kind].write_bytes(f"{kind} {claim.chunk.index}\n".encode())
        tallies = {"completed": 1, "failed": 1, "usage": {"input_tokens": 2}, "stopped": None}
        assert store.finish_chunk("batch_w", claim.chunk, files, tallies)
    counted = store.batch("batch_w")
    assert counted["request_counts"]["completed"] == 3 and counted["usage"]["input_tokens"] == 6
    assembly = store.claim("b", 30, 4)
    assert assembly is not None and assembly.chunk is None and assembly.work is Work.ASSEMBLE
    stored = StoredFile("file-w-output", 0, 1, "w.jsonl", "batch_output", None)
    assembled = store.assemble("batch_w", "output", stored)
    assert store.open_body(assembled.id).read() == b"output 0\noutput 1\noutput 2\n"
    assert assembled.bytes == 27 and store.file("file-w-output") == assembled
    assert Chunks(store.bucket, "batch_w").survey().finished == {0, 1, 2}
    store.change_batch("batch_w", lambda b: {**b, "status": "completed"}, "b")
    assert store.claim("a", 30, 4) is None


def test_a_batch_is_cut_for_the_runners_present(
    aws: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Three runners looked for work, each leaving a heartbeat: a 900-line batch is cut into
    four chunks for each, 12 of 75 lines (`lines_per_chunk`); the first chunks written stand."""
    name = f"store-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=name)
    store = S3Store(f"s3://{name}/p/", str(tmp_path_factory.mktemp("staging")))
    for owner in ("host-a/1/a", "host-b/1/b", "host-c/1/c", "host-a/1/a"):
        assert store.claim(owner, 30, 2) is None
    assert sorted(key for key, _ in store.bucket.listed("runners/")) == [
        "runners/host-a/1/a",
        "runners/host-b/1/b",
        "runners/host-c/1/c",
    ]
    store.add_batch(batch("batch_s"))
    store.add_chunks("batch_s", [10] * 900)
    chunks = store.chunks("batch_s")
    assert chunks is not None
    assert [chunk.first_line for chunk in chunks] == list(range(1, 901, 75))
    assert (chunks[-1].start, chunks[-1].end) == (825 * 10, 9000)
    store.add_chunks("batch_s", [10] * 5)
    again = S3Store(f"s3://{name}/p/", str(tmp_path_factory.mktemp("again")))
    assert again.chunks("batch_s") == chunks


def test_an_unreachable_bucket_is_a_clear_store_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Nothing listens on the endpoint: opening the store fails at once with the reason, which
    the routes answer with 503."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with pytest.raises(StoreUnavailable, match="cannot be reached"):
        S3Store("s3://nowhere/p/", str(tmp_path_factory.mktemp("staging")))
