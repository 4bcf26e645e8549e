"""Shared test set-up."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _fresh_rates(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test plans as a fresh process does: the whole model's build time per pair
    measured by earlier tests' builds (planner/solver/portfolio.py, Rates) is not
    carried over, so that a test's choices do not depend on which tests ran before."""
    from planner.solver import portfolio

    monkeypatch.setattr(portfolio.RATES, "build_pair_s", portfolio.BUILD_PAIR_S)
