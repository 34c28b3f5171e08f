"""The Batches API across replicas: three real servers sharing one S3 store (moto). Every route
answers the same through every replica, a 900-line batch is cut into chunks for the three and
every replica's engine answers part of it, a cancel through one stops them all, and a replica
killed mid-batch loses nothing: its chunk is taken over once its lease runs out.

The engines are frozen (vLLM's /pause) while the chunks are handed out, so that each replica
surely holds one before any finishes, on any machine. Which replica answered which lines is read
from the store: every finished chunk's `done.json` names the runner that ran it (host, process
id, nonce), and each replica's engine counted exactly those lines."""

import contextlib
import io
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import openai
import psutil
import pytest
from openai.types import Batch

from tests.conftest import LITELLM_MODEL
from tests.handler.batches import test_batches_api, test_litellm
from tests.handler.batches.test_batches_api import chat_line, client, lines_of
from tests.support import processes, servers, waiting
from tests.support.json_lines import parse_lines
from tests.support.servers import Server
from vllm_sagemaker.handler.batches.store.chunking import lines_per_chunk
from vllm_sagemaker.handler.batches.store.leases import Lease, claimable

SUCCESSES = "vllm:request_success_total"
REPLICA_BUCKET = "replicas"
# A batch under the old fixed chunk of 1,000 lines, which ran whole on one replica: the
# replicas cut it for the three of them, four chunks each.
LINES = 900
CHUNK = lines_per_chunk(LINES, 3)
# The replicas live only for this module, beside the session's engines: a small KV cache each
# (vLLM's --kv-cache-memory-bytes, 256 MiB) keeps the machine's memory for the rest. Chunks are
# sized by the replicas themselves (no SAGEMAKER_BATCH_CHUNK_LINES).
REPLICA_ENV = {
    "SAGEMAKER_BATCH_STORE": f"s3://{REPLICA_BUCKET}/store/",
    "SAGEMAKER_MAX_CONCURRENT_BATCHES": "1",
    "VLLM_SERVER_DEV_MODE": "1",
    "SM_VLLM_KV_CACHE_MEMORY_BYTES": str(256 * 2**20),
}


@pytest.fixture(scope="module")
def replicas(
    models: dict[str, Path], aws: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Server]]:
    """Three chat servers sharing one S3 store, as replicas behind a load balancer: one run at
    a time each, engines that tests can freeze."""
    boto3.client("s3").create_bucket(Bucket=REPLICA_BUCKET)
    env = {
        **REPLICA_ENV,
        "SM_VLLM_SERVED_MODEL_NAME": json.dumps([str(models["chat"]), LITELLM_MODEL]),
    }
    names = [f"replica{n}" for n in range(3)]
    log_dir = tmp_path_factory.mktemp("replica-logs")
    chat = dict.fromkeys(names, models["chat"])
    with servers.running(chat, log_dir, dict.fromkeys(names, env)) as running:
        yield [running[name] for name in names]


def upload(server: Server, custom_ids: list[str]) -> str:
    body = b"".join(json.dumps(chat_line(i)).encode() + b"\n" for i in custom_ids)
    return client(server).files.create(file=("in.jsonl", io.BytesIO(body)), purpose="batch").id


def create(server: Server, file_id: str) -> Batch:
    return client(server).batches.create(
        input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
    )


def wait(server: Server, batch_id: str, statuses: tuple[str, ...], timeout: float = 300) -> Batch:
    sdk = client(server)

    def reached() -> Batch | None:
        batch = sdk.batches.retrieve(batch_id)
        return batch if batch.status in statuses else None

    return waiting.until(
        reached, timeout, lambda: f"batch still {sdk.batches.retrieve(batch_id).status}", 0.2
    )


def chunk_objects(batch_id: str, name: str) -> dict[int, dict]:
    """The object `name` (lease.json, done.json) of each chunk of the batch that has one, by
    chunk index, as the replicas wrote it in S3."""
    s3 = boto3.client("s3")
    prefix = f"store/batches/{batch_id}/chunks/"
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=REPLICA_BUCKET, Prefix=prefix)
    found = {}
    for page in pages:
        for item in page.get("Contents", []):
            index, _, rest = item["Key"][len(prefix) :].partition("/")
            if rest == name:
                body = s3.get_object(Bucket=REPLICA_BUCKET, Key=item["Key"])["Body"]
                found[int(index)] = json.load(body)
    return found


def held_chunks(batch_id: str) -> dict[str, int]:
    """Who holds a chunk of the batch now, and which chunk: the store's own lease rule
    (`leases.claimable`) on the leases in S3, at the store's clock (wall time; holders renew
    long before a lease runs out, so a live holder is always found)."""
    now = time.time()
    return {
        lease.owner: index
        for index, raw in chunk_objects(batch_id, "lease.json").items()
        if (lease := Lease.from_json(raw)).owner is not None and not claimable(lease, now)
    }


