"""The local transform job's rules: JSONPath, DataProcessing, packing, SageMaker's precedence
and limits, and output assembly, as tables of cases."""

import io
import json
import re
from typing import Any

import pytest

from vllm_sagemaker.core.config import MIB
from vllm_sagemaker.deploy.base.errors import ClientError, UsageError
from vllm_sagemaker.deploy.base.ordered import packed, payload_problem
from vllm_sagemaker.deploy.transform.data_processing import DataProcessing
from vllm_sagemaker.deploy.transform.job import (
    MiniBatch,
    ResolvedParameters,
    TransformJob,
    assembled,
    batches,
    check,
    settings,
)
from vllm_sagemaker.deploy.transform.jsonpath import JsonPathError, compiled

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
    assert compiled(expression)(RECORD) == value


@pytest.mark.parametrize("expression", ["id", "$..id", "$[?(@.id)]", "$.a[b]", "$.", "$[x:y]"])
def test_unsupported_jsonpath_is_refused(expression: str) -> None:
    with pytest.raises(JsonPathError):
        compiled(expression)


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
            DataProcessing(join_input=True, output_filter=compiled("$['id','SageMakerOutput']")),
            b'{"id": 1, "prompt": "p"}',
            OUT,
            {"id": 1, "SageMakerOutput": {"choices": [1]}},
        ),
        (
            DataProcessing(output_filter=compiled("$.choices[0]")),
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
    assert DataProcessing(input_filter=compiled(expression)).filtered_input(record) == sent


@pytest.mark.parametrize(
    ("sizes", "max_bytes", "max_items", "grouped"),
    [
        ((3, 3, 3), 8, 0, [[3, 3], [3]]),
        ((3, 3, 3), 9, 0, [[3, 3, 3]]),
        ((3, 3, 3), 100, 1, [[3], [3], [3]]),
        ((3, 3, 3), 100, 2, [[3, 3], [3]]),
        ((3, 3, 3), 0, 0, [[3, 3, 3]]),  # no limit at all
        ((7, 1, 1), 8, 0, [[7, 1], [1]]),
        ((9, 1), 8, 0, [[9], [1]]),  # over the limit alone: the caller refuses it first
        ((), 8, 0, []),
    ],
)
def test_packing(sizes: tuple[int, ...], max_bytes: int, max_items: int, grouped: list) -> None:
    """The one packer of transform and batch: a byte limit and a record count (0: none)."""
    assert list(packed(sizes, lambda size: size, max_bytes, max_items)) == grouped


def lines(*sizes: int) -> io.BytesIO:
    return io.BytesIO(b"".join(b"s" * size + b"\n" for size in sizes))


SPLIT = TransformJob("h", "i", "o", split_lines=True)


@pytest.mark.parametrize(
    ("job", "sizes", "chosen", "bodies"),
    [
        (SPLIT, (3, 3, 3), ResolvedParameters(1, True, 1), [12]),
        (SPLIT, (3, 3, 3), ResolvedParameters(1, False, 1), [4, 4, 4]),
        (SPLIT, (3, 3, 3), ResolvedParameters(1, False, 0), [4, 4, 4]),
        (TransformJob("h", "i", "o"), (3, 3), ResolvedParameters(1, True, 1), [8]),
    ],
)
def test_a_file_s_requests(
    job: TransformJob, sizes: tuple[int, ...], chosen: ResolvedParameters, bodies: list[int]
) -> None:
    assert [len(batch.body()) for batch in batches(lines(*sizes), job, chosen)] == bodies


@pytest.mark.parametrize(
    ("job", "size", "line"),
    [
        (SPLIT, MIB, f"record 2 is {MIB + 1} bytes, more than MaxPayloadInMB allows ({MIB} bytes)"),
        (TransformJob("h", "i", "o"), MIB, "use SplitType Line"),
    ],
)
def test_a_record_over_the_payload_fails_its_file(job: TransformJob, size: int, line: str) -> None:
    with pytest.raises(ClientError, match=re.escape(line)):
        list(batches(lines(3, size), job, ResolvedParameters(1, True, 1)))


JOB = TransformJob("http://x", "in", "out")


@pytest.mark.parametrize(
    ("job", "answer", "expected"),
    [
        (JOB, {}, ResolvedParameters(1, True, 6)),
        (
            JOB,
            {"MaxConcurrentTransforms": 2, "BatchStrategy": "MULTI_RECORD", "MaxPayloadInMB": 1},
            ResolvedParameters(2, True, 1),
        ),
        (JOB, {"BatchStrategy": "SINGLE_RECORD"}, ResolvedParameters(1, False, 6)),
        (JOB, {"MaxPayloadInMB": 0}, ResolvedParameters(1, True, 0)),
        (
            TransformJob("h", "i", "o", max_payload_mb=0),
            {"MaxPayloadInMB": 2},
            ResolvedParameters(1, True, 0),
        ),
        (
            TransformJob("http://x", "in", "out", max_payload_mb=4, batch_strategy="SingleRecord"),
            {"MaxConcurrentTransforms": 8, "BatchStrategy": "MULTI_RECORD", "MaxPayloadInMB": 1},
            ResolvedParameters(8, False, 4),
        ),
    ],
)
def test_sagemaker_precedence(
    job: TransformJob, answer: dict, expected: ResolvedParameters
) -> None:
    assert settings(job, answer) == expected


@pytest.mark.parametrize(
    ("job", "answer", "line"),
    [
        (
            TransformJob("http://x", "in", "out", max_payload_mb=100000, split_lines=True),
            {},
            "--max-payload-mb 100000: must be from 1 to 100",
        ),
        (
            TransformJob("http://x", "in", "out", max_payload_mb=0, split_lines=True),
            {},
            "--max-payload-mb 0: must be from 1 to 100 (0, no limit, is for SingleRecord or "
            "SplitType None)",
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
            "the container's MaxPayloadInMB 500: must be from 0 to 100",
        ),
        (
            TransformJob("http://x", "in", "out", max_concurrent_transforms=-1),
            {},
            "--max-concurrent-transforms -1: must be at least 0 (0: the container's)",
        ),
    ],
)
def test_limits_sagemaker_enforces(job: TransformJob, answer: dict, line: str) -> None:
    """Each limit is said with where the value came from: the option, or the container."""
    with pytest.raises(UsageError) as refused:
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
        TransformJob("h", "i", "o", max_payload_mb=101),
        TransformJob("h", "i", "o", max_payload_mb=20, max_concurrent_transforms=6),
    ],
)
def test_jobs_sagemaker_would_refuse(job: TransformJob) -> None:
    with pytest.raises(UsageError):
        check(job)


