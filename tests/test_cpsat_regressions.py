"""Regressions of the CP-SAT model, named after the bug."""

from __future__ import annotations

from planner import plan
from planner.generate import generate
from planner.verify import verify


def test_phase_weights_do_not_overflow_model_invalid() -> None:
    # Weighted phases spanning up to 2**60 made CP-SAT reject the model as a
    # possible integer overflow (MODEL_INVALID) on this generated snapshot, and
    # phase values read back as doubles lost precision above 2**53.
    data = generate(nodes=64, pending=20, seed=0)
    p = plan(data, time_limit_s=5.0, deterministic=True)
    assert p.solver.engine == "cp-sat"
    assert "MODEL_INVALID" not in p.solver.status
    assert p.status in ("optimal", "feasible")
    from models import load_snapshot

    assert verify(load_snapshot(data), p) == []
