"""Policy records of the contract (section 3) and the rule arithmetic that only
depends on the policy: cooldowns (R9), preemption windows (R8), grace (R12).

No solver imports here: the planner, the verifier and the simulator share these.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from functools import cache
from types import UnionType
from typing import Annotated, Any, Literal, Self, Union, get_args, get_origin

import pydantic_core
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    field_validator,
    model_validator,
)

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_HHMM = re.compile(r"^([01]\d|2[0-4]):([0-5]\d)$")


class Record(BaseModel):
    """Strict record: unknown fields are errors (typos must not silently default);
    in a document given to ``model_validate``, keys starting with ``_`` are comments
    and are dropped (:func:`drop_comments`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> Self:
        """A document: its comments are dropped (:func:`drop_comments`). Those of the
        record itself first; pydantic refuses a nested one as an unknown field, so
        the whole document is walked for them only when validation fails."""
        obj = _dropper(cls).own(obj)
        try:
            return super().model_validate(obj, **kwargs)
        except ValidationError:
            dropped = drop_comments(cls, obj)
            if dropped is obj:
                raise
        return super().model_validate(dropped, **kwargs)

    @classmethod
    def model_validate_json(cls, json_data: str | bytes | bytearray, **kwargs: Any) -> Self:
        """A JSON text, which may hold comments when ``"_`` occurs in it: then it is
        read in Python and validated as a document (:meth:`model_validate`)."""
        marker: Any = '"_' if isinstance(json_data, str) else b'"_'
        if marker in json_data:
            try:
                doc = pydantic_core.from_json(json_data)
            except ValueError:
                pass  # not JSON: pydantic's own error
            else:
                return cls.model_validate(doc, **kwargs)
        return super().model_validate_json(json_data, **kwargs)


def _is_comment(key: Any) -> bool:
    return isinstance(key, str) and key[:1] == "_"


Drop = Callable[[Any], Any]


def drop_comments(model: type[Record], data: Any) -> Any:
    """``data`` as pydantic reads it as a ``model``, without its comments: the keys
    starting with ``_`` of every mapping read as a record, nested ones too;
    ``_comment`` becomes ``comment`` where the record has that field. Values
    without comments are returned as they are, the others copied."""
    return _dropper(model)(data)


class _Dropper:
    """The comment dropper of one record (see :func:`drop_comments`): its own keys
    (``own``), then its fields that can hold records, each with the dropper of its
    type."""

    def __init__(self, model: type[Record]):
        self.model = model
        self.fields: dict[str, Drop] | None = None  # (filled on first use: records nest)

    def own(self, data: Any) -> Any:
        if not isinstance(data, dict) or not any(_is_comment(k) for k in data):
            return data  # (not a mapping: pydantic reports the type error)
        out = {k: v for k, v in data.items() if not _is_comment(k)}
        if "_comment" in data and "comment" not in data and "comment" in self.model.model_fields:
            out["comment"] = data["_comment"]
        return out

    def __call__(self, data: Any) -> Any:
        out = self.own(data)
        if not isinstance(out, dict):
            return out
        if self.fields is None:
            self.fields = {name: drop for name, f in self.model.model_fields.items()
                           if (drop := _type_dropper(f.annotation)) is not None}
        for name, drop in self.fields.items():
            if name in out and (new := drop(out[name])) is not out[name]:
                out = dict(out) if out is data else out
                out[name] = new
        return out


@cache
def _dropper(model: type[Record]) -> _Dropper:
    return _Dropper(model)


def _type_dropper(tp: Any) -> Drop | None:
    """The comment dropper of a field's type, None when the type holds no record."""
    if isinstance(tp, type) and issubclass(tp, Record):
        return _dropper(tp)
    args = [a for a in get_args(tp) if a is not type(None)]
    origin = get_origin(tp)
    if origin is Annotated:
        return _type_dropper(args[0])
    if origin is list or origin is dict:
        inner = _type_dropper(args[-1])
        if inner is None:
            return None
        return _each_item(inner) if origin is list else _each_value(inner)
    if origin is Union or origin is UnionType:
        drops = [d for d in map(_type_dropper, args) if d is not None]
        if len(drops) > 1:
            raise TypeError(f"{tp}: a union of more than one type holding records")
        return drops[0] if drops else None
    return None


def _each_item(drop: Drop) -> Drop:
    def items(v: Any) -> Any:
        if not isinstance(v, list):
            return v
        out = [drop(x) for x in v]
        return v if all(a is b for a, b in zip(out, v, strict=True)) else out
    return items


def _each_value(drop: Drop) -> Drop:
    def values(v: Any) -> Any:
        if not isinstance(v, dict):
            return v
        out = {k: drop(x) for k, x in v.items()}
        return v if all(out[k] is x for k, x in v.items()) else out
    return values


def minutes_of(hhmm: str) -> int:
    """Minutes since midnight of a window's ``HH:MM`` (``24:00`` is 1,440)."""
    h, m = hhmm.split(":")
    return int(h) * 60 + int(m)


class Window(Record):
    """A UTC time window ``[start, end)`` on some days; ``end < start`` wraps past
    midnight (the part after midnight belongs to the listed day)."""

    days: list[str] = Field(default_factory=list)
    start: str = "00:00"
    end: str = "24:00"

    @field_validator("days")
    @classmethod
    def _days(cls, v: list[str]) -> list[str]:
        out = []
        for d in v:
            d2 = d.lower()[:3]
            if d2 not in DAYS:
                raise ValueError(f"unknown day {d!r} (use mon, tue, wed, thu, fri, sat, sun)")
            out.append(d2)
        return out

    @field_validator("start", "end")
    @classmethod
    def _time(cls, v: str, info: Any) -> str:
        m = _HHMM.match(v)
        if not m or (m.group(1) == "24" and m.group(2) != "00"):
            raise ValueError(f"time {v!r} is not HH:MM between 00:00 and 24:00")
        if info.field_name == "start" and v == "24:00":
            raise ValueError("start may not be 24:00")
        return v

    def contains(self, now: datetime) -> bool:
        """Whether ``now`` (aware) lies inside the window (R8, section 7)."""
        t = now.astimezone(UTC)
        minute = t.hour * 60 + t.minute + t.second / 60.0
        start, end = minutes_of(self.start), minutes_of(self.end)
        today = DAYS[t.weekday()]
        yesterday = DAYS[(t.weekday() - 1) % 7]
        days = set(self.days) if self.days else set(DAYS)
        if start == end:  # the whole day
            return today in days
        if start < end:
            return today in days and start <= minute < end
        # wrapping window: [start, 24:00) on the listed day, [00:00, end) the day after
        return (today in days and minute >= start) or (yesterday in days and minute < end)


# Implementation limits (docs/format.md, "Limits"): far beyond any real cluster, and
# what keeps every cost, hold and objective term a finite number the solver can use
MAX_SECONDS = 1e9  # a duration: about 32 years
MAX_GB = 1e9  # a checkpoint: an exabyte
MAX_GB_PER_S = 1e6  # a write bandwidth
MIN_GB_PER_S = 1e-3  # ... at least 1 MB/s
MAX_PRIORITY = 10**9  # |priority|, as Kubernetes PriorityClass values
MAX_NODES = 100_000  # nodes of one job
MAX_COUNT = 10**6  # preemptions of a job, evictions per tick
MAX_FACTOR = 1e3  # backoff factor, grace safety


class TierPolicy(Record):
    preemptible: bool = Field(False, strict=True)
    min_runtime_s: float = Field(0, ge=0, le=MAX_SECONDS, strict=True)
    can_preempt: list[Annotated[int, Strict()]] = Field(default_factory=list)
    windows: list[Window] = Field(default_factory=list)
    # R16 (section 9): a pending job of this tier may use GPUs freed by victims only
    # after it has been queued this long
    preempt_after_s: float = Field(0, ge=0, le=MAX_SECONDS, strict=True)

    def preemptible_at(self, now: datetime) -> bool:
        """R5 and R8: preemptible at all, and inside a window when windows are set."""
        if not self.preemptible:
            return False
        return not self.windows or any(w.contains(now) for w in self.windows)


class Backoff(Record):
    cooldown_s: float = Field(1800, ge=0, le=MAX_SECONDS, strict=True)
    free_preemptions: int = Field(3, ge=0, le=MAX_COUNT, strict=True)
    factor: float = Field(2.0, ge=1.0, le=MAX_FACTOR, strict=True)
    max_s: float = Field(28800, ge=0, le=MAX_SECONDS, strict=True)

    def cooldown(self, k: int) -> float:
        """Hold after a job's k-th preemption (section 3)."""
        if k <= self.free_preemptions:
            return float(self.cooldown_s)
        try:
            grown = self.cooldown_s * self.factor ** (k - self.free_preemptions)
        except OverflowError:  # (thousands of preemptions)
            grown = math.inf
        return float(min(self.max_s, grown))


class Grace(Record):
    min_s: float = Field(60, ge=0, le=MAX_SECONDS, strict=True)
    max_s: float = Field(180, ge=0, le=MAX_SECONDS, strict=True)
    safety: float = Field(2.0, gt=0, le=MAX_FACTOR, strict=True)

    @model_validator(mode="after")
    def _order(self) -> Grace:
        if self.min_s > self.max_s:
            raise ValueError(f"min_s ({self.min_s}) exceeds max_s ({self.max_s})")
        return self

    def need(self, flush_s: float, barrier_s: float, cleanup_s: float) -> float:
        """R12: the grace a flushing victim needs."""
        return max(self.min_s, self.safety * (flush_s + barrier_s + cleanup_s))


PAST_BUDGET_GPU_S = 1800.0  # thrash.past_budget_gpu_s (docs/simulation.md, "Why these values")


class Thrash(Record):
    """R15, the rolling eviction budget (section 9): at most
    ``max(min_evictions, floor(max_fraction * running jobs))`` evictions per
    ``window_s``, counting the recent ones; victims of jobs of ``exempt_tiers`` are
    never refused but use up the budget of the others."""

    window_s: float = Field(3600, ge=0, le=MAX_SECONDS, strict=True)
    # 0.03, not the contract's starting point 0.05: B follows the running jobs of each
    # tick, and at 0.05 their swings put whole hours above the 5% alert (docs/simulation.md)
    max_fraction: float = Field(0.03, ge=0, le=1, strict=True)
    min_evictions: int = Field(4, ge=0, le=MAX_COUNT, strict=True)
    exempt_tiers: list[Annotated[int, Strict()]] = Field(default_factory=lambda: [1])
    # an extension of the contract (docs/format.md): "any" is the contract's reading (a
    # victim is exempt when one of its preemptors is of an exempt tier), "all" asks it
    # of every preemptor, so that an exempt job cannot carry jobs of other tiers onto
    # the rest of its victim's GPUs past the budget (docs/simulation.md)
    exempt_if: Literal["any", "all"] = "all"
    # an extension of the contract (docs/format.md): the GPUs those evictions free,
    # at most this share of the GPUs on up and drain nodes per window, and never less
    # than min_gpus (null: no limit). With the count alone, a planner that maximises
    # admitted GPUs spends each eviction on the largest victim it can use
    # (docs/simulation.md, "The default policy")
    max_gpu_fraction: float | None = Field(0.015, ge=0, le=1, strict=True)
    min_gpus: int = Field(16, ge=0, le=MAX_COUNT, strict=True)
    # an extension of the contract (docs/format.md): a planner's choice, not a rule.
    # An exempt job placed on victims' GPUs while a job of another tier takes free GPUs
    # it could use instead swaps with it: otherwise exempt evictions make room for the
    # other tiers past the budget, before their patience ran out or beyond their
    # rights (docs/format.md; docs/simulation.md, "The default policy")
    exempt_free_first: bool = Field(True, strict=True)
    # an extension of the contract (docs/format.md): a planner's choice, not a rule.
    # When exempt victims take a plan past what the window has left, each victim past
    # it adds this many GPU-seconds to the eviction cost the planner minimises (0:
    # off): the thrash alert counts evictions, and the cheapest way to free a tier-1
    # gang's nodes is often the one with the most victims (docs/simulation.md)
    past_budget_gpu_s: float = Field(PAST_BUDGET_GPU_S, ge=0, le=MAX_SECONDS, strict=True)

    def limit(self, running: int) -> int:
        """``B``: the evictions the window allows with ``running`` running jobs."""
        return max(self.min_evictions, math.floor(self.max_fraction * running + 1e-9))

    def gpu_limit(self, gpus: int) -> int | None:
        """The GPUs evictions may free per window, of ``gpus`` on up and drain nodes:
        ``max(min_gpus, floor(max_gpu_fraction x gpus))`` (None without a limit)."""
        if self.max_gpu_fraction is None:
            return None
        return max(self.min_gpus, math.floor(self.max_gpu_fraction * gpus + 1e-9))

    def exempt_by(self, tiers: Iterable[int]) -> bool:
        """Is a victim whose preemptors are of these tiers exempt (``exempt_if``)?"""
        return exempt_by(tiers, self.exempt_tiers, self.exempt_if == "all")


def exempt_by(tiers: Iterable[int], exempt_tiers: Iterable[int], every: bool) -> bool:
    """R15: a victim whose preemptors are of ``tiers`` is exempt when one of them
    (``every`` False, the contract's reading) or each of them is of an exempt tier."""
    ts, ex = set(tiers), set(exempt_tiers)
    if not ts:
        return False
    return ts <= ex if every else not ts.isdisjoint(ex)


class Reserve(Record):
    """An extension of the contract (docs/format.md), a planner's choice, not a rule:
    keep some nodes open for the big shards of jobs of ``tiers``. A node is open when
    it is up, in a pool admitting one of ``tiers``, and every job running on it may
    be evicted now by one of them (its tier preemptible by one of them, past its
    minimum runtime, inside its windows, not ending soon, within R11). Of the open
    nodes, the ``max(nodes, floor(fraction x up nodes))`` with the most free GPUs
    (``prefer: empty``; the fewest with ``prefer: full``), then the fewest running
    jobs, then by id, are reserved for shards of jobs of ``tiers`` of at least
    ``min_shard_fraction`` of the node's GPUs (only nodes such a job, running or
    pending, could use; none while there is none); other pending jobs are not placed
    there (nor evict there), but for smaller shards of ``tiers`` on reserved nodes
    that hold running jobs while R15's window has nothing left (every eviction past
    it). Off on clusters of fewer than ``min_cluster_nodes`` up nodes. Without it,
    jobs of lower tiers start on open nodes, each is immune for its tier's
    min_runtime_s (R6), and a whole-node tier-1 job finds every node holding one;
    with ``prefer: empty`` the reserved nodes drain to whole free nodes that a burst
    of tier-1 jobs can take without evicting (docs/simulation.md, "The default
    policy")."""

    tiers: list[Annotated[int, Strict()]] = Field(default_factory=lambda: [1])
    nodes: int = Field(4, ge=0, le=MAX_COUNT, strict=True)
    fraction: float = Field(0.02, ge=0, le=1, strict=True)
    min_cluster_nodes: int = Field(32, ge=0, le=MAX_COUNT, strict=True)
    min_shard_fraction: float = Field(0.25, ge=0, le=1, strict=True)
    # which open nodes: "empty", the most free GPUs first (the reserved nodes drain
    # to whole free nodes as their jobs end); "full", the fewest
    # free GPUs first (nodes full of jobs a tier-1 job may evict: few GPUs idle)
    prefer: Literal["empty", "full"] = "empty"

    def takes(self, shard_gpus: int, node_gpus: int) -> bool:
        """May a shard of ``shard_gpus`` GPUs of a job of ``tiers`` use a reserved node
        of ``node_gpus`` GPUs (at least ``min_shard_fraction`` of them)? Such shards
        are also what makes a node worth keeping."""
        return shard_gpus >= self.min_shard_fraction * node_gpus

    def count(self, up_nodes: int) -> int:
        """How many open nodes to reserve on a cluster of ``up_nodes`` up nodes."""
        if up_nodes < self.min_cluster_nodes:
            return 0
        return min(up_nodes, max(self.nodes, math.floor(self.fraction * up_nodes + 1e-9)))


DEFAULT_TIERS: dict[int, dict[str, Any]] = {
    1: {"preemptible": False, "min_runtime_s": 0, "can_preempt": [2, 3], "preempt_after_s": 0},
    2: {"preemptible": True, "min_runtime_s": 3600, "can_preempt": [3], "windows": [],
        "preempt_after_s": 600},
    3: {"preemptible": True, "min_runtime_s": 1800, "can_preempt": [], "preempt_after_s": 0},
}
NEW_TIER: dict[str, Any] = {"preemptible": False, "min_runtime_s": 0, "can_preempt": [], "windows": [],
                            "preempt_after_s": 0}


_TIER_KEY = re.compile(r"-?[0-9]{1,4300}")  # (the JSON Schema's tier keys, as int() reads)


def tier_number(key: Any) -> int | None:
    """The tier a key of ``policy.tiers`` names: an integer, or a string of its
    decimal digits (``"3"``, ``"03"``); None for anything else (``1.9``, ``true``,
    ``" 3"``, ``"3_0"``, which int() would read as a tier)."""
    if isinstance(key, int) and not isinstance(key, bool):
        return key
    if isinstance(key, str) and _TIER_KEY.fullmatch(key):
        return int(key)
    return None


def tier_key_problems(tiers: dict[Any, Any]) -> list[str]:
    """What is wrong with the keys of a ``policy.tiers`` map: a key that is not a
    tier number, two keys naming one tier (``"3"`` and ``"03"``: one would silently
    win)."""
    out: list[str] = []
    bad: list[str] = []
    seen: dict[int, Any] = {}
    for key in tiers:
        t = tier_number(key)
        if t is None:
            bad.append(repr(key) if len(repr(key)) <= 40 else repr(key)[:40] + "...")
        elif t in seen:
            out.append(f"keys {seen[t]!r} and {key!r} are both tier {t}; give each tier once")
        else:
            seen[t] = key
    if bad:
        out.insert(0, (f"key {bad[0]} is not a tier number" if len(bad) == 1 else
                       f"keys {', '.join(bad)} are not tier numbers")
                   + ' (a tier key is an integer, written as a string of decimal digits such '
                   'as "3")')
    return out


class Policy(Record):
    """Contract section 3. Built from a partial dict: ``tiers.N``, ``backoff`` and
    ``grace`` merge field by field over the defaults."""

    tiers: dict[int, TierPolicy] = Field(default_factory=dict)
    pools: dict[str, list[Annotated[int, Strict()]]] = Field(default_factory=dict)
    backoff: Backoff = Field(default_factory=Backoff)
    grace: Grace = Field(default_factory=Grace)
    max_evictions_per_tick: int | None = Field(None, ge=0, le=MAX_COUNT, strict=True)
    max_evicted_gpu_fraction: float | None = Field(None, ge=0, le=1, strict=True)
    cascade_guard_s: float = Field(0, ge=0, le=MAX_SECONDS, strict=True)
    # section 9: R15 (null turns it off; merges field by field over the default)
    thrash: Thrash | None = Field(default_factory=Thrash)
    # section 9: R17, a running job expected to end within this many seconds is spared
    spare_ending_within_s: float = Field(600, ge=0, le=MAX_SECONDS, strict=True)
    # an extension (docs/format.md): nodes kept open for whole-node jobs of the
    # reserve's tiers (null turns it off; merges field by field over the default)
    reserve: Reserve | None = Field(default_factory=Reserve)

    @model_validator(mode="before")
    @classmethod
    def _merge_defaults(cls, data: Any) -> Any:
        if isinstance(data, Policy):
            return data
        if data is None:
            data = {}
        if not isinstance(data, dict):
            return data  # pydantic reports the type error
        data = {k: v for k, v in data.items() if not (isinstance(k, str) and k.startswith("_"))}
        tiers: dict[Any, Any] = {t: dict(d) for t, d in DEFAULT_TIERS.items()}
        given = data.get("tiers", {})
        if isinstance(given, dict) and tier_key_problems(given):
            data["tiers"] = given  # (unmerged: _tier_keys says what is wrong)
        elif isinstance(given, dict):
            for key, spec in given.items():
                t = int(key)
                if isinstance(spec, dict):
                    base = dict(tiers.get(t, NEW_TIER))
                    base.update({k: v for k, v in spec.items()})
                    tiers[t] = base
                else:
                    tiers[t] = spec
            data["tiers"] = tiers
        elif "tiers" not in data:
            data["tiers"] = tiers
        return data

    @field_validator("tiers", mode="before")
    @classmethod
    def _tier_keys(cls, v: Any) -> Any:
        problems = tier_key_problems(v) if isinstance(v, dict) else []
        if problems:
            raise ValueError("; ".join(problems))
        return v

    def tier(self, t: int) -> TierPolicy:
        return self.tiers[t]

    def pool_admits(self, pool: str, tier: int) -> bool:
        """R4: a pool not listed admits every tier."""
        allowed = self.pools.get(pool)
        return allowed is None or tier in allowed

    def can_preempt(self, attacker: int, victim: int) -> bool:
        """R7 rights: the attacker's tier lists the victim's tier."""
        return victim in self.tiers[attacker].can_preempt

    def hold_until(self, last_preempted_at: datetime | None, k: int) -> datetime | None:
        """R9: the earliest time a job preempted k times may be placed again."""
        if k < 1 or last_preempted_at is None:
            return None
        return last_preempted_at + timedelta(seconds=self.backoff.cooldown(k))
