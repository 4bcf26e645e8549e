"""The examples in the docs are what the software does: each is run and its shown
output compared (times aside), so that the docs cannot drift from the code.

A block of README.md or docs/*.md that runs offline on the bundled files
(instances/, tests/data/, tests/fixtures/) carries a mark on the line before it:

- ``<!-- example: runs -->``: every ``preempt-planner ...`` line of the block runs
  and exits 0 (``<!-- example: runs, exit 2 -->``: with that status);
- ``<!-- example: output -->``: a console block; each ``$ preempt-planner ...`` line
  runs and what it prints (stdout, then stderr) is the lines shown under it, where
  a line ``...`` stands for any number of lines and ``...`` in a line for any text
  (a time, a path).

The commands run in-process in a scratch folder that sees the repository's
instances/, tests/ and docs/, so files they write land there.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

import cli

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARK = re.compile(r"<!-- example: (runs|output)(?:, exit (\d))? -->\n```\w*\n(.*?)```", re.DOTALL)


def _checked() -> list[tuple[str, str, int, str]]:
    """(where, kind, exit status, block) of every marked block."""
    out = []
    for path in DOCS:
        text = path.read_text()
        for m in MARK.finditer(text):
            line = text[:m.start()].count("\n") + 1
            out.append((f"{path.name}:{line}", m.group(1), int(m.group(2) or 0), m.group(3)))
    return out


CHECKED = _checked()


def _commands(block: str) -> list[str]:
    """The command lines of a block (continuation lines joined)."""
    return [line.strip() for line in block.replace("\\\n", " ").splitlines()
            if line.strip().startswith(("preempt-planner ", "$ preempt-planner "))]


def _matches(shown: list[str], got: list[str]) -> bool:
    """``got`` is what ``shown`` shows (``...`` lines and ``...`` in lines: anything)."""
    pattern = "".join("(?:.*\n)*?" if line.strip() == "..." else
                      ".*".join(map(re.escape, line.split("..."))) + "\n" for line in shown)
    return re.fullmatch(pattern, "".join(f"{line}\n" for line in got)) is not None


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("instances", "tests", "docs"):
        (tmp_path / name).symlink_to(ROOT / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("where,kind,status,block", CHECKED, ids=[c[0] for c in CHECKED])
def test_a_checked_example_runs_and_shows_its_output(
        where: str, kind: str, status: int, block: str, scratch: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    commands = _commands(block)
    assert commands, f"{where}: no preempt-planner command in the block"
    if kind == "runs":
        for command in commands:
            assert cli.main(shlex.split(command)[1:]) == status, (where, command)
            capsys.readouterr()
        return
    lines = block.replace("\\\n", " ").splitlines()
    starts = [k for k, line in enumerate(lines) if line.startswith("$ ")]
    for k, start in enumerate(starts):
        shown = [line.rstrip() for line in lines[start + 1:(starts[k + 1:] or [None])[0]]]
        cli.main(shlex.split(lines[start][2:])[1:])
        out, err = capsys.readouterr()
        got = [line.rstrip() for line in (out + err).splitlines()]
        assert _matches(shown, got), (where, lines[start], "\n".join(got))


def test_enough_examples_are_checked() -> None:
    # the README's, and each guide's that has one on the bundled files
    names = {where.split(":")[0] for where, *_ in CHECKED}
    assert {"README.md", "format.md", "simulation.md", "kubernetes.md", "slurm.md"} <= names
    assert len(CHECKED) >= 8


def _blocks(path: Path, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", path.read_text(), re.DOTALL)


def test_the_api_example_answer_is_the_real_one() -> None:
    # docs/api.md: the curl request's body, planned as the service plans it with
    # ?deterministic=true, gives the JSON answer shown (wall_s aside)
    from planner.service.server import _plan_job

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
    for path in DOCS:
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
