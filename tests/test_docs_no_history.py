"""The docs, docstrings and comments describe the software as it is, not the history of
its development: no numbered sessions or rounds of work, no links to the removed
benchmark history or to results files that are no longer kept. History, where worth
keeping, is in CHANGELOG.md (not checked) and in git.

"Round" is also a word of the software (neighbourhood rounds of LNS, rounds of
ejection moves, round robin, rounded sizes); only a round followed by a number is
taken for a round of work.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PATTERNS = {
    "a session of work": re.compile(r"\bsessions?\b", re.IGNORECASE),
    "a numbered round of work": re.compile(
        r"\brounds?[ -]\d+(?:\s*(?:-|to|and)\s*\d+)?\b(?![.,]\d)(?!\s*(?:s|ms|%)\b)",
        re.IGNORECASE),
    "a link to the removed benchmark history": re.compile(r"benchmarks-history"),
    "a results file no longer kept": re.compile(r"results-20\d\d-\d\d-\d\d"),
}

# Files whose owner is rewriting them; each entry goes once its file is clean
# (test_the_exclusions_are_still_needed says when).
EXCLUDED: dict[str, str] = {}


def _checked_files() -> list[Path]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for folder in ("planner", "models"):
        files += sorted((ROOT / folder).rglob("*.py"))
    return files


def _hits(path: Path) -> list[str]:
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        for what, pattern in PATTERNS.items():
            m = pattern.search(line)
            if m:
                out.append(f"{path.relative_to(ROOT)}:{n}: {what}: {m.group(0)!r} in {line.strip()!r}")
    return out


def test_docs_and_code_carry_no_development_history() -> None:
    hits = [h for p in _checked_files() if p.relative_to(ROOT).as_posix() not in EXCLUDED
            for h in _hits(p)]
    assert not hits, "development history (move it to CHANGELOG.md or drop it):\n" + "\n".join(hits)


@pytest.mark.parametrize("name", sorted(EXCLUDED))
def test_the_exclusions_are_still_needed(name: str) -> None:
    path = ROOT / name
    assert path.exists() and _hits(path), f"{name} is clean now: remove it from EXCLUDED"


@pytest.mark.parametrize("line", [
    "Rounds go through the neighbourhoods in turn until the time is up",
    "shards are dealt to jobs round robin, which gives every job distinct nodes",
    "sizes rounded up and caps down to the megabyte",
    "the greedy plan was improved in 1 of 1 neighbourhood rounds",
    "LNS runs only with two whole rounds (0.6 s) of time",
    "a round 0.3 s long",
    "round(x, 2) keeps two decimals",
])
def test_words_of_the_software_are_not_taken_for_history(line: str) -> None:
    assert not any(p.search(line) for p in PATTERNS.values()), line


@pytest.mark.parametrize("line", [
    "since session 12 the variant runs twice",
    "Sessions 10-13 reached 1,056 at 1 s",
    "the optimum's objective since round 14",
    "rounds 10-13 reached 1,056 at 1 s",
    "in the session-8 soak, 15 of 927 plans were behind",
    "numbers in [benchmarks-history.md](benchmarks-history.md)",
    "Raw results: `benchmarks/results-2026-11-30-session14-full.json`",
])
def test_history_is_found(line: str) -> None:
    assert any(p.search(line) for p in PATTERNS.values()), line
