"""The foundation commands: validate, schema and show, on the bundled instances."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

import cli
from models import InputError, load_snapshot
from planner.commands.schema import KINDS, all_schemas, build_schema

ROOT = Path(__file__).resolve().parent.parent
INSTANCES = sorted((ROOT / "instances").glob("*.json"))
HAND_WRITTEN = [p for p in INSTANCES if not p.name.startswith("gen-")]


def _ids(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


def _out(capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    return out + err


def test_enough_instances() -> None:
    assert len(HAND_WRITTEN) >= 9
    assert {"gen-small.json", "gen-medium.json", "gen-large.json"} <= {p.name for p in INSTANCES}
    for path in HAND_WRITTEN:
        comment = json.loads(path.read_text()).get("_comment", "")
        assert len(comment) > 80, f"{path.name} needs a story in _comment"


@pytest.mark.parametrize("path", INSTANCES, ids=_ids(INSTANCES))
def test_instance_validates(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["validate", str(path)]) == 0
    out = _out(capsys)
    snap = load_snapshot(path)
    gpus = sum(n.gpus for n in snap.nodes)
    assert out.strip() == (f"valid: {len(snap.nodes)} nodes, {gpus} GPUs, "
                           f"{len(snap.running())} running, {len(snap.pending())} pending")


# ------------------------------------------------------------------ schema


@pytest.mark.parametrize("kind", [*KINDS, "all"])
def test_schema_command_output_is_a_valid_schema(kind: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["schema", "--kind", kind]) == 0
    doc = json.loads(capsys.readouterr().out)
    Draft202012Validator.check_schema(doc)
    assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    out = tmp_path / "schema.json"
    assert cli.main(["schema", "--kind", kind, "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == doc


@pytest.mark.parametrize("path", INSTANCES, ids=_ids(INSTANCES))
def test_instances_match_snapshot_schema(path: Path) -> None:
    validator = Draft202012Validator(build_schema("snapshot"))
    errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(json.loads(
        path.read_text()))]
    assert errors == []


def test_schema_rejects_what_the_loader_rejects() -> None:
    validator = Draft202012Validator(build_schema("snapshot"))
    doc = json.loads((ROOT / "instances" / "example-70b.json").read_text())
    doc["nodes"][0]["gpuz"] = 8
    doc["jobs"][0]["topology"] = "ring"
    messages = " ".join(e.message for e in validator.iter_errors(doc))
    assert "gpuz" in messages and "ring" in messages


def test_schema_accepts_epoch_timestamps_and_comments() -> None:
    validator = Draft202012Validator(build_schema("snapshot"))
    doc: dict[str, Any] = {
        "version": 1, "_comment": "x", "now": 1796025600,
        "nodes": [{"id": "n", "gpus": 8, "_note": 1}],
        "policy": {"tiers": {"2": {"windows": [{"days": ["sat"]}]}}},
    }
    assert list(validator.iter_errors(doc)) == []
    load_snapshot(doc)
    # the version is required, by the schema and by the loader
    bare = {k: v for k, v in doc.items() if k != "version"}
    assert [e.message for e in validator.iter_errors(bare)] == ["'version' is a required property"]
    with pytest.raises(InputError, match="version: Field required"):
        load_snapshot(bare)
    doc["policy"]["tiers"]["two"] = {}
    assert list(validator.iter_errors(doc))


def test_policy_and_plan_schemas() -> None:
    pol = Draft202012Validator(build_schema("policy"))
    good = {"tiers": {"2": {"min_runtime_s": 60}}, "cascade_guard_s": 5}
    assert list(pol.iter_errors(good)) == []
    assert list(pol.iter_errors({"max_evicted_gpu_fraction": 2}))
    plan = Draft202012Validator(build_schema("plan"))
    example: dict[str, Any] = {
        "version": 1, "now": "2026-11-29T08:00:00Z", "status": "optimal",
        "objective": {"admitted_gpus": {"1": 8, "2": 0, "3": 0}, "priority_value": 400,
                      "eviction_cost_gpu_s": 5305.0, "evictions": 1},
        "evictions": [{"job": "sweep-17", "tier": 3, "preemptors": ["finetune-70b"],
                       "signal": "SIGTERM", "grace_s": 60, "flush_s": 13.125,
                       "cost_gpu_s": 5305.0, "requeue_hold_until": "2026-11-29T08:31:00Z"}],
        "placements": [{"job": "finetune-70b",
                        "placement": [{"node": "dgx-002", "gpus": [0, 1, 2, 3, 4, 5, 6, 7]}],
                        "start_after_s": 60}],
        "deferred": [{"job": "eval-3", "reason": "COOLDOWN", "until": "2026-11-29T08:20:00Z",
                      "detail": "held"}],
        "storm": [{"storage": "nfs-a", "flush_gb": 52.5, "flush_s": 1.3125}],
        "warnings": [],
        "solver": {"engine": "cp-sat", "status": "OPTIMAL", "wall_s": 0.12, "gap": 0.0},
    }
    assert list(plan.iter_errors(example)) == []
    example["deferred"][0]["reason"] = "BORED"
    assert list(plan.iter_errors(example))


def test_all_schemas_bundle() -> None:
    doc = all_schemas()
    Draft202012Validator.check_schema(doc)
    assert set(doc["$defs"]) == set(KINDS)


# ------------------------------------------------------------------ show


def test_show_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["show", str(ROOT / "instances" / "example-70b.json")]) == 0
    out = _out(capsys)
    for text in ("2026-11-29T08:00:00Z", "dgx-001", "dgx-002", "finetune-70b", "sweep-17",
                 "11111111", "33333333", "pool standard", "2 running, 1 pending"):
        assert text in out


def test_show_backoff_cooldown(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["show", str(ROOT / "instances" / "backoff.json")]) == 0
    out = _out(capsys)
    for text in ("b1", "b2", "eval-3", "sweep-9", "ft-5"):
        assert text in out
    eval_line = next(line for line in out.splitlines() if line.lstrip().startswith("eval-3"))
    assert "cooldown until 2026-11-29T08:40:00Z" in eval_line
    ft_line = next(line for line in out.splitlines() if line.lstrip().startswith("ft-5"))
    assert "ready (cooldown ended 2026-11-29T07:00:00Z)" in ft_line


def test_show_marks_node_states_and_immunity(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["show", str(ROOT / "instances" / "drain-down.json")]) == 0
    out = _out(capsys)
    assert "DRAIN" in out and "DOWN" in out
    assert "3333----" in out  # drain node: 4 held by tier 3, 4 free but unusable
    assert "lost-d2 has GPUs on a down node" in out
    assert cli.main(["show", str(ROOT / "instances" / "tier1-arrival.json")]) == 0
    out = _out(capsys)
    immune = next(line for line in out.splitlines() if line.strip().startswith("spot-d"))
    assert "20m" in immune and "2026-11-29T08:20:00Z" in immune


def test_show_windows_and_cascade(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["show", str(ROOT / "instances" / "window-outside.json")]) == 0
    assert "no (outside windows)" in _out(capsys)
    assert cli.main(["show", str(ROOT / "instances" / "window-inside.json")]) == 0
    assert "yes (in window)" in _out(capsys)
    assert cli.main(["show", str(ROOT / "instances" / "cascade-guard.json")]) == 0
    assert "cascade guard until 2026-11-29T08:05:00Z" in _out(capsys)


def test_show_compact_mode(capsys: pytest.CaptureFixture[str]) -> None:
    path = ROOT / "instances" / "gen-medium.json"
    assert cli.main(["show", str(path), "--max-jobs", "5"]) == 0
    out = _out(capsys)
    assert "Nodes by pool, state and GPU type (256 nodes" in out
    assert "reserved" in out
    assert "node-0001" not in out.split("Running:")[0]  # aggregated, not one row per node
    assert "more pending jobs" in out
    assert cli.main(["show", str(path), "--max-nodes", "1000", "--max-jobs", "1"]) == 0
    assert "node-0256" in _out(capsys)


def test_show_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"now": "2026-11-29T08:00:00Z", "nodes": [{"id": "n"}]}')
    assert cli.main(["show", str(path)]) == 2
    assert "nodes[0].gpus: Field required" in " ".join(_out(capsys).split())


def test_every_help_ends_with_examples_that_parse(capsys: pytest.CaptureFixture[str]) -> None:
    # the examples in each command's (and action's) --help use real options: each one
    # parses with the command line parser, nothing left over; pipes and redirections
    # aside
    import shlex

    parser = cli.build_parser()
    for name, examples in cli.EXAMPLES.items():
        assert 2 <= len(examples) <= 3, name
        for example in examples:
            commands = [part.split(" > ")[0] for part in example.split(" | ")
                        if part.startswith("preempt-planner ")]
            assert any(shlex.split(c)[1:1 + len(name.split())] == name.split()
                       for c in commands), example
            for command in commands:
                args, extra = parser.parse_known_args(shlex.split(command)[1:])
                assert extra == [] and args.command in cli.COMMANDS, example
        with pytest.raises(SystemExit):
            cli.main([*name.split(), "--help"])
        shown = capsys.readouterr().out
        assert shown.split("examples:\n", 1)[1].startswith(f"  {examples[0]}\n"), name
        assert "``" not in shown, name  # (plain text, not RST)
    actions = {f"{c} {a}" for c in ("slurm", "k8s") for a in
               next(x for x in parser._actions if hasattr(x, "choices") and x.choices
                    and "slurm" in x.choices).choices[c]._subparsers._group_actions[0].choices}
    assert set(cli.EXAMPLES) == set(cli.COMMANDS) | actions
