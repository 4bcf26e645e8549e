"""Bad input (contract section 8): ``validate`` exits 2 and names the field and the
problem; every problem of a file is reported at once."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import cli

NOW = "2026-11-29T08:00:00Z"

BASE: dict[str, Any] = {
    "version": 1,
    "now": NOW,
    "storage": [{"id": "nfs-a", "write_gb_per_s": 40.0}],
    "nodes": [
        {"id": "n1", "gpus": 8, "gpu_type": "H100"},
        {"id": "n2", "gpus": 8, "gpu_type": "H100", "nvlink": [[0, 1], [2, 3], [4, 5], [6, 7]]},
    ],
    "jobs": [
        {"id": "a", "tier": 3, "state": "running", "gpus_per_node": 4,
         "started_at": "2026-11-29T07:00:00Z",
         "placement": [{"node": "n1", "gpus": [0, 1, 2, 3]}],
         "checkpoint": {"size_gb": 56, "barrier_s": 10, "cleanup_s": 5, "restore_s": 300}},
        {"id": "b", "tier": 2, "state": "running", "gpus_per_node": 2, "nodes": 2,
         "started_at": "2026-11-29T06:00:00Z",
         "placement": [{"node": "n1", "gpus": [4, 5]}, {"node": "n2", "gpus": [0, 1]}]},
        {"id": "p", "tier": 1, "state": "pending", "gpus_per_node": 8},
    ],
}


def _output(capsys: pytest.CaptureFixture[str]) -> str:
    """stdout + stderr with whitespace collapsed (rich wraps long lines)."""
    out, err = capsys.readouterr()
    return " ".join((out + err).split())


def _validate(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    status = cli.main(["validate", str(path), *extra])
    return status, _output(capsys)


def _write(tmp_path: Path, doc: Any, name: str = "snap.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_base_is_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out = _validate(_write(tmp_path, BASE), capsys)
    assert status == 0
    assert "valid: 2 nodes, 16 GPUs, 2 running, 1 pending" in out


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A mutation setting a dotted path (``jobs.0.checkpoint.size_gb``)."""
    def apply(doc: dict[str, Any]) -> None:
        *head, last = path.split(".")
        node: Any = doc
        for key in head:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return apply


