"""The lease rules of shared batch work, as pure functions: who may claim a piece of work, who
may renew it, and which writes still count.

A lease names its owner (one runner: host, process and a nonce), the moment it runs out, and an
epoch. The epoch grows by one with every claim and is the fencing token: a runner writes its
results under its epoch, and only the epoch that finishes the work first is ever read, so a
runner that lost its lease (paused, partitioned) can still write, but what it writes is never
used. The stores apply these rules in their own transactions: S3 with conditional writes
(`handler.batches.store.s3.chunks`, `handler.batches.store.s3.batches`).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Lease:
    owner: str | None
    until: float
    epoch: int

    def to_json(self) -> dict[str, str | float | int | None]:
        return {"owner": self.owner, "until": self.until, "epoch": self.epoch}

    @classmethod
    def from_json(cls, value: dict) -> "Lease":
        return cls(value.get("owner"), float(value.get("until", 0)), int(value.get("epoch", 0)))


def claimable(lease: Lease | None, now: float) -> bool:
    """Nobody holds the work: never claimed, released, or its holder's lease ran out."""
    return lease is None or lease.owner is None or lease.until <= now


def claimed(lease: Lease | None, owner: str, now: float, lease_s: float) -> Lease | None:
    """The lease after `owner` claims the work, or None when someone else holds it."""
    if not claimable(lease, now):
        return None
    epoch = 0 if lease is None else lease.epoch
    return Lease(owner, now + lease_s, epoch + 1)


def renewed(lease: Lease | None, mine: Lease, now: float, lease_s: float) -> Lease | None:
    """The lease extended by its holder (`mine` is the lease it claimed), or None when the work
    is no longer its own (taken over, released, or run out: a lease that ran out is never
    revived, since someone may be claiming it at this moment)."""
    if not holds(lease, mine, now):
        return None
    return Lease(mine.owner, now + lease_s, mine.epoch)


def released(mine: Lease) -> Lease:
    """The lease given up by its holder, so another runner may claim at once (the store writes
    it only while the lease is still `mine`)."""
    return Lease(None, 0.0, mine.epoch)


def holds(lease: Lease | None, mine: Lease, now: float) -> bool:
    """The holder of `mine` still holds the work at `now`: same owner, same epoch, not run out."""
    return (
        lease is not None
        and (lease.owner, lease.epoch) == (mine.owner, mine.epoch)
        and lease.until > now
    )
