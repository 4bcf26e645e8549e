"""CP-SAT: the model, large-neighbourhood search and solve_cpsat (see README.md here)."""

from planner.solver.cp_model_import import import_cp_model

import_cp_model()  # first, before any module here imports it: without pandas
