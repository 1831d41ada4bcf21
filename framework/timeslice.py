"""A slice of time selecting files by their modification time: what ``medallion backfill`` takes
from a folder, and what a refresh of a bronze feed reads again (``--since``/``--until``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class TimeSlice:
    """Files delivered in ``[since, until)`` (aware datetimes; None: no bound), by their
    modification time."""

    since: datetime | None = None
    until: datetime | None = None

    def takes(self, modified_ms: float) -> bool:
        """Whether a file modified at ``modified_ms`` (ms since the epoch) is in the slice."""
        since = self.since.timestamp() * 1000 if self.since else None
        until = self.until.timestamp() * 1000 if self.until else None
        return (since is None or modified_ms >= since) and (until is None or modified_ms < until)

    def __str__(self) -> str:
        return (f"[{self.since.isoformat() if self.since else '...'}, "
                f"{self.until.isoformat() if self.until else '...'})")

    def to_json(self) -> dict[str, str | None]:
        return {"since": self.since.isoformat() if self.since else None,
                "until": self.until.isoformat() if self.until else None}

    @classmethod
    def from_json(cls, data: dict[str, str | None]) -> TimeSlice:
        return cls(*(datetime.fromisoformat(data[k]) if data.get(k) else None  # type: ignore[arg-type]
                     for k in ("since", "until")))
