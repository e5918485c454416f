"""Stall verdicts: whether a group keeps up on a partition (``ok``, ``idle``, ``behind``,
``stalled``, or ``paused`` by an operator) and why, judged from the owner's lag samples one after
another (``advance`` is pure; ``docs/api.md`` defines each state and reason)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

OK, IDLE, BEHIND, STALLED, PAUSED = "ok", "idle", "behind", "stalled", "paused"
STATES = (OK, IDLE, BEHIND, STALLED, PAUSED)
NO_MEMBER, PARKED_KEY, REDELIVERY_LOOP = "no_member", "parked_key", "redelivery_loop"
MEMBER_NOT_ACKING, ENDPOINT_FAILING = "member_not_acking", "endpoint_failing"
RETENTION_OVERRUN_IN, ARCHIVE_BEHIND = "retention_overrun_in", "archive_behind"
REASONS = (NO_MEMBER, ENDPOINT_FAILING, PARKED_KEY, REDELIVERY_LOOP, MEMBER_NOT_ACKING,
           RETENTION_OVERRUN_IN, ARCHIVE_BEHIND)


@dataclass(frozen=True, slots=True)
class VerdictConfig:
    """What a group's verdict on a partition is judged against.

    ``window_ms`` is the group's ack timeout: that long without an ack or a new delivery while
    work waits is a stall. ``retention_ms``/``max_length`` are the topic's (None: not bounded that
    way); ``hot_retention_ms`` is the archive's target age of the hot tier (0: no archive)."""

    window_ms: int
    loop_deliveries: int = 3
    ok_lag_entries: int = 1000
    retention_ms: int | None = None
    max_length: int | None = None
    horizon_ms: int = 900_000
    hot_retention_ms: int = 0


@dataclass(frozen=True, slots=True)
class GroupSample:
    """One look at a group on a partition. ``present``: a member holds the partition or someone
    read it lately (None: not looked at); ``max_delivery_count``: the highest delivery count among
    the oldest pending entries."""

    at_ms: int
    lag: int | None
    pending: int
    last_delivered: str | None
    oldest_unacked_age_ms: int | None = None
    oldest_unread_age_ms: int | None = None
    max_delivery_count: int = 0
    parked_keys: int = 0
    present: bool | None = None
    paused: bool = False  # the group is paused: no delivery is expected
    # a push subscription's endpoint fails from this partition (its last error); None: it does
    # not, or the group is no push subscription here
    endpoint_error: str | None = None

    @property
    def work_waits(self) -> bool:
        """Something is unread or un-acked (an unknown lag counts unless nothing is unread)."""
        if self.pending > 0 or (self.lag or 0) > 0:
            return True
        return self.lag is None and self.oldest_unread_age_ms != 0

    @property
    def unconsumed(self) -> int:
        """Entries not yet acked: unread and pending (an unknown lag counts as none)."""
        return (self.lag or 0) + self.pending

    @property
    def oldest_waiting_age_ms(self) -> int | None:
        """Age of the oldest entry not acked yet, read or not (None: unknown)."""
        ages = [a for a in (self.oldest_unacked_age_ms, self.oldest_unread_age_ms) if a is not None]
        return max(ages) if ages else None


@dataclass(frozen=True, slots=True)
class Verdict:
    """A group's state on a partition, the reason (None for ok, idle and a plain behind), since
    when the state holds (epoch ms; a stall from the last progress), a sentence for people, and
    the other reasons that apply too."""

    state: str
    reason: str | None
    since_ms: int
    detail: str
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (the ``verdict`` of a partition in ``GET /v1/groups/{group}``)."""
        return {"state": self.state, "reason": self.reason, "since_ms": self.since_ms,
                "detail": self.detail, "warnings": list(self.warnings)}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Verdict:
        """A verdict from its JSON form."""
        return cls(str(doc["state"]), doc.get("reason"), int(doc["since_ms"]),
                   str(doc.get("detail", "")), tuple(doc.get("warnings", ())))


@dataclass(frozen=True, slots=True)
class History:
    """What the owner remembers of a group on a partition between samples: the last sample, when
    the group last progressed, the trend's start (about one window back) and the last verdict."""

    last: GroupSample
    last_progress_ms: int
    baseline: GroupSample
    verdict: Verdict


def progressed(before: GroupSample, after: GroupSample) -> bool:
    """A new delivery or an ack between two samples. Without a new delivery the pending list only
    shrinks by acks (a redelivery changes neither), so this needs no ack counter."""
    return after.last_delivered != before.last_delivered or after.pending < before.pending


def quiet_ms(history: History | None, sample: GroupSample) -> int:
    """How long the group has gone without progress as of ``sample``."""
    if history is None or progressed(history.last, sample):
        return 0
    return sample.at_ms - history.last_progress_ms


def needs_presence(history: History | None, sample: GroupSample, config: VerdictConfig) -> bool:
    """Whether the verdict will hang on who holds the partition: work waits without progress for
    the window (the caller then looks at members and readers)."""
    return (not sample.paused and sample.work_waits
            and quiet_ms(history, sample) >= config.window_ms)


