"""The Batches API's rules without an engine: create parameters, usage, file validation, the
window under live traffic, the store's leases, and the size of a batch's chunks."""

import asyncio
import json
from pathlib import Path

import pytest

from vllm_sagemaker.core.batch_lines import MAX_LINES, validate
from vllm_sagemaker.core.errors import RequestError
from vllm_sagemaker.handler.batches.admission import rules as admission
from vllm_sagemaker.handler.batches.admission.window import BatchWindow
from vllm_sagemaker.handler.batches.api import batch_object
from vllm_sagemaker.handler.batches.api.batches import cancelled
from vllm_sagemaker.handler.batches.store.chunking import lines_per_chunk
from vllm_sagemaker.handler.batches.store.sqlite import Store
from vllm_sagemaker.handler.batches.store.types import Claim, StoredFile, Work
from vllm_sagemaker.handler.batches.store.usage import add_usage, zero_usage

SERVED = frozenset({"/v1/chat/completions", "/v1/completions", "/tokenize"})


def create(**changes: object) -> bytes:
    body = {"input_file_id": "file-a", "endpoint": "/v1/chat/completions"}
    return json.dumps({**body, "completion_window": "24h", **changes}).encode()


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        (create(endpoint="/v1/embeddings"), "invalid_value", "endpoint"),
        (create(endpoint="/tokenize"), "invalid_value", "endpoint"),
        (create(completion_window="48h"), "invalid_value", "completion_window"),
        (create(completion_window=""), "missing_required_parameter", "completion_window"),
        (create(input_file_id=None), "missing_required_parameter", "input_file_id"),
        (create(input_file_id=7), "invalid_type", "input_file_id"),
        (create(metadata=[1]), "invalid_type", "metadata"),
        (create(metadata={"k": 1}), "invalid_type", "metadata.k"),
        (
            create(metadata={str(i): "v" for i in range(17)}),
            "object_above_max_properties",
            "metadata",
        ),
        (create(metadata={"k": "v" * 513}), "string_above_max_length", "metadata.k"),
        (create(metadata={"k" * 65: "v"}), "invalid_value", "metadata"),
        (
            create(output_expires_after={"anchor": "x", "seconds": 4000}),
            "invalid_value",
            "output_expires_after",
        ),
        (
            create(output_expires_after={"anchor": "created_at", "seconds": 10}),
            "invalid_value",
            "output_expires_after.seconds",
        ),
        (b"[]", "invalid_request_error", None),
        (b"{not json", "invalid_json", None),
    ],
)
def test_create_refuses(body: bytes, code: str, param: str | None) -> None:
    with pytest.raises(RequestError) as refused:
        batch_object.create_params(body, SERVED)
    assert (refused.value.status, refused.value.code, refused.value.param) == (400, code, param)


def test_the_endpoint_error_lists_what_this_model_serves() -> None:
    with pytest.raises(RequestError) as refused:
        batch_object.create_params(create(endpoint="/v1/x"), SERVED)
    assert refused.value.message == (
        "Invalid value: '/v1/x'. Supported values are: '/v1/chat/completions', and "
        "'/v1/completions'."
    )


def test_a_new_batch_is_validating_and_expires_after_the_window() -> None:
    params = batch_object.create_params(
        create(metadata={"a": "b"}, output_expires_after={"anchor": "created_at", "seconds": 7200}),
        SERVED,
    )
    batch = batch_object.new_batch("batch_1", params, 1000, 86400)
    assert (batch["status"], batch["expires_at"], batch["metadata"]) == (
        "validating",
        87400,
        {"a": "b"},
    )
    assert batch["output_expires_after"] == {"anchor": "created_at", "seconds": 7200}
    assert batch["request_counts"] == {"total": 0, "completed": 0, "failed": 0}


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        ({"prompt_tokens": 3, "completion_tokens": 4}, (3, 4, 0, 0)),
        ({"prompt_tokens": 5, "total_tokens": 5}, (5, 0, 0, 0)),
        (
            {
                "input_tokens": 2,
                "output_tokens": 6,
                "input_tokens_details": {"cached_tokens": 1},
                "output_tokens_details": {"reasoning_tokens": 2},
            },
            (2, 6, 1, 2),
        ),
        ({"prompt_tokens": -1, "completion_tokens": "x"}, (0, 0, 0, 0)),
        ({}, (0, 0, 0, 0)),
    ],
)
def test_usage_adds_up_every_kind(usage: dict, expected: tuple[int, int, int, int]) -> None:
    total = zero_usage()
    add_usage(total, usage)
    found = (
        total["input_tokens"],
        total["output_tokens"],
        total["input_tokens_details"]["cached_tokens"],
        total["output_tokens_details"]["reasoning_tokens"],
    )
    assert found == expected
    assert total["total_tokens"] == expected[0] + expected[1]


