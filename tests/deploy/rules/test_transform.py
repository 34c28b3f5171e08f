"""The local transform job's rules: JSONPath, DataProcessing, packing, SageMaker's precedence
and output assembly, as tables of cases."""

import json
from typing import Any

import pytest

from vllm_sagemaker.deploy.transform.data_processing import DataProcessing
from vllm_sagemaker.deploy.transform.job import (
    FileFailed,
    JobError,
    Settings,
    TransformJob,
    assembled,
    check,
    settings,
)
from vllm_sagemaker.deploy.transform.jsonpath import JsonPath, JsonPathError
from vllm_sagemaker.deploy.transform.packing import RecordTooLarge, mini_batches, whole_file

RECORD = {"id": 7, "a": {"b": [10, 20, 30, 40]}, "tags": ["x", "y"], "SageMakerOutput": {"v": 1}}


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("$", RECORD),
        ("$.id", 7),
        ("$['id']", 7),
        ('$["id"]', 7),
        ("$.a.b", [10, 20, 30, 40]),
        ("$.a.b[0]", 10),
        ("$.a.b[-1]", 40),
        ("$.a.b[0,2]", [10, 30]),
        ("$.a.b[1:3]", [20, 30]),
        ("$.a.b[2:]", [30, 40]),
        ("$.a.b[:-3]", [10]),
        ("$.a.b[0,5:]", [10]),
        ("$.a.b[*]", [10, 20, 30, 40]),
        ("$['id','SageMakerOutput']", {"id": 7, "SageMakerOutput": {"v": 1}}),
        ("$['id', 'missing']", {"id": 7}),
        ("$.missing", None),
        ("$.a.b[9]", None),
        ("$.id.deeper", None),
        ("$.tags.*", ["x", "y"]),
        ("$.*", [7, {"b": [10, 20, 30, 40]}, ["x", "y"], {"v": 1}]),
    ],
)
def test_jsonpath(expression: str, value: Any) -> None:
    assert JsonPath.compile(expression)(RECORD) == value


@pytest.mark.parametrize("expression", ["id", "$..id", "$[?(@.id)]", "$.a[b]", "$.", "$[x:y]"])
def test_unsupported_jsonpath_is_refused(expression: str) -> None:
    with pytest.raises(JsonPathError):
        JsonPath.compile(expression)


OUT = b'{"choices": [1]}'


@pytest.mark.parametrize(
    ("processing", "record", "answer", "output"),
    [
        (DataProcessing(), b'{"id": 1}', OUT, {"choices": [1]}),
        (
            DataProcessing(join_input=True),
            b'{"id": 1, "prompt": "p"}',
            OUT,
            {"id": 1, "prompt": "p", "SageMakerOutput": {"choices": [1]}},
        ),
        (
            DataProcessing(join_input=True),
            b"[1, 2]",
            OUT,
            {"SageMakerInput": [1, 2], "SageMakerOutput": {"choices": [1]}},
        ),
        (
            DataProcessing(join_input=True),
            b"{not json",
            b'{"error": {"code": "invalid_json"}}',
            {"SageMakerInput": "{not json", "SageMakerOutput": {"error": {"code": "invalid_json"}}},
        ),
        (
            DataProcessing(
                join_input=True, output_filter=JsonPath.compile("$['id','SageMakerOutput']")
            ),
            b'{"id": 1, "prompt": "p"}',
            OUT,
            {"id": 1, "SageMakerOutput": {"choices": [1]}},
        ),
        (
            DataProcessing(output_filter=JsonPath.compile("$.choices[0]")),
            b'{"id": 1}',
            OUT,
            1,
        ),
    ],
)
def test_join_and_output_filter(
    processing: DataProcessing, record: bytes, answer: bytes, output: Any
) -> None:
    written = processing.output(record, answer)
    assert b"\n" not in written
    assert json.loads(written) == output


@pytest.mark.parametrize(
    ("expression", "record", "sent"),
    [
        ("$.body", b'{"id": 1, "body": {"prompt": "p"}}', b'{"prompt":"p"}'),
        (
            "$['prompt','max_tokens']",
            b'{"id": 1, "prompt": "p", "max_tokens": 2}',
            b'{"prompt":"p","max_tokens":2}',
        ),
        ("$.body", b"{not json", b"{not json"),
    ],
)
def test_input_filter(expression: str, record: bytes, sent: bytes) -> None:
    assert DataProcessing(input_filter=JsonPath.compile(expression)).filtered_input(record) == sent


def pairs(*sizes: int) -> list[tuple[bytes, bytes]]:
    return [(b"o" * size, b"s" * size) for size in sizes]


