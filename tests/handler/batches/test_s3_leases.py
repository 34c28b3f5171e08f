"""The shared store's lease rules: as pure functions, and as conditional writes against a moto
S3 server (which enforces If-None-Match and If-Match), with no engine.

Each scenario is a table of steps on one fresh chunk: which runner does what at which moment,
and what it must get."""

import concurrent.futures
import io
import itertools
import uuid

import boto3
import pytest

from vllm_sagemaker.handler.batches.store import leases
from vllm_sagemaker.handler.batches.store.leases import Lease
from vllm_sagemaker.handler.batches.store.s3.chunks import Chunks, Held
from vllm_sagemaker.handler.batches.store.s3.objects import Bucket, Conflict, parse_uri
from vllm_sagemaker.handler.batches.store.s3.replicas import FRESH_S, present
from vllm_sagemaker.handler.batches.store.types import StoreError

LEASE_S = 10.0
A, B = "host-a/1/aa", "host-b/2/bb"


@pytest.mark.parametrize(
    ("lease", "now", "expected"),
    [
        (None, 0, True),
        (Lease(None, 0, 3), 0, True),
        (Lease(A, 10, 1), 9.9, False),
        (Lease(A, 10, 1), 10, True),
    ],
)
def test_claimable(lease: Lease | None, now: float, expected: bool) -> None:
    assert leases.claimable(lease, now) is expected


@pytest.mark.parametrize(
    ("lease", "expected"),
    [
        (None, Lease(B, 15, 1)),
        (Lease(None, 0, 4), Lease(B, 15, 5)),
        (Lease(A, 5, 2), Lease(B, 15, 3)),
        (Lease(A, 6, 2), None),
    ],
)
def test_claimed_takes_the_next_epoch(lease: Lease | None, expected: Lease | None) -> None:
    assert leases.claimed(lease, B, 5, LEASE_S) == expected


@pytest.mark.parametrize(
    ("lease", "now", "expected"),
    [
        (Lease(A, 10, 1), 5, Lease(A, 15, 1)),
        (Lease(A, 10, 1), 10, None),
        (Lease(B, 10, 2), 5, None),
        (Lease(A, 10, 2), 5, None),
        (None, 5, None),
    ],
)
def test_renewed_only_by_its_holder_in_time(
    lease: Lease | None, now: float, expected: Lease | None
) -> None:
    assert leases.renewed(lease, Lease(A, 10, 1), now, LEASE_S) == expected


def test_released_keeps_the_epoch() -> None:
    assert leases.released(Lease(A, 10, 4)) == Lease(None, 0, 4)
    assert leases.claimable(leases.released(Lease(A, 10, 4)), 0)


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ({}, set()),
        ({A: 100}, {A}),
        ({A: 100, B: 100 - FRESH_S}, {A, B}),
        ({A: 100, B: 100 - FRESH_S - 1}, {A}),
        ({A: 3, B: 1000}, {B}),
        # Measured against the newest heartbeat, not this machine's clock: a store whose
        # runners all beat long ago (by S3's clock) still counts them.
        ({A: 5, B: 7, "c": 9}, {A, B, "c"}),
    ],
)
def test_present_runners_beat_within_three_beats_of_the_newest(
    written: dict[str, float], expected: set[str]
) -> None:
    assert present(written) == expected


@pytest.mark.parametrize(
    ("uri", "bucket", "prefix"),
    [
        ("s3://b", "b", ""),
        ("s3://b/", "b", ""),
        ("s3://b/store", "b", "store/"),
        ("s3://b/a/store/", "b", "a/store/"),
    ],
)
def test_store_uri(uri: str, bucket: str, prefix: str) -> None:
    assert parse_uri(uri) == (bucket, prefix)


@pytest.mark.parametrize("uri", ["s3://", "s3:///x", "/local/dir", "https://b/x"])
def test_bad_store_uri(uri: str) -> None:
    with pytest.raises(StoreError, match="s3://bucket/prefix/"):
        parse_uri(uri)


@pytest.fixture
def bucket(aws: dict[str, str]) -> Bucket:
    name = f"leases-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=name)
    return Bucket(f"s3://{name}/store/")


def test_conditional_writes_are_enforced(bucket: Bucket) -> None:
    etag = bucket.create_json("x.json", {"v": 1})
    with pytest.raises(Conflict):
        bucket.create_json("x.json", {"v": 2})
    newer = bucket.replace_json("x.json", {"v": 2}, etag)
    with pytest.raises(Conflict):
        bucket.replace_json("x.json", {"v": 3}, etag)
    found = bucket.get_json("x.json")
    assert found is not None and found.value == {"v": 2} and found.etag == newer
    assert bucket.get_json("missing.json") is None