def test_assembly() -> None:
    batch = MiniBatch([(b'{"id": 1}', b'{"id": 1}'), (b'{"id": 2}', b'{"id": 2}')])
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
    with pytest.raises(ClientError, match="answered 1 records for a mini-batch of 2"):
        assembled(batch, b'{"r": 1}\n', joined)


@pytest.mark.parametrize(
    ("payload", "concurrency", "packs", "problem"),
    [
        (6, 1, True, None),
        (100, 1, True, None),
        (0, 8, False, None),  # no limit: a record or file sent whole
        (50, 0, True, None),  # 0: the container's concurrency
        (
            0,
            1,
            True,
            "--max-payload-mb 0: must be from 1 to 100 (0, no limit, is for "
            "SingleRecord or SplitType None)",
        ),
        (101, 1, False, "--max-payload-mb 101: must be from 0 to 100"),
        (6, -1, True, "--max-concurrent-transforms -1: must be at least 0 (0: the container's)"),
        (
            20,
            6,
            True,
            "--max-payload-mb 20 times --max-concurrent-transforms 6 = 120 MB: SageMaker "
            "allows at most 100 MB in flight per instance",
        ),
    ],
)
def test_the_payload_rule(payload: int, concurrency: int, packs: bool, problem: str | None) -> None:
    """CreateTransformJob's MaxPayloadInMB and MaxConcurrentTransforms, the one rule of
    `transform` (and of `deploy transform` and `deploy batch`)."""
    assert payload_problem(payload, concurrency, packs) == problem
