"""`deploy transform`'s calls: the input's shards when it holds fewer files than instances, and
the CreateTransformJob (which `deploy batch` makes once per shard)."""

from typing import Any

from vllm_sagemaker.core import s3_uri
from vllm_sagemaker.core.content_types import JSON_LINES
from vllm_sagemaker.core.jsonlines import iter_records
from vllm_sagemaker.deploy.base import storage
from vllm_sagemaker.deploy.base.calls import Call, remove
from vllm_sagemaker.deploy.base.errors import ClientError, Problem
from vllm_sagemaker.deploy.base.reads import Reads
from vllm_sagemaker.deploy.kit.plans import shards
from vllm_sagemaker.deploy.kit.plans.names import TAGS

TRANSFORM_INVOCATION_TIMEOUT_S = 3600
TRANSFORM_RETRIES = 1


def transform_call(
    name: str,
    input_prefix: str,
    output: str,
    instance_type: str,
    instance_count: int,
    max_payload_mb: int,
    max_concurrent: int,
    join_input: bool,
    model: str | None = None,
) -> Call:
    """CreateTransformJob over JSON Lines; the model is the job's namesake unless `model`."""
    params: dict[str, Any] = {
        "TransformJobName": name,
        "ModelName": model or name,
        "MaxConcurrentTransforms": max_concurrent,
        "MaxPayloadInMB": max_payload_mb,
        "BatchStrategy": "MultiRecord",
        "ModelClientConfig": {
            "InvocationsTimeoutInSeconds": TRANSFORM_INVOCATION_TIMEOUT_S,
            "InvocationsMaxRetries": TRANSFORM_RETRIES,
        },
        "Environment": {
            "SAGEMAKER_MINI_BATCH_TIMEOUT_SECONDS": str(TRANSFORM_INVOCATION_TIMEOUT_S * 9 // 10)
        },
        "TransformInput": {
            "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": input_prefix}},
            "ContentType": JSON_LINES,
            "SplitType": "Line",
        },
        "TransformOutput": {"S3OutputPath": output, "Accept": JSON_LINES, "AssembleWith": "Line"},
        "TransformResources": {"InstanceType": instance_type, "InstanceCount": instance_count},
        "Tags": TAGS,
    }
    if join_input:
        params["DataProcessing"] = {"JoinSource": "Input"}
    return Call("sagemaker", "CreateTransformJob", params)


def shard_plan(
    reads: Reads, input_prefix: str, output: str, job: str, instances: int
) -> tuple[str, list[Call], list[str]]:
    """The prefix the job reads (`input_prefix` when it holds as many files as instances, else
    the job's shard prefix), the calls that fill it (deleting an earlier attempt's), a note."""
    target = shards.shard_prefix(
        output, job
    )  # outside the input (kit.transform_job.shards_problem)
    bucket = s3_uri.s3_parts(input_prefix)[0]
    assumed = len(reads.assumed)
    head = Call("s3", "HeadBucket", {"Bucket": bucket})
    held = reads.describe(head, f"the plan assumes bucket {bucket} exists")
    if held is None and len(reads.assumed) == assumed:  # read: a dry run stops as a run would
        raise ClientError(Problem("--input", f"bucket {bucket} does not exist", input_prefix))

    def listed() -> list[storage.InputFile]:
        try:
            return storage.list_inputs(input_prefix)
        except FileNotFoundError:
            raise ClientError(f"no input files under --input {input_prefix}") from None

    files = reads.guarded(
        listed,
        f"the files under {input_prefix}",
        f"the plan assumes they number at least {instances}; with fewer, the run first cuts "
        f"them into shards under {target}",
        None,
    )
    if files is None or len(files) >= instances:
        return input_prefix, [], []

    def counted() -> list[shards.Counted]:
        result = []
        for file in files:
            with storage.reading(file.uri) as source:
                lines = sum(1 for _ in iter_records(source))
            result.append(shards.Counted(file.uri, file.relative, lines))
        return result

    puts = shards.shard_calls(reads.required(counted, input_prefix), instances, target)
    planned = {call.params["Key"] for call in puts}
    bucket, prefix = s3_uri.s3_parts(target)
    what = f"the objects under {target}"
    objects = reads.items("s3", "ListObjectsV2", "Contents", what, Bucket=bucket, Prefix=prefix)
    found = [item["Key"] for item in objects]
    foreign = [key for key in found if not shards.is_shard(key)]
    if foreign:
        raise ClientError(
            f"{target} holds {foreign[0]}, which no cut wrote, and the job would read it: remove "
            "it, or give the job another --name"
        )
    deletes = [remove(f"{s3_uri.S3}{bucket}/{key}") for key in found if key not in planned]
    note = (
        f"{len(files)} file(s) under {input_prefix} for {instances} instances: the run cuts "
        f"them into {len(puts)} shards under {target}"
    )
    return target, [*deletes, *puts], [note]
