"""Properties of the planner over many snapshots rather than hand-made stories.

- R14: deterministic mode gives the same plan (JSON equal but for ``solver.wall_s``).
- The fallback paths: when CP-SAT finds nothing, the greedy plan comes back with
  status ``fallback``; when a candidate plan fails verification, ``plan()``
  returns a plan that evicts nothing. Both are valid.
- A seeded sweep over 600 random small snapshots (2-6 nodes, every NVLink form
  including explicit edge graphs, tiers, immunity, gangs, blocks, domains, pools,
  drain/down nodes, storm-prone storage, budgets, windows, cooldowns, cascade
  guards): every CP-SAT plan is the solver's own (neither a fallback nor the
  safety net's), passes the verifier, lists every pending job exactly once, is
  proven optimal unless a node has an explicit edge graph, and is
  lexicographically no worse (objective items 1-5) than the greedy plan; a plan
  proven optimal is no worse than the Kubernetes- and Slurm-style plans too.
- On 900 tiny snapshots (2-4 nodes of at most 8 GPUs, 1-4 pending jobs) an
  exhaustive enumeration of plans (written here, checked by the verifier) gives
  the true optimum: a plan proven ``optimal`` must reach it, none may beat it,
  and every deferral reason must agree with what the job could do on its own.
- Random snapshots that exposed planner bugs are kept as regression tests;
  ``KNOWN_BAD`` lists any that still do (left out of the sweeps meanwhile).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

import numpy as np
import pytest
from ortools.sat.python import cp_model

import planner as planner_pkg
from models import load_snapshot
from planner import plan
from planner.checks.verify import objective_of, verify
from planner.sim.generate import generate

NOW = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)  # a Monday

# NVLink layouts by node size; the 8-GPU list holds every contract form
CUBE_MESH = {"edges": [[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3], [4, 5], [4, 6], [4, 7],
                       [5, 6], [5, 7], [6, 7], [0, 4], [1, 5], [2, 6], [3, 7]]}
LAYOUTS: dict[int, list[Any]] = {
    8: ["nvswitch", "none", [[0, 1], [2, 3], [4, 5], [6, 7]], [[0, 1, 2, 3], [4, 5, 6, 7]],
        [[0, 1, 2]], CUBE_MESH, {"edges": [[i, (i + 1) % 8] for i in range(8)]}],
    4: ["nvswitch", "none", [[0, 1], [2, 3]], {"edges": [[0, 1], [1, 2], [2, 3]]}],
    2: ["nvswitch", "none"],
}
WINDOWS = [
    {"days": ["mon"], "start": "06:00", "end": "09:00"},  # inside
    {"days": ["sun"], "start": "22:00", "end": "08:00"},  # just ended
    {"start": "20:00", "end": "04:00"},  # outside
]


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def random_snapshot(seed: int, *, n_nodes: tuple[int, int] = (2, 6),
                    sizes: tuple[int, ...] = (2, 4, 8, 8, 8), n_pending: tuple[int, int] = (1, 6),
                    gangs: tuple[int, ...] = (1, 1, 1, 2, 3),
                    shapes: tuple[int, ...] = (1, 2, 2, 4, 4, 8),
                    speeds: tuple[float, ...] = (2.0, 5.0, 10.0, 40.0),
                    ck_sizes: tuple[float, ...] = (0, 20, 100, 300, 600)) -> dict[str, Any]:
    """A small random snapshot (contract v1) that is valid input: between
    ``n_nodes`` nodes of ``sizes`` GPUs, ``n_pending`` pending jobs of ``shapes``
    GPUs per node on ``gangs`` nodes (bounds inclusive)."""
    rng = np.random.default_rng(seed)

    def pick(xs: list[Any]) -> Any:
        return xs[int(rng.integers(len(xs)))]

    def ago(max_s: float) -> str:
        return _iso(NOW - timedelta(seconds=int(rng.uniform(0, max_s))))

    n_storage = int(rng.integers(1, 3))
    storage = [{"id": f"fs{i}", "write_gb_per_s": float(pick(list(speeds)))}
               for i in range(n_storage)]
    reserved = rng.random() < 0.25
    nodes: list[dict[str, Any]] = []
    for i in range(int(rng.integers(n_nodes[0], n_nodes[1] + 1))):
        gpus = int(pick(list(sizes)))
        rec: dict[str, Any] = {
            "id": f"n{i}", "gpus": gpus, "gpu_type": pick(["H100", "H100", "A100"]),
            "nvlink": pick(LAYOUTS[gpus]),
            "block": pick(["b0", "b1", None]), "nvlink_domain": pick(["d0", "d1", None]),
            "state": "up" if rng.random() < 0.85 else pick(["drain", "down"]),
        }
        if n_storage > 1:
            rec["storage"] = storage[int(rng.integers(n_storage))]["id"]
        if rng.random() < 0.5:
            rec["local_write_gb_per_s"] = float(pick([1.0, 4.0, 8.0]))
        if reserved and i == 0:
            rec["pool"] = "reserved"
        nodes.append(rec)

    free = {n["id"]: list(range(n["gpus"])) for n in nodes}
    jobs: list[dict[str, Any]] = []

    def checkpoint(started: str) -> dict[str, Any]:
        ck: dict[str, Any] = {"size_gb": float(pick(list(ck_sizes))),
                              "barrier_s": float(pick([0, 5, 20])),
                              "cleanup_s": float(pick([0, 5])),
                              "restore_s": float(rng.integers(0, 900))}
        if rng.random() < 0.25:
            ck["signal"] = None
        if rng.random() < 0.6:
            s = datetime.fromisoformat(started)
            span = (NOW - s).total_seconds()
            ck["last_at"] = _iso(s + timedelta(seconds=int(rng.uniform(0, span))))
        return ck

    def running(jid: str, where: dict[str, list[int]]) -> dict[str, Any]:
        started = ago(4 * 3600)  # a quarter to a half are still immune (R6)
        job: dict[str, Any] = {
            "id": jid, "tier": int(pick([1, 2, 3, 3])), "priority": int(rng.integers(0, 50)),
            "state": "running", "gpus_per_node": len(next(iter(where.values()))),
            "nodes": len(where), "started_at": started, "checkpoint": checkpoint(started),
            "placement": [{"node": n, "gpus": sorted(g)} for n, g in where.items()]}
        if rng.random() < 0.2:
            job["preemptions"] = int(rng.integers(1, 6))
            job["last_preempted_at"] = _iso(NOW - timedelta(days=1))
        return job

    # a multi-node running gang now and then
    if rng.random() < 0.4:
        k = int(pick([1, 2, 4]))
        hosts = [n["id"] for n in nodes if len(free[n["id"]]) >= k]
        if len(hosts) >= 2:
            members = [hosts[int(i)] for i in rng.choice(len(hosts), 2, replace=False)]
            where = {}
            for n in members:
                take = [int(g) for g in rng.choice(free[n], k, replace=False)]
                free[n] = [g for g in free[n] if g not in take]
                where[n] = take
            jobs.append(running("r-gang", where))
    for n in nodes:
        r = 0
        while free[n["id"]] and rng.random() < 0.8:
            k = int(pick([1, 1, 2, 2, 4, 8]))
            k = min(k, len(free[n["id"]]))
            take = [int(g) for g in rng.choice(free[n["id"]], k, replace=False)]
            free[n["id"]] = [g for g in free[n["id"]] if g not in take]
            jobs.append(running(f"r-{n['id']}-{r}", {n["id"]: take}))
            r += 1

    for i in range(int(rng.integers(n_pending[0], n_pending[1] + 1))):
        job = {"id": f"p{i}", "tier": int(pick([1, 1, 2, 2, 3])),
               "priority": int(rng.integers(0, 100)), "state": "pending",
               "gpus_per_node": int(pick(list(shapes))), "nodes": int(pick(list(gangs))),
               "topology": pick(["nvlink", "nvlink", "any"])}
        if rng.random() < 0.15:
            job["gpu_type"] = pick(["H100", "A100", "B200"])
        if rng.random() < 0.15:
            job["same_block"] = True
        if rng.random() < 0.1:
            job["same_nvlink_domain"] = True
        if rng.random() < 0.3:
            job["preemptions"] = int(rng.integers(1, 7))
            job["last_preempted_at"] = ago(3 * 3600)  # some still held (R9), some guarded
        jobs.append(job)

    policy: dict[str, Any] = {}
    if reserved:
        policy["pools"] = {"reserved": [1]}
    if rng.random() < 0.3:
        policy["max_evictions_per_tick"] = int(rng.integers(0, 4))
    if rng.random() < 0.3:
        policy["max_evicted_gpu_fraction"] = float(pick([0.1, 0.25, 0.5]))
    if rng.random() < 0.3:
        policy["cascade_guard_s"] = float(pick([600, 3600]))
    if rng.random() < 0.3:
        policy["tiers"] = {"2": {"windows": [pick(WINDOWS)]}}
    if rng.random() < 0.3:
        policy["grace"] = pick([{"max_s": 120}, {"min_s": 30, "safety": 1.5},
                                {"max_s": 300, "safety": 3}])
    if rng.random() < 0.2:
        policy["backoff"] = {"cooldown_s": pick([120, 600])}
    data = {"version": 1, "now": _iso(NOW), "storage": storage, "nodes": nodes, "jobs": jobs,
            "policy": policy}
    _cross_tick(np.random.default_rng([seed, 9]), data)
    return data


def _cross_tick(rng: np.random.Generator, data: dict[str, Any]) -> None:
    """Section 9's fields, drawn from their own generator (so that the rest of a
    seed's snapshot is what it was before they existed): queue starts (some inside
    tier 2's 600 s of patience, R16), expected ends (some within 600 s, R17), recent
    evictions (some outside the hour, R15) and policies that vary the three rules."""
    def pick(xs: list[Any]) -> Any:
        return xs[int(rng.integers(len(xs)))]

    for job in data["jobs"]:
        if job["state"] == "pending" and rng.random() < 0.5:
            job["submitted_at"] = _iso(NOW - timedelta(seconds=int(rng.uniform(0, 1200))))
        if job["state"] == "running" and rng.random() < 0.25:
            job["expected_end_at"] = _iso(NOW + timedelta(seconds=int(rng.uniform(-300, 1500))))
    if rng.random() < 0.5:
        data["recent_evictions"] = [
            {"job": f"gone-{k}", "at": _iso(NOW - timedelta(seconds=int(rng.uniform(1, 5400)))),
             "gpus": int(pick([1, 2, 4, 8]))}
            for k in range(int(rng.integers(0, 7)))]
    policy = data["policy"]
    if rng.random() < 0.4:
        policy["thrash"] = pick([None, {"min_evictions": 1}, {"min_evictions": 2},
                                 {"exempt_tiers": []}, {"exempt_tiers": [1, 2]},
                                 {"window_s": 600, "min_evictions": 3},
                                 {"max_gpu_fraction": 0.3, "min_gpus": 0},
                                 {"max_gpu_fraction": 0.5, "min_gpus": 0}])
    if rng.random() < 0.2:
        tiers = policy.setdefault("tiers", {})
        tiers.setdefault(pick(["1", "3"]), {})["preempt_after_s"] = 300
    if rng.random() < 0.2:
        policy["spare_ending_within_s"] = pick([0, 1200])
    if rng.random() < 0.3 and policy.get("thrash", {}) is not None:  # (drawn last)
        policy["thrash"] = {**policy.get("thrash", {}), "exempt_if": "any"}


def _plan_json(p: Any) -> dict[str, Any]:
    """The plan as JSON data without ``solver.wall_s``."""
    d = json.loads(p.to_json())
    d["solver"].pop("wall_s")
    return d


# ---------------------------------------------------------------- R14: determinism


@pytest.mark.parametrize("nodes,seed", [(8, 1), (16, 2), (24, 5), (32, 7)])
def test_deterministic_mode_repeats_generated(nodes: int, seed: int) -> None:
    data = generate(nodes=nodes, seed=seed, pending=max(4, nodes // 2))
    first = _plan_json(plan(data, deterministic=True, time_limit_s=1.0))
    for _ in range(2):
        assert _plan_json(plan(data, deterministic=True, time_limit_s=1.0)) == first


def test_deterministic_mode_repeats_random_small() -> None:
    for seed in range(20):
        data = random_snapshot(seed)
        first = _plan_json(plan(data, deterministic=True, time_limit_s=0.5))
        assert _plan_json(plan(data, deterministic=True, time_limit_s=0.5)) == first, seed


def _shuffled(data: dict[str, Any], seed: int) -> dict[str, Any]:
    """The same snapshot with its nodes, storage targets, jobs and recent evictions
    in another order."""
    rng = np.random.default_rng(seed)
    out = json.loads(json.dumps(data))
    for key in ("nodes", "storage", "jobs", "recent_evictions"):
        if out.get(key):
            out[key] = [out[key][i] for i in rng.permutation(len(out[key]))]
    return out


@pytest.mark.parametrize("nodes,seed", [(16, 2), (32, 7), (64, 11)])
def test_deterministic_plans_do_not_depend_on_the_order_of_records(nodes: int,
                                                                     seed: int) -> None:
    # ids are put in canonical order (the running jobs are read in the snapshot's
    # order, in which their records lie in memory, then ordered by id)
    data = generate(nodes=nodes, seed=seed, pending=max(4, nodes // 2))
    first = _plan_json(plan(data, deterministic=True, time_limit_s=1.0))
    for k in range(2):
        assert _plan_json(plan(_shuffled(data, k), deterministic=True,
                               time_limit_s=1.0)) == first, k
    for s in range(12):
        small = random_snapshot(s)
        want = _plan_json(plan(small, deterministic=True, time_limit_s=0.5))
        assert _plan_json(plan(_shuffled(small, s), deterministic=True,
                               time_limit_s=0.5)) == want, s


def test_deterministic_mode_ignores_workers_setting() -> None:
    # deterministic mode runs one worker whatever ``workers`` says
    data = generate(nodes=12, seed=3, pending=8)
    a = _plan_json(plan(data, deterministic=True, workers=1))
    b = _plan_json(plan(data, deterministic=True, workers=8))
    assert a == b


# ---------------------------------------------------------------- fallbacks


def _busy_snapshot() -> dict[str, Any]:
    """A snapshot where the greedy plan evicts something (so fallback is not trivial)."""
    return generate(nodes=16, seed=1, pending=8)


def test_fallback_when_solver_returns_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _busy_snapshot()
    greedy = plan(data, planner="greedy")
    monkeypatch.setattr(cp_model.CpSolver, "solve",
                        lambda self, model, *a, **k: cp_model.UNKNOWN)
    p = plan(data, deterministic=True)
    assert p.status == "fallback"
    assert p.solver.engine == "cp-sat" and p.solver.status == "UNKNOWN"
    assert verify(load_snapshot(data), p) == []
    # the fallback is the greedy plan
    assert [e.job for e in p.evictions] == [e.job for e in greedy.evictions]
    assert ([(q.job, q.placement) for q in p.placements]
            == [(q.job, q.placement) for q in greedy.placements])
    assert p.objective == greedy.objective
    assert greedy.evictions, "the story should make the greedy planner evict"


def test_fallback_when_solver_is_infeasible(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _busy_snapshot()
    monkeypatch.setattr(cp_model.CpSolver, "solve",
                        lambda self, model, *a, **k: cp_model.INFEASIBLE)
    p = plan(data, deterministic=True)
    assert p.status == "fallback"
    assert verify(load_snapshot(data), p) == []


@pytest.mark.parametrize("failing", [1, 2])
def test_safe_plan_when_candidate_fails_verification(monkeypatch: pytest.MonkeyPatch,
                                                     failing: int) -> None:
    # If the CP-SAT plan ever failed verification, plan() returns the greedy plan
    # (engine greedy, status fallback); if that failed too, one that evicts nothing
    # (placing only on free GPUs). Either is valid.
    data = _busy_snapshot()
    snap = load_snapshot(data)
    calls: list[int] = []
    real = planner_pkg._valid

    def first_fail(s: Any, p: Any) -> bool:
        calls.append(1)
        return False if len(calls) <= failing else real(s, p)

    monkeypatch.setattr(planner_pkg, "_valid", first_fail)
    p = plan(data, deterministic=True)
    assert verify(snap, p) == []
    assert p.status == "fallback"
    if failing == 1:
        greedy = plan(data, planner="greedy")
        assert p.solver.engine == "greedy" and "failed verification" in p.solver.detail
        assert p.evictions  # the busy snapshot needs evictions, and the greedy plan makes them
        assert objective_of(snap, p).key() >= objective_of(snap, greedy).key()
    else:
        assert p.solver.engine == "safe"
        assert p.evictions == []
        assert all(q.start_after_s == 0 for q in p.placements)


# ---------------------------------------------------------------- random sweep


SWEEP = 600
PER_CHUNK = 50


def _check_one(seed: int) -> str:
    data = random_snapshot(seed)
    snap = load_snapshot(data)
    p = plan(data, deterministic=True, time_limit_s=0.5)
    where = f"seed {seed}: {json.dumps(data)}"
    problems = verify(snap, p)
    assert problems == [], f"{where}\n{[str(v) for v in problems]}"
    assert p.solver.engine == "cp-sat", f"{where}\nthe CP-SAT plan failed verification: {p.solver}"
    # the solver always has time on snapshots this small: a fallback would mean its
    # solution could not be turned into GPU indices
    assert p.status != "fallback", f"{where}\n{p.solver}"
    pending = sorted(j.id for j in snap.jobs if j.state == "pending")
    listed = sorted([q.job for q in p.placements] + [d.job for d in p.deferred])
    assert listed == pending, where
    if not any(isinstance(n["nvlink"], dict) for n in data["nodes"]):
        # without explicit edge graphs the model is exact: small snapshots are proven,
        # unless thrash.exempt_free_first traded an exempt job's victims for free GPUs
        # (a plan that gives up admissions on purpose: no longer the plain optimum)
        assert (p.status == "optimal"
                or "thrash.exempt_free_first" in (p.solver.detail or "")), \
            f"{where}\n{p.solver}"
    key = objective_of(snap, p).key()
    greedy = plan(data, planner="greedy")
    assert key >= objective_of(snap, greedy).key(), f"{where}\nworse than greedy"
    if p.status == "optimal":
        for name in ("k8s", "slurm"):
            other = plan(data, planner=name)
            assert key >= objective_of(snap, other).key(), f"{where}\nworse than {name}"
    return p.status


@pytest.mark.parametrize("chunk", range(SWEEP // PER_CHUNK))
def test_random_small_snapshots(chunk: int) -> None:
    statuses = [_check_one(seed) for seed in range(chunk * PER_CHUNK, (chunk + 1) * PER_CHUNK)
                if ("sweep", seed) not in KNOWN_BAD]
    # the sweep should mostly prove optimality on snapshots this small
    assert statuses.count("optimal") >= PER_CHUNK // 2, statuses


def test_random_snapshots_are_varied() -> None:
    """The sweep exercises what it claims: evictions, storms, every reason code."""
    reasons: set[str] = set()
    evicting = storms = edges = 0
    for seed in range(SWEEP):
        data = random_snapshot(seed)
        edges += any(isinstance(n["nvlink"], dict) for n in data["nodes"])
        p = plan(data, planner="greedy")
        reasons |= {d.reason for d in p.deferred}
        evicting += bool(p.evictions)
        storms += any(e.grace_s > data.get("policy", {}).get("grace", {}).get("min_s", 60)
                      for e in p.evictions)
    assert evicting >= SWEEP // 5 and storms >= 5 and edges >= SWEEP // 4
    assert reasons >= {"COOLDOWN", "NO_FIT", "PROTECTED", "OUTRANKED", "BUDGET",
                       "THRASH_BUDGET", "PATIENCE", "ENDING_SOON"}, reasons


# ---------------------------------------------------------------- brute force optimum


def _connected(raw: Any, gpus: tuple[int, ...]) -> bool:
    """R3 over a raw ``nvlink`` value (written again here, independent of the planner)."""
    if len(gpus) <= 1 or raw == "nvswitch":
        return True
    if raw == "none":
        return False
    if isinstance(raw, list):
        return any(set(gpus) <= set(island) for island in raw)
    edges = {frozenset(e) for e in raw["edges"]}
    seen, stack = {gpus[0]}, [gpus[0]]
    while stack:
        g = stack.pop()
        for h in gpus:
            if h not in seen and frozenset((g, h)) in edges:
                seen.add(h)
                stack.append(h)
    return len(seen) == len(gpus)


Chosen = list[tuple[str, list[tuple[str, int]]]]  # (job id, [(node, GPU)]) per placed job


def enumerate_best(data: dict[str, Any], *, only: set[str] | None = None, empty: bool = False,
                   storm: bool = True, budgets: bool = True,
                   max_leaves: int = 30000) -> tuple[tuple[float, ...], Chosen] | None:
    """The best objective key (items 1-5) over every plan, by enumeration, and the
    placements reaching it: each pending job (of ``only``, when given) is left out or
    placed on any legal node set and GPU set; the victims are then exactly the holders
    of the GPUs used (R7: no eviction without a beneficiary), and R5-R13 are checked
    on them (``storm``/``budgets`` False skip R11-R12/R13; ``empty`` treats every GPU as
    free). None when the enumeration would be too large."""
    from itertools import combinations, product

    from models.plan import Objective
    from models.rules import eviction_cost, local_flush_s, victim_storage

    snap = load_snapshot(data)
    pol, now = snap.policy, snap.now
    nodes = snap.node_map()
    holder: dict[tuple[str, int], Any] = {}
    for j in snap.jobs:
        if j.state == "running" and not empty:
            for part in j.placement or []:
                for g in part.gpus:
                    holder[(part.node, g)] = j

    def evictable(j: Any) -> bool:
        tp = pol.tier(j.tier)
        left = (None if j.expected_end_at is None
                else (j.expected_end_at - now).total_seconds())
        ending = (pol.spare_ending_within_s > 0 and left is not None
                  and 0 <= left <= pol.spare_ending_within_s)  # R17
        return (tp.preemptible_at(now) and not ending
                and (now - j.started_at).total_seconds() >= tp.min_runtime_s
                and all(nodes[p.node].state != "down" for p in j.placement))

    def patient(j: Any) -> bool:  # R16: queued long enough (or queue start unknown)
        wait = pol.tier(j.tier).preempt_after_s
        starts = [t for t in (j.submitted_at, j.last_preempted_at) if t is not None]
        return wait <= 0 or not starts or (now - max(starts)).total_seconds() >= wait

    options: list[list[Any]] = []
    pending = [j for j in snap.jobs if j.state == "pending" and (only is None or j.id in only)]
    for j in pending:
        opts: list[Any] = [None]
        until = pol.hold_until(j.last_preempted_at, j.preemptions)
        if until is None or now >= until:
            guarded = (pol.cascade_guard_s > 0 and j.last_preempted_at is not None
                       and (now - j.last_preempted_at).total_seconds() < pol.cascade_guard_s)
            rights = set() if guarded or not patient(j) else set(pol.tier(j.tier).can_preempt)
            nvl = j.topology == "nvlink" and j.gpus_per_node > 1
            shards: dict[str, list[tuple[int, ...]]] = {}
            for n in snap.nodes:
                if (n.state != "up" or n.gpus < j.gpus_per_node
                        or (j.gpu_type is not None and n.gpu_type != j.gpu_type)
                        or not pol.pool_admits(n.pool, j.tier)
                        or (j.same_block and n.block is None)
                        or (j.same_nvlink_domain and n.nvlink_domain is None)):
                    continue
                ok = [g for g in range(n.gpus) if (n.id, g) not in holder
                      or (evictable(holder[(n.id, g)])
                          and holder[(n.id, g)].tier in rights)]
                sets = [c for c in combinations(ok, j.gpus_per_node)
                        if not nvl or _connected(n.nvlink_raw(), c)]
                if sets:
                    shards[n.id] = sets
            for group in combinations(sorted(shards), j.nodes):
                if j.same_block and len({nodes[n].block for n in group}) > 1:
                    continue
                if j.same_nvlink_domain and len({nodes[n].nvlink_domain for n in group}) > 1:
                    continue
                for choice in product(*(shards[n] for n in group)):
                    opts.append([(n, g) for n, c in zip(group, choice) for g in c])
        options.append(opts)
    leaves = 1
    for o in options:
        leaves *= len(o)
    if leaves > max_leaves:
        return None
    storages = snap.storage_map()
    total = sum(n.gpus for n in snap.nodes if n.state in ("up", "drain"))
    tiers = sorted(pol.tiers)
    best: list[Any] = [None, []]
    th = pol.thrash
    if th is not None:  # R15: B and H
        counted = sum(1 for j in snap.jobs if j.state == "running"
                      and all(nodes[p.node].state != "down" for p in j.placement))
        limit = max(th.min_evictions, int(th.max_fraction * counted + 1e-9))
        window = [e for e in snap.recent_evictions
                  if (now - e.at).total_seconds() <= th.window_s and e.at < now]
        recent = len(window)
        live = sum(n.gpus for n in snap.nodes if n.state in ("up", "drain"))
        gpu_limit = (None if th.max_gpu_fraction is None
                     else max(th.min_gpus, int(th.max_gpu_fraction * live + 1e-9))
                     - sum(e.gpus or 0 for e in window))

    def leaf(chosen: list[tuple[Any, list[tuple[str, int]]]]) -> tuple[float, ...] | None:
        victims = {holder[g].id: holder[g] for _j, gs in chosen for g in gs if g in holder}
        if budgets and th is not None:
            users: dict[str, set[int]] = {}  # victim -> the tiers of the jobs on its GPUs
            for j, gs in chosen:
                for g in gs:
                    if g in holder:
                        users.setdefault(holder[g].id, set()).add(j.tier)
            exempt = {v for v, ts in users.items() if th.exempt_by(ts)}
            if len(victims) - len(exempt) > max(0, limit - recent - len(exempt)):
                return None
            ex_gpus = sum(victims[v].total_gpus for v in exempt)
            all_gpus = sum(v.total_gpus for v in victims.values())
            if gpu_limit is not None and all_gpus - ex_gpus > max(0, gpu_limit - ex_gpus):
                return None
        if budgets and (pol.max_evictions_per_tick is not None
                        and len(victims) > pol.max_evictions_per_tick):
            return None
        if budgets and (pol.max_evicted_gpu_fraction is not None and sum(
                v.total_gpus for v in victims.values())
                > pol.max_evicted_gpu_fraction * total + 1e-9):
            return None
        loads: dict[str, float] = {}
        for v in victims.values():
            s = victim_storage(snap, v)
            if v.checkpoint.signal is not None and s is not None:
                loads[s.id] = loads.get(s.id, 0.0) + v.checkpoint.size_gb
        for v in victims.values():
            if v.checkpoint.signal is None or not storm:
                continue
            s = victim_storage(snap, v)
            fl = max(loads[s.id] / storages[s.id].write_gb_per_s if s else 0.0,
                     local_flush_s(nodes, v))
            ck = v.checkpoint
            if pol.grace.need(fl, ck.barrier_s, ck.cleanup_s) > pol.grace.max_s + 1e-9:
                return None
        admitted = {str(t): 0 for t in tiers}
        for j, _gs in chosen:
            admitted[str(j.tier)] += j.total_gpus
        return Objective(admitted_gpus=admitted,
                         priority_value=sum(j.priority * j.total_gpus for j, _ in chosen),
                         eviction_cost_gpu_s=sum(eviction_cost(snap, v)
                                                 for v in victims.values()),
                         evictions=len(victims)).key()

    def dfs(i: int, used: set[tuple[str, int]], chosen: list[Any]) -> None:
        if i == len(pending):
            k = leaf(chosen)
            if k is not None and (best[0] is None or k > best[0]):
                best[0], best[1] = k, [(j.id, gs) for j, gs in chosen]
            return
        for o in options[i]:
            if o is None:
                dfs(i + 1, used, chosen)
            elif used.isdisjoint(o):
                dfs(i + 1, used | set(o), [*chosen, (pending[i], o)])

    dfs(0, set(), [])
    return best[0], best[1]


def brute_force_key(data: dict[str, Any]) -> tuple[float, ...] | None:
    found = enumerate_best(data)
    return None if found is None else found[0]


def enumerated_plan(data: dict[str, Any], chosen: Chosen) -> Any:
    """The enumerated placements as a contract plan (through the shared assembly), so
    that the verifier can vouch for the enumeration itself."""
    from models import SolverInfo
    from planner.checks.assemble import assemble
    from planner.core.decision import Decision
    from planner.core.problem import build_problem

    problem = build_problem(load_snapshot(data))
    d = Decision()
    for jid, gs in chosen:
        parts: dict[int, int] = {}
        for n, g in gs:
            ni = problem.node_index[n]
            parts[ni] = parts.get(ni, 0) | 1 << g
        d.placements[jid] = sorted(parts.items())
        for ni, m in parts.items():
            d.victims |= {problem.owner[(ni, g)] for g in range(m.bit_length())
                          if m >> g & 1 and (ni, g) in problem.owner}
    return assemble(problem, d, "feasible", SolverInfo(engine="enumeration", status="ENUM"))


# tiny snapshots for the enumeration: (seed base, random_snapshot keywords)
TINY: dict[str, tuple[int, dict[str, Any]]] = {
    "A": (10_000, {"n_nodes": (2, 3), "sizes": (2, 4, 4), "n_pending": (1, 3),
                   "gangs": (1, 1, 2), "shapes": (1, 2, 2, 4)}),
    "B": (20_000, {"n_nodes": (2, 4), "sizes": (2, 4, 4, 8), "n_pending": (2, 4),
                   "gangs": (1, 1, 2), "shapes": (1, 2, 2, 4)}),
    # storm-prone: slow storage, checkpoints from empty to large
    "S": (30_000, {"n_nodes": (2, 4), "sizes": (2, 4, 4, 8), "n_pending": (2, 4),
                   "gangs": (1, 1, 2), "shapes": (2, 4, 4, 8), "speeds": (2.0, 5.0),
                   "ck_sizes": (0, 50, 100, 200, 400)}),
}
BRUTE = 300  # snapshots per family


def tiny(family: str, seed: int) -> dict[str, Any]:
    base, kw = TINY[family]
    return random_snapshot(base + seed, **kw)


@pytest.mark.parametrize("family,chunk", [(f, c) for f in sorted(TINY) for c in range(2)])
def test_optimal_matches_enumeration(family: str, chunk: int) -> None:
    """On tiny snapshots a plan proven ``optimal`` has the enumerated best objective
    (items 1-5); no plan beats the enumeration; when the planner's plan is worse, the
    enumerated plan passes the verifier (so the enumeration is not the one at fault)."""
    checked = proven = 0
    for seed in range(chunk * BRUTE // 2, (chunk + 1) * BRUTE // 2):
        if (family, seed) in KNOWN_BAD:
            continue
        data = tiny(family, seed)
        if data["policy"].get("thrash", {}) is not None:  # the contract objective's optimum
            data["policy"]["thrash"] = {**data["policy"].get("thrash", {}),
                                        "exempt_free_first": False,
                                        "past_budget_gpu_s": 0}
        found = enumerate_best(data)
        if found is None:
            continue
        best, chosen = found
        checked += 1
        snap = load_snapshot(data)
        p = plan(data, deterministic=True, time_limit_s=0.5)
        where = f"{family}/{seed}: {json.dumps(data)}"
        assert p.solver.engine == "cp-sat", f"{where}\nCP-SAT plan failed verification"
        key = objective_of(snap, p).key()
        assert key <= best, f"{where}\nplan {key} beats the enumeration {best}"
        if key < best:
            other = enumerated_plan(data, chosen)
            assert [str(v) for v in verify(snap, other)] == [], where
            assert objective_of(snap, other).key() == best, where
        if p.status == "optimal":
            proven += 1
            assert key == best, f"{where}\nproven optimal {key} but {best} exists"
        elif not any(isinstance(n["nvlink"], dict) for n in data["nodes"]):
            pytest.fail(f"{where}\nnot proven optimal without edge graphs: {p.solver}")
    assert checked >= BRUTE // 2 * 3 // 4 and proven >= checked // 2, (checked, proven)


def _reason_facts(data: dict[str, Any], jid: str) -> dict[str, bool | None]:
    """What the enumeration says about one pending job on its own (None: too large)."""
    def placed(**kw: Any) -> bool | None:
        found = enumerate_best(data, only={jid}, **kw)
        return None if found is None else bool(found[1])

    return {"empty": placed(empty=True), "alone": placed(),
            "free_rules": placed(storm=False, budgets=False)}


@dataclass(frozen=True)
class _Deferral:
    where: str
    reason: str
    held: bool  # R9 hold in force at now
    until_ok: bool  # the entry's ``until`` is the hold's end (when held)
    guarded: bool  # R10 in force
    budgeted: bool  # the policy sets an R13 budget
    impatient: bool  # R16 in force
    facts: tuple[tuple[str, bool | None], ...]  # see _reason_facts (not for held jobs)


@cache
def _deferrals() -> tuple[_Deferral, ...]:
    """Every deferred job of the tiny snapshots, with what the enumeration says about it."""
    out = []
    for family in sorted(TINY):
        for seed in range(BRUTE):
            if (family, seed) in KNOWN_BAD:
                continue
            data = tiny(family, seed)
            snap = load_snapshot(data)
            pol = snap.policy
            p = plan(data, deterministic=True, time_limit_s=0.5)
            jobs = snap.job_map()
            for d in p.deferred:
                job = jobs[d.job]
                until = pol.hold_until(job.last_preempted_at, job.preemptions)
                held = until is not None and snap.now < until
                guarded = (pol.cascade_guard_s > 0 and job.last_preempted_at is not None
                           and (snap.now - job.last_preempted_at).total_seconds()
                           < pol.cascade_guard_s)
                out.append(_Deferral(
                    where=f"{family}/{seed} {d.job} {d.reason} ({d.detail}): {json.dumps(data)}",
                    reason=d.reason, held=held, until_ok=not held or d.until == until,
                    guarded=guarded,
                    budgeted=(pol.max_evictions_per_tick is not None
                              or pol.max_evicted_gpu_fraction is not None),
                    impatient=(pol.tier(job.tier).preempt_after_s > 0
                               and job.queue_start() is not None
                               and (snap.now - job.queue_start()).total_seconds()
                               < pol.tier(job.tier).preempt_after_s),
                    facts=() if held else tuple(_reason_facts(data, d.job).items())))
    return tuple(out)


def test_deferral_reasons_agree_with_enumeration() -> None:
    """Each deferred job's reason is consistent with what the job could do on its own:
    COOLDOWN iff it is held (R9); NO_FIT iff it fits nowhere even on an empty cluster;
    PROTECTED only if it cannot be placed alone (within every rule); CASCADE_GUARD
    only if guarded; BUDGET only under a budget; PATIENCE only if R16 holds it;
    STORM, BUDGET and THRASH_BUDGET only if it could be placed with R11-R13 and R15
    waived."""
    counts: dict[str, int] = {}
    for d in _deferrals():
        counts[d.reason] = counts.get(d.reason, 0) + 1
        assert (d.reason == "COOLDOWN") == d.held and d.until_ok, d.where
        if d.held:
            continue
        facts = dict(d.facts)
        if facts["empty"] is not None:
            assert (d.reason == "NO_FIT") == (not facts["empty"]), (d.where, facts)
        if d.reason == "PROTECTED" and facts["alone"] is not None:
            assert not facts["alone"], (d.where, facts)
        if d.reason in ("STORM", "BUDGET", "THRASH_BUDGET") and facts["free_rules"] is not None:
            assert facts["free_rules"], (d.where, facts)
        assert d.reason != "CASCADE_GUARD" or d.guarded, d.where
        assert d.reason != "BUDGET" or d.budgeted, d.where
        assert d.reason != "PATIENCE" or d.impatient, d.where
    assert set(counts) >= {"COOLDOWN", "NO_FIT", "PROTECTED", "OUTRANKED", "STORM", "BUDGET",
                           "PATIENCE", "THRASH_BUDGET"}, counts


def test_outranked_and_storm_agree_with_enumeration() -> None:
    """OUTRANKED only if the job could be placed alone within every rule (the capacity
    went to others); STORM only if it could not."""
    wrong = []
    for d in _deferrals():
        alone = dict(d.facts).get("alone")
        if alone is not None and d.reason in ("OUTRANKED", "STORM") and (
                (d.reason == "OUTRANKED") != alone):
            wrong.append(d.where)
    assert wrong == []


# ---------------------------------------------------------------- known planner bugs


# Random snapshots that expose a reported, still open planner bug: (family, seed) ->
# the bug; left out of the sweeps above until it is fixed.
KNOWN_BAD: dict[tuple[str, int], str] = {}


@pytest.mark.parametrize("family,seed", [("A", 49), ("sweep", 174), ("sweep", 4403),
                                         ("sweep", 7045), ("sweep", 15460)])
def test_regressions(family: str, seed: int) -> None:
    """Snapshots that exposed planner bugs, now fixed: A/49, a signal-holding victim
    with an empty checkpoint left out of the storm cap (every plan broke R11 and
    plan() evicted nothing); sweep/174, a GPU assignment after the solve that gave a
    tier-1 job the only GPUs a tier-2 job could use (EXTRACT_FAILED, fallback).
    Under ``thrash.exempt_if: any`` with R15 binding: sweep/7045, the model counted a
    victim exempt when a tier-1 shard was on its node though on other GPUs (n0:
    tier-1 p2 on GPUs 0 and 2, victim r-n0-1 on GPU 3 counted exempt), so its optimum
    did not realise and the plan was the Kubernetes-style one (the model's
    ``OPTIMAL`` unproven); sweep/4403, a gang victim counted exempt beside the two
    one-node victims that took the tier-1 shard's two GPUs, an unrealisable optimum
    (6/4/0 GPUs) whose plan then kept the gang as a victim for nothing (cost 103,583
    GPU-s against greedy's 20,655); now the model's optimum is realised, 6/2/0 GPUs,
    above greedy's 6/0/0; sweep/15460, the first GPU order for the touches left a
    tier-2 shard without GPUs (EXTRACT_FAILED) until the GPUs are dealt again (its
    nodes with NVLink rings are modelled GPU by GPU: the plan is not proven)."""
    data = random_snapshot(seed) if family == "sweep" else tiny(family, seed)
    if (family, seed) == ("sweep", 174):
        # its optimum (8/14/0 GPUs) has tier-1 p0 evict tier-2 r-n1-1 while tier-2
        # p3, whose rights stop at tier 3, takes free GPUs p0 could use:
        # thrash.exempt_free_first trades them (8/10/0, feasible); the bug was the
        # model's extraction
        pol = data.setdefault("policy", {})
        pol["thrash"] = {**(pol.get("thrash") or {}), "exempt_free_first": False}
    snap = load_snapshot(data)
    p = plan(data, deterministic=True, time_limit_s=0.5)
    assert p.status == ("feasible" if seed == 15460 else "optimal"), p.solver
    assert p.solver.engine == "cp-sat" and p.solver.status == "OPTIMAL", p.solver
    assert verify(snap, p) == []
    found = enumerate_best(data)
    if found is not None:
        assert objective_of(snap, p).key() == found[0]


def test_fallback_never_worse_than_the_plain_greedy_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sparing capacity for less important jobs can cost a tier its own admissions;
    the plain greedy plan (the greedy baseline's) is always a candidate too, also
    with a wall-clock budget.

    n1 (H100) is free; n2 (H200) holds tier-2 job r2. Tier-1 job a (any GPU type,
    priority 10) goes first. The sparing variant keeps free GPUs for the pending
    tier-3 job c, so a evicts r2 on n2, and tier-1 job b (H200 only) has no node
    left: 8 tier-1 GPUs. The plain greedy puts a on free n1 and b on n2 (evicting
    r2), and c finds no free GPU: 16 tier-1 GPUs, lexicographically better."""
    data = {"version": 1, "now": "2026-11-30T08:00:00Z", "storage": [], "policy": {},
            "nodes": [{"id": "n1", "gpus": 8, "gpu_type": "H100"},
                      {"id": "n2", "gpus": 8, "gpu_type": "H200"}],
            "jobs": [{"id": "r2", "tier": 2, "state": "running", "gpus_per_node": 8,
                      "started_at": "2026-11-30T04:00:00Z",
                      "checkpoint": {"restore_s": 100.0},
                      "placement": [{"node": "n2", "gpus": list(range(8))}]},
                     {"id": "a", "tier": 1, "state": "pending", "gpus_per_node": 8,
                      "priority": 10},
                     {"id": "b", "tier": 1, "state": "pending", "gpus_per_node": 8,
                      "priority": 5, "gpu_type": "H200"},
                     {"id": "c", "tier": 3, "state": "pending", "gpus_per_node": 1}]}
    monkeypatch.setattr(cp_model.CpSolver, "solve",
                        lambda self, model, *a, **k: cp_model.UNKNOWN)
    p = plan(data, time_limit_s=1.0)  # a wall-clock budget, not deterministic mode
    assert p.status == "fallback"
    assert verify(load_snapshot(data), p) == []
    assert {q.job: q.placement[0].node for q in p.placements} == {"a": "n1", "b": "n2"}
    assert [e.job for e in p.evictions] == ["r2"]
    assert p.objective.admitted_gpus == {"1": 16, "2": 0, "3": 0}
    assert [d.job for d in p.deferred] == ["c"]


@pytest.mark.parametrize("deterministic", [False, True])
def test_fallback_takes_the_priority_first_plan_when_largest_first_blocks(
        monkeypatch: pytest.MonkeyPatch, deterministic: bool) -> None:
    """Largest-first can give a big job the node two smaller jobs of its tier
    needed; the greedy variant that takes more important jobs first (the
    baselines' queue order) is a candidate too.

    a-h200 (H200) and b-h100 (H100) are free 8-GPU nodes. Tier-1 job big needs 6
    GPUs of any type (priority 1); s1 and s2 need 4 H200 GPUs each (priorities 10
    and 9). Largest first, big goes first and takes a-h200 (both nodes fit it
    equally; the first by id wins), and neither s1 nor s2 fits in the 2 GPUs
    left: 6 tier-1 GPUs. More important first, s1 and s2 fill a-h200 and big
    takes b-h100: 14 tier-1 GPUs, the optimum, and no eviction."""
    def pending(jid: str, gpus: int, prio: int, gtype: str | None) -> dict[str, Any]:
        return {"id": jid, "tier": 1, "state": "pending", "gpus_per_node": gpus,
                "priority": prio, "topology": "any", "gpu_type": gtype}

    data = {"version": 1, "now": "2026-11-30T08:00:00Z", "storage": [], "policy": {},
            "nodes": [{"id": "a-h200", "gpus": 8, "gpu_type": "H200"},
                      {"id": "b-h100", "gpus": 8, "gpu_type": "H100"}],
            "jobs": [pending("big", 6, 1, None), pending("s1", 4, 10, "H200"),
                     pending("s2", 4, 9, "H200")]}
    greedy = plan(data, planner="greedy")
    assert greedy.objective.admitted_gpus["1"] == 6  # the story: largest first loses
    monkeypatch.setattr(cp_model.CpSolver, "solve",
                        lambda self, model, *a, **k: cp_model.UNKNOWN)
    p = plan(data, time_limit_s=1.0, deterministic=deterministic)
    assert p.status == "fallback"
    assert verify(load_snapshot(data), p) == []
    assert {q.job: q.placement[0].node for q in p.placements} == {
        "s1": "a-h200", "s2": "a-h200", "big": "b-h100"}
    assert p.objective.admitted_gpus == {"1": 14, "2": 0, "3": 0}
    assert p.evictions == [] and p.deferred == []


def test_fallback_takes_the_baselines_plan_when_an_eviction_budget_binds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a count budget (R13) the greedy variants, cheapest victims first, can
    spend it on one job; the per-node baselines, fewest victims first, place more.
    Their plans are candidates too when the budget bound (and the time allows).

    Budget: 2 evictions. n1 holds two 4-GPU tier-3 jobs (cost 4 x 10 = 40 GPU-s
    each); n2 and n3 hold one 8-GPU tier-3 job each (8 x 100 = 800 GPU-s). Tier-1
    jobs p and q need 8 GPUs. The greedy puts p on n1 (80 GPU-s, 2 evictions) and
    has no eviction left for q: 8 tier-1 GPUs. Fewest victims first puts p on n2
    and q on n3: 16 tier-1 GPUs for 1,600 GPU-s, lexicographically better (and the
    optimum)."""
    def running(jid: str, where: str, gpus: list[int], restore: float) -> dict[str, Any]:
        return {"id": jid, "tier": 3, "state": "running", "gpus_per_node": len(gpus),
                "started_at": "2026-11-30T04:00:00Z", "checkpoint": {"restore_s": restore},
                "placement": [{"node": where, "gpus": gpus}]}

    data = {"version": 1, "now": "2026-11-30T08:00:00Z", "storage": [],
            "policy": {"max_evictions_per_tick": 2},
            "nodes": [{"id": n, "gpus": 8} for n in ("n1", "n2", "n3")],
            "jobs": [running("a1", "n1", [0, 1, 2, 3], 10.0),
                     running("a2", "n1", [4, 5, 6, 7], 10.0),
                     running("b2", "n2", list(range(8)), 100.0),
                     running("b3", "n3", list(range(8)), 100.0),
                     {"id": "p", "tier": 1, "state": "pending", "gpus_per_node": 8},
                     {"id": "q", "tier": 1, "state": "pending", "gpus_per_node": 8}]}
    greedy = plan(data, planner="greedy")
    assert greedy.objective.admitted_gpus["1"] == 8  # the story: the greedy loses q
    monkeypatch.setattr(cp_model.CpSolver, "solve",
                        lambda self, model, *a, **k: cp_model.UNKNOWN)
    p = plan(data, deterministic=True)
    assert p.status == "fallback"
    assert verify(load_snapshot(data), p) == []
    assert {q.job: q.placement[0].node for q in p.placements} == {"p": "n2", "q": "n3"}
    assert sorted(e.job for e in p.evictions) == ["b2", "b3"]
    assert p.objective.admitted_gpus["1"] == 16
    assert p.objective.eviction_cost_gpu_s == pytest.approx(1600.0)


def test_explanations_of_a_plan_equal_those_worked_out_from_scratch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A deferred job's explanation next to the plan takes each node the plan neither
    places on nor evicts from from the answers "as if nothing else happened"
    (planner/checks/explain.py): on random ticks (small ones and generated clusters
    of 48-96 nodes with long queues) the deferrals equal those worked out node by
    node for the plan itself."""
    from models import SolverInfo
    from planner.checks import explain
    from planner.checks.assemble import assemble
    from planner.core.problem import build_problem
    from planner.heuristics.greedy import GreedyPlanner

    snaps = [random_snapshot(seed, n_nodes=(4, 8), n_pending=(4, 10)) for seed in range(40)]
    snaps += [generate(nodes=n, pending=p, seed=s, occupancy=0.95)
              for n, p, s in ((48, 60, 1), (64, 120, 2), (96, 200, 3))]
    compared = with_victims = 0
    for data in snaps:
        problem = build_problem(load_snapshot(data))
        d = GreedyPlanner(problem).solve()
        info = SolverInfo(engine="greedy", status="HEURISTIC")
        fast = assemble(problem, d, "feasible", info).deferred
        with monkeypatch.context() as m:  # every node worked out for the plan itself
            m.setattr(explain, "DERIVED", False)
            slow = assemble(problem, d, "feasible", info).deferred
        assert fast == slow
        def same(answer: tuple) -> tuple:  # (a node left without victims: no entry)
            used, by_node, already = answer
            return (used, {i: vs for i, vs in by_node.items() if vs},
                    {i: sorted(ts) for i, ts in already.items()})

        derived = same(explain._victims_by_node(problem, d))  # (kept in the memo by the first)
        explain.forget(problem)
        with monkeypatch.context() as m:
            m.setattr(explain, "DERIVED", False)
            assert derived == same(explain._victims_by_node(problem, d))
        compared += len(fast)
        with_victims += bool(d.victims)
    assert compared > 300 and with_victims > 10


def test_jobs_of_one_shape_share_their_deferral_and_each_equals_its_own() -> None:
    """assemble works a deferral out once per job shape (and time-limit note) and
    copies it with each job's id, except for the job-specific reasons (R9, R10,
    R16): on random ticks (small ones and generated clusters with long queues,
    policy.reserve on from 32 nodes) each deferral equals the one worked out for that
    job alone, with the memo emptied before it."""
    from models import SolverInfo
    from planner.checks import explain
    from planner.checks.assemble import assemble, storm_loads
    from planner.core.decision import clean
    from planner.core.problem import build_problem
    from planner.heuristics.greedy import GreedyPlanner

    snaps = [random_snapshot(seed, n_nodes=(4, 8), n_pending=(4, 10)) for seed in range(30)]
    snaps += [generate(nodes=n, pending=p, seed=s, occupancy=0.95)
              for n, p, s in ((48, 80, 4), (64, 160, 5))]
    compared = shared = 0
    for data in snaps:
        problem = build_problem(load_snapshot(data))
        d = GreedyPlanner(problem).solve()
        deferred = assemble(problem, d, "feasible",
                            SolverInfo(engine="greedy", status="HEURISTIC")).deferred
        d = clean(problem, d)
        loads = storm_loads(problem, d.victims)
        for entry in deferred:
            explain.forget(problem)
            alone = explain._deferral(problem, problem.pending[entry.job], d, loads, None)
            assert entry == alone, entry.job
        compared += len(deferred)
        shared += len(deferred) - len({(e.reason, e.detail) for e in deferred})
    assert compared > 300 and shared > 100