def advance(history: History | None, sample: GroupSample,
            config: VerdictConfig) -> tuple[History, Verdict]:
    """The verdict as of ``sample`` and what to remember for the next one. A paused group is never
    quiet: its stall clock starts again at the first sample after the resume."""
    resumed = history is not None and history.verdict.state == PAUSED
    quiet = 0 if sample.paused or resumed else quiet_ms(history, sample)
    baseline = sample if history is None else history.baseline
    if history is not None and sample.at_ms - baseline.at_ms >= config.window_ms:
        baseline = history.last  # the trend is read over about one window
    state, reason, detail, warnings = _judge(sample, baseline, quiet, config)
    previous = None if history is None else history.verdict
    if previous is not None and previous.state == state:
        since = previous.since_ms
    else:
        since = sample.at_ms - quiet if state == STALLED else sample.at_ms
    verdict = Verdict(state, reason, since, detail, warnings)
    return History(sample, sample.at_ms - quiet, baseline, verdict), verdict


def _judge(sample: GroupSample, baseline: GroupSample, quiet: int,
           config: VerdictConfig) -> tuple[str, str | None, str, tuple[str, ...]]:
    if sample.paused:
        waits = f"{sample.unconsumed} entries wait" if sample.work_waits else "nothing waits"
        return PAUSED, None, f"paused by an operator; {waits}", tuple(
            _risks(sample, baseline, config))
    if not sample.work_waits:
        return IDLE, None, "nothing unread and nothing pending", ()
    risks = _risks(sample, baseline, config)
    side = _side_reasons(sample, config)
    waiting = f"{sample.unconsumed} entries wait"
    if quiet >= config.window_ms:
        cause = stall_cause(sample, config)
        detail = f"no ack and no new delivery for {quiet // 1000}s while {waiting}: "
        if cause == ENDPOINT_FAILING:
            detail += f"{_CAUSES[cause]} ({sample.endpoint_error})"
            return STALLED, cause, detail, _others(cause, side + list(risks))
        return STALLED, cause, detail + _CAUSES[cause], _others(cause, side + list(risks))
    if risks:
        reason = next(iter(risks))
        return BEHIND, reason, f"{waiting}; {risks[reason]}", _others(reason, side + list(risks))
    if sample.unconsumed <= config.ok_lag_entries or sample.unconsumed < baseline.unconsumed:
        return OK, None, f"{waiting}, draining or few", tuple(side)
    return BEHIND, None, f"{waiting} and do not drain; acks progress", tuple(side)


_CAUSES = {
    NO_MEMBER: "no member holds the partition and nobody read it within the window",
    PARKED_KEY: "keys are parked, waiting for the redelivery of a failed message",
    REDELIVERY_LOOP: "entries come back again and again without an ack",
    MEMBER_NOT_ACKING: "a member holds entries and does not ack them",
    ENDPOINT_FAILING: "the push endpoint fails",
}


def stall_cause(sample: GroupSample, config: VerdictConfig) -> str:
    """Why a stalled group is stuck, the first that holds of: its push endpoint fails, nobody
    holds or reads the partition (also when nothing is out to anyone), parked keys, entries
    delivered ``loop_deliveries`` times without an ack, a member holding entries without acking
    them."""
    if sample.endpoint_error is not None:
        return ENDPOINT_FAILING
    if sample.present is False or sample.pending == 0:
        return NO_MEMBER
    if sample.parked_keys > 0:
        return PARKED_KEY
    if sample.max_delivery_count >= config.loop_deliveries:
        return REDELIVERY_LOOP
    return MEMBER_NOT_ACKING


def _side_reasons(sample: GroupSample, config: VerdictConfig) -> list[str]:
    """Stall causes that show while the group still progresses."""
    side = [PARKED_KEY] if sample.parked_keys > 0 else []
    return side + ([REDELIVERY_LOOP] if sample.max_delivery_count >= config.loop_deliveries else [])


def _others(reason: str | None, reasons: list[str]) -> tuple[str, ...]:
    return tuple(r for r in dict.fromkeys(reasons) if r != reason)


def _risks(sample: GroupSample, baseline: GroupSample,
           config: VerdictConfig) -> dict[str, str]:
    """Data at risk: retention about to drop waiting entries, the group holding the hot tier past
    the archive's target; each with its sentence."""
    risks: dict[str, str] = {}
    overrun = overrun_in_ms(sample, baseline, config)
    if overrun is not None and overrun <= config.horizon_ms:
        risks[RETENTION_OVERRUN_IN] = f"retention drops waiting entries in about {overrun // 1000}s"
    oldest = sample.oldest_waiting_age_ms
    if config.hot_retention_ms > 0 and oldest is not None \
            and oldest > config.hot_retention_ms + config.window_ms:
        risks[ARCHIVE_BEHIND] = (f"its oldest waiting entry is {oldest // 1000}s old and holds "
                                 "the hot tier past the archive's target")
    return risks


def overrun_in_ms(sample: GroupSample, baseline: GroupSample, config: VerdictConfig) -> int | None:
    """When retention would drop an entry the group has not acked, at the rates since the
    baseline: its oldest waiting entry ageing toward ``retention_ms``, its waiting entries growing
    toward ``max_length`` (None: not while the trend holds, or no trend yet)."""
    elapsed = sample.at_ms - baseline.at_ms
    if not sample.work_waits or elapsed <= 0:
        return None
    found: list[float] = []
    oldest, base_oldest = sample.oldest_waiting_age_ms, baseline.oldest_waiting_age_ms
    if config.retention_ms is not None and oldest is not None and base_oldest is not None:
        growth = (oldest - base_oldest) / elapsed
        if growth > 0:
            found.append((config.retention_ms - oldest) / growth)
    if config.max_length is not None:
        rate = (sample.unconsumed - baseline.unconsumed) / elapsed
        if rate > 0:
            found.append((config.max_length - sample.unconsumed) / rate)
    return max(0, int(min(found))) if found else None