@pytest.mark.parametrize(
    ("sizes", "max_bytes", "multi", "grouped"),
    [
        ((3, 3, 3), 8, True, [[3, 3], [3]]),
        ((3, 3, 3), 12, True, [[3, 3, 3]]),
        ((3, 3, 3), 100, False, [[3], [3], [3]]),
        ((7, 0, 0), 8, True, [[7], [0, 0]]),
        ((), 8, True, []),
    ],
)
def test_packing(sizes: tuple[int, ...], max_bytes: int, multi: bool, grouped: list) -> None:
    batches = list(mini_batches(pairs(*sizes), max_bytes, multi))
    assert [[len(s) for s in batch.sent] for batch in batches] == grouped
    for batch in batches:
        assert len(batch.body()) <= max_bytes
        assert batch.body().count(b"\n") == len(batch.sent)


def test_a_record_over_the_payload_fails_its_file() -> None:
    with pytest.raises(RecordTooLarge, match="record 2"):
        list(mini_batches(pairs(3, 9), 8, True))
    with pytest.raises(RecordTooLarge, match="SplitType Line"):
        whole_file(b"x" * 9, 8)
    assert whole_file(b"a\nb\n", 8).body() == b"a\nb\n"


JOB = TransformJob("http://x", "in", "out")


@pytest.mark.parametrize(
    ("job", "answer", "expected"),
    [
        (JOB, None, Settings(1, True, 6)),
        (
            JOB,
            {"MaxConcurrentTransforms": 2, "BatchStrategy": "MULTI_RECORD", "MaxPayloadInMB": 1},
            Settings(2, True, 1),
        ),
        (JOB, {"BatchStrategy": "SINGLE_RECORD"}, Settings(1, False, 6)),
        (
            TransformJob("http://x", "in", "out", max_payload_mb=4, batch_strategy="SingleRecord"),
            {"MaxConcurrentTransforms": 8, "BatchStrategy": "MULTI_RECORD", "MaxPayloadInMB": 1},
            Settings(8, False, 4),
        ),
    ],
)
def test_sagemaker_precedence(job: TransformJob, answer: dict | None, expected: Settings) -> None:
    assert settings(job, answer) == expected


@pytest.mark.parametrize(
    ("job", "answer", "line"),
    [
        (
            TransformJob("http://x", "in", "out", max_payload_mb=100000),
            None,
            "--max-payload-mb 100000: must be from 1 to 100",
        ),
        (
            TransformJob("http://x", "in", "out", max_concurrent_transforms=30),
            {"MaxPayloadInMB": 6},
            "the container's MaxPayloadInMB 6 times --max-concurrent-transforms 30 = 180 MB: "
            "SageMaker allows at most 100 MB in flight per instance",
        ),
        (
            TransformJob("http://x", "in", "out"),
            {"MaxPayloadInMB": 500},
            "the container's MaxPayloadInMB 500: must be from 1 to 100",
        ),
        (
            TransformJob("http://x", "in", "out", max_concurrent_transforms=-1),
            None,
            "--max-concurrent-transforms -1: must be at least 1",
        ),
    ],
)
def test_limits_sagemaker_enforces(job: TransformJob, answer: dict | None, line: str) -> None:
    """Each limit is said with where the value came from: the option, or the container."""
    with pytest.raises(JobError) as refused:
        settings(job, answer)
    assert str(refused.value) == line


@pytest.mark.parametrize(
    "job",
    [
        TransformJob(
            "h",
            "i",
            "o",
            content_type="application/jsonlines",
            processing=DataProcessing(join_input=True),
            split_lines=True,
            assemble_lines=True,
        ),
        TransformJob(
            "h",
            "i",
            "o",
            content_type="a",
            accept="a",
            processing=DataProcessing(join_input=True),
            split_lines=True,
        ),
        TransformJob("h", "i", "o", max_retries=4),
        TransformJob("h", "i", "o", timeout_s=0),
    ],
)
def test_jobs_sagemaker_would_refuse(job: TransformJob) -> None:
    with pytest.raises(JobError):
        check(job)


def test_assembly() -> None:
    batch = next(
        mini_batches([(b'{"id": 1}', b'{"id": 1}'), (b'{"id": 2}', b'{"id": 2}')], 100, True)
    )
    answer = b'{"r": 1}\n{"r": 2}\n'
    assert assembled(batch, answer, JOB) == answer
    lines = TransformJob("h", "i", "o", assemble_lines=True, split_lines=True)
    assert assembled(batch, answer.rstrip(), lines) == answer
    joined = TransformJob(
        "h",
        "i",
        "o",
        split_lines=True,
        assemble_lines=True,
        processing=DataProcessing(join_input=True),
    )
    assert assembled(batch, answer, joined).splitlines() == [
        b'{"id":1,"SageMakerOutput":{"r":1}}',
        b'{"id":2,"SageMakerOutput":{"r":2}}',
    ]
    with pytest.raises(FileFailed, match="answered 1 records for a mini-batch of 2"):
        assembled(batch, b'{"r": 1}\n', joined)
