"""How fast could the planner's model be proven optimal, at best?

Issue #3 asks for the 256-node / 100-pending benchmark snapshot to be proven
optimal within 0.3 s. This script measures a floor under that time for the
planner's model on this machine, by giving CP-SAT the answer:

1. The time before any solve, as ``plan()`` spends it (garbage collector
   paused): problem build, the greedy hint (polished, planner/heuristics/repack.py), and
   the model build (median of the runs).
2. For each lexicographic phase of the model, in order: a reference solve
   (long limit) finds the phase's optimum; then the phase is solved again
   (a) from the hint the planner really has (the greedy plan for the first
   phase, the previous phase's optimum for the next), and (b) from the phase's
   own optimal solution as a complete hint (an oracle). Each is run with the
   planner's parameters (``planner.solver.model.make_solver``, 2 workers) and with one
   worker. After a phase, its items are fixed at their optimal values, as
   ``run_phases`` does.

With the oracle hint, the solver only has to prove the bound: the sum of the
pre-solve time and the oracle proof times is a floor for proving this snapshot
optimal with this model, whatever the primal heuristics.

Usage (from the repository root)::

    python benchmarks/bench_proof_floor.py --runs 3 --out proof-floor.json

Results are recorded in docs/benchmarks.md. Timings vary between runs by up to
1.5x on the 2-core benchmark machine.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(REPO))

from bench_formulation import GEN, instance_arguments
from ortools.sat.python import cp_model

from models import load_snapshot
from planner.core.decision import clean
from planner.core.problem import build_problem
from planner.heuristics.greedy import GreedyPlanner
from planner.heuristics.repack import polish
from planner.sim.generate import generate
from planner.solver.model import ADMISSION_PRESOLVE, CpsatModel, make_solver


def _solve(model: CpsatModel, presolve: bool, workers: int, seed: int,
           limit: float) -> tuple[float, str, cp_model.CpSolver]:
    solver = make_solver(limit, False, workers, seed, len(model.m.proto.variables),
                     presolve=presolve)
    t = time.perf_counter()
    st = solver.solve(model.m)
    return time.perf_counter() - t, solver.status_name(st), solver


def run(args: argparse.Namespace) -> dict[str, Any]:
    snap = generate(nodes=args.nodes, pending=args.pending, seed=args.seed, **GEN)
    out: dict[str, Any] = {"nodes": args.nodes, "pending": args.pending, "seed": args.seed,
                           "runs": args.runs, "before_solve_s": [], "phases": []}
    model = None
    for _ in range(args.runs):  # the time before the first solve, as plan() spends it
        s = load_snapshot(snap)
        gc.disable()  # plan() pauses the garbage collector too
        t = time.perf_counter()
        problem = build_problem(s)
        greedy, _said = polish(problem, clean(problem, GreedyPlanner(problem,
                                                                   spare_lower=True).solve()))
        model = CpsatModel(problem)
        model.hint(greedy)
        out["before_solve_s"].append(round(time.perf_counter() - t, 3))
        gc.enable()
    assert model is not None
    for pi, ks in enumerate(model.phases()):
        names = [model.items[k][0] for k in ks]
        presolve = ADMISSION_PRESOLVE or names[0] == "cost"
        expr, _w = model.phase_expr(ks)
        model.m.maximize(expr)
        real_hint = list(zip(model.m.proto.solution_hint.vars,
                             model.m.proto.solution_hint.values))
        ref_s, ref_st, ref = _solve(model, presolve, 2, 0, args.limit)
        if ref_st != "OPTIMAL":
            raise SystemExit(f"phase {pi} ({', '.join(names)}) not proven optimal in "
                             f"{args.limit} s")
        sol = ref.response_proto.solution
        oracle = [(v, sol[v.index]) for v in model.decision_vars()]
        rec: dict[str, Any] = {"items": names, "reference_s": round(ref_s, 3),
                               "variables": len(model.m.proto.variables)}
        for hint_name in ("planner_hint", "oracle_hint"):
            for workers in (2, 1):
                times = []
                for r in range(args.runs):
                    if hint_name == "oracle_hint":
                        model.set_hints(oracle)
                    else:
                        model.m.clear_hints()
                        for var, val in real_hint:
                            model.m.proto.solution_hint.vars.append(var)
                            model.m.proto.solution_hint.values.append(val)
                    dt, st, _s = _solve(model, presolve, workers, r, args.limit)
                    if st != "OPTIMAL":
                        raise SystemExit(f"phase {pi}: {st} from the {hint_name}")
                    times.append(round(dt, 3))
                rec[f"{hint_name}_{workers}w_s"] = times
        out["phases"].append(rec)
        print(json.dumps(rec), file=sys.stderr)
        for k in ks:  # fix the phase's items at their optimum, as run_phases does
            _n, v, c, _lo, _hi = model.items[k]
            item = cp_model.LinearExpr.weighted_sum(v, c)
            model.m.add(item == int(ref.value(item)))
        model.set_hints(oracle)  # the next phase starts from this phase's optimum
    med = statistics.median
    floor = med(out["before_solve_s"]) + sum(
        min(med(p["oracle_hint_2w_s"]), med(p["oracle_hint_1w_s"])) for p in out["phases"])
    real = med(out["before_solve_s"]) + sum(med(p["planner_hint_2w_s"]) for p in out["phases"])
    out["floor_s"] = round(floor, 3)
    out["planner_s"] = round(real, 3)
    return out


def main(argv: list[str] | None = None) -> int:
    args = instance_arguments(__doc__).parse_args(argv)
    res = run(args)
    med = statistics.median
    print(f"{args.nodes} nodes / {args.pending} pending, median of {args.runs} runs")
    print(f"before the first solve: {med(res['before_solve_s']):.3f} s")
    for p in res["phases"]:
        print(f"phase {'+'.join(p['items'])} ({p['variables']} variables): "
              f"planner hint {med(p['planner_hint_2w_s']):.3f} s (2 workers), "
              f"{med(p['planner_hint_1w_s']):.3f} s (1); "
              f"oracle hint {med(p['oracle_hint_2w_s']):.3f} s (2), "
              f"{med(p['oracle_hint_1w_s']):.3f} s (1)")
    print(f"proof with the planner's hints: {res['planner_s']:.3f} s; "
          f"floor with the optimum as hint: {res['floor_s']:.3f} s")
    if args.out:
        from bench_planner import machine

        res = {"machine": machine(), "command": " ".join(["python", *sys.argv]), **res}
        args.out.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
