"""Cutting input into shards, contiguous runs of whole lines (SageMaker gives an object to one
instance only): `deploy transform` cuts the files under --input, when fewer than its instances,
into `<output>-parts/<job>/<file>.part-NNNNN.<ext>`; `deploy batch` a batch file's valid lines
into shards of at most `--shard-lines` lines."""

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from vllm_sagemaker.core import s3_uri
from vllm_sagemaker.deploy.base.calls import Call, Lines, put

DEFAULT_SHARD_LINES = 2000


def ranges(line_count: int, shards: int) -> list[tuple[int, int]]:
    """`shards` contiguous [start, end) ranges of `line_count` lines, sizes within one."""
    shards = min(shards, line_count)
    if shards <= 0:
        return []
    size, extra = divmod(line_count, shards)
    return list(itertools.pairwise(i * size + min(i, extra) for i in range(shards + 1)))


def shards_per_file(line_counts: Sequence[int], instances: int) -> list[int]:
    """Shards per file, in proportion to its lines, so that they number at least `instances`."""
    total = sum(line_counts)
    if len(line_counts) >= instances or total == 0:
        return [1] * len(line_counts)
    wanted = [max(1, -(-count * instances // total)) for count in line_counts]
    return [min(w, max(count, 1)) for w, count in zip(wanted, line_counts, strict=True)]


def shard_prefix(output: str, job: str) -> str:
    """Where a job's shards go: `<output>-parts/<job>/` (at a bucket's root `parts/<job>/`)."""
    bucket, key = s3_uri.s3_parts(output)
    base = key.rstrip("/")
    return f"{s3_uri.S3}{bucket}/{base + '-' if base else ''}parts/{job}/"


def overlap(input_prefix: str, target: str) -> bool:
    """Whether the shards' prefix and the input select any key in common."""
    return target.startswith(input_prefix) or input_prefix.startswith(target)


def shard_key(relative: str, index: int) -> str:
    """`a/b.jsonl` -> `a/b.part-00003.jsonl`."""
    path = PurePosixPath(relative)
    return str(path.with_name(f"{path.stem}.part-{index:05d}{path.suffix}"))


def is_shard(key: str) -> bool:
    """Whether an object is a shard a cut wrote (and so may be replaced by a new cut)."""
    return re.fullmatch(r"[^/]*\.part-\d{5}(\.[^/.]*)?", PurePosixPath(key).name) is not None


@dataclass(frozen=True)
class Counted:
    """An input file: its URI, its path under the input prefix, and its lines."""

    uri: str
    relative: str
    lines: int


def shard_calls(files: Sequence[Counted], instances: int, target: str) -> list[Call]:
    """The PutObject of every shard of `files` under `target`, in line order."""
    calls = []
    counts = [file.lines for file in files]
    for file, shards in zip(files, shards_per_file(counts, instances), strict=True):
        for index, (start, end) in enumerate(ranges(file.lines, shards)):
            key = target + shard_key(file.relative, index)
            calls.append(put(key, Lines(file.uri, start, end)))
    return calls


def shard_sizes(requests: int, instances: int, shard_lines: int) -> list[int]:
    """Shard sizes: one shard per instance at least, `shard_lines` lines each at most."""
    count = max(instances, math.ceil(requests / shard_lines))
    return [end - start for start, end in ranges(requests, count)]