# A step: (runner, action, moment, expected). `claim` expects the epoch it gets (None: refused);
# `renew` whether the lease is still the runner's; `finish` whether this run's results became
# the chunk's. `release` expects nothing. The chunk's final `done` epoch closes each scenario.
SCENARIOS = {
    "first claim wins, the second waits": (
        [(A, "claim", 0, 1), (B, "claim", 1, None), (A, "finish", 2, True)],
        1,
    ),
    "a held lease is renewed and keeps others out": (
        [
            (A, "claim", 0, 1),
            (A, "renew", 8, True),
            (B, "claim", 12, None),
            (A, "finish", 13, True),
        ],
        1,
    ),
    "a dead runner's chunk is taken over when its lease runs out": (
        [(A, "claim", 0, 1), (B, "claim", 10, 2), (B, "finish", 11, True)],
        2,
    ),
    "the runner taken over can no longer renew": (
        [(A, "claim", 0, 1), (B, "claim", 11, 2), (A, "renew", 12, False), (B, "renew", 12, True)],
        None,
    ),
    "a lease that ran out is not revived by its holder": (
        [(A, "claim", 0, 1), (A, "renew", 10, False), (B, "claim", 10, 2)],
        None,
    ),
    "fenced: the runner taken over writes, but the chunk keeps the new run": (
        [
            (A, "claim", 0, 1),
            (B, "claim", 11, 2),
            (B, "finish", 12, True),
            (A, "finish", 13, False),
        ],
        2,
    ),
    "fenced: a slow runner that finishes first is the one kept, once": (
        [
            (A, "claim", 0, 1),
            (B, "claim", 11, 2),
            (A, "finish", 12, True),
            (B, "finish", 13, False),
        ],
        1,
    ),
    "a released chunk is claimed at once": (
        [(A, "claim", 0, 1), (A, "release", 1, None), (B, "claim", 1, 2), (B, "finish", 2, True)],
        2,
    ),
    "a release after a takeover gives nothing up": (
        [
            (A, "claim", 0, 1),
            (B, "claim", 10, 2),
            (A, "release", 11, None),
            (A, "claim", 11, None),
        ],
        None,
    ),
    "a finished chunk is never claimed again": (
        [(A, "claim", 0, 1), (A, "finish", 1, True), (B, "claim", 20, None)],
        1,
    ),
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_lease_scenarios_against_s3(bucket: Bucket, scenario: str) -> None:
    steps, done_epoch = SCENARIOS[scenario]
    chunks = Chunks(bucket, "batch_leases")
    held: dict[str, Held] = {}
    for number, (runner, action, moment, expected) in enumerate(steps, start=1):
        where = f"step {number}: {runner} {action} at {moment}"
        if action == "claim":
            got = chunks.claim(0, runner, LEASE_S, now=moment)
            assert (got and got.lease.epoch) == expected, where
            if got is not None:
                held[runner] = got
        elif action == "renew":
            renewed = chunks.renew(held[runner], LEASE_S, now=moment)
            assert (renewed is not None) is expected, where
            if renewed is not None:
                held[runner] = renewed
        elif action == "release":
            chunks.release(held[runner])
        elif action == "finish":
            lines = f'{{"custom_id": "{runner}"}}\n'.encode()
            chunks.write_results(held[runner], "output", io.BytesIO(lines))
            assert chunks.finish(held[runner], {"completed": 1}) is expected, where
    done = chunks.done(0)
    assert (done and done.epoch) == done_epoch
    if done is not None:
        kept = bucket.open(chunks.results_key(0, done.epoch, "output")).read()
        owner = next(runner for runner, h in held.items() if h.lease.epoch == done.epoch)
        assert kept == f'{{"custom_id": "{owner}"}}\n'.encode()


def test_runners_racing_for_every_chunk_never_share_one(bucket: Bucket) -> None:
    """Four runners claim the same 16 free chunks at the same moment from four threads: S3
    lets exactly one create each lease."""
    chunks = Chunks(bucket, "batch_race")
    runners = [f"host-{n}/1/x" for n in range(4)]

    def claim_all(runner: str) -> list[int]:
        return [index for index in range(16) if chunks.claim(index, runner, LEASE_S, now=0)]

    with concurrent.futures.ThreadPoolExecutor(len(runners)) as pool:
        won = list(pool.map(claim_all, runners))
    assert sorted(itertools.chain.from_iterable(won)) == list(range(16)), won


def test_finished_lists_the_finished_chunks_and_who_ran_them(bucket: Bucket) -> None:
    chunks = Chunks(bucket, "batch_finished")
    for index, runner in ((0, A), (2, B), (5, A)):
        held = chunks.claim(index, runner, LEASE_S, now=0)
        assert held is not None and chunks.finish(held, {"completed": 0})
    assert chunks.claim(1, A, LEASE_S, now=0) is not None
    assert chunks.survey().finished == {0, 2, 5}
    ran = [bucket.get_json(f"batches/batch_finished/chunks/{n:06d}/done.json") for n in (0, 2, 5)]
    assert [found and found.value["owner"] for found in ran] == [A, B, A]