def chunk_owners(batch_id: str) -> set[str]:
    return set(held_chunks(batch_id))


def replica_of(owner: str, replicas: list[Server]) -> Server:
    """The replica a runner id (host/pid/nonce) names: its API server is vLLM's server, a
    process under `serve` (a replica that was killed names nothing)."""
    pid = int(owner.split("/")[1])

    def runs(replica: Server) -> bool:
        with contextlib.suppress(psutil.Error):
            return pid in {process.pid for process in replica.family()}
        return False

    return next(replica for replica in replicas if runs(replica))


def first_lines(batch_id: str) -> list[int]:
    """The number of each chunk's first line, from the batch's chunks in S3."""
    key = f"store/batches/{batch_id}/chunks.json"
    cut = json.load(boto3.client("s3").get_object(Bucket=REPLICA_BUCKET, Key=key)["Body"])
    return [chunk["first_line"] for chunk in cut["chunks"]]


def wait_for_owners(batch_id: str, count: int, timeout: float = 300) -> set[str]:
    return waiting.until(
        lambda: owners if len(owners := chunk_owners(batch_id)) >= count else None,
        timeout,
        lambda: f"only {chunk_owners(batch_id)} hold chunks",
        0.2,
    )


@contextlib.contextmanager
def all_paused(replicas: list[Server]) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for replica in replicas:
            stack.enter_context(replica.paused())
        yield


def answered(server: Server, batch: Batch) -> Counter[str]:
    sdk = client(server)
    lines = lines_of(sdk, batch.output_file_id) + lines_of(sdk, batch.error_file_id)
    return Counter(line["custom_id"] for line in lines)


def test_every_replica_answers_every_route_and_part_of_a_900_line_batch(
    replicas: list[Server],
) -> None:
    """Upload through one, create through a second, poll through the third. The batch is cut
    for the three replicas present, 12 chunks of 75 lines, and each replica's engine answers
    the lines of the chunks whose done.json names it, and no others; each custom_id once."""
    a, b, c = replicas
    ids = [f"r{i}" for i in range(LINES)]
    before = {replica.name: replica.metric(SUCCESSES) for replica in replicas}
    with all_paused(replicas):
        file_id = upload(a, ids)
        assert client(c).files.retrieve(file_id).bytes == client(a).files.retrieve(file_id).bytes
        batch = create(b, file_id)
        assert client(c).batches.retrieve(batch.id).status in ("validating", "in_progress")
        wait_for_owners(batch.id, 3)
    done = wait(c, batch.id, ("completed", "failed", "cancelled", "expired"))
    assert done.status == "completed" and done.request_counts is not None
    assert done.request_counts.model_dump() == {"total": LINES, "completed": LINES, "failed": 0}
    assert answered(a, done) == Counter(ids)
    assert done.usage is not None and done.usage.output_tokens > 0
    assert first_lines(batch.id) == list(range(1, LINES + 1, CHUNK)) and CHUNK == 75
    ran: Counter[str] = Counter()
    for finished in chunk_objects(batch.id, "done.json").values():
        ran[replica_of(finished["owner"], replicas).name] += finished["tallies"]["completed"]
    worked = {r.name: r.metric(SUCCESSES) - before[r.name] for r in replicas}
    assert ran == worked and len(ran) == 3 and sum(ran.values()) == LINES, (ran, worked)
    for replica in replicas:
        sdk = client(replica)
        assert batch.id in [listed.id for listed in sdk.batches.list(limit=10)]
        assert done.output_file_id in [listed.id for listed in sdk.files.list()]
        assert parse_lines(sdk.files.content(done.output_file_id).content)


def test_a_file_deleted_through_one_replica_is_gone_through_all(replicas: list[Server]) -> None:
    a, b, _ = replicas
    file_id = upload(a, ["d0"])
    assert client(b).files.delete(file_id).deleted
    for replica in replicas:
        with pytest.raises(openai.NotFoundError):
            client(replica).files.retrieve(file_id)


