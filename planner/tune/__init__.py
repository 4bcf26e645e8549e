"""Policy tuning (``preempt-planner tune``): a space of policies simulated on trace
windows x loads x seeds, locally or on a Ray cluster, with a cache of every run; the
Pareto front of the objectives and a chosen policy (docs/tuning.md)."""
