"""The batch file the fleet tests run: 30 requests with pinned tokens and 2 bad lines, and the
`deploy batch` options that run it from (moto's) S3 in 3 shards.

Not a test module: tests/deploy/test_fleet.py and test_batch_calls.py import these from here.
"""

from pathlib import Path
from typing import Any

import boto3

from tests.deploy.batching import jsonl
from tests.deploy.deploying import model_options


def request(i: int) -> dict[str, Any]:
    """Line i's request. Its tokens are pinned by a logit bias of its own: greedy decoding of the
    random test model is not batch-invariant on CPU (near-ties flip with the batch's shape), so
    without it two containers batching differently could write different text."""
    body = {
        "prompt": f"Line {i} says",
        "max_tokens": 4,
        "temperature": 0,
        "logit_bias": {str(100 + i): 100},
    }
    return {"custom_id": f"q{i}", "method": "POST", "url": "/v1/completions", "body": body}


def thirty_two_lines() -> list[Any]:
    """30 requests and 2 bad lines (not JSON; a duplicate custom_id)."""
    records: list[Any] = [request(i) for i in range(30)]
    records.insert(5, b"{oops")
    records.insert(20, request(3))
    return records


def fleet_args(name: str, tmp_path: Path, **extra: str) -> list[str]:
    """30 requests (and 2 bad lines) from S3 in 3 shards, 2 instances at a time."""
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=name)
    s3.put_object(Bucket=name, Key="in/requests.jsonl", Body=jsonl(thirty_two_lines()))
    return model_options(
        name,
        "ml.g4dn.xlarge",
        instance_count="2",
        input_file=f"s3://{name}/in/requests.jsonl",
        output_file=f"s3://{name}/out/output.jsonl",
        error_file=f"s3://{name}/out/errors.jsonl",
        work_prefix=f"s3://{name}/work/",
        shard_lines="10",
        poll_seconds="0.2",
        **extra,
    )
