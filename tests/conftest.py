"""Shared test set-up."""

from __future__ import annotations

import os

import pytest

# Plans with a wall clock take some times from this machine's speed, measured once per
# process (planner/solver/speed.py): the tests, and the processes they start, plan as
# on the benchmark machine, whatever machine runs them.
os.environ["PREEMPT_PLANNER_SPEED"] = "1"


@pytest.fixture(autouse=True)
def _fresh_rates(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test plans as a fresh process does: the whole model's build time per pair
    and an LNS round's time measured by earlier tests (planner/solver/portfolio.py,
    Rates) are not carried over, so that a test's choices do not depend on which
    tests ran before."""
    from planner.solver import portfolio

    monkeypatch.setattr(portfolio.RATES, "build_pair_s", None)
    monkeypatch.setattr(portfolio.RATES, "lns_round_s", None)
