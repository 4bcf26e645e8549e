"""How strong is the CP-SAT model, and would a MIP solver prove it faster?

On the 256-node benchmark snapshot (the one of ``bench_planner.py``: 8-GPU
nodes, ~90% occupancy, seed 0, 100 pending jobs) this script builds the
planner's model exactly as ``solve_cpsat`` does without a time limit, proves the
admission phase (objective items 1-3) optimal, fixes its items as the planner
does, and then measures the eviction-cost phase (items 4-5) four ways:

- CP-SAT with the planner's own parameters (2 workers), from the planner's hint;
- its plain LP relaxation, solved with GLOP: value, gap to the optimum, and how
  many variables are fractional;
- SCIP, CBC and HiGHS (the MIP solvers OR-Tools ships, one thread each) on the
  same model written as a MIP (enforced constraints as big-M rows).

Usage (from the repository root)::

    python benchmarks/bench_formulation.py --runs 3 --out formulation.json

The results are recorded in docs/benchmarks.md. Timings vary between runs by up
to 1.5x on the 2-core benchmark machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(REPO))

from ortools.linear_solver import pywraplp
from ortools.sat.python import cp_model

from models import load_snapshot
from planner.core.decision import clean
from planner.core.problem import build_problem
from planner.heuristics.greedy import GreedyPlanner
from planner.sim.generate import generate
from planner.solver.model import CpsatModel, make_solver

GEN: dict[str, Any] = {"gpus_per_node": 8, "occupancy": 0.9, "immune_share": 0.25,
                       "multinode_share": 0.1}


def cost_phase_model(nodes: int, pending: int, seed: int) -> tuple[CpsatModel, int]:
    """The planner's model with the admission phase proven and fixed, the cost phase
    as objective and the admission solution as hint (as ``solve_cpsat`` leaves it)."""
    problem = build_problem(load_snapshot(generate(nodes=nodes, pending=pending, seed=seed,
                                                   **GEN)))
    model = CpsatModel(problem)
    model.hint(clean(problem, GreedyPlanner(problem, spare_lower=True).solve()))
    phases = model.phases()
    if len(phases) != 2:
        raise SystemExit(f"expected two phases, the model has {len(phases)}")
    expr, _w = model.phase_expr(phases[0])
    model.m.maximize(expr)
    solver = make_solver(60.0, False, 2, 0, len(model.m.proto.variables), presolve=False)
    if solver.solve(model.m) != cp_model.OPTIMAL:
        raise SystemExit("the admission phase was not proven optimal in 60 s")
    for k in phases[0]:
        _n, v, c, _lo, _hi = model.items[k]
        item = cp_model.LinearExpr.weighted_sum(v, c)
        model.m.add(item == int(solver.value(item)))
    sol = solver.response_proto.solution
    model.set_hints([(v, sol[v.index]) for v in model.decision_vars()])
    expr, _w = model.phase_expr(phases[1])
    model.m.maximize(expr)
    return model, len(model.m.proto.variables)


def to_mip(proto: Any, engine: str, integer: bool) -> tuple[pywraplp.Solver, list, float]:
    """The CP-SAT model as a pywraplp model (minimisation of the scaled objective)."""
    s = pywraplp.Solver.CreateSolver(engine)
    if s is None:
        raise SystemExit(f"OR-Tools has no {engine} solver here")
    dom = [list(v.domain) for v in proto.variables]
    if any(len(d) != 2 for d in dom):
        raise SystemExit("a variable has a domain with holes")
    xs = [(s.IntVar if integer else s.NumVar)(d[0], d[1], f"x{i}") for i, d in enumerate(dom)]

    def relaxed(enf: list[int]) -> Any:  # 0 when every enforcement literal holds
        return sum((1 - xs[lit]) if lit >= 0 else xs[-lit - 1] for lit in enf)

    for ct in proto.constraints:
        enf = list(ct.enforcement_literal)
        if ct.has_linear():
            vs, cs = list(ct.linear.vars), list(ct.linear.coeffs)
            d = list(ct.linear.domain)
            if len(d) != 2:
                raise SystemExit("a linear constraint has a domain with holes")
            lo, hi = d
            act = sum(c * xs[v] for v, c in zip(vs, cs))
            amin = sum(min(c * dom[v][0], c * dom[v][1]) for v, c in zip(vs, cs))
            amax = sum(max(c * dom[v][0], c * dom[v][1]) for v, c in zip(vs, cs))
            if hi < amax:
                s.Add(act <= hi + (amax - hi) * relaxed(enf))
            if lo > amin:
                s.Add(act >= lo - (lo - amin) * relaxed(enf))
        elif ct.has_bool_and():
            for lit in ct.bool_and.literals:
                target = xs[lit] if lit >= 0 else 1 - xs[-lit - 1]
                s.Add(target >= 1 - relaxed(enf))
        else:
            raise SystemExit(f"unexpected constraint kind: {str(ct)[:60]}")
    obj = proto.objective
    scale = max(abs(c) for c in obj.coeffs)  # GLOP is ill-conditioned at ~1e10
    s.Minimize(sum((c / scale) * xs[v] for v, c in zip(obj.vars, obj.coeffs)))
    return s, xs, scale


def run(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"nodes": args.nodes, "pending": args.pending, "seed": args.seed,
                           "runs": []}
    for r in range(args.runs):
        model, n_vars = cost_phase_model(args.nodes, args.pending, args.seed)
        rec: dict[str, Any] = {"variables": n_vars,
                               "constraints": len(model.m.proto.constraints)}
        solver = make_solver(args.limit, False, 2, r, n_vars, presolve=True)
        t = time.perf_counter()
        st = solver.solve(model.m)
        rec["cpsat_s"] = round(time.perf_counter() - t, 3)
        rec["cpsat_status"] = solver.status_name(st)
        opt = -solver.objective_value  # the phase maximises -(cost * W + evictions)
        rec["optimum"] = opt
        proto = model.m.proto
        lp, xs, scale = to_mip(proto, "GLOP", integer=False)
        t = time.perf_counter()
        if lp.Solve() != pywraplp.Solver.OPTIMAL:
            raise SystemExit("GLOP did not solve the LP relaxation")
        rec["lp_s"] = round(time.perf_counter() - t, 3)
        # proto objective: minimise sum(coeffs * x) = -phase value = cost * W + evictions
        rec["lp_value"] = lp.Objective().Value() * scale
        rec["lp_gap"] = round((opt - rec["lp_value"]) / opt, 4)
        rec["fractional"] = sum(abs(x.solution_value() - round(x.solution_value())) > 1e-6
                                for x in xs)
        for engine in args.mip:
            mip, _xs, scale = to_mip(proto, engine, integer=True)
            mip.SetNumThreads(1)
            mip.SetTimeLimit(int(args.limit * 1000))
            t = time.perf_counter()
            code = mip.Solve()
            rec[f"{engine}_s"] = round(time.perf_counter() - t, 3)
            rec[f"{engine}_optimal"] = (code == pywraplp.Solver.OPTIMAL
                                        and abs(mip.Objective().Value() * scale - opt)
                                        <= 1e-6 * opt)
        out["runs"].append(rec)
        print(json.dumps(rec), file=sys.stderr)
    keys = ["cpsat_s", "lp_s"] + [f"{e}_s" for e in args.mip]
    out["median"] = {k: statistics.median(r[k] for r in out["runs"]) for k in keys}
    return out


def instance_arguments(doc: str) -> argparse.ArgumentParser:
    """The options shared with bench_proof_floor.py: which snapshot, how many runs,
    the limit per solve, the JSON output."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=256)
    ap.add_argument("--pending", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0, help="generator seed (default %(default)s)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--limit", type=float, default=60.0, help="seconds per solve")
    ap.add_argument("--out", type=Path, help="write the results as JSON")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = instance_arguments(__doc__)
    ap.add_argument("--mip", default="SCIP,CBC,HIGHS", help="pywraplp MIP engines (default %(default)s)")
    args = ap.parse_args(argv)
    args.mip = [e for e in args.mip.split(",") if e]
    res = run(args)
    r0 = res["runs"][0]
    print(f"cost phase of the {args.nodes}-node model: {r0['variables']} variables, "
          f"{r0['constraints']} constraints")
    print(f"LP relaxation: {r0['lp_gap']:.1%} below the optimum, "
          f"{r0['fractional']} fractional variables")
    for k, v in res["median"].items():
        print(f"median {k}: {v}")
    if args.out:
        from bench_planner import machine

        res = {"machine": machine(), "command": " ".join(["python", *sys.argv]), **res}
        args.out.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