def test_a_cancel_through_one_replica_stops_the_batch_on_all(replicas: list[Server]) -> None:
    """Created through one replica while each holds a chunk (engines frozen), cancelled through
    another: the held chunks stop, the others are answered `batch_cancelled` without the
    engine, and every custom_id is answered once."""
    a, b, c = replicas
    ids = [f"c{i}" for i in range(LINES)]
    with all_paused(replicas):
        batch = create(a, upload(a, ids))
        wait_for_owners(batch.id, 3)
        assert client(b).batches.cancel(batch.id).status == "cancelling"
        # With every engine frozen only the cancel itself can move on (a replica may finish it).
        assert client(c).batches.retrieve(batch.id).status in ("cancelling", "cancelled")
    done = wait(c, batch.id, ("cancelled",), timeout=120)
    assert answered(a, done) == Counter(ids)
    sdk = client(b)
    errors = lines_of(sdk, done.error_file_id)
    assert errors and {line["error"]["code"] for line in errors} == {"batch_cancelled"}
    assert done.request_counts is not None
    assert done.request_counts.completed + done.request_counts.failed == LINES


def expire_now(batch_id: str) -> None:
    """End the batch's completion window, as time would (a 24 h window cannot pass in a test):
    it ends when the batch was created. Its object in S3 is changed with If-Match as the
    replicas change it (read again when one of them wrote first)."""
    s3 = boto3.client("s3")
    key = f"store/batches/{batch_id}/batch.json"
    for _ in range(10):
        found = s3.get_object(Bucket=REPLICA_BUCKET, Key=key)
        record = json.load(found["Body"])
        record["batch"]["expires_at"] = record["batch"]["created_at"]
        body = json.dumps(record).encode()
        with contextlib.suppress(s3.exceptions.ClientError):
            s3.put_object(Bucket=REPLICA_BUCKET, Key=key, Body=body, IfMatch=found["ETag"])
            return
    raise AssertionError(f"{key} kept changing")


def test_an_expired_window_stops_the_batch_on_all_replicas(replicas: list[Server]) -> None:
    """Three of the 12 chunks are held (engines frozen) when the window ends: the held ones
    stop or finish, and the other nine are answered `batch_expired` without the engine."""
    a, b, c = replicas
    ids = [f"x{i}" for i in range(LINES)]
    with all_paused(replicas):
        batch = create(a, upload(a, ids))
        wait_for_owners(batch.id, 3)
        expire_now(batch.id)
    done = wait(b, batch.id, ("expired",), timeout=120)
    assert done.expired_at is not None
    assert answered(c, done) == Counter(ids)
    errors = lines_of(client(c), done.error_file_id)
    assert len(errors) >= LINES - 3 * CHUNK
    assert {line["error"]["code"] for line in errors} == {"batch_expired"}
    assert done.request_counts is not None
    assert done.request_counts.completed + done.request_counts.failed == LINES


UNCHANGED: list[Callable[[Server], None]] = [
    test_batches_api.test_round_trip_with_lines_the_engine_refuses,
    test_batches_api.test_a_finished_batch_cannot_be_cancelled_and_is_not_retried,
    test_batches_api.test_list_pages_newest_first_and_ends,
    test_litellm.test_passthrough_upload_create_poll_and_content,
]


@pytest.mark.parametrize("test", UNCHANGED, ids=lambda test: test.__name__)
@pytest.mark.parametrize("replica", [0, 1])
def test_the_sdk_and_litellm_tests_pass_unchanged_on_the_s3_store(
    replicas: list[Server], test: Callable[[Server], None], replica: int
) -> None:
    """The Batches API's tests with the official SDK and LiteLLM, as they run on the local
    store, through two of the replicas."""
    test(replicas[replica])


def test_a_replica_killed_mid_batch_loses_no_line_and_answers_none_twice(
    replicas: list[Server],
) -> None:
    """`kill -9` of a replica holding a chunk: its lease runs out, another replica takes the
    chunk over (a later epoch), the batch completes, and every custom_id is answered exactly
    once. (The last test here: the killed replica stays down.)"""
    a, b, c = replicas
    ids = [f"k{i}" for i in range(LINES)]
    with contextlib.ExitStack() as frozen:
        for replica in (a, b):
            frozen.enter_context(replica.paused())
        c.pause()
        batch = create(a, upload(a, ids))
        wait_for_owners(batch.id, 3)
        held = held_chunks(batch.id)
        lost = next(index for owner, index in held.items() if replica_of(owner, replicas) is c)
        epoch = chunk_objects(batch.id, "lease.json")[lost]["epoch"]
        processes.kill(c.process)
    done = wait(a, batch.id, ("completed", "failed", "cancelled", "expired"))
    assert done.status == "completed"
    assert answered(b, done) == Counter(ids)
    assert done.request_counts is not None and done.request_counts.completed == LINES
    finished = chunk_objects(batch.id, "done.json")
    assert len(finished) == len(first_lines(batch.id)) == LINES // CHUNK
    assert finished[lost]["epoch"] > epoch
    assert replica_of(finished[lost]["owner"], replicas) in (a, b)
    assert all(replica_of(chunk["owner"], replicas) is not c for chunk in finished.values())
