"""What-if analysis on one snapshot: change fields, add jobs, plan every variant and
put it side by side with the base.

Keys are dotted paths into the snapshot's JSON form; lists of records with an
``id`` (``storage``, ``nodes``, ``jobs``) are addressed by id, other lists by index,
maps (``policy.tiers``, ``policy.pools``) by key::

    policy.tiers.3.min_runtime_s=3600
    storage.nfs-a.write_gb_per_s=10
    nodes.dgx-001.state=down
    jobs.train-3.priority=5
    policy.grace.max_s=120

Values are parsed as JSON when they parse (``3600``, ``true``, ``null``,
``[1, 2]``), else taken as strings (``down``). A key that names nothing raises
:class:`models.InputError` naming it.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from models import InputError, Plan, Snapshot, load_snapshot, read_document

__all__ = ["Variant", "add_job", "apply_set", "load_scenarios", "parse_assignment",
           "parse_job", "plan_with", "run_whatif", "summarize", "variant_snapshot"]

_MAPS = {("policy", "tiers"), ("policy", "pools")}


@dataclass
class Variant:
    name: str
    sets: list[tuple[str, Any]] = field(default_factory=list)
    add_jobs: list[dict[str, Any]] = field(default_factory=list)

    def describe(self) -> str:
        parts = [f"{k}={json.dumps(v)}" for k, v in self.sets]
        parts += [f"+job {j.get('id')}" for j in self.add_jobs]
        return ", ".join(parts) or "(no change)"


def parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return text
    except RecursionError:  # (nested past Python's limit: no value of the contract is)
        raise InputError([f"--set: the value {text[:40]!r}... is nested too deep"]) from None


def parse_assignment(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` -> (key, value parsed as JSON when it parses, else the string)."""
    if "=" not in text:
        raise InputError([f"--set {text!r}: expected KEY=VALUE"])
    key, _, raw = text.partition("=")
    key = key.strip()
    if not key:
        raise InputError([f"--set {text!r}: empty key"])
    return key, parse_value(raw.strip())


def _shown(text: str, most: int = 60) -> str:
    """A key or segment as a message shows it: cut after ``most`` characters."""
    return text if len(text) <= most else f"{text[:most]}... ({len(text):,} characters)"


def _bad(key: str, msg: str) -> InputError:
    return InputError([f"--set {_shown(key, 200)}: {msg}"])


def apply_set(data: dict[str, Any], key: str, value: Any) -> None:
    """Set ``key`` (a dotted path, see the module docstring) in snapshot JSON ``data``."""
    segs = key.split(".")
    if any(not s for s in segs):
        raise _bad(key, "empty path segment")
    obj: Any = data
    walked: list[str] = []
    i = 0
    fresh = False  # inside a map entry this call created: any field may be set
    while True:
        here = ".".join(walked) or "(snapshot)"
        if isinstance(obj, dict):
            k = segs[i]
            maplike = tuple(walked[-2:]) in _MAPS
            if k not in obj and not maplike and not fresh:
                known = ", ".join(sorted(str(x) for x in obj)) or "none"
                raise _bad(key, f"unknown key {k!r} at {here} (known: {known})")
            if i == len(segs) - 1:
                obj[k] = value
                return
            if k not in obj:
                obj[k] = {}
                fresh = True
            obj = obj[k]
            walked.append(k)
            i += 1
        elif isinstance(obj, list):
            hit = None
            for n in range(len(segs) - i, 0, -1):  # ids may contain dots: longest match first
                cand = ".".join(segs[i:i + n])
                for pos, item in enumerate(obj):
                    if isinstance(item, dict) and item.get("id") == cand:
                        hit = (pos, n, cand)
                        break
                if hit:
                    break
            if hit is None and segs[i].isascii() and segs[i].isdigit() \
                    and len(segs[i]) <= 18 and int(segs[i]) < len(obj):  # (not 5,000 digits)
                hit = (int(segs[i]), 1, segs[i])
            if hit is None:
                ids = [str(x.get("id")) for x in obj if isinstance(x, dict) and "id" in x]
                known = (f"ids: {', '.join(ids)}" if ids else f"indices 0..{len(obj) - 1}"
                         if obj else "the list is empty")
                raise _bad(key, f"no item {_shown(segs[i])!r} in {here} ({known})")
            pos, n, name = hit
            if i + n == len(segs):
                obj[pos] = value
                return
            obj = obj[pos]
            walked.append(name)
            i += n
        else:
            raise _bad(key, f"{'.'.join(walked)} is a value ({obj!r}), it has no field "
                            f"{segs[i]!r}")


