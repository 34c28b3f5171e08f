"""Splitting a transform job's input so every instance gets work.

SageMaker gives each input file to one instance only, so a job with fewer files than instances
leaves instances idle. The input is split into at least as many parts as instances, each part a
contiguous run of whole lines (so each part's `.out` keeps the input's order), nothing lost.
"""

from collections.abc import Sequence


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
