"""OR-Tools' CP-SAT module imported without pandas (planner/solver/cp_model_import.py):
a fresh process that imports the planner and plans never imports pandas, and a
later ``import pandas`` gets the real module, which cp_model's own pandas helpers
then use."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = """
import sys
from planner import plan
from planner.sim.generate import generate
p = plan(generate(nodes=8, pending=4, seed=1), time_limit_s=0.5)
print("planned", p.status in ("optimal", "feasible", "fallback"), "pandas" in sys.modules)
import pandas as pd
from ortools.sat.python import cp_model
print("real", type(pd).__name__, pd.__name__, hasattr(pd, "DataFrame"))
s = cp_model.CpModel().new_int_var_series("x", pd.Index([1, 2, 3]), 0, 5)
print("series", type(s).__name__, len(s))
"""


def test_planning_imports_no_pandas_and_pandas_still_works_after() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True,
                         text=True, check=True, timeout=120)
    assert out.stdout.split("\n")[:3] == [
        "planned True False", "real module pandas True", "series Series 3"]


def test_with_pandas_imported_first_cp_model_is_imported_as_usual() -> None:
    script = ("import pandas, sys\nfrom planner.solver.cp_model_import import import_cp_model\n"
              "m = import_cp_model()\nprint(m.pd is sys.modules['pandas'])")
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                         text=True, check=True, timeout=120)
    assert out.stdout.strip() == "True"