def _add_job(job: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    return lambda doc: doc["jobs"].append(job)


def _add_node(node: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    return lambda doc: doc["nodes"].append(node)


def _many(*fs: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def apply(doc: dict[str, Any]) -> None:
        for f in fs:
            f(doc)
    return apply


def _drop(path: str, key: str) -> Callable[[dict[str, Any]], None]:
    def apply(doc: dict[str, Any]) -> None:
        node: Any = doc
        for k in path.split("."):
            node = node[int(k)] if isinstance(node, list) else node[k]
        del node[key]
    return apply


# (name, mutation, expected message fragment)
CASES: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("unknown node in placement", _set("jobs.0.placement.0.node", "ghost"),
     "jobs[0].placement[0].node: unknown node 'ghost'"),
    ("GPU out of range", _set("jobs.0.placement.0.gpus", [0, 1, 2, 9]),
     "jobs[0].placement[0].gpus: GPU 9 out of range for node n1 (8 GPUs)"),
    ("GPU shared by two running jobs", _set("jobs.1.placement.0.gpus", [3, 4]),
     "jobs[1].placement[0].gpus: GPU 3 of node n1 is also used by running job 'a' (R1)"),
    ("duplicate job id", _set("jobs.2.id", "a"),
     "jobs[2].id: duplicate id 'a' (also jobs[0])"),
    ("duplicate node id", _set("nodes.1.id", "n1"),
     "nodes[1].id: duplicate id 'n1' (also nodes[0])"),
    ("duplicate storage id", _set("storage", [{"id": "s", "write_gb_per_s": 1},
                                              {"id": "s", "write_gb_per_s": 2}]),
     "storage[1].id: duplicate id 's' (also storage[0])"),
    ("wrong placement size", _set("jobs.0.placement.0.gpus", [0, 1, 2]),
     "jobs[0].placement[0].gpus: 3 GPUs but the job has gpus_per_node=4"),
    ("wrong number of placement entries", _set("jobs.1.nodes", 3),
     "jobs[1].placement: 2 entries but the job has nodes=3"),
    ("placement entries on the same node", _set("jobs.1.placement.1",
                                                 {"node": "n1", "gpus": [6, 7]}),
     "jobs[1].placement[1].node: node 'n1' appears twice"),
    ("GPU listed twice in one entry", _set("jobs.0.placement.0.gpus", [0, 1, 1, 2]),
     "jobs[0].placement[0].gpus: GPU indices [0, 1, 1, 2] are not distinct"),
    ("negative GPU index", _set("jobs.0.placement.0.gpus", [-1, 0, 1, 2]),
     "jobs[0].placement[0].gpus: GPU indices [-1, 0, 1, 2] must not be negative"),
    ("started_at after now", _set("jobs.0.started_at", "2026-11-29T09:00:00Z"),
     "jobs[0].started_at: 2026-11-29T09:00:00+00:00 is after now"),
    ("last_preempted_at after now", _set("jobs.2.last_preempted_at", "2026-11-30T00:00:00Z"),
     "jobs[2].last_preempted_at: 2026-11-30T00:00:00+00:00 is after now"),
    ("checkpoint last_at after now", _set("jobs.0.checkpoint.last_at", "2026-11-29T08:00:01Z"),
     "jobs[0].checkpoint.last_at: 2026-11-29T08:00:01+00:00 is after now"),
    ("overlapping NVLink islands", _set("nodes.1.nvlink", [[0, 1], [1, 2]]),
     "nodes[1].nvlink[1]: GPU 1 is also in island 0 (islands must not overlap)"),
    ("NVLink island GPU out of range", _set("nodes.1.nvlink", [[0, 1], [8, 9]]),
     "nodes[1].nvlink[1]: GPU 8 out of range (node has 8 GPUs)"),
    ("NVLink edge out of range", _set("nodes.1.nvlink", {"edges": [[0, 1], [1, 8]]}),
     "nodes[1].nvlink.edges[1]: edge [1, 8] out of range (node has 8 GPUs)"),
    ("NVLink self loop", _set("nodes.1.nvlink", {"edges": [[2, 2]]}),
     "nodes[1].nvlink.edges[0]: self loop on GPU 2"),
    ("bad NVLink string", _set("nodes.0.nvlink", "nvswich"),
     'nodes[0].nvlink: must be "nvswitch", "none", a list of islands'),
    ("unknown storage", _set("nodes.0.storage", "nfs-z"),
     "nodes[0].storage: unknown storage target 'nfs-z'"),
    ("several storages and a node without one",
     _many(_set("storage", [{"id": "nfs-a", "write_gb_per_s": 40},
                            {"id": "nfs-b", "write_gb_per_s": 20}]),
           _set("nodes.0.storage", "nfs-a")),
     "nodes[1].storage: required when there are several storage targets (nfs-a, nfs-b)"),
    ("unknown tier", _set("jobs.0.tier", 7),
     "jobs[0].tier: tier 7 of job 'a' is not in the policy (tiers: 1, 2, 3)"),
    ("can_preempt names an undefined tier", _set("policy", {"tiers": {"2": {"can_preempt": [5]}}}),
     "policy.tiers.2.can_preempt: tier 5 is not defined in the policy"),
    ("two keys of one tier", _set("policy", {"tiers": {"3": {"min_runtime_s": 0},
                                                      "03": {"min_runtime_s": 9}}}),
     "policy.tiers: keys '3' and '03' are both tier 3; give each tier once"),
    ("tier key that int() reads", _set("policy", {"tiers": {" 3": {}, "3_0": {}}}),
     "policy.tiers: keys ' 3', '3_0' are not tier numbers (a tier key is an integer"),
    ("negative size_gb", _set("jobs.0.checkpoint.size_gb", -1),
     "jobs[0].checkpoint.size_gb: Input should be greater than or equal to 0"),
    ("non-finite bandwidth", _set("storage.0.write_gb_per_s", float("inf")),
     "storage[0].write_gb_per_s: Input should be a finite number"),
    ("zero bandwidth", _set("storage.0.write_gb_per_s", 0),
     "storage[0].write_gb_per_s: Input should be greater than or equal to 0.001"),
    ("node without GPUs", _set("nodes.0.gpus", 0),
     "nodes[0].gpus: Input should be greater than or equal to 1"),
    ("pending job with a placement", _set("jobs.2.placement", [{"node": "n2", "gpus": [4]}]),
     "jobs[2].placement: pending job 'p' must not have a placement"),
    ("running job without started_at", _drop("jobs.0", "started_at"),
     "jobs[0].started_at: required for running job 'a'"),
    ("running job without placement", _drop("jobs.0", "placement"),
     "jobs[0].placement: required for running job 'a'"),
    ("bad topology value", _set("jobs.2.topology", "ring"),
     "jobs[2].topology: Input should be 'nvlink' or 'any', got 'ring'"),
    ("bad job state", _set("jobs.2.state", "queued"),
     "jobs[2].state: Input should be 'running' or 'pending', got 'queued'"),
    ("bad node state", _set("nodes.0.state", "offline"),
     "nodes[0].state: Input should be 'up', 'drain' or 'down', got 'offline'"),
    ("unknown field typo", _set("jobs.2.priorty", 5),
     "jobs[2].priorty: unknown field (not in the contract; comments start with '_')"),
    ("missing required field", _drop("jobs.2", "gpus_per_node"),
     "jobs[2].gpus_per_node: Field required"),
    ("bad window time",
     _set("policy", {"tiers": {"2": {"windows": [{"start": "22:00", "end": "25:00"}]}}}),
     "policy.tiers.2.windows[0].end: time '25:00' is not HH:MM between 00:00 and 24:00"),
    ("window starting at 24:00",
     _set("policy", {"tiers": {"2": {"windows": [{"start": "24:00"}]}}}),
     "policy.tiers.2.windows[0].start: start may not be 24:00"),
    ("bad window day", _set("policy", {"tiers": {"2": {"windows": [{"days": ["moon"]}]}}}),
     "policy.tiers.2.windows[0].days: unknown day 'moon'"),
    ("grace min above max", _set("policy", {"grace": {"min_s": 300}}),
     "policy.grace: min_s (300.0) exceeds max_s (180)"),
    ("evicted GPU fraction above 1", _set("policy", {"max_evicted_gpu_fraction": 1.5}),
     "policy.max_evicted_gpu_fraction: Input should be less than or equal to 1"),
    ("timestamp without zone", _set("now", "2026-11-29T08:00:00"),
     "now: Input should have timezone info"),
    ("unknown signal name", _set("jobs.0.checkpoint.signal", "SIGFOO"),
     "jobs[0].checkpoint.signal: unknown signal 'SIGFOO'"),
    ("wrong version", _set("version", 2), "version: Input should be 1, got 2"),
    ("empty id", _set("jobs.0.id", ""), "jobs[0].id: String should have at least 1 character"),
    # implementation limits (docs/format.md, "Limits"): each value below crashed the
    # planner (an objective term or a cost beyond what CP-SAT takes, a hold past the
    # last date Python has)
    ("priority beyond the limit", _set("jobs.2.priority", 10**30),
     "jobs[2].priority: Input should be less than or equal to 1000000000"),
    ("gang beyond the limit", _set("jobs.2.nodes", 10**30),
     "jobs[2].nodes: Input should be less than or equal to 100000"),
    ("restore time beyond the limit", _set("jobs.0.checkpoint.restore_s", 1e308),
     "jobs[0].checkpoint.restore_s: Input should be less than or equal to 1000000000"),
    ("eviction budget beyond the limit", _set("policy", {"max_evictions_per_tick": 10**30}),
     "policy.max_evictions_per_tick: Input should be less than or equal to 1000000"),
    ("cooldown beyond the limit", _set("policy", {"backoff": {"cooldown_s": 1e308}}),
     "policy.backoff.cooldown_s: Input should be less than or equal to 1000000000"),
    ("time beyond the limit", _set("now", "9999-12-31T23:59:59Z"),
     "now: 9999-12-31T23:59:59+00:00 is outside 1970-01-01 to 9000-01-01"),
]


@pytest.mark.parametrize(("mutate", "message"), [(m, msg) for _, m, msg in CASES],
                         ids=[name for name, _, _ in CASES])
def test_bad_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                      mutate: Callable[[dict[str, Any]], None], message: str) -> None:
    doc = copy.deepcopy(BASE)
    mutate(doc)
    status, out = _validate(_write(tmp_path, doc), capsys)
    assert status == 2
    assert message in out
    assert "valid:" not in out


def test_cases_are_distinct() -> None:
    messages = [msg for _, _, msg in CASES]
    assert len(set(messages)) == len(messages) >= 15


def test_malformed_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"version": 1,\n "now": }')
    status, out = _validate(path, capsys)
    assert status == 2
    assert "malformed JSON at line 2 column 9" in out
    assert "broken.json" in out


