"""Planners without a solver: the greedy planner, its passes and the baselines
(see README.md here)."""
