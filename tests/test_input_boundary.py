"""The input boundary is the contract: any finite number where it says number (a
fractional priority, weighed exactly), plans as strict as snapshots, YAML alias
bombs refused, and a document of another tool recognised and named."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

import cli
from models import InputError, load_plan, load_policy, load_snapshot
from planner import plan
from planner.checks.verify import verify

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "instances" / "example-70b.json"
FIX = ROOT / "tests" / "fixtures"


def _err(capsys: pytest.CaptureFixture[str]) -> str:
    return capsys.readouterr().err


def _two_pending(p_a: float, p_b: float, gpus: int = 8) -> dict[str, Any]:
    return {"version": 1, "now": "2026-11-29T08:00:00Z", "nodes": [{"id": "n1", "gpus": 8}],
            "jobs": [{"id": "a", "tier": 2, "state": "pending", "gpus_per_node": gpus,
                      "priority": p_a},
                     {"id": "b", "tier": 2, "state": "pending", "gpus_per_node": gpus,
                      "priority": p_b}]}


# ------------------------------------------------------------------ priority


@pytest.mark.parametrize("planner", ["cpsat", "greedy", "k8s", "slurm"])
@pytest.mark.parametrize(("p_a", "p_b", "value"), [(0.25, 0.5, 4), (3, 10.0, 80)])
def test_priorities_that_are_not_ints_are_ordered_exactly(planner: str, p_a: float,
                                                          p_b: float, value: int) -> None:
    # two 8-GPU jobs for one node: b, of the higher priority, goes first. 0.5 against
    # 0.25 (the loader refused any priority that was not an integer); 10.0 against 3:
    # 10.0 needs no scaling (its scale is 1) but is a float, and CP-SAT, which weighs
    # integers only, refused the model (exit status 3) until it was planned as the
    # integer 10. priority_value 0.5 x 8 = 4, 10 x 8 = 80
    snap = load_snapshot(_two_pending(p_a, p_b))
    p = plan(snap, deterministic=True, planner=planner)
    assert [pl.job for pl in p.placements] == ["b"]
    assert p.objective.priority_value == value and verify(snap, p) == []
    assert [d.job for d in p.deferred] == ["a"]
    assert p.status == ("optimal" if planner == "cpsat" else "feasible")


def test_fractional_priorities_sum_exactly_and_integers_stay_integers() -> None:
    snap = load_snapshot(_two_pending(0.1, 0.2, gpus=4))
    p = plan(snap, deterministic=True)
    assert sorted(pl.job for pl in p.placements) == ["a", "b"]
    # 0.1 x 4 + 0.2 x 4 is 1.2, not 1.2000000000000002, and the verifier agrees
    assert json.loads(p.to_json())["objective"]["priority_value"] == 1.2
    assert verify(snap, p) == []
    example = plan(load_snapshot(EXAMPLE), deterministic=True)
    assert json.loads(example.to_json())["objective"]["priority_value"] == 400
    assert load_snapshot(EXAMPLE).model_dump(mode="json")["jobs"][0]["priority"] == 50


def test_a_priority_that_cannot_be_scaled_exactly_is_refused() -> None:
    # 10^9 with the nine decimal places of the other would be 10^18 in the solver
    with pytest.raises(InputError) as exc:
        load_snapshot(_two_pending(1e9, 0.123456789))
    (msg,) = exc.value.errors
    assert msg.startswith("jobs[0].priority: 1000000000.0 times 10^9 is beyond +-1,000,000,000")
    for bad, said in ((True, "valid number"), ("0.5", "valid number"),
                      (float("nan"), "finite number"), (2e9, "less than or equal to")):
        with pytest.raises(InputError) as exc:
            load_snapshot(_two_pending(bad, 1))
        assert exc.value.errors == [f"jobs[0].priority: Input should be a {said}"
                                    if "number" in said else
                                    "jobs[0].priority: Input should be less than or equal to "
                                    "1000000000"]


# ------------------------------------------------------------------ seeds


def test_a_seed_out_of_range_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    # OR-Tools took it as a TypeError: exit status 3, an internal error
    assert cli.main(["plan", str(EXAMPLE), "--seed", "100000000000000000000000"]) == 2
    assert "--seed: must be a seed from 0 to 2,147,483,647, got 100000000000000000000000" \
        in _err(capsys)
    assert cli.main(["plan", str(EXAMPLE), "--seed", "-1"]) == 2
    with pytest.raises(ValueError, match="seed: must be a seed from 0"):
        plan(load_snapshot(EXAMPLE), seed=2**31)
    assert cli.main(["generate", "--nodes", "4", "--seed", "-3"]) == 2
    assert "--seed: must be a seed from 0 to 2,147,483,647, got -3" in _err(capsys)
    for command in (["simulate", "--planner", "greedy"], ["compare", "--planners", "greedy"]):
        assert cli.main([*command, "--cluster", str(ROOT / "tests/data/sim/cluster-1node.json"),
                         "--trace", str(ROOT / "tests/data/sim/ping-pong.jsonl"),
                         "--seed", str(2**40)]) == 2, command
        assert "--seed: must be a seed from 0" in _err(capsys)


# ------------------------------------------------------------------ YAML


BOMB = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{x}: &{x} [{', '.join([f'*{p}'] * 9)}]\n" for p, x in zip("abcdefgh", "bcdefghi",
                                                                 strict=True))


def test_a_yaml_alias_bomb_is_refused_at_once(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    # 9 levels of 9 aliases: under 450 bytes, 387 million values; validate hung
    assert len(BOMB) < 450
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    assert cli.main(["validate", str(path)]) == 2
    assert "YAML aliases (*name) repeat more than 1,000,000 values" in _err(capsys)
    loop = tmp_path / "loop.yaml"
    loop.write_text("a: &a [*a]\n")
    assert cli.main(["validate", str(loop)]) == 2
    assert "the document contains itself (a recursive YAML alias)" in _err(capsys)
    # a few aliases, as people use them, are fine
    import yaml

    doc = json.loads(EXAMPLE.read_text())
    doc["jobs"][2]["checkpoint"] = doc["jobs"][0]["checkpoint"]  # (the same object)
    shared = tmp_path / "shared.yaml"
    shared.write_text(yaml.safe_dump(doc))
    assert "*id001" in shared.read_text()
    assert cli.main(["validate", str(shared)]) == 0


# ------------------------------------------------------------------ plans


def _plan_doc() -> dict[str, Any]:
    return json.loads(plan(load_snapshot(EXAMPLE), deterministic=True).to_json())


@pytest.mark.parametrize("command", [["verify", str(EXAMPLE)], ["k8s", "apply"],
                                     ["slurm", "apply", "--dry-run"]])
@pytest.mark.parametrize("change,said", [
    (lambda d: d.pop("version"), "plan.version: Field required"),
    (lambda d: d["evictions"][0].update(grace_s="60"),
     "plan.evictions[0].grace_s: Input should be a valid number"),
    (lambda d: d["evictions"][0].update(gracee_s=60),
     ("plan.evictions[0].gracee_s: unknown field (not in the contract; comments start with "
     "'_'); did you mean 'grace_s'?")),
])
def test_plans_are_as_strict_as_snapshots(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          command: list[str], change: Any, said: str) -> None:
    doc = _plan_doc()
    change(doc)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    out = tmp_path / "never"
    args = [*command, str(path)]
    if command[0] == "k8s":
        args += ["--now", "2026-11-29T08:00:00Z", "--out", str(out)]
    assert cli.main(args) == 2
    assert said in " ".join(_err(capsys).split())
    assert not out.exists()


def test_a_plan_written_by_plan_and_read_from_yaml_loads() -> None:
    import yaml

    doc = _plan_doc()
    assert load_plan(doc).model_dump(mode="json") == doc
    assert load_plan(yaml.safe_load(yaml.safe_dump(doc))).model_dump(mode="json") == doc


# ------------------------------------------------------------------ other tools


def _fixture(name: str) -> Any:
    return json.loads((FIX / name).read_text())


WRONG = {  # a file of another tool, and the words that must name it
    "plan": (None, "this looks like a preempt-planner plan, not a snapshot; give it as PLAN"),
    "pods": ("k8s/pods.json", ("this looks like a Pod list (the output of 'kubectl get pods -A "
             "-o json'), not a snapshot; turn it into a snapshot with 'preempt-planner k8s "
             "snapshot")),
    "nodes": ("k8s/nodes.json", "this looks like a Node list"),
    "squeue": ("slurm/23.11/squeue.json", ("this looks like the output of 'squeue --json' "
               "(Slurm), not a snapshot; turn it into a snapshot with 'preempt-planner slurm "
               "snapshot")),
    "sinfo": ("slurm/23.11/sinfo.json", "this looks like the output of 'sinfo --json'"),
    "scontrol": ("slurm/23.11/scontrol_nodes.json", "'scontrol show nodes --json' (Slurm)"),
    "policy": ({"tiers": {"1": {"can_preempt": [3]}}, "grace": {"min_s": 30}},
               ("this looks like a policy (the 'policy' section of a snapshot), not a snapshot; "
               "give it with --policy FILE")),
}


def _write_wrong(tmp_path: Path, kind: str) -> Path:
    source = WRONG[kind][0]
    doc = _plan_doc() if source is None else (source if isinstance(source, dict)
                                              else _fixture(source))
    path = tmp_path / f"{kind}.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("kind", sorted(WRONG))
@pytest.mark.parametrize("command", [
    ["plan"], ["validate"], ["show"], ["whatif", "--set", "policy.thrash=null"], ["verify"],
    ["simulate", "--trace", str(ROOT / "tests/data/sim/ping-pong.jsonl"), "--cluster"],
])
def test_a_file_of_another_tool_is_named_in_one_message(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str],
        kind: str) -> None:
    path = _write_wrong(tmp_path, kind)
    args = [*command, str(path)]
    if command == ["verify"]:
        args.append(str(tmp_path / "no-plan.json"))
    assert cli.main(args) == 2
    err = " ".join(_err(capsys).split())
    assert WRONG[kind][1] in err and "(1 problem(s))" in err, err


def test_verify_with_its_files_swapped_says_so(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    plan_file = _write_wrong(tmp_path, "plan")
    assert cli.main(["verify", str(plan_file), str(EXAMPLE)]) == 2
    err = " ".join(_err(capsys).split())
    assert "this looks like a preempt-planner plan, not a snapshot; give it as PLAN: " \
        "'preempt-planner verify SNAPSHOT PLAN' (the snapshot first)" in err
    assert cli.main(["verify", str(EXAMPLE), str(EXAMPLE)]) == 2
    assert "this looks like a contract snapshot (preempt-planner's own format), not a plan" \
        in " ".join(_err(capsys).split())


def test_a_snapshot_given_as_the_policy_is_named(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    # it said "policy.version: unknown field; did you mean 'version'?"
    for command in (["plan", str(EXAMPLE), "--policy", str(EXAMPLE)],
                    ["validate", str(EXAMPLE), "--kind", "policy"],
                    ["simulate", "--cluster", str(ROOT / "tests/data/sim/cluster-1node.json"),
                     "--trace", str(ROOT / "tests/data/sim/ping-pong.jsonl"),
                     "--policy", str(EXAMPLE)]):
        assert cli.main(command) == 2
        err = " ".join(_err(capsys).split())
        assert ("this looks like a contract snapshot (preempt-planner's own format), not a "
                "policy; give it as SNAPSHOT") in err, command
        assert "did you mean" not in err
    with pytest.raises(InputError, match="not a policy"):
        load_policy(json.loads(EXAMPLE.read_text()))


def test_a_broken_snapshot_still_gets_its_field_errors() -> None:
    # recognition must not hide the errors of a snapshot that is merely broken
    doc = json.loads(EXAMPLE.read_text())
    del doc["version"]
    doc["nodes"][0]["gpus"] = "8"
    with pytest.raises(InputError) as exc:
        load_snapshot(copy.deepcopy(doc))
    assert exc.value.errors == ["version: Field required",
                                "nodes[0].gpus: Input should be a valid integer"]


def test_an_input_error_keeps_its_problems_across_a_process_boundary() -> None:
    # a worker pool (sim_matrix, the service's workers) pickles the exception it
    # raises; the problems must come back as they were, not one per character
    import pickle

    err = InputError(["trace: file 'x.csv' not found", "days: must be positive"], "run.yaml")
    back = pickle.loads(pickle.dumps(err))
    assert isinstance(back, InputError)
    assert back.errors == ["trace: file 'x.csv' not found", "days: must be positive"]
    assert back.source == "run.yaml"
    assert str(back) == str(err)
    assert str(back).startswith("run.yaml: 2 problem(s):")


@pytest.mark.parametrize("planner", ["cpsat", "greedy", "k8s", "slurm"])
def test_a_job_id_with_control_characters_on_a_down_node_is_named_in_warnings(
        planner: str) -> None:
    # the warning wrote the id as Python's repr ('\\x00' for the NUL character), so
    # the verifier, which looks for the id itself, found it unnamed and every plan
    # of the snapshot invalid
    jid = "\u00e9\u0000"
    snap = load_snapshot({
        "version": 1, "now": "2026-11-29T08:00:00Z",
        "nodes": [{"id": "n1", "gpus": 8, "state": "down"}, {"id": "n2", "gpus": 8}],
        "jobs": [{"id": jid, "tier": 3, "state": "running", "gpus_per_node": 2,
                  "started_at": "2026-11-29T04:00:00Z",
                  "placement": [{"node": "n1", "gpus": [0, 1]}]}]})
    p = plan(snap, deterministic=True, planner=planner)
    assert verify(snap, p) == []
    assert p.warnings == [(f"running job '{jid}' has GPUs on down node(s) n1: ignored "
                           "there and never evicted")]