def test_malformed_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("version: 1\nnodes: [\n  {id: n1, gpus: 8\n")
    status, out = _validate(path, capsys)
    assert status == 2
    assert "malformed YAML" in out


def test_yaml_snapshot_is_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    path = tmp_path / "snap.yaml"
    path.write_text(yaml.safe_dump(BASE))
    status, out = _validate(path, capsys)
    assert status == 0 and "valid: 2 nodes" in out


def test_not_an_object(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out = _validate(_write(tmp_path, [1, 2, 3]), capsys)
    assert status == 2
    assert "snapshot: must be a JSON/YAML object" in out


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out = _validate(tmp_path / "nope.json", capsys)
    assert status == 2
    assert "cannot read file" in out


def test_all_cross_record_errors_at_once(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    doc = copy.deepcopy(BASE)
    doc["jobs"][0]["placement"][0]["node"] = "ghost"  # unknown node
    doc["jobs"][1]["started_at"] = "2026-11-29T09:00:00Z"  # after now
    doc["jobs"][2]["tier"] = 9  # unknown tier
    status, out = _validate(_write(tmp_path, doc), capsys)
    assert status == 2
    assert "invalid input (3 problem(s))" in out
    assert "jobs[0].placement[0].node: unknown node 'ghost'" in out
    assert "jobs[1].started_at: 2026-11-29T09:00:00+00:00 is after now" in out
    assert "jobs[2].tier: tier 9 of job 'p' is not in the policy" in out


def test_all_field_errors_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = copy.deepcopy(BASE)
    doc["now"] = "2026-11-29T08:00:00"
    doc["nodes"][0]["nvlink"] = "nvswich"
    doc["jobs"][2]["topolgy"] = "any"
    status, out = _validate(_write(tmp_path, doc), capsys)
    assert status == 2
    assert "invalid input (3 problem(s))" in out
    assert "now: Input should have timezone info" in out
    assert "nodes[0].nvlink: must be" in out
    assert "jobs[2].topolgy: unknown field" in out


def test_bad_policy_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snap = _write(tmp_path, BASE)
    policy = _write(tmp_path, {"backoff": {"factor": 0.5}, "pools": {"x": "all"}}, "policy.json")
    status, out = _validate(snap, capsys, "--policy", str(policy))
    assert status == 2
    assert "policy.backoff.factor: Input should be greater than or equal to 1" in out
    assert "policy.pools.x: Input should be a valid list" in out


def test_policy_file_replaces_the_snapshot_policy(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """``--policy`` replaces the snapshot's own policy (section 7): its bad window is gone."""
    doc = copy.deepcopy(BASE)
    doc["policy"] = {"tiers": {"2": {"windows": [{"start": "25:00"}]}}}  # would be invalid
    snap = _write(tmp_path, doc)
    policy = _write(tmp_path, {"tiers": {"3": {"preemptible": True}}}, "policy.json")
    status, out = _validate(snap, capsys, "--policy", str(policy))
    assert status == 0, out


def test_validate_policy_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _write(tmp_path, {"tiers": {"4": {"preemptible": True}}, "pools": {"r": [1]}}, "ok.json")
    assert cli.main(["validate", "--kind", "policy", str(good)]) == 0
    assert "valid policy: tiers 1, 2, 3, 4; restricted pools: r" in _output(capsys)
    bad = _write(tmp_path, {"tiers": {"2": {"min_runtime_s": -5}}}, "bad.json")
    assert cli.main(["validate", "--kind", "policy", str(bad)]) == 2
    assert "policy.tiers.2.min_runtime_s: Input should be greater than or equal to 0" \
        in _output(capsys)


def test_thousands_of_preemptions_hold_a_job_for_the_longest_cooldown() -> None:
    # factor ** (k - free) overflowed a float for k in the thousands (a crash); the
    # hold is then backoff.max_s: 28,800 s after 2026-11-29T07:00:00Z.
    from planner import plan

    doc = copy.deepcopy(BASE)
    doc["jobs"][2].update(preemptions=5000, last_preempted_at="2026-11-29T07:00:00Z")
    p = plan(doc, deterministic=True, time_limit_s=0.5)
    (d,) = p.deferred
    assert (d.job, d.reason) == ("p", "COOLDOWN")
    assert d.until is not None and d.until.isoformat() == "2026-11-29T15:00:00+00:00"


# ---------------------------------------------------------------- exit statuses


EXAMPLE = Path(__file__).resolve().parents[1] / "instances" / "example-70b.json"
SIM_DATA = Path(__file__).resolve().parent / "data" / "sim"


def test_exit_status_0_1_2_3(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    # 0: a plan; 1: verify says the plan breaks a rule; 2: bad input (no plan written)
    # and bad options; 3: an internal error, one line and no traceback (--debug
    # raises it)
    out = tmp_path / "plan.json"
    assert cli.main(["plan", str(EXAMPLE), "--format", "json", "--deterministic",
                     "--out", str(out)]) == 0
    plan = json.loads(out.read_text())
    plan["evictions"][0]["grace_s"] = 1.0
    bad_plan = tmp_path / "bad-plan.json"
    bad_plan.write_text(json.dumps(plan))
    assert cli.main(["verify", str(EXAMPLE), str(bad_plan)]) == 1
    broken = tmp_path / "broken.json"
    broken.write_text('{"version": 1')
    target = tmp_path / "never.json"
    assert cli.main(["plan", str(broken), "--out", str(target)]) == 2 and not target.exists()
    assert cli.main(["serve", "--port", "99999"]) == 2
    capsys.readouterr()

    import planner.commands._common as common

    def boom(*_a: Any, **_k: Any) -> Any:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(common, "load_snapshot", boom)
    assert cli.main(["plan", str(EXAMPLE)]) == 3
    err = capsys.readouterr().err
    assert "internal error in 'plan': ZeroDivisionError: division by zero" in err
    assert "--debug" in err and "Traceback" not in err and err.count("\n") == 1
    with pytest.raises(ZeroDivisionError):
        cli.main(["--debug", "plan", str(EXAMPLE)])
    monkeypatch.setenv("PREEMPT_PLANNER_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        cli.main(["plan", str(EXAMPLE)])


def test_version_and_exit_statuses_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"preempt-planner {version('preempt-planner')}"
    for command in (["plan"], ["verify"], ["simulate"], ["slurm", "run"], ["k8s", "apply"]):
        with pytest.raises(SystemExit):
            cli.main([*command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "exit status: 0 success, 1 the answer is no" in text, command
        assert "3 internal error" in text, command


@pytest.mark.parametrize("name,content,said", [
    ("utf16.json", '{"version": 1}'.encode("utf-16"), "the file is UTF-16 text; save it as UTF-8"),
    ("utf16le.json", '{"version": 1, "now": 0}'.encode("utf-16-le"),
     "UTF-16 text without a byte-order mark"),
    ("latin1.json", '{"_comment": "café"}'.encode("latin-1"),
     "not UTF-8 text (byte 0xe9 at offset 17"),
    ("binary.json", bytes(range(256)), "a binary file, not a JSON or YAML document"),
    ("deep.json", ("[" * 1000 + "]" * 1000).encode(), "nested more than 64 levels deep"),
    ("deep-comment.json", ('{"_comment": ' + "[" * 70 + "]" * 70 + "}").encode(),
     "nested more than 64 levels deep"),
])
def test_files_that_are_not_utf8_json_or_yaml_are_bad_input(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, content: bytes,
        said: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    assert cli.main(["validate", str(path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert said in err and "Traceback" not in err


def test_yaml_in_a_json_file_and_standard_input(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import sys

    import yaml

    doc = json.loads(EXAMPLE.read_text())
    path = tmp_path / "snapshot.json"  # YAML content, .json name: read as YAML
    path.write_text(yaml.safe_dump(doc))
    assert cli.main(["validate", str(path)]) == 0
    assert capsys.readouterr().out.startswith("valid: ")
    stdin = io.TextIOWrapper(io.BytesIO(EXAMPLE.read_bytes()))
    monkeypatch.setattr(sys, "stdin", stdin)
    assert cli.main(["plan", "-", "--format", "json", "--deterministic"]) == 0
    assert json.loads(capsys.readouterr().out)["evictions"][0]["job"] == "sweep-17"


def _changed(doc: Any, path: tuple, value: Any) -> Any:
    """A copy of ``doc`` with the value at ``path`` (keys and list positions) set."""
    out = copy.deepcopy(doc)
    node: Any = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def test_types_are_strict_and_the_version_is_required() -> None:
    # numbers and booleans sent as strings were accepted ("priority": "8"); the
    # version could be left out
    from models import InputError, load_snapshot

    base = json.loads(EXAMPLE.read_text())
    cases = [
        (("jobs", 0, "priority"), "8", "jobs[0].priority: Input should be a valid number"),
        (("jobs", 0, "same_block"), "true", "jobs[0].same_block: Input should be a valid boolean"),
        (("nodes", 0, "gpus"), 8.0, "nodes[0].gpus: Input should be a valid integer"),
        (("storage", 0, "write_gb_per_s"), "40", ("storage[0].write_gb_per_s: Input should be a "
                                                 "valid number")),
        (("jobs", 0, "placement", 0, "gpus", 0), "0", ("jobs[0].placement[0].gpus[0]: Input "
                                                       "should be a valid integer")),
    ]
    for path, value, said in cases:
        with pytest.raises(InputError) as exc:
            load_snapshot(_changed(base, path, value))
        assert said in exc.value.errors, (path, exc.value.errors)
    doc = copy.deepcopy(base)
    del doc["version"]
    with pytest.raises(InputError) as exc:
        load_snapshot(doc)
    assert exc.value.errors == ["version: Field required"]


def test_a_plan_read_back_has_finite_durations_in_range(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A plan that 'slurm apply', 'k8s apply' or 'verify' reads is bad input (exit 2,
    # the field named) when a duration is NaN, infinite, negative or beyond 10^9 s:
    # a grace of NaN or 1e308 would have an adapter wait for ever for its victim
    from models import InputError, load_plan

    snap = json.loads(EXAMPLE.read_text())
    snap_file = _write(tmp_path, snap)
    assert cli.main(["plan", str(snap_file), "-o", "json", "--deterministic",
                     "--out", str(tmp_path / "plan.json")]) == 0
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["evictions"] and load_plan(plan).evictions[0].grace_s == \
        plan["evictions"][0]["grace_s"]
    cases = [
        (("evictions", 0, "grace_s"), float("nan"),
         "plan.evictions[0].grace_s: Input should be a finite number"),
        (("evictions", 0, "flush_s"), float("inf"),
         "plan.evictions[0].flush_s: Input should be a finite number"),
        (("evictions", 0, "grace_s"), -5,
         "plan.evictions[0].grace_s: Input should be greater than or equal to 0"),
        (("evictions", 0, "grace_s"), 1e308,
         "plan.evictions[0].grace_s: Input should be less than or equal to 1000000000"),
        (("placements", 0, "start_after_s"), -1,
         "plan.placements[0].start_after_s: Input should be greater than or equal to 0"),
        (("evictions", 0, "cost_gpu_s"), -1.5,
         "plan.evictions[0].cost_gpu_s: Input should be greater than or equal to 0"),
    ]
    for path, value, said in cases:
        with pytest.raises(InputError) as exc:
            load_plan(_changed(plan, path, value))
        assert said in exc.value.errors, (path, exc.value.errors)
    doc = copy.deepcopy(plan)
    doc["evictions"][0]["grace_s"] = float("nan")
    (tmp_path / "bad.json").write_text(json.dumps(doc))  # (json writes NaN)
    assert cli.main(["verify", str(snap_file), str(tmp_path / "bad.json")]) == 2
    assert "grace_s: Input should be a finite number" in capsys.readouterr().err


def test_a_number_of_thousands_of_digits_is_bad_input(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Python refuses to read an integer of more than 4,300 digits: that is malformed
    # JSON for every command (exit 2), not an internal error
    text = EXAMPLE.read_text().replace('"priority": 50', '"priority": ' + "9" * 5000, 1)
    assert "9" * 5000 in text
    path = tmp_path / "big.json"
    path.write_text(text)
    for command in ("validate", "plan", "show"):
        assert cli.main([command, str(path)]) == 2
        assert ("malformed JSON: a number has more than 4,300 digits"
                in capsys.readouterr().err)


def test_a_yaml_value_python_cannot_read_is_bad_input_at_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # PyYAML let the ValueError of int() (5,000 digits) and of a date (month 13)
    # through: internal errors. Now the message of a JSON number of that size, with
    # the YAML's line
    head = "version: 1\nnow: 2026-11-29T08:00:00Z\n"
    for body, said in [
            ("nodes: [{id: n1, gpus: " + "9" * 5000 + "}]\n",
             ("malformed YAML: a number has more than 4,300 digits (no value of the contract "
              "needs that many) in \"<unicode string>\", line 3, column 24")),
            (("nodes: [{id: n1, gpus: 8}]\njobs:\n  - {id: a, tier: 1, state: pending, "
              "gpus_per_node: 1, submitted_at: 2026-13-45}\n"),
             ("malformed YAML: cannot read '2026-13-45' (month must be in 1..12) in "
              "\"<unicode string>\", line 5, column 70"))]:
        path = tmp_path / "s.yaml"
        path.write_text(head + body)
        status, out = _validate(path, capsys)
        assert status == 2, out
        assert said in out


def test_a_pool_may_name_a_tier_the_policy_does_not_define() -> None:
    # (the contract does not make it bad input: no job can be of that tier, so the pool
    # admits nothing by it)
    from models import load_snapshot

    snap = json.loads(EXAMPLE.read_text())
    snap["policy"] = {"pools": {"spot": [2, 9]}}
    assert load_snapshot(snap).policy.pools["spot"] == [2, 9]


def test_a_yaml_key_given_twice_is_bad_input_at_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # PyYAML kept the last of two keys in silence: a policy's second 'tiers:' replaced
    # the first (JSON documents are machine-written: not checked, json.loads' way)
    path = tmp_path / "s.yaml"
    path.write_text("version: 1\nnow: 2026-11-29T08:00:00Z\nnodes: [{id: n1, gpus: 8}]\n"
                    "jobs: []\npolicy:\n  thrash: null\n  tiers: {1: {}}\n"
                    "  tiers: {3: {}}\n")
    status, out = _validate(path, capsys)
    assert status == 2, out
    assert ("malformed YAML: the key 'tiers' is given twice in one mapping (first at line 7) "
            "in \"<unicode string>\", line 8, column 3") in out
    path.write_text("version: 1\nnow: 2026-11-29T08:00:00Z\nnodes: [{id: n1, gpus: 8, "
                    "gpus: 4}]\njobs: []\n")
    status, out = _validate(path, capsys)
    assert status == 2 and "the key 'gpus' is given twice in one mapping (first at line 3)" \
        in out
    # a merge key's values may be given again: that is what merging is for
    path.write_text("x: &n {id: n1, gpus: 8}\nversion: 1\nnow: 2026-11-29T08:00:00Z\n"
                    "nodes: [{<<: *n, gpus: 4}]\njobs: []\n")
    status, out = _validate(path, capsys)
    assert "given twice" not in out
    # ... also where the anchored mapping is written below the one that merges it
    # (PyYAML merges into it in place before it is built)
    from models.load import parse_document

    doc = parse_document("_base: &base {preemptible: true, min_runtime_s: 1800}\n"
                         "_t:\n  t2: &t2\n    <<: *base\n    min_runtime_s: 3600\n"
                         "tiers:\n  '2':\n    <<: *t2\n    can_preempt: [3]\n", "p",
                         yaml_first=True)
    assert doc["tiers"] == {"2": {"preemptible": True, "min_runtime_s": 3600,
                                  "can_preempt": [3]}}


def test_yaml_tier_keys_must_be_tier_numbers(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    # int() made 1.9 and true tier 1: both merged into it, one silently winning
    path = tmp_path / "s.yaml"
    path.write_text("version: 1\nnow: 2026-11-29T08:00:00Z\nnodes: [{id: n1, gpus: 8}]\n"
                    "jobs: []\npolicy: {tiers: {1.9: {min_runtime_s: 99}, true: {}, 4: {}}}\n")
    status, out = _validate(path, capsys)
    assert status == 2
    assert ("policy.tiers: keys 1.9, True are not tier numbers (a tier key is an integer, "
            'written as a string of decimal digits such as "3")') in out
    path.write_text(path.read_text().replace("1.9: {min_runtime_s: 99}, true: {}, ", ""))
    assert _validate(path, capsys)[0] == 0  # (a YAML integer key is one)


def test_an_output_folder_where_nothing_can_be_made_is_bad_input_before_the_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # As root, os.access says /proc is writable: compare and tune ran, then failed to
    # make their folder (an internal error after minutes of work)
    if not Path("/proc/self").is_dir():
        pytest.skip("no /proc")
    space = tmp_path / "space.yaml"
    space.write_text("params: {thrash.min_evictions: [1, 2]}\n")
    run = ["--cluster", str(SIM_DATA / "cluster-1node.json"), "--trace",
           str(SIM_DATA / "ping-pong.jsonl"), "--days", "0.05", "--jobs", "1"]
    for argv in (["compare", *run, "--planners", "greedy", "--out", "/proc/pp-report/x"],
                 ["tune", *run, "--planner", "greedy", "--space", str(space), "--out",
                  "/proc/pp-report/x"],
                 ["plan", str(EXAMPLE), "--out", "/proc/pp-plan.json"]):
        assert cli.main(argv) == 2, argv
        err = " ".join(capsys.readouterr().err.split())
        assert ("--out: cannot create folder /proc/pp-report" in err
                or "--out: cannot write in folder /proc:" in err
                or "--out: folder /proc is not writable" in err), err
        assert "done" not in err


def test_ids_are_shown_as_they_are_not_as_markup(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # An id, node or GPU type holding rich markup ('[/]', '[bold]') is text in every
    # table: it was an internal error (a closing tag with nothing to close)
    doc = json.loads(EXAMPLE.read_text())
    old = doc["jobs"][1]["id"]  # (sweep-17, the plan's victim)
    assert old == "sweep-17"
    text = json.dumps(doc).replace(json.dumps(old), json.dumps("[/]"))
    path = tmp_path / "markup.json"
    path.write_text(text)
    assert cli.main(["validate", str(path)]) == 0
    capsys.readouterr()
    for command in ("plan", "show"):
        assert cli.main([command, str(path), "--deterministic"] if command == "plan"
                        else [command, str(path)]) == 0
        assert "[/]" in capsys.readouterr().out


def test_compare_without_a_policy_in_policies_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cmp"
    assert cli.main(["compare", "--cluster", str(SIM_DATA / "cluster-1node.json"), "--trace",
                     str(SIM_DATA / "ping-pong.jsonl"), "--policies", ",", "--out",
                     str(out)]) == 2
    assert "--policies: no policy file in ','" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(("args", "said"), [
    (["whatif", str(EXAMPLE), "--set", "nodes.\u00b2=1"], "no item '\u00b2' in nodes"),
    (["generate", "--nodes", "4", "--nvlink-mix", "nvswitch=nan"],
     "share must be a finite number >= 0"),
    (["generate", "--nodes", "4", "--now", "0001-01-01T00:00:00Z"],
     "is outside 1971-01-01 to 8999-01-01"),
    (["show", str(EXAMPLE), "--width", "1"], "--width: at least 40 columns, got 1"),
    (["show", str(EXAMPLE), "--max-nodes", "-1"], "--max-nodes: must be 0 or more, got -1"),
    (["show", str(EXAMPLE), "--max-jobs", "-1"], "--max-jobs: must be 0 or more, got -1"),
    (["whatif", str(EXAMPLE), "--set", "policy.tiers.3.min_runtime_s=" + "[" * 3000],
     "is nested too deep"),
    (["whatif", str(EXAMPLE), "--add-job", "[" * 3000], "--add-job: malformed JSON"),
    (["simulate", "--cluster", str(SIM_DATA / "cluster-1node.json"), "--trace",
      str(SIM_DATA / "ping-pong.jsonl"), "--days", "1e300", "--planner", "greedy"],
     "--days: at most 3,650 (ten years of a trace), got 1e+300"),
])
def test_options_beyond_what_the_commands_take_are_bad_input(
        args: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    # (each was an internal error: a superscript digit read as an index, a NaN share,
    # a year before 1970, a table of one column; argparse refuses an option's value by
    # exiting with status 2 itself)
    try:
        status = cli.main(args)
    except SystemExit as exc:
        status = exc.code
    assert status == 2
    assert said in capsys.readouterr().err


def test_typos_in_fields_and_options_get_a_suggestion(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads(EXAMPLE.read_text())
    doc["jobs"][0]["gpus_per_nod"] = 8
    path = tmp_path / "typo.json"
    path.write_text(json.dumps(doc))
    assert cli.main(["validate", str(path), "-o", "json"]) == 2
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["valid"] is False and verdict["errors"] == [
        ("jobs[0].gpus_per_nod: unknown field (not in the contract; comments start with '_'); "
        "did you mean 'gpus_per_node'?")]
    with pytest.raises(SystemExit) as exc:
        cli.main(["plan", str(EXAMPLE), "--polcy", "p.json"])
    assert exc.value.code == 2
    assert "(did you mean: --polcy -> --policy?)" in capsys.readouterr().err
    assert cli.main(["validate", str(EXAMPLE), "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "valid": True, "kind": "snapshot", "nodes": 2, "gpus": 16, "running": 2, "pending": 1}


def test_ignored_or_oversized_settings_are_warned_about(capsys: pytest.CaptureFixture[str]) -> None:
    # --workers beside --deterministic is ignored (one worker); more workers than
    # cores is allowed but said; a number CP-SAT refuses (it answered MODEL_INVALID,
    # so the plan fell back to the greedy one) is capped; generate refuses sizes that
    # would run for hours
    import os

    assert cli.main(["plan", str(EXAMPLE), "--deterministic", "--workers", "4", "-o", "json"]) == 0
    out, err = capsys.readouterr()
    assert "--workers 4 is ignored with --deterministic" in err
    assert json.loads(out)["status"] == "optimal"
    assert cli.main(["plan", str(EXAMPLE), "--workers", "100000", "-o", "json"]) == 0
    out, err = capsys.readouterr()
    assert f"more than this machine's {os.cpu_count()} core(s)" in err
    assert json.loads(out)["solver"]["status"] == "OPTIMAL"
    assert cli.main(["generate", "--nodes", "100000000"]) == 2
    assert "--nodes: at most 200,000" in capsys.readouterr().err
