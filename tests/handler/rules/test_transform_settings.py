"""Multi-record bodies and Batch Transform settings: tables of cases for the pure rules."""

import json

import pytest

from vllm_sagemaker.core import execution_parameters, formats, jsonlines, routing
from vllm_sagemaker.core.config import Config
from vllm_sagemaker.core.env import ConfigError
from vllm_sagemaker.core.errors import RequestError
from vllm_sagemaker.core.routing import Answer
from vllm_sagemaker.handler.records.pipeline import MULTI_RECORD

BOM = jsonlines.BOM


@pytest.mark.parametrize(
    ("body", "records"),
    [
        (b'{"a":1}', [b'{"a":1}']),
        (b'{"a":1}\n', [b'{"a":1}']),
        (b'{"a":1}\n{"b":2}', [b'{"a":1}', b'{"b":2}']),
        (b'{"a":1}\r\n{"b":2}\r\n', [b'{"a":1}', b'{"b":2}']),
        (BOM + b'{"a":1}\n{"b":2}\n', [b'{"a":1}', b'{"b":2}']),
        (b'{"a":1}\n\n{"b":2}\n', [b'{"a":1}', b"", b'{"b":2}']),
        (b'{"a":1}\n  \n', [b'{"a":1}', b"  "]),
        (b'{"a":1}\n  ', [b'{"a":1}']),
        (b'{"a":1}\n\n', [b'{"a":1}', b""]),
        (b"", [b""]),
        (b"\n", [b""]),
        (b'{"a":"x\\ny"}\n', [b'{"a":"x\\ny"}']),
    ],
)
def test_json_lines_split(body: bytes, records: list[bytes]) -> None:
    assert jsonlines.split(body) == records


