"""The CP-SAT model class the planner builds its models with.

OR-Tools' ``cp_model.CpModel`` gives each new model camel-case aliases of its
methods (``AddBoolOr`` for ``add_bool_or``: about 60), kept in the model's own
``__dict__`` as wrappers of its bound methods. Each holds the model, so every
model is a reference cycle that only Python's cyclic garbage collector frees,
together with everything the model holds. The planner calls the snake-case
methods only; :class:`CpModel` makes no aliases, so a model is freed as soon as
the planner lets go of it, and :func:`planner.plan` makes no cyclic garbage
(tests/test_gc.py), which lets it resume the collector without a collection over
everything it made (models/load.py, ``gc_paused``). ``_add_pre_pep8_methods`` is
a private method of OR-Tools 9.15 (pinned in pyproject.toml); should a version
rename it, the aliases come back and tests/test_gc.py says so.
"""

from __future__ import annotations

from ortools.sat.python import cp_model


class CpModel(cp_model.CpModel):
    """``cp_model.CpModel`` without its camel-case aliases (module doc)."""

    def _add_pre_pep8_methods(self) -> None:
        pass