def parse_job(text: str | dict[str, Any]) -> dict[str, Any]:
    """A job for ``--add-job``: a JSON object, ``@file`` or a file path (or the
    document read from standard input)."""
    if isinstance(text, dict):
        return dict(text)
    if not isinstance(text, str):  # (a list or a value read from standard input)
        raise InputError([("--add-job: must be a JSON object (one job of the contract), got "
                           f"{_kind(text)}")])
    src = text.strip()
    try:
        is_file = src.startswith("@") or (not src.startswith(("{", "[")) and Path(src).exists())
    except (OSError, ValueError):  # (a name too long, a NUL: no such file)
        is_file = False
    if is_file:
        doc = read_document(src.lstrip("@"))
    else:
        try:
            doc = json.loads(src)
        except json.JSONDecodeError as exc:
            raise InputError([f"--add-job: malformed JSON ({exc.msg} at column {exc.colno})"]) \
                from None
        except (RecursionError, ValueError):
            raise InputError([("--add-job: malformed JSON (nested too deep, or a number of "
                               "thousands of digits)")]) from None
    if not isinstance(doc, dict):
        raise InputError(["--add-job: must be a JSON object (one job of the contract)"])
    return doc


def add_job(data: dict[str, Any], job: dict[str, Any]) -> None:
    """Append a job (pending by default, given an id when it has none)."""
    job = dict(job)
    job.setdefault("state", "pending")
    if "id" not in job:
        n = 1
        ids = {j.get("id") for j in data.get("jobs", [])}
        while f"whatif-{n}" in ids:
            n += 1
        job["id"] = f"whatif-{n}"
    data.setdefault("jobs", []).append(job)


def variant_snapshot(base: Snapshot, v: Variant) -> Snapshot:
    data = copy.deepcopy(base.model_dump(mode="json"))
    data.pop("comment", None)
    for k, val in v.sets:
        apply_set(data, k, val)
    for j in v.add_jobs:
        add_job(data, j)
    try:
        return load_snapshot(data)
    except InputError as exc:
        raise InputError(exc.errors, f"variant {v.name!r}") from None


def _kind(value: Any) -> str:
    """What a value of the wrong type is, for a message: ``null``, ``5``, ``a list``."""
    if value is None or isinstance(value, bool | int | float):
        return json.dumps(value)[:40]
    names: dict[type, str] = {dict: "an object", list: "a list", str: "a string"}
    return names.get(type(value), type(value).__name__)


def load_scenarios(path: str | Path) -> list[Variant]:
    """A scenario file: ``{"variants": [{"name", "set": {KEY: VALUE} or ["K=V", ...],
    "add_jobs": [job, ...]}]}`` (``add_job`` for a single job)."""
    doc = read_document(path)
    items = doc.get("variants") if isinstance(doc, dict) else doc
    if not isinstance(items, list) or not items:
        raise InputError(["scenario: expected {\"variants\": [...]} with at least one variant"],
                         str(path))
    out, errors = [], []
    for i, it in enumerate(items):
        if not isinstance(it, dict):
            errors.append(f"variants[{i}]: must be an object")
            continue
        unknown = sorted(set(it) - {"name", "set", "add_jobs", "add_job", "_comment"})
        if unknown:
            errors.append(f"variants[{i}]: unknown field(s) {unknown} (name, set, add_jobs)")
            continue
        sets: list[tuple[str, Any]] = []
        raw = it.get("set", {})
        if isinstance(raw, dict):
            sets = list(raw.items())
            errors += [(f"variants[{i}].set: key {_kind(k)} must be a dotted path (a string "
                        "such as nodes.dgx-001.state)") for k in raw if not isinstance(k, str)]
        elif isinstance(raw, list):
            for n, text in enumerate(raw):
                if not isinstance(text, str):
                    errors.append(f"variants[{i}].set[{n}]: must be a KEY=VALUE string, got "
                                  f"{_kind(text)}")
                    continue
                try:
                    sets.append(parse_assignment(text))
                except InputError as exc:
                    errors += [f"variants[{i}].set: {e}" for e in exc.errors]
        else:
            errors.append(f"variants[{i}].set: must be an object or a list of KEY=VALUE")
        jobs = it.get("add_jobs", [])
        if not isinstance(jobs, list):
            errors.append(f"variants[{i}].add_jobs: must be a list of jobs, got {_kind(jobs)}")
            jobs = []
        jobs = list(jobs)
        if "add_job" in it:
            jobs.append(it["add_job"])
        if any(not isinstance(j, dict) for j in jobs):
            errors.append(f"variants[{i}].add_jobs: every job must be an object")
        out.append(Variant(name=str(it.get("name", f"variant-{i + 1}")), sets=sets,
                           add_jobs=jobs))
    if errors:
        raise InputError(errors, str(path))
    return out


