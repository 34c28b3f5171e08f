"""How `deploy transform` cuts its input into shards: the ranges of lines, shards per file and
per instance, where the shards go (never inside the input), and which objects are shards."""

import pytest

from vllm_sagemaker.deploy.kit.plans import shards


@pytest.mark.parametrize(
    ("count", "wanted", "expected"),
    [
        (300, 3, [(0, 100), (100, 200), (200, 300)]),
        (7, 3, [(0, 3), (3, 5), (5, 7)]),
        (2, 3, [(0, 1), (1, 2)]),
        (0, 3, []),
    ],
)
def test_shard_ranges(count: int, wanted: int, expected: list[tuple[int, int]]) -> None:
    assert shards.ranges(count, wanted) == expected


@pytest.mark.parametrize(
    ("counts", "instances", "cut"),
    [([300], 3, [3]), ([100, 200], 4, [2, 3]), ([5, 5, 5], 2, [1, 1, 1]), ([1], 4, [1])],
)
def test_shards_per_file(counts: list[int], instances: int, cut: list[int]) -> None:
    assert shards.shards_per_file(counts, instances) == cut


@pytest.mark.parametrize(
    ("output", "job", "prefix"),
    [
        ("s3://b/results/", "llama", "s3://b/results-parts/llama/"),
        ("s3://b/results", "llama", "s3://b/results-parts/llama/"),
        ("s3://b/", "llama", "s3://b/parts/llama/"),
        ("s3://b", "x-y", "s3://b/parts/x-y/"),
    ],
)
def test_split_prefix(output: str, job: str, prefix: str) -> None:
    assert shards.shard_prefix(output, job) == prefix


@pytest.mark.parametrize(
    ("input_prefix", "target", "overlap"),
    [
        ("s3://b/in/", "s3://b/out-parts/job/", False),
        ("s3://b/data/", "s3://b/data/res-parts/job/", True),
        ("s3://b/out", "s3://b/out-parts/job/", True),
        ("s3://b/out-parts/job/a/", "s3://b/out-parts/job/", True),
    ],
)
def test_parts_must_not_overlap_the_input(input_prefix: str, target: str, overlap: bool) -> None:
    assert shards.overlap(input_prefix, target) is overlap


@pytest.mark.parametrize(
    ("key", "shard"),
    [
        ("out-parts/job/a.part-00000.jsonl", True),
        ("out-parts/job/d/a.b.part-00012.jsonl", True),
        ("out-parts/job/a.part-00003", True),
        ("out-parts/job/a.jsonl.part-00001.gz", True),
        ("out-parts/job/a.jsonl", False),
        ("out-parts/job/a.part-1.jsonl", False),
        ("out-parts/job/notes.txt", False),
    ],
)
def test_which_objects_are_shards(key: str, shard: bool) -> None:
    assert shards.is_shard(key) is shard
    if shard:
        assert shards.shard_key("d/a.jsonl", 7) == "d/a.part-00007.jsonl"
