"""Objective item 6, placements that keep whole nodes free (planner/core/decision.py,
``best_fit``).

Conventions of test_planner_cases.py: Monday 2026-11-30 08:00Z, 8-GPU NVSwitch
nodes, checkpoints of size 0 with a signal; running jobs started at 04:00.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_planner_cases import OLD, node, nodes_of, pend, run, snap, solve
from test_planner_properties import random_snapshot

from models import SolverInfo, load_snapshot
from planner.checks.assemble import assemble
from planner.checks.verify import verify
from planner.core.budget import Budget
from planner.core.decision import Decision, best_fit, clean, objective_of, used_gpus
from planner.core.problem import Problem, build_problem
from planner.core.topology import layout_best_fit
from planner.heuristics.greedy import GreedyPlanner


def _problem(nodes: list[dict], jobs: list[dict], policy: dict | None = None) -> Problem:
    return build_problem(load_snapshot(snap(nodes, jobs, policy)))


def _idle(problem: Problem, d: Decision) -> list[int]:
    used = used_gpus(d)
    return [(n.free & ~used.get(n.idx, 0)).bit_count() for n in problem.nodes]


def test_a_job_on_free_gpus_moves_to_the_tightest_node_and_a_node_stays_whole() -> None:
    # n0: r0 on GPUs 0-1 (6 free), n1: r1 on GPUs 0-5 (2 free), n2 free. A plan puts
    # a (1 GPU) on n2 and b (2 GPUs) on n0: idle GPUs 4, 2 and 7, no node whole.
    # a goes first (its node keeps the most idle, 7): the tightest node it fits is
    # n1 (2 idle, 1 left there < 7), on GPU 6 (best fit in the NVSwitch: lowest).
    # Then b (its node keeps 4): a node left with fewer than 4 needs 2 to 5 idle
    # GPUs, and n1 has 1, n2 8: b stays. Idle 4, 1, 8: n2 whole; the sum of squares
    # of idle GPUs 69 -> 81 = 69 + 2 x 1 x (7 - 1). Same objective: no victims.
    jobs = [run("r0", 3, {"n0": [0, 1]}), run("r1", 3, {"n1": [0, 1, 2, 3, 4, 5]}),
            pend("a", 2, 1, submitted_at=OLD), pend("b", 2, 2, submitted_at=OLD)]
    problem = _problem([node("n0"), node("n1"), node("n2")], jobs)
    d = Decision(set(), {"a": [(2, 1 << 0)], "b": [(0, 0b1100)]})
    assert _idle(problem, d) == [4, 2, 7]
    out, moved = best_fit(problem, d)
    assert moved == 1
    assert out.placements == {"a": [(1, 1 << 6)], "b": [(0, 0b1100)]}
    assert _idle(problem, out) == [4, 1, 8]
    assert sum(k * k for k in _idle(problem, out)) == 81
    assert objective_of(problem, out).key() == objective_of(problem, d).key()
    assert best_fit(problem, out) == (out, 0)  # nothing left to gain
    # with its budget ended before it starts, the plan stays as it is (not even the
    # set-up runs); a budget in deterministic mode never ends
    assert best_fit(problem, d, Budget(0.0)) == (d, 0)
    assert best_fit(problem, d, Budget(0.0, wall=False))[1] == 1


def test_jobs_on_victims_gpus_and_nodes_outside_the_pool_stay() -> None:
    # n0, n1 (pool "a"), n2 (pool "b": tiers 1 and 3 only). r0 (tier 3) holds all of
    # n0, r2 (tier 3) GPUs 0-6 of n2; n1 is free. v (tier 1, 8 GPUs) evicts r0: its
    # GPUs were r0's, it stays. q (tier 1, 1 GPU) on n1 keeps 7 idle there and moves
    # to n2's last GPU (0 left); p (tier 2, 1 GPU) on n1 in another plan may not go
    # to n2 (R4), and n0 has no idle GPU: it stays.
    nodes = [node("n0", pool="a"), node("n1", pool="a"), node("n2", pool="b")]
    jobs = [run("r0", 3, {"n0": list(range(8))}), run("r2", 3, {"n2": list(range(7))}),
            pend("v", 1, 8), pend("q", 1, 1), pend("p", 2, 1, submitted_at=OLD)]
    problem = _problem(nodes, jobs, {"pools": {"b": [1, 3]}})
    d = Decision({"r0"}, {"v": [(0, 0xFF)], "q": [(1, 1 << 3)]})
    out, moved = best_fit(problem, d)
    assert (moved, out.placements) == (1, {"v": [(0, 0xFF)], "q": [(2, 1 << 7)]})
    assert out.victims == {"r0"}
    d2 = Decision({"r0"}, {"v": [(0, 0xFF)], "p": [(1, 1 << 3)]})
    assert best_fit(problem, d2) == (d2, 0)


def test_a_gang_shard_moves_only_inside_its_block() -> None:
    # Four nodes, blocks A (n0, n1) and B (n2, n3). n1 and n2 each have 4 GPUs held
    # (GPUs 0-3), n0 and n3 free. Gang g (2 nodes x 4 GPUs, same_block) is on n0 and
    # n1: idle 4, 0, 4, 8. Its n0 shard (4 idle left there) could go to n2 (4 idle,
    # 0 left), but n2 is in block B: it stays. Without same_block it moves there:
    # idle 8, 0, 0, 8.
    nodes = [node("n0", block="A"), node("n1", block="A"), node("n2", block="B"),
             node("n3", block="B")]
    held = [run("r1", 3, {"n1": [0, 1, 2, 3]}), run("r2", 3, {"n2": [0, 1, 2, 3]})]
    d = Decision(set(), {"g": [(0, 0x0F), (1, 0xF0)]})
    tied = _problem(nodes, [*held, pend("g", 2, 4, nodes=2, same_block=True,
                                        submitted_at=OLD)])
    assert best_fit(tied, d) == (d, 0)
    free = _problem(nodes, [*held, pend("g", 2, 4, nodes=2, submitted_at=OLD)])
    out, moved = best_fit(free, d)
    assert moved == 1
    assert out.placements == {"g": [(2, 0xF0), (1, 0xF0)]}
    assert _idle(free, out) == [8, 0, 0, 8]


def test_tier1_work_gathers_on_the_node_that_already_holds_some() -> None:
    # n0: r1 (tier 1, not preemptible) on GPU 0, r3 (tier 3) on GPUs 1-6, GPU 7 free.
    # n1: r4 (tier 3) on GPUs 0-6, GPU 7 free. A plan puts t (tier 1, 1 GPU) on n1's
    # GPU 7: no idle GPU moves it by best fit (n1 keeps 0 idle), but tier-1 work on
    # n1 would be t alone (0 without it) and n0 holds 1: t moves to n0's GPU 7, the
    # sum of squared tier-1 GPUs per node 1 + 1 = 2 -> 4, and n1 holds no tier-1
    # job (all of it may be evicted for a later 8-GPU job).
    held = [run("r1", 1, {"n0": [0]}), run("r3", 3, {"n0": [1, 2, 3, 4, 5, 6]}),
            run("r4", 3, {"n1": [0, 1, 2, 3, 4, 5, 6]})]
    problem = _problem([node("n0"), node("n1")], [*held, pend("t", 1, 1)])
    d = Decision(set(), {"t": [(1, 1 << 7)]})
    assert _fixed(problem, d) == [1, 1]
    out, moved = best_fit(problem, d)
    assert (moved, out.placements) == (1, {"t": [(0, 1 << 7)]})
    assert _fixed(problem, out) == [2, 0]
    assert _idle(problem, out) == [0, 1]
    assert objective_of(problem, out).key() == objective_of(problem, d).key()
    assert best_fit(problem, out) == (out, 0)
    # with u (tier 2, 1 GPU) on n0's GPU 7 no GPU is idle: t and u trade places
    # (same size, both on free GPUs), the same sums of squares 2 -> 4
    problem = _problem([node("n0"), node("n1")],
                       [*held, pend("t", 1, 1), pend("u", 2, 1, submitted_at=OLD)])
    d = Decision(set(), {"t": [(1, 1 << 7)], "u": [(0, 1 << 7)]})
    out, moved = best_fit(problem, d)
    assert (moved, out.placements) == (1, {"t": [(0, 1 << 7)], "u": [(1, 1 << 7)]})
    assert _fixed(problem, out) == [2, 0]
    assert objective_of(problem, out).key() == objective_of(problem, d).key()
    assert best_fit(problem, out) == (out, 0)
    # a tier-2 job alone stays: its tier may be evicted, where it runs keeps every
    # node as claimable as before
    problem = _problem([node("n0"), node("n1")], [*held, pend("u", 2, 1, submitted_at=OLD)])
    d = Decision(set(), {"u": [(1, 1 << 7)]})
    assert best_fit(problem, d) == (d, 0)


def test_plans_keep_a_node_whole_for_cpsat_and_greedy() -> None:
    # n0: r0 on GPUs 0-6 (1 free), n1 and n2 free. Pending: a (1 GPU), b (4 GPUs).
    # Best fit: a on n0's last GPU, b on n1 (or n2): one node stays whole. Every
    # planner's plan admits both (5 GPUs, no victims) and leaves a whole node.
    jobs = [run("r0", 3, {"n0": list(range(7))}),
            pend("a", 2, 1, submitted_at=OLD), pend("b", 2, 4, submitted_at=OLD)]
    data = snap([node("n0"), node("n1"), node("n2")], jobs)
    for planner in ("cpsat", "greedy"):
        p = solve(data, planner)
        assert nodes_of(p, "a") == {"n0": [7]}, planner
        b_nodes = set(nodes_of(p, "b"))
        assert b_nodes in ({"n1"}, {"n2"}), planner


def _scrambled(problem: Problem, d: Decision, rng: np.random.Generator) -> Decision:
    """``d`` with each single-node job on free GPUs moved to a random other node
    where it fits in idle free GPUs (its candidates, NVLink as it needs): plans
    that are valid but far from best fit."""
    out = Decision(set(d.victims), dict(d.placements))
    used = [0] * len(problem.nodes)
    for ni, m in used_gpus(d).items():
        used[ni] = m
    for j in sorted(out.placements):
        parts = out.placements[j]
        if len(parts) != 1:
            continue
        (ni, m), = parts
        if m & ~problem.nodes[ni].free:
            continue
        info = problem.pending[j]
        used[ni] &= ~m
        options = []
        for nd in problem.nodes:
            if nd.idx in problem.candidate_set(info):
                mask = layout_best_fit(nd.layout, nd.free & ~used[nd.idx], m.bit_count(),
                                       info.need_nvlink)
                if mask is not None:
                    options.append((nd.idx, mask))
        nj, mask = options[int(rng.integers(len(options)))]  # (its own place is one)
        used[nj] |= mask
        out.placements[j] = [(nj, mask)]
    return out


def _squares(problem: Problem, d: Decision) -> int:
    return sum(k * k for k in _idle(problem, d))


def _fixed(problem: Problem, d: Decision) -> list[int]:
    """GPUs per node of the work no plan may evict (R5): running and placed jobs of
    tiers that are not preemptible."""
    fixed = {t for t, tp in problem.policy.tiers.items() if not tp.preemptible}
    out = [0] * len(problem.nodes)
    held = [v.parts for v in problem.running.values() if v.job.tier in fixed]
    held += [parts for j, parts in d.placements.items() if problem.pending[j].job.tier in fixed]
    for parts in held:
        for ni, m in parts:
            out[ni] += m.bit_count()
    return out


def _potential(problem: Problem, d: Decision) -> tuple[int, int]:
    """What every move of best_fit raises: the sum of squared unpreemptible GPUs per
    node, then the sum of squared idle GPUs per node."""
    return sum(k * k for k in _fixed(problem, d)), _squares(problem, d)


@pytest.mark.parametrize("chunk", range(4))
def test_best_fit_on_scrambled_plans_keeps_them_valid_and_the_objective(chunk: int) -> None:
    # 200 random small snapshots (4-8 nodes, 4-10 pending jobs of 1-4 GPUs per node,
    # every NVLink form, gangs, blocks, pools, drain and down nodes, budgets,
    # cross-tick rules): the greedy planner's decision with its
    # jobs on free GPUs scattered at random, then best_fit. The plan stays valid
    # (the verifier), the objective key (items 1-5) is the same, the sums of squared
    # unpreemptible and then idle GPUs per node never fall (lexicographically), and a
    # second call moves nothing.
    moved_any = gathered = 0
    for seed in range(chunk * 50, chunk * 50 + 50):
        data = random_snapshot(seed, n_nodes=(4, 8), n_pending=(4, 10), shapes=(1, 1, 2, 4),
                               gangs=(1, 1, 1, 2))
        snap = load_snapshot(data)
        problem = build_problem(snap)
        rng = np.random.default_rng(seed)
        d = _scrambled(problem, clean(problem, GreedyPlanner(problem).solve()), rng)
        out, moved = best_fit(problem, d)
        moved_any += moved > 0
        assert objective_of(problem, out).key() == objective_of(problem, d).key(), seed
        assert _potential(problem, out) >= _potential(problem, d), seed
        gathered += _potential(problem, out)[0] > _potential(problem, d)[0]
        assert best_fit(problem, out)[1] == 0, seed
        p = assemble(problem, out, "feasible", SolverInfo(engine="greedy", status="HEURISTIC"))
        problems = verify(snap, p)
        assert problems == [], (seed, [str(v) for v in problems])
    assert moved_any >= 5  # (the sweep does exercise the moves: 8 to 17 of each 50)
    assert gathered >= 3  # (and gathering: 5 to 10 of each 50)
