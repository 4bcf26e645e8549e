"""CP-SAT: the model, large-neighbourhood search and solve_cpsat (see README.md here)."""
