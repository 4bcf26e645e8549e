"""Each rule of the contract (R1-R13, R15-R17; R14, determinism, is a property of the
planner) is one named function in the CP-SAT builder (``_rNN_*`` in
planner/solver/model.py) and one in the verifier (``_check_rNN_*`` in
planner/checks/verify.py), whose docstring starts with the rule's id, so that
``grep -n R7`` finds them. The builder's functions for the rules applied in
preprocessing say what the model relies on; the second test checks it does."""

from __future__ import annotations

import ast
import json
import re
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from models import load_snapshot
from planner.core.problem import build_problem
from planner.sim.generate import generate
from planner.solver.model import CpsatModel

ROOT = Path(__file__).resolve().parents[1]
RULES = [r for r in range(1, 18) if r != 14]
FILES = {"planner/solver/model.py": "_r{:02d}_", "planner/checks/verify.py": "_check_r{:02d}_"}


@pytest.mark.parametrize("path", sorted(FILES))
def test_every_rule_is_one_named_function(path: str) -> None:
    tree = ast.parse((ROOT / path).read_text())
    defs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    problems = []
    for r in RULES:
        prefix = FILES[path].format(r)
        found = [n for n in defs if n.name.startswith(prefix)]
        if not found:
            problems.append(f"R{r}: no function named {prefix}... in {path}")
            continue
        if len(found) > 1:
            problems.append(f"R{r}: {len(found)} functions in {path} "
                            f"({', '.join(n.name for n in found)}); one per rule")
        doc = ast.get_docstring(found[0]) or ""
        if not re.match(rf"R{r}(?!\d)", doc):
            problems.append(f"R{r}: the docstring of {found[0].name} does not start with 'R{r}'")
    assert not problems, "\n".join(problems)


def _cases() -> list[tuple[str, dict]]:
    """Snapshots where R5, R6, R8, R9, R10, R16 and R17 each hold a job back."""
    raw = generate(nodes=32, pending=24, seed=4)
    now = datetime.fromisoformat(raw["now"])
    running = [j for j in raw["jobs"] if j["state"] == "running" and j["tier"] == 3]
    old = next(j for j in running
               if datetime.fromisoformat(j["started_at"])
               < now - timedelta(hours=2))
    old["expected_end_at"] = (now + timedelta(seconds=300)).isoformat()  # R17
    pending = next(j for j in raw["jobs"] if j["state"] == "pending" and j["tier"] == 2)
    pending["submitted_at"] = (now - timedelta(seconds=60)).isoformat()  # R16
    out = [("generated", raw)]
    for name in ("window-outside", "cascade-guard", "backoff"):  # R8, R10, R9
        out.append((name, json.loads((ROOT / "instances" / f"{name}.json").read_text())))
    return out


def test_the_builder_honours_the_rules_applied_in_preprocessing() -> None:
    seen = set()
    for name, raw in _cases():
        model = CpsatModel(build_problem(load_snapshot(raw)))
        p = model.p
        for rule, protected in (("R5", model._r05_preemptible()), ("R6", model._r06_immunity()),
                                ("R8", model._r08_windows()),
                                ("R17", model._r17_ending_soon())):
            seen |= {rule} if protected else set()
            assert not set(protected) & set(model.evict), (name, rule)
        placed = {i.job.id: c for c in model.classes for i in c.jobs}
        for rule, held in (("R10", model._r10_cascade_guard()), ("R16", model._r16_patience())):
            seen |= {rule} if held else set()
            assert all(placed[j].rights == frozenset() for j in held if j in placed), (name, rule)
        backoff = [j for j, i in p.pending.items() if model._r09_backoff(i)]
        seen |= {"R9"} if backoff else set()
        assert not set(backoff) & set(placed), name
        for c in model.classes:
            assert set(c.candidates) <= set(model._r04_pools(c.jobs[0])), name
    assert seen == {"R5", "R6", "R8", "R9", "R10", "R16", "R17"}
