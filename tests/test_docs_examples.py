"""The examples in the docs are what the software does: each is run and its shown
output compared (times aside), so that the docs cannot drift from the code."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import cli

ROOT = Path(__file__).resolve().parents[1]


def _blocks(path: Path, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", path.read_text(), re.DOTALL)


def test_the_api_example_answer_is_the_real_one() -> None:
    # docs/api.md: the curl request's body, planned as the service plans it with
    # ?deterministic=true, gives the JSON answer shown (wall_s aside)
    from planner.service import _plan_job

    doc = ROOT / "docs" / "api.md"
    shell = next(b for b in _blocks(doc, "sh") if "/v1/plan?deterministic=true" in b)
    body = shell[shell.index("-d '") + 4:shell.rindex("'")]
    shown = json.loads(next(b for b in _blocks(doc, "json") if '"status": "optimal"' in b))
    kind, (data, status, _ev, _pl) = _plan_job(body.encode(), {"deterministic": True,
                                                               "time_limit_s": 2.0})
    got = json.loads(data)
    assert kind == "plan" and status == "optimal"
    for plan in (got, shown):
        plan["solver"].pop("wall_s")
    assert got == shown


def test_the_readme_quickstart_plan_is_the_one_it_describes(
        capsys: pytest.CaptureFixture[str]) -> None:
    # README: "tier-1 finetune-70b takes a node from tier-3 sweep-17: grace 60 s,
    # flush 13.125 s, cost 5305 GPU-s"
    readme = (ROOT / "README.md").read_text()
    assert "grace 60 s, flush 13.125 s, cost 5305 GPU-s" in readme
    assert cli.main(["plan", str(ROOT / "instances" / "example-70b.json"), "-o", "json",
                     "--deterministic"]) == 0
    plan = json.loads(capsys.readouterr().out)
    (ev,) = plan["evictions"]
    assert (ev["job"], ev["preemptors"], ev["grace_s"], ev["flush_s"], ev["cost_gpu_s"]) == (
        "sweep-17", ["finetune-70b"], 60, 13.125, 5305.0)


def test_the_documented_commands_parse() -> None:
    # every 'preempt-planner ...' command line in README.md and docs/*.md uses
    # options that exist (they parse with the command line parser, nothing left over)
    import shlex

    parser = cli.build_parser()
    seen = 0
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        if path.name == "benchmarks-history.md":
            continue
        for block in _blocks(path, "(?:sh|bash|)"):
            text = block.replace("\\\n", " ")
            lines = [part.strip() for raw in text.splitlines() for part in raw.split("&&")]
            for line in lines:
                if (not line.startswith("preempt-planner ") or "..." in line or "|" in line
                        or " [" in line):  # (a synopsis, not a command)
                    continue
                words = shlex.split(line.split(" #")[0])
                _args, extra = parser.parse_known_args(words[1:])
                assert extra == [], (path.name, line)
                seen += 1
    assert seen >= 9  # (README quickstart, api, kubernetes, simulation, slurm)