def plan_with(snap: Snapshot, planner: str = "cpsat", time_limit_s: float = 1.0,
              deterministic: bool = False, workers: int = 2) -> Plan:
    if planner == "naive":
        from planner.sim.naive import plan_naive

        return plan_naive(snap)
    from planner import plan as _plan
    from planner import warm_up

    if planner == "cpsat":  # (not inside the plan's time limit)
        warm_up(deterministic)
    return _plan(snap, time_limit_s=time_limit_s, deterministic=deterministic, workers=workers,
                 planner=planner)


def summarize(name: str, snap: Snapshot, plan: Plan, describe: str = "") -> dict[str, Any]:
    """The numbers shown side by side for one variant."""
    tiers = sorted(snap.policy.tiers)
    pend = Counter(str(j.tier) for j in snap.pending())
    pend_gpus: Counter[str] = Counter()
    for j in snap.pending():
        pend_gpus[str(j.tier)] += j.total_gpus
    admitted = {str(t): int(plan.objective.admitted_gpus.get(str(t), 0)) for t in tiers}
    return {
        "name": name,
        "changes": describe,
        "status": plan.status,
        "admitted_gpus": admitted,
        "pending_gpus": {str(t): pend_gpus.get(str(t), 0) for t in tiers},
        "pending_jobs": {str(t): pend.get(str(t), 0) for t in tiers},
        "placements": len(plan.placements),
        "placed": sorted(p.job for p in plan.placements),
        "evictions": len(plan.evictions),
        "evicted": sorted(e.job for e in plan.evictions),
        "eviction_cost_gpu_s": round(plan.objective.eviction_cost_gpu_s, 3),
        "max_grace_s": max((e.grace_s for e in plan.evictions), default=0.0),
        "storm_flush_gb": round(sum(s.flush_gb for s in plan.storm), 3),
        "storm_max_flush_s": round(max((s.flush_s for s in plan.storm), default=0.0), 3),
        "deferred": dict(sorted(Counter(d.reason for d in plan.deferred).items())),
        "deferred_jobs": {d.job: d.reason for d in sorted(plan.deferred, key=lambda d: d.job)},
        "warnings": len(plan.warnings),
        "solver_wall_s": plan.solver.wall_s,
    }


def _diff(base: dict[str, Any], other: dict[str, Any]) -> list[str]:
    skip = {"name", "changes", "solver_wall_s"}
    return sorted(k for k in other if k not in skip and other[k] != base.get(k))


def run_whatif(base: Snapshot, variants: list[Variant], planner: str = "cpsat",
               time_limit_s: float = 1.0, deterministic: bool = False,
               workers: int = 2) -> dict[str, Any]:
    """Plan the base and every variant; returns {"base": summary, "variants": [summary
    with a "differs" list of the fields that changed]}."""
    snaps = [(v, variant_snapshot(base, v)) for v in variants]  # all bad keys before planning
    b = summarize("base", base, plan_with(base, planner, time_limit_s, deterministic, workers))
    out = []
    for v, s in snaps:
        summ = summarize(v.name, s, plan_with(s, planner, time_limit_s, deterministic, workers),
                         v.describe())
        summ["differs"] = _diff(b, summ)
        out.append(summ)
    return {"planner": planner, "base": b, "variants": out}
