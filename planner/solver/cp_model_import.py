"""Import OR-Tools' CP-SAT module without importing pandas with it.

``ortools.sat.python.cp_model`` imports pandas at its top for its pandas helpers
(``new_int_var_series`` and the like, ``pd.Series`` / ``pd.Index`` in their
signatures), which the planner never calls. pandas takes about 0.45 s to import
on the benchmark machine, half of all the imports a command pays before it plans.

:func:`import_cp_model` imports cp_model with a stand-in module under the name
``pandas``: while cp_model's module body runs, the stand-in answers ``Index`` and
``Series`` with empty placeholder classes (its type annotations and one type
alias); then it leaves ``sys.modules``, so that any later ``import pandas``
imports the real one, and from then on every attribute asked of it (cp_model's
helpers at call time) comes from the real pandas, imported on first use. Where
pandas is already imported, or cp_model is, nothing is done.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

_CP_MODEL = "ortools.sat.python.cp_model"


class _PandasStandIn(types.ModuleType):
    """``pandas`` as cp_model sees it: placeholders while cp_model is imported, the
    real module (imported on first use) after."""

    def __init__(self) -> None:
        super().__init__("pandas")
        self.importing = True
        self.placeholders: dict[str, type] = {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if self.importing and name in ("Index", "Series"):
            return self.placeholders.setdefault(name, type(name, (), {}))
        if sys.modules.get("pandas") is self:  # (asked for more while cp_model imports)
            del sys.modules["pandas"]
        return getattr(importlib.import_module("pandas"), name)


def import_cp_model() -> types.ModuleType:
    """``ortools.sat.python.cp_model``, imported without pandas where it is not yet
    (see the module doc)."""
    done = sys.modules.get(_CP_MODEL)
    if done is not None:
        return done
    if "pandas" in sys.modules:
        return importlib.import_module(_CP_MODEL)
    stand_in = _PandasStandIn()
    sys.modules["pandas"] = stand_in
    try:
        return importlib.import_module(_CP_MODEL)
    finally:
        stand_in.importing = False
        if sys.modules.get("pandas") is stand_in:
            del sys.modules["pandas"]