@pytest.mark.parametrize(
    ("body", "several"),
    [
        (b'{"a": 1}', False),
        (b'{\n  "a": 1,\n  "b": [1, 2]\n}\n', False),
        (b'{"a": 1}\n{"b": 2}\n', True),
        (b'{"a": 1}\r\n{"b": 2}', True),
        (b'{"a": 1}\n\n', False),
        (b"{bad\n{bad", True),
        (b"{bad", False),
        (BOM + b'{"a": 1}\n{"b": 2}', True),
    ],
)
def test_json_bodies_with_several_records(body: bytes, several: bool) -> None:
    assert jsonlines.holds_several_records(body) is several


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, {"MaxConcurrentTransforms": 2, "BatchStrategy": "MULTI_RECORD", "MaxPayloadInMB": 1}),
        (
            {"SAGEMAKER_MAX_PAYLOAD_IN_MB": "6"},
            {"MaxConcurrentTransforms": 2, "BatchStrategy": "MULTI_RECORD", "MaxPayloadInMB": 6},
        ),
        (
            {"SAGEMAKER_MAX_PAYLOAD_IN_MB": "100"},
            {"MaxConcurrentTransforms": 1, "BatchStrategy": "MULTI_RECORD", "MaxPayloadInMB": 100},
        ),
        (
            {"SAGEMAKER_MAX_PAYLOAD_IN_MB": "1000"},
            {"MaxConcurrentTransforms": 1, "BatchStrategy": "MULTI_RECORD", "MaxPayloadInMB": 100},
        ),
        (
            {
                "SAGEMAKER_MAX_CONCURRENT_TRANSFORMS": "8",
                "SAGEMAKER_BATCH_STRATEGY": "SingleRecord",
            },
            {"MaxConcurrentTransforms": 8, "BatchStrategy": "SINGLE_RECORD", "MaxPayloadInMB": 1},
        ),
        (
            {"SAGEMAKER_BATCH_STRATEGY": "multi_record", "SAGEMAKER_MAX_PAYLOAD_IN_MB": "25"},
            {"MaxConcurrentTransforms": 2, "BatchStrategy": "MULTI_RECORD", "MaxPayloadInMB": 25},
        ),
    ],
)
def test_execution_parameters(env: dict[str, str], expected: dict) -> None:
    assert json.loads(execution_parameters.from_env(env).to_json()) == expected


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"SAGEMAKER_BATCH_STRATEGY": "EVERYTHING"}, "SAGEMAKER_BATCH_STRATEGY"),
        ({"SAGEMAKER_MAX_PAYLOAD_IN_MB": "0"}, "SAGEMAKER_MAX_PAYLOAD_IN_MB"),
        ({"SAGEMAKER_MAX_PAYLOAD_IN_MB": "6.5"}, "SAGEMAKER_MAX_PAYLOAD_IN_MB"),
        ({"SAGEMAKER_MAX_CONCURRENT_TRANSFORMS": "-1"}, "SAGEMAKER_MAX_CONCURRENT_TRANSFORMS"),
        (
            {"SAGEMAKER_MAX_CONCURRENT_TRANSFORMS": "20", "SAGEMAKER_MAX_PAYLOAD_IN_MB": "6"},
            "must not exceed 100 MB",
        ),
        ({"SAGEMAKER_MAX_RECORDS_IN_FLIGHT": "lots"}, "SAGEMAKER_MAX_RECORDS_IN_FLIGHT"),
        ({"SAGEMAKER_MINI_BATCH_TIMEOUT_SECONDS": "0"}, "SAGEMAKER_MINI_BATCH_TIMEOUT_SECONDS"),
        ({"SAGEMAKER_MINI_BATCH_TIMEOUT_SECONDS": "soon"}, "SAGEMAKER_MINI_BATCH_TIMEOUT_SECONDS"),
    ],
)
def test_bad_settings_are_named(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        Config.from_env(env)


@pytest.mark.parametrize(
    ("env", "limit_mb", "in_flight", "timeout_s"),
    [
        ({}, 6, 1024, 540.0),
        ({"SAGEMAKER_BATCH": "true"}, 100, 1024, 540.0),
        ({"SAGEMAKER_BATCH": "true", "SAGEMAKER_MAX_PAYLOAD_IN_MB": "20"}, 20, 1024, 540.0),
        (
            {
                "SAGEMAKER_MAX_RECORDS_IN_FLIGHT": "64",
                "SAGEMAKER_MINI_BATCH_TIMEOUT_SECONDS": "2.5",
            },
            6,
            64,
            2.5,
        ),
    ],
)
def test_batch_settings(env: dict, limit_mb: int, in_flight: int, timeout_s: float) -> None:
    config = Config.from_env(env)
    assert config.max_payload_bytes == limit_mb * 1024 * 1024
    assert config.records_in_flight == in_flight
    assert config.mini_batch_timeout_s == timeout_s


@pytest.mark.parametrize(
    ("status", "body", "is_json", "line"),
    [
        (200, b'{"id": 1}', True, {"id": 1}),
        (200, b'{\n "id": 1\n}\n', True, {"id": 1}),
        (
            400,
            b'{"error": {"message": "too long", "type": "BadRequestError", "code": 400}}',
            True,
            {"error": {"message": "too long", "type": "BadRequestError", "code": 400}},
        ),
        (
            500,
            b"Internal Server Error",
            False,
            {
                "error": {
                    "message": "Internal Server Error",
                    "type": "server_error",
                    "param": None,
                    "code": "engine_error",
                }
            },
        ),
        (
            503,
            b"",
            False,
            {
                "error": {
                    "message": "Service Unavailable",
                    "type": "service_unavailable_error",
                    "param": None,
                    "code": "engine_error",
                }
            },
        ),
    ],
)
def test_record_lines(status: int, body: bytes, is_json: bool, line: object) -> None:
    written = formats.record_line(Answer.PLAIN, status, body, is_json)
    assert b"\n" not in written
    assert json.loads(written) == line


def test_records_of_a_mini_batch_cannot_stream() -> None:
    served = {"/v1/completions"}
    record = {"prompt": "hi", "stream": True}
    assert routing.target(record, b"", None, served).route == "/v1/completions"
    with pytest.raises(RequestError) as refused:
        routing.target(record, b"", None, served, no_stream=MULTI_RECORD)
    assert refused.value.code == "stream_not_supported"
    assert refused.value.message.startswith(MULTI_RECORD)