def line(custom_id: str, **body: object) -> bytes:
    record = {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions"}
    return json.dumps({**record, "body": {"messages": [], **body}}).encode()


def test_validation_counts_requests_and_takes_the_first_model() -> None:
    found = validate([line("a"), b"", line("b", model="m")], "/v1/chat/completions", SERVED, ["m"])
    assert (found.total, found.errors, found.model) == (2, [], "m")


def test_validation_lists_every_bad_line_with_its_number() -> None:
    lines = [line("a"), b"{", line("a"), line("c", stream=True)]
    found = validate(lines, "/v1/chat/completions", SERVED, ["m"])
    assert [(e["line"], e["code"]) for e in found.errors] == [
        (2, "invalid_json_line"),
        (3, "duplicate_custom_id"),
        (4, "streaming_unsupported"),
    ]


def test_validation_refuses_empty_and_oversized_files() -> None:
    assert [
        e["code"] for e in validate([b"", b" "], "/v1/chat/completions", SERVED, []).errors
    ] == ["empty_file"]
    many = (line(f"r{i}") for i in range(MAX_LINES + 1))
    found = validate(many, "/v1/chat/completions", SERVED, [])
    assert [e["code"] for e in found.errors] == ["too_many_requests"]


@pytest.mark.parametrize(
    ("status", "after"),
    [
        ("validating", "cancelling"),
        ("in_progress", "cancelling"),
        ("finalizing", "cancelling"),
        ("cancelling", None),
        ("cancelled", None),
        ("completed", None),
        ("failed", None),
        ("expired", None),
    ],
)
def test_cancel_transitions(status: str, after: str | None) -> None:
    changed = cancelled({"status": status, "cancelling_at": None}, 5)
    assert (changed["status"] if changed else None) == after


@pytest.mark.parametrize(("yields", "limit"), [(True, 16), (False, 256)])
def test_a_live_request_after_a_quiet_spell_shrinks_the_window(yields: bool, limit: int) -> None:
    window = BatchWindow(admission.Settings(full=256), yields)
    assert window.limit() == 256
    with window.live():
        assert window.limit() == limit


def test_the_window_never_closes() -> None:
    window = BatchWindow(admission.Settings(full=3), yields=True)
    with window.live():
        assert window.limit() == 1


def test_batch_work_finds_room_only_within_the_window() -> None:
    """Slots are taken like a semaphore's; a batch-marked invocation that finds none within its
    hold is throttled, and finds one as soon as a slot is released."""

    async def scenario() -> tuple[bool, bool, bool]:
        window = BatchWindow(admission.Settings(full=2), yields=True)
        await window.acquire()
        await window.acquire()
        full = window.locked()
        throttled = not await window.room(0.01)
        asyncio.get_running_loop().call_soon(window.release)
        return full, throttled, await window.room(600)

    assert asyncio.run(scenario()) == (True, True, True)


def test_an_event_loop_that_falls_behind_caps_the_batch() -> None:
    """One wake-up of the event loop 0.2 s late, while 8 lines run: the cap halves from the lines
    in flight; lines already running keep running. An on-time wake-up changes nothing."""

    async def scenario() -> tuple[int | None, int, int]:
        window = BatchWindow(admission.Settings(full=8), yields=True)
        for _ in range(8):
            await window.acquire()
        window.note_lag(0.0, 100.0)
        on_time = window.state.cap
        window.note_lag(0.2, 100.05)
        return on_time, window.limit(), window.running

    assert asyncio.run(scenario()) == (None, 4, 8)


def claimed(claim: Claim | None) -> str | None:
    return None if claim is None else claim.batch["id"]


def batch(batch_id: str, status: str = "validating") -> dict:
    return {"id": batch_id, "status": status, "request_counts": {"total": 0}}


def test_a_held_batch_is_claimed_once_and_taken_over_when_its_lease_ends(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    store.add_batch(batch("batch_a"))
    assert claimed(store.claim("one", 15, 5, now=100)) == "batch_a"
    assert store.claim("two", 15, 5, now=101) is None
    assert claimed(store.claim("two", 15, 5, now=116)) == "batch_a"
    assert store.change_batch("batch_a", lambda b: {**b, "status": "in_progress"}, "one") is None
    assert store.change_batch("batch_a", lambda b: {**b, "status": "in_progress"}, "two")


def test_no_more_than_max_running_batches_are_claimed(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    for name in ("batch_a", "batch_b", "batch_c"):
        store.add_batch(batch(name))
    first = store.claim("p", 15, 2, now=100)
    assert [claimed(first), claimed(store.claim("p", 15, 2, now=100))] == ["batch_a", "batch_b"]
    assert store.claim("p", 15, 2, now=100) is None
    assert first is not None
    store.release(first)
    assert claimed(store.claim("q", 15, 2, now=100)) == "batch_a"


@pytest.mark.parametrize(
    ("status", "work"),
    [
        ("validating", Work.VALIDATE),
        ("in_progress", Work.LINES),
        ("finalizing", Work.LINES),
        ("cancelling", Work.LINES),
    ],
)
def test_a_batch_is_validated_then_its_lines_run_whole(
    tmp_path: Path, status: str, work: Work
) -> None:
    store = Store(str(tmp_path))
    store.add_batch(batch("batch_a", status))
    claim = store.claim("p", 15, 1)
    assert claim is not None and (claim.work, claim.chunk) == (work, None)


def test_final_batches_are_never_claimed(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    for status in ("completed", "failed", "cancelled", "expired"):
        store.add_batch(batch(f"batch_{status}", status))
    assert store.claim("p", 15, 9) is None


def test_finishing_twice_after_a_crash_keeps_one_file(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    store.add_batch(batch("batch_a", "in_progress"))
    store.claim("p", 15, 1)
    results = tmp_path / "out.jsonl"
    results.write_bytes(b"line\n")
    stored = StoredFile("file-a-output", 5, 1, "batch_a_output.jsonl", "batch_output", None)
    store.change_batch("batch_a", lambda b: {**b, "status": "finalizing"}, "p")
    store.body_path(stored.id).write_bytes(b"line\n")
    done = store.finish_batch(
        "batch_a", "p", [(stored, results)], lambda b: {**b, "status": "completed"}
    )
    assert done is not None and done["status"] == "completed"
    assert store.file("file-a-output") is not None
    assert store.body_path(stored.id).read_bytes() == b"line\n"
    assert store.finish_batch("batch_a", "p", [(stored, results)], lambda b: b) is None


@pytest.mark.parametrize(
    ("lines", "runners", "override", "per_chunk"),
    [
        # Four chunks per runner present.
        (900, 3, None, 75),  # 12 chunks: each of three replicas runs four
        (900, 1, None, 225),
        (901, 3, None, 76),  # rounded up: never a thirteenth chunk of one line
        (3000, 1, None, 750),
        (2400, 2, None, 300),
        (900, 0, None, 225),  # none seen yet: the runner cutting it counts as one
        # At least 50 lines: a chunk's dozen S3 requests spread over enough lines.
        (100, 3, None, 50),
        (10, 8, None, 50),
        (0, 3, None, 50),
        (600, 3, None, 50),
        (601, 3, None, 51),
        # At most 1,000: a takeover redoes at most that many lines.
        (50_000, 3, None, 1000),
        (8000, 1, None, 1000),
        (12_000, 3, None, 1000),
        (12_012, 3, None, 1000),
        # SAGEMAKER_BATCH_CHUNK_LINES wins, outside the bounds too.
        (900, 3, 1000, 1000),
        (900, 3, 10, 10),
        (50_000, 1, 5000, 5000),
    ],
)
def test_lines_per_chunk(lines: int, runners: int, override: int | None, per_chunk: int) -> None:
    assert lines_per_chunk(lines, runners, override) == per_chunk
