"""Splitting a transform job's input so every instance gets work.

SageMaker gives each input file to one instance only, so a job with fewer files than instances
leaves instances idle. The input is split into at least as many parts as instances, each part a
contiguous run of whole lines (so each part's `.out` keeps the input's order), nothing lost.
The parts go under a prefix of the job's own, beside its output (`split_prefix`), never into the
input's prefix, so a later job never reads an earlier job's parts.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from vllm_sagemaker.deploy.aws.plan import Call, Lines, put
from vllm_sagemaker.handler.core import s3_uri


def ranges(line_count: int, parts: int) -> list[tuple[int, int]]:
    """`parts` contiguous [start, end) line ranges covering `line_count` lines, sizes differing by
    at most one; fewer when there are fewer lines than parts; none for no lines."""
    parts = min(parts, line_count)
    if parts <= 0:
        return []
    size, extra = divmod(line_count, parts)
    bounds: list[tuple[int, int]] = []
    start = 0
    for index in range(parts):
        end = start + size + (1 if index < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


def parts_per_file(line_counts: Sequence[int], instances: int) -> list[int]:
    """How many parts each input file becomes so that the parts number at least `instances`:
    files are split in proportion to their lines (each at least one part)."""
    total = sum(line_counts)
    if len(line_counts) >= instances or total == 0:
        return [1] * len(line_counts)
    wanted = [max(1, -(-count * instances // total)) for count in line_counts]
    return [min(w, max(count, 1)) for w, count in zip(wanted, line_counts, strict=True)]


def split_prefix(output: str, job: str) -> str:
    """Where a job's input parts go: `<output>-parts/<job>/` beside the output prefix (the
    bucket's `parts/<job>/` for an output at a bucket's root). A job name holds no `/`, so two
    jobs never share one."""
    bucket, key = s3_uri.s3_parts(output)
    base = key.rstrip("/")
    return f"{s3_uri.S3}{bucket}/{base + '-' if base else ''}parts/{job}/"


def overlap(input_prefix: str, target: str) -> bool:
    """Whether the parts prefix and the input select any key in common (S3 prefixes are plain
    string prefixes): the job would read its input's parts, or the parts its input."""
    return target.startswith(input_prefix) or input_prefix.startswith(target)


def part_name(relative: str, index: int) -> str:
    """`a/b.jsonl` -> `a/b.part-00003.jsonl`."""
    path = PurePosixPath(relative)
    return str(path.with_name(f"{path.stem}.part-{index:05d}{path.suffix}"))


def is_part(key: str) -> bool:
    """Whether an object is a part the split wrote (and so may be replaced by a new split)."""
    return re.fullmatch(r"[^/]*\.part-\d{5}(\.[^/.]*)?", PurePosixPath(key).name) is not None


@dataclass(frozen=True)
class Counted:
    """An input file: its URI, its path under the input prefix, and how many lines it holds."""

    uri: str
    relative: str
    lines: int


def part_calls(files: Sequence[Counted], instances: int, target: str) -> list[Call]:
    """The PutObject of every part of `files` under `target`: `a/b.jsonl` becomes
    `a/b.part-00000.jsonl`, `a/b.part-00001.jsonl`, ... in line order."""
    calls = []
    counts = [file.lines for file in files]
    for file, parts in zip(files, parts_per_file(counts, instances), strict=True):
        for index, (start, end) in enumerate(ranges(file.lines, parts)):
            calls.append(put(target + part_name(file.relative, index), Lines(file.uri, start, end)))
    return calls
