"""Slurm adapter without a Slurm: JSON parsing on recorded fixtures of both Slurm
shapes (tests/fixtures/slurm/README.md says which are real), the command
builders, and apply/run against a fake ``runner``."""

from __future__ import annotations

import copy
import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from models import InputError
from planner.slurm import apply as sapply
from planner.slurm.apply import UnsafeId, apply_plan
from planner.slurm.config import ConfigError, config_from_dict, load_config
from planner.slurm.hostlist import HostlistError, expand
from planner.slurm.parse import (
    build_snapshot,
    node_state,
    normalize_signal,
    num,
    parse_comment,
    parse_gpu_request,
    parse_gres,
    parse_time,
    read_nodes,
    sidecar_reader,
    states_of,
)
from planner.slurm.state import AdapterState

FIX = Path(__file__).parent / "fixtures" / "slurm"
NOW_2205 = 1795944887
NOW_2205_TYPED = 1795944919
NOW_2311 = 1795945000


def load(rel: str) -> dict[str, Any]:
    return json.loads((FIX / rel).read_text())


def cfg_of(**kw: Any):
    return config_from_dict(kw)


CFG_2205: dict[str, Any] = {
    "tiers": {"partitions": {"tier1": 1, "tier2": 2, "tier3": 3}},
    "storage": [{"id": "nfs", "write_gb_per_s": 10}],
    "policy": {"grace": {"min_s": 5, "max_s": 60}, "tiers": {"3": {"min_runtime_s": 0}}},
}
CFG_2311: dict[str, Any] = {
    "tiers": {"qos": {"high": 1, "normal": 2, "low": 3}, "partitions": {"batch": 3, "train": 2}},
    "storage": [{"id": "lustre", "write_gb_per_s": 40}],
    "nodes": [{"match": "dgx*", "block": "rack-1"},
              {"match": "dgx[05-06]", "block": "rack-2", "local_write_gb_per_s": 4}],
}


def jobs_by_id(snap: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {j["id"]: j for j in snap["jobs"]}


# ------------------------------------------------------------------ scalars

def test_hostlist_expansion() -> None:
    assert expand("gpu[1-3,7],cpu01") == ["gpu1", "gpu2", "gpu3", "gpu7", "cpu01"]
    assert expand("dgx[01-03]") == ["dgx01", "dgx02", "dgx03"]
    assert expand("r[1-2]-n[1-2]") == ["r1-n1", "r1-n2", "r2-n1", "r2-n2"]
    assert expand("a,a,b") == ["a", "b"]
    assert expand("") == [] and expand(None) == [] and expand("(null)") == []
    for bad in ("gpu[1-", "gpu1]", "gpu[3-1]", "gpu[a-b]"):
        with pytest.raises(HostlistError):
            expand(bad)


def test_numbers_states_and_times_in_both_shapes() -> None:
    assert num(7) == 7 and num({"set": True, "infinite": False, "number": 7}) == 7
    assert num({"set": False, "infinite": False, "number": 7}) is None
    assert num({"set": True, "infinite": True, "number": 0}) is None
    assert num(None) is None and num(True) is None
    assert states_of("mixed") == ["MIXED"] and states_of(["IDLE", "DRAIN"]) == ["IDLE", "DRAIN"]
    assert states_of("down*") == ["DOWN"] and states_of("MIXED+DRAIN") == ["MIXED", "DRAIN"]
    assert parse_time(1795944887) == 1795944887
    assert parse_time({"set": True, "infinite": False, "number": 5}) == 5
    assert parse_time(0) is None and parse_time({"set": False, "number": 0}) is None
    assert parse_time("2026-11-29T09:34:47Z") == 1795944887
    assert parse_time("not a time") is None


def test_gres_strings() -> None:
    g = parse_gres("gpu:4(IDX:0-3)")
    assert [(i.type, i.count, i.indices) for i in g] == [(None, 4, (0, 1, 2, 3))]
    g = parse_gres("gpu:a100:2(IDX:0,2)")
    assert [(i.type, i.count, i.indices) for i in g] == [("a100", 2, (0, 2))]
    g = parse_gres("gpu:h100:8(S:0-1),nic:2")
    assert [(i.type, i.count, i.indices) for i in g] == [("h100", 8, None)]
    g = parse_gres("gpu:l40s:1(IDX:0),tmpsize:10737418240")
    assert [(i.type, i.count, i.indices) for i in g] == [("l40s", 1, (0,))]
    assert parse_gres("gpu:a100:0(IDX:N/A)")[0].indices is None
    assert parse_gres("gpu:a100:4,gpu:v100:4")[1].type == "v100"
    assert parse_gres("") == [] and parse_gres("(null)") == [] and parse_gres("nic:2") == []


def test_gpu_requests() -> None:
    assert parse_gpu_request("gres:gpu:8") == (8, None)  # 22.05
    assert parse_gpu_request("gres/gpu:8") == (8, None)  # 23.02+
    assert parse_gpu_request("gres/gpu:h100:4") == (4, "h100")
    assert parse_gpu_request("gres:gpu:a100:8") == (8, "a100")
    assert parse_gpu_request("cpu=1,gres/gpu=2") == (2, None)
    assert parse_gpu_request("") is None and parse_gpu_request("gres/nic:1") is None


def test_node_states() -> None:
    assert node_state(["IDLE"]) == "up" and node_state(["MIXED", "PLANNED"]) == "up"
    assert node_state(["MIXED", "DRAIN"]) == "drain" and node_state(["IDLE", "MAINTENANCE"]) == "drain"
    assert node_state(["DOWN", "NOT_RESPONDING"]) == "down"
    assert node_state(["IDLE", "NOT_RESPONDING"]) == "down"
    assert node_state(["IDLE", "DRAIN", "NOT_RESPONDING"]) == "down"
    assert node_state([]) == "down"


# ----------------------------------------------------------------- comments

def test_comment_key_value_form() -> None:
    fields, problems = parse_comment(
        "preempt: size_gb=40 signal=USR1, barrier_s=10;restore_s=600 owner=me")
    assert fields == {"size_gb": 40.0, "signal": "SIGUSR1", "barrier_s": 10.0, "restore_s": 600.0}
    assert problems == []
    fields, _ = parse_comment("signal=none topology=any same_block=yes priority=7 team=llm")
    assert fields == {"signal": None, "topology": "any", "same_block": True, "priority": 7,
                      "team": "llm"}


def test_comment_json_form() -> None:
    fields, problems = parse_comment(
        '{"preempt": {"size_gb": 12.5, "signal": "SIGTERM"}, "priority": 5, "other": 1}')
    assert fields == {"size_gb": 12.5, "signal": "SIGTERM", "priority": 5}
    assert problems == []
    fields, _ = parse_comment('{"last_at": "2026-11-29T09:00:00Z", "cleanup_s": 3}')
    assert fields["last_at"] == parse_time("2026-11-29T09:00:00Z") and fields["cleanup_s"] == 3


def test_comment_problems_are_reported_not_raised() -> None:
    fields, problems = parse_comment("size_gb=-1 signal=KILL topology=ring priority=1.5 barrier_s=x")
    assert fields == {}
    assert len(problems) == 5 and all(p.startswith("comment ") for p in problems)
    assert parse_comment("{not json")[1]
    assert parse_comment("just a note") == ({}, [])
    assert parse_comment(None) == ({}, [])


def test_signal_names() -> None:
    assert normalize_signal("TERM") == normalize_signal("SIGTERM") == normalize_signal("15") \
        == "SIGTERM"
    assert normalize_signal("usr1") == "SIGUSR1"
    assert normalize_signal("none") is None and normalize_signal(None) is None
    for bad in ("KILL", "SIGSTOP", "FOO", "999", "TERM;reboot"):
        with pytest.raises(ValueError):
            normalize_signal(bad)


# ------------------------------------------------- Slurm 22.05 (real output)

def test_2205_snapshot_from_real_output() -> None:
    res = build_snapshot(load("22.05/squeue.json"), load("22.05/sinfo.json"), cfg_of(**CFG_2205),
                         now=NOW_2205, read_sidecar=lambda j: ({}, []))
    snap = res.snapshot
    assert res.slurm_version == "22.05.8"
    assert snap["now"] == "2026-11-29T09:34:47Z"
    assert [(n["id"], n["gpus"], n["state"]) for n in snap["nodes"]] == [
        ("gpu1", 8, "up"), ("gpu2", 8, "up"), ("gpu3", 8, "up"), ("gpu4", 8, "drain")]
    jobs = jobs_by_id(snap)
    # running GPU jobs with their GPU indices from gres_detail; 28 (no GPUs) is left out
    assert {k for k, j in jobs.items() if j["state"] == "running"} == {"19", "20", "25", "26", "27"}
    assert jobs["19"]["tier"] == 2 and jobs["20"]["tier"] == 3 and jobs["27"]["tier"] == 1
    assert jobs["20"]["placement"] == [{"node": "gpu1", "gpus": [4, 5, 6, 7]}]
    assert jobs["27"]["nodes"] == 2 and jobs["27"]["gpus_per_node"] == 8
    assert jobs["27"]["placement"] == [{"node": "gpu2", "gpus": list(range(8))},
                                       {"node": "gpu3", "gpus": list(range(8))}]
    assert jobs["20"]["started_at"] == "2026-11-29T09:34:23Z"
    assert jobs["25"]["checkpoint"] == {"size_gb": 50.0, "signal": "SIGTERM", "barrier_s": 0,
                                        "cleanup_s": 0, "restore_s": 600.0}
    # pending: only 29 (JSON comment); 30 held, 31 dependency, 21-24 in BeginTime
    # (and pinned to user-required nodes), 18 cancelled
    assert {k for k, j in jobs.items() if j["state"] == "pending"} == {"29"}
    p = jobs["29"]
    assert (p["gpus_per_node"], p["nodes"], p["tier"], p["priority"], p["topology"]) == \
        (8, 1, 3, 5, "any")
    assert p["checkpoint"]["signal"] == "SIGUSR1" and p["checkpoint"]["size_gb"] == 12.5
    assert "placement" not in p
    assert any("job 21: not eligible" in n for n in res.notes)
    assert any("job 31: pending for Dependency" in n for n in res.notes)


def test_2205_snapshot_validates_and_plans() -> None:
    from models import load_snapshot
    from planner import plan

    res = build_snapshot(load("22.05/squeue.json"), load("22.05/sinfo.json"), cfg_of(**CFG_2205),
                         now=NOW_2205, read_sidecar=lambda j: ({}, []))
    snap = load_snapshot(res.snapshot)
    assert len(snap.jobs) == 6
    p = plan(snap, deterministic=True, time_limit_s=2.0)
    assert p.status in ("optimal", "feasible", "fallback")
    assert {d.job for d in p.deferred} | {pl.job for pl in p.placements} == {"29"}


def test_2205_typed_gpus_uneven_jobs_and_requests() -> None:
    cfg = cfg_of(tiers={"default": 3}, gpu_types={"a100": "A100"})
    res = build_snapshot(load("22.05-typed/squeue.json"), load("22.05-typed/sinfo.json"), cfg,
                         now=NOW_2205_TYPED, read_sidecar=lambda j: ({}, []))
    snap = res.snapshot
    assert [(n["id"], n["gpu_type"]) for n in snap["nodes"]] == [("gpu1", "A100"), ("gpu2", "A100")]
    jobs = jobs_by_id(snap)
    # job 2 got 5 GPUs on gpu1 and 2 on gpu2: one piece per node
    assert jobs["2@gpu1"]["placement"] == [{"node": "gpu1", "gpus": [3, 4, 5, 6, 7]}]
    assert jobs["2@gpu2"]["placement"] == [{"node": "gpu2", "gpus": [0, 1]}]
    assert jobs["2@gpu1"]["checkpoint"]["signal"] is None  # comment says signal=none
    assert jobs["2@gpu1"]["checkpoint"]["restore_s"] == 60
    assert jobs["5"]["placement"] == [{"node": "gpu2", "gpus": [3, 4, 5, 6]}]
    assert (jobs["4"]["gpus_per_node"], jobs["4"]["nodes"], jobs["4"]["gpu_type"]) == (8, 2, "A100")
    assert "6" not in jobs and any("job 6: GPUs per task" in n for n in res.notes)
    assert "7" not in jobs and any("job 7: 3 GPUs per job" in n for n in res.notes)
    assert "9" not in jobs and any("job 9: has node constraints" in n for n in res.notes)
    from models import load_snapshot
    load_snapshot(snap)


# ------------------------------------------ Slurm 23.11+ (from documentation)

@pytest.mark.parametrize("nodes_file", ["scontrol_nodes.json", "sinfo.json"])
def test_2311_snapshot(nodes_file: str) -> None:
    res = build_snapshot(load("23.11/squeue.json"), load(f"23.11/{nodes_file}"),
                         cfg_of(**CFG_2311), now=NOW_2311, read_sidecar=lambda j: ({}, []))
    snap = res.snapshot
    assert res.slurm_version == "23.11.4"
    nodes = {n["id"]: n for n in snap["nodes"]}
    assert list(nodes) == ["dgx01", "dgx02", "dgx03", "dgx04", "dgx05", "dgx06"]  # no cpu01
    assert {k: n["state"] for k, n in nodes.items()} == {
        "dgx01": "up", "dgx02": "up", "dgx03": "up", "dgx04": "drain", "dgx05": "down",
        "dgx06": "up"}
    assert all(n["gpus"] == 8 and n["gpu_type"] == "h100" for n in nodes.values())
    assert nodes["dgx01"]["block"] == "rack-1" and nodes["dgx06"]["block"] == "rack-2"
    assert nodes["dgx06"]["local_write_gb_per_s"] == 4 and "local_write_gb_per_s" not in nodes["dgx01"]
    jobs = jobs_by_id(snap)
    assert sorted(jobs) == ["101", "102", "103", "104", "105", "111"]
    j = jobs["101"]
    assert (j["tier"], j["nodes"], j["gpus_per_node"], j["team"]) == (2, 2, 8, "llm")  # QOS normal
    assert j["checkpoint"] == {"size_gb": 140.0, "signal": "SIGUSR1", "barrier_s": 20.0,
                               "cleanup_s": 5.0, "restore_s": 900.0}
    assert j["started_at"] == "2026-11-29T07:36:40Z"
    assert jobs["102"]["checkpoint"]["last_at"] == "2026-11-29T09:20:00Z"
    assert jobs["102"]["priority"] == 3 and jobs["102"]["team"] == "vision"
    assert jobs["103"]["placement"] == [{"node": "dgx03", "gpus": [4, 6]}]
    assert jobs["103"]["team"] == "carol"  # no account: the user
    assert jobs["104"]["placement"] == [{"node": "dgx03", "gpus": [5, 7]}]
    assert jobs["104"]["preemptions"] == 1 and jobs["104"]["checkpoint"]["signal"] is None
    p = jobs["105"]
    assert (p["tier"], p["nodes"], p["gpus_per_node"], p["gpu_type"], p["same_block"]) == \
        (1, 2, 8, "h100", True)
    assert p["checkpoint"]["size_gb"] == 300 and p["submitted_at"] == "2026-11-29T09:34:40Z"
    assert (jobs["111"]["tier"], jobs["111"]["gpus_per_node"]) == (2, 4)  # batch,train: best tier
    assert any("job 109: not eligible" in n for n in res.notes)
    from models import load_snapshot
    load_snapshot(snap)


def test_2311_scontrol_and_sinfo_agree() -> None:
    a, b = load("23.11/scontrol_nodes.json"), load("23.11/sinfo.json")
    na, nb = read_nodes(a), read_nodes(b)
    assert sorted(na) == sorted(nb)
    for name in na:
        assert na[name].partitions == nb[name].partitions
        assert node_state(na[name].flags) == node_state(nb[name].flags)


def test_2311_cooldown_job_enters_with_state_record() -> None:
    state = AdapterState(preempted={"109": {"at": "2026-11-29T09:20:00Z", "count": 2}})
    res = build_snapshot(load("23.11/squeue.json"), load("23.11/scontrol_nodes.json"),
                         cfg_of(**CFG_2311), now=NOW_2311, state=state,
                         read_sidecar=lambda j: ({}, []))
    j = jobs_by_id(res.snapshot)["109"]
    assert (j["state"], j["preemptions"], j["last_preempted_at"]) == \
        ("pending", 2, "2026-11-29T09:20:00Z")


def test_unmapped_running_jobs_become_unmanaged_tier() -> None:
    cfg = cfg_of(tiers={"qos": {"high": 1}, "unmanaged": 9})
    res = build_snapshot(load("23.11/squeue.json"), load("23.11/scontrol_nodes.json"), cfg,
                         now=NOW_2311, read_sidecar=lambda j: ({}, []))
    jobs = jobs_by_id(res.snapshot)
    assert jobs["101"]["tier"] == 9 and jobs["102"]["tier"] == 9  # still hold their GPUs
    assert "111" not in jobs  # an unmapped pending job is Slurm's business
    assert res.snapshot["policy"]["tiers"]["9"] == {"preemptible": False, "min_runtime_s": 0,
                                                    "can_preempt": []}
    from models import load_snapshot
    snap = load_snapshot(res.snapshot)
    assert not snap.policy.tiers[9].preemptible


def test_2411_nested_job_resources() -> None:
    res = build_snapshot(load("24.11/squeue.json"), load("23.11/scontrol_nodes.json"),
                         cfg_of(**CFG_2311), now=NOW_2311, read_sidecar=lambda j: ({}, []))
    jobs = jobs_by_id(res.snapshot)
    assert jobs["201"]["placement"] == [{"node": "dgx01", "gpus": [4, 5, 6, 7]},
                                        {"node": "dgx02", "gpus": [0, 1, 2, 3]}]
    assert jobs["202"]["gpus_per_node"] == 4 and jobs["202"]["tier"] == 1
    assert res.slurm_version == "24.11.1"


# -------------------------------------------------------------- sidecars

def test_sidecar_overrides_comment(tmp_path: Path) -> None:
    (tmp_path / "101.json").write_text(json.dumps({
        "size_gb": 150.5, "last_at": "2026-11-29T09:30:00Z", "signal": "SIGUSR1",
        "barrier_s": 12, "cleanup_s": 5, "restore_s": 800, "path": "/ckpt/x", "reason": "signal"}))
    (tmp_path / "102.json").write_text(json.dumps({"size_gb": 21, "last_at": "2026-11-29T05:00:00Z"}))
    (tmp_path / "103.json").write_text("{broken")
    cfg = cfg_of(**CFG_2311, sidecar_dir=str(tmp_path))
    res = build_snapshot(load("23.11/squeue.json"), load("23.11/scontrol_nodes.json"), cfg,
                         now=NOW_2311)
    jobs = jobs_by_id(res.snapshot)
    assert jobs["101"]["checkpoint"] == {"size_gb": 150.5, "signal": "SIGUSR1", "barrier_s": 12,
                                         "cleanup_s": 5, "restore_s": 800,
                                         "last_at": "2026-11-29T09:30:00Z"}
    # a checkpoint older than the job's start (a previous run) is not "since start"
    assert jobs["102"]["checkpoint"]["size_gb"] == 21
    assert "last_at" not in jobs["102"]["checkpoint"]
    assert any("103.json: unreadable" in n for n in res.notes)
    assert jobs["103"]["checkpoint"]["signal"] == "SIGTERM"


def test_sidecar_reader_without_directory() -> None:
    assert sidecar_reader(None)("123") == ({}, [])


# ------------------------------------------------------------------ config

def test_config_files(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text("backoff: {cooldown_s: 600}\n")
    (tmp_path / "c.yaml").write_text(
        "tiers: {partitions: {gpu: 2}}\npolicy_file: policy.yaml\nsidecar_dir: side\n"
        "policy: {grace: {min_s: 5}}\n")
    cfg = load_config(tmp_path / "c.yaml")
    assert cfg.sidecar_dir == tmp_path / "side"
    assert cfg.policy_dict() == {"backoff": {"cooldown_s": 600}, "grace": {"min_s": 5}}
    (tmp_path / "c.json").write_text(json.dumps({"tiers": {"partitions": {"gpu": 1}}}))
    assert load_config(tmp_path / "c.json").tiers.partitions == {"gpu": 1}
    (tmp_path / "bad.yaml").write_text("tiers: {partition: {gpu: 1}}\n")
    with pytest.raises(ConfigError, match="tiers.partition"):
        load_config(tmp_path / "bad.yaml")
    (tmp_path / "bad2.yaml").write_text("commands: {scancel: 'scancel --full'}\n")
    with pytest.raises(ConfigError, match="commands.scancel"):
        load_config(tmp_path / "bad2.yaml")
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    assert load_config(None).tiers.partitions == {} or os.environ.get("PREEMPT_PLANNER_SLURM_CONFIG")


def test_node_rules_match_by_hostlist_glob_and_partition() -> None:
    cfg = cfg_of(nodes=[
        {"match": "gpu[1-2]", "pool": "reserved", "nvlink": [[0, 1, 2, 3], [4, 5, 6, 7]]},
        {"match": "gpu*", "partitions": ["tier1"], "block": "b1"},
        {"match": "gpu4", "state": "drain"},
        {"match": "gpu4", "state": "up"},  # never better than what Slurm says
    ])
    res = build_snapshot({"jobs": []}, load("22.05/sinfo.json"), cfg, now=NOW_2205)
    nodes = {n["id"]: n for n in res.snapshot["nodes"]}
    assert nodes["gpu1"]["pool"] == "reserved" and nodes["gpu3"].get("pool") is None
    assert nodes["gpu2"]["nvlink"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert all(n["block"] == "b1" for n in nodes.values())
    assert nodes["gpu4"]["state"] == "drain"


# --------------------------------------------------------- command builders

def test_command_builders_use_argument_lists() -> None:
    cfg = cfg_of()
    assert sapply.signal_cmd(cfg, "12", "SIGUSR1") == ["scancel", "--signal=USR1", "--batch", "12"]
    assert sapply.signal_cmd(cfg_of(signal_target="full"), "12", "TERM") == \
        ["scancel", "--signal=TERM", "--full", "12"]
    assert sapply.requeuehold_cmd(cfg, "12") == ["scontrol", "requeuehold", "12"]
    assert sapply.start_time_cmd(cfg, "12", 605) == \
        ["scontrol", "update", "JobId=12", "StartTime=now+605"]
    assert sapply.release_cmd(cfg, "12") == ["scontrol", "release", "12"]
    assert sapply.pin_cmd(cfg, "7", ["gpu2", "gpu3"]) == \
        ["scontrol", "update", "JobId=7", "ReqNodeList=gpu2,gpu3"]
    assert sapply.slurm_job_id("1234@gpu3") == "1234"


@pytest.mark.parametrize("bad", ["12;reboot", "-1", "0", "abc", "12 13", "", "1_2", "$(id)",
                                 "1234567890123"])
def test_bad_job_ids_build_no_command(bad: str) -> None:
    cfg = cfg_of()
    with pytest.raises(UnsafeId):
        sapply.slurm_job_id(bad)
    with pytest.raises(UnsafeId):
        sapply.requeuehold_cmd(cfg, bad)


@pytest.mark.parametrize("bad", ["gpu1 gpu2", "-gpu", "gpu;1", "gpu[1-2]", "", "a/b"])
def test_bad_node_names_build_no_command(bad: str) -> None:
    with pytest.raises(UnsafeId):
        sapply.pin_cmd(cfg_of(), "7", ["gpu1", bad])


def test_bad_signal_or_delay_builds_no_command() -> None:
    with pytest.raises(UnsafeId):
        sapply.start_time_cmd(cfg_of(), "7", 0)
    with pytest.raises(ValueError):
        sapply.signal_cmd(cfg_of(), "7", "KILL")


# ----------------------------------------------------- apply, fake Slurm

class FakeSlurm:
    """Records commands; victims stop `stop_after` seconds after their signal."""

    def __init__(self, running: dict[str, float], fail: frozenset[str] | set[str] = frozenset(),
                 squeue: dict[str, Any] | None = None, nodes: dict[str, Any] | None = None):
        self.t = 1000.0
        self.stop_after = dict(running)  # job -> seconds to stop after the signal (inf: never)
        self.signalled: dict[str, float] = {}
        self.state = {j: "RUNNING" for j in running}
        self.calls: list[tuple[float, list[str]]] = []
        self.fail = fail
        self.squeue, self.nodes = squeue, nodes

    def clock(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s

    def _update(self) -> None:
        for j, at in self.signalled.items():
            if self.state.get(j) == "RUNNING" and self.t >= at + self.stop_after[j]:
                self.state[j] = "COMPLETED"

    def __call__(self, argv: list[str], timeout: float) -> tuple[int, str, str]:
        self.calls.append((self.t, argv))
        self._update()
        text = " ".join(argv)
        if any(f in text for f in self.fail):
            return 1, "", "slurm_update error: Access/permission denied"
        if argv[0] == "squeue" and "--json" in argv:
            return 0, json.dumps(self.squeue), ""
        if argv[0] == "sinfo":
            return 0, json.dumps(self.nodes), ""
        if argv[0] == "squeue" and any(a.startswith("--jobs=") for a in argv):
            ids = next(a for a in argv if a.startswith("--jobs="))[7:].split(",")
            return 0, "".join(f"{j}|{self.state[j]}\n" for j in ids if j in self.state), ""
        if argv[0] == "squeue":
            return 0, "".join(f"{j}\n" for j in self.state), ""
        if argv[0] == "scancel":
            self.signalled[argv[-1]] = self.t
        if argv[:2] == ["scontrol", "requeuehold"]:
            self.state[argv[2]] = "PENDING"
        return 0, "", ""

    def commands(self, verb: str) -> list[list[str]]:
        return [a for _, a in self.calls if verb in " ".join(a)]


PLAN: dict[str, Any] = {
    "version": 1, "now": "1970-01-01T00:16:40Z", "status": "optimal",
    "evictions": [
        {"job": "21", "tier": 3, "preemptors": ["27"], "signal": "SIGTERM", "grace_s": 5,
         "requeue_hold_until": "1970-01-01T00:26:45Z"},
        {"job": "22", "tier": 3, "preemptors": ["27"], "signal": "SIGUSR1", "grace_s": 8,
         "requeue_hold_until": "1970-01-01T00:26:48Z"},
        {"job": "23", "tier": 3, "preemptors": ["27"], "signal": None, "grace_s": 5,
         "requeue_hold_until": "1970-01-01T00:26:45Z"},
    ],
    "placements": [{"job": "27", "placement": [{"node": "gpu2", "gpus": [0, 1]},
                                               {"node": "gpu3", "gpus": [0, 1]}],
                    "start_after_s": 8}],
    "deferred": [],
}


def test_apply_pins_first_then_signals_all_victims_at_once() -> None:
    fake = FakeSlurm({"21": 2.0, "22": float("inf"), "23": float("inf")})
    state = AdapterState()
    rep = apply_plan(PLAN, cfg_of(poll_interval_s=0.5), state=state, runner=fake,
                     clock=fake.clock, sleep=fake.sleep)
    assert rep.ok, rep.to_dict()
    verbs = [" ".join(a[:2]) for _, a in fake.calls if a[0] != "squeue"]
    assert verbs[0] == "scontrol update" and "ReqNodeList=gpu2,gpu3" in fake.calls[0][1][-1]
    signals = [i for i, (_, a) in enumerate(fake.calls) if a[0] == "scancel"]
    first_requeue = min(i for i, (_, a) in enumerate(fake.calls) if "requeuehold" in a)
    # 23 has no signal: requeued at once, but only after both signals went out
    assert len(signals) == 2 and max(signals) < first_requeue
    assert fake.commands("scancel") == [["scancel", "--signal=TERM", "--batch", "21"],
                                        ["scancel", "--signal=USR1", "--batch", "22"]]
    times = {a[2]: t for t, a in fake.calls if "requeuehold" in a}
    assert times["23"] == 1000.0  # no checkpoint signal
    assert 1002.0 <= times["21"] < 1003.0  # stopped after 2 s: finished early
    assert times["22"] == pytest.approx(1008.0, abs=0.6)  # never stopped: its grace
    assert fake.t < 1010  # parallel: about the largest grace, not the sum
    starts = {a[2]: a[3] for a in fake.commands("StartTime=")}
    assert starts["JobId=21"] == "StartTime=now+603"  # 1605 - 1002(.x) rounded up
    assert fake.commands("scontrol release") and len(fake.commands("scontrol release")) == 3
    out = {v.job: v for v in rep.victims}
    assert out["21"].stopped_in_grace is True and out["22"].stopped_in_grace is False
    assert state.pinned == {"27": ["gpu2", "gpu3"]}
    assert set(state.preempted) == {"21", "22", "23"}


def test_apply_failure_is_reported_and_others_go_on() -> None:
    fake = FakeSlurm({"21": 0.0, "22": 0.0, "23": 0.0}, fail={"JobId=21 StartTime"})
    rep = apply_plan(PLAN, cfg_of(poll_interval_s=0.5), runner=fake, clock=fake.clock,
                     sleep=fake.sleep)
    assert not rep.ok and [f.argv[2] for f in rep.failures] == ["JobId=21"]
    released = [a[2] for a in fake.commands("scontrol release")]
    assert released == ["23", "22"] or sorted(released) == ["22", "23"]  # 21 stays held
    out = {v.job: v for v in rep.victims}
    assert out["21"].requeued and not out["21"].released and "left held" in out["21"].note


def test_apply_leaves_alone_victims_that_are_no_longer_running() -> None:
    fake = FakeSlurm({"21": 0.0, "22": 0.0, "23": 0.0})
    fake.state["22"] = "COMPLETED"
    rep = apply_plan(PLAN, cfg_of(), runner=fake, clock=fake.clock, sleep=fake.sleep)
    assert not [a for a in fake.commands("22") if a[0] != "squeue"]
    assert "left alone" in {v.job: v for v in rep.victims}["22"].note


def test_apply_rejects_unsafe_ids_but_does_the_rest() -> None:
    plan = json.loads(json.dumps(PLAN))
    plan["evictions"][0]["job"] = "21; scancel -u root"
    plan["placements"].append({"job": "28", "placement": [{"node": "gpu2 --uid=0", "gpus": [2]}]})
    fake = FakeSlurm({"22": 0.0, "23": 0.0})
    rep = apply_plan(plan, cfg_of(), runner=fake, clock=fake.clock, sleep=fake.sleep)
    assert len(rep.problems) == 2
    assert all("21" not in " ".join(a) for _, a in fake.calls)
    assert [a[2] for a in fake.commands("ReqNodeList")] == ["JobId=27"]
    assert len(fake.commands("requeuehold")) == 2


def test_apply_pieces_of_one_job_are_one_victim() -> None:
    plan = {"evictions": [
        {"job": "2@gpu1", "signal": "SIGTERM", "grace_s": 5, "requeue_hold_until": 1700},
        {"job": "2@gpu2", "signal": "SIGTERM", "grace_s": 7, "requeue_hold_until": 1702}],
        "placements": []}
    fake = FakeSlurm({"2": float("inf")})
    rep = apply_plan(plan, cfg_of(), runner=fake, clock=fake.clock, sleep=fake.sleep)
    assert len(fake.commands("scancel")) == 1 and len(rep.victims) == 1
    assert rep.victims[0].grace_s == 7 and fake.commands("StartTime=")[0][3] == "StartTime=now+695"


def test_dry_run_runs_nothing() -> None:
    fake = FakeSlurm({"21": 0.0, "22": 0.0, "23": 0.0})
    lines: list[str] = []
    state = AdapterState()
    rep = apply_plan(PLAN, cfg_of(), dry_run=True, runner=fake, clock=fake.clock,
                     sleep=fake.sleep, echo=lines.append, state=state)
    assert fake.calls == [] and rep.ok and state.preempted == {} and state.pinned == {}
    cmds = [ln for ln in lines if not ln.startswith("#")]
    assert cmds[0] == "scontrol update JobId=27 ReqNodeList=gpu2,gpu3"
    assert cmds[1:3] == ["scancel --signal=TERM --batch 21", "scancel --signal=USR1 --batch 22"]
    assert "scontrol requeuehold 23" in cmds and "scontrol release 22" in cmds
    assert all(c.rc is None for c in rep.commands)


# ------------------------------------------------------------- run loop

def _fake_cluster() -> FakeSlurm:
    return FakeSlurm({}, squeue=load("22.05/squeue.json"), nodes=load("22.05/sinfo.json"))


def test_run_loop_ticks_and_writes_plans(tmp_path: Path) -> None:
    from planner.slurm.run import run_loop

    fake = _fake_cluster()
    cfg = cfg_of(**CFG_2205, plan_dir=str(tmp_path), state_file=str(tmp_path / "state.json"))
    status = run_loop(cfg, interval_s=0.01, ticks=2, runner=fake)
    assert status == 0
    files = sorted(tmp_path.glob("tick-*.json"))
    assert len(files) == 2
    doc = json.loads(files[0].read_text())
    assert set(doc) == {"tick", "snapshot", "plan", "apply"}
    assert (tmp_path / "state.json").exists()
    assert [a[0] for _, a in fake.calls].count("squeue") >= 4


def test_run_loop_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    from planner.slurm.run import run_loop

    fake = _fake_cluster()
    cfg = cfg_of(**CFG_2205)
    before = signal.getsignal(signal.SIGTERM)
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        status = run_loop(cfg, interval_s=0.1, runner=fake, dry_run=True)
    finally:
        timer.cancel()
    assert status == 0
    assert signal.getsignal(signal.SIGTERM) is before  # handler restored


def test_run_loop_survives_a_failing_tick() -> None:
    from planner.slurm.run import run_loop

    def broken(argv: list[str], timeout: float) -> tuple[int, str, str]:
        return 1, "", "slurm_load_jobs error: Unable to contact slurm controller"

    assert run_loop(cfg_of(), interval_s=0.01, ticks=2, runner=broken) == 1


def test_cli_snapshot_from_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from planner.slurm.commands import main

    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(CFG_2205))
    status = main(["snapshot", "--config", str(cfg),
                   "--squeue-json", str(FIX / "22.05/squeue.json"),
                   "--nodes-json", str(FIX / "22.05/sinfo.json"), "--now", str(NOW_2205)])
    captured = capsys.readouterr()
    assert status == 0
    snap = json.loads(captured.out)
    assert snap["now"] == "2026-11-29T09:34:47Z" and len(snap["jobs"]) == 6
    assert "note: job 30" not in captured.err  # held jobs are silently Slurm's
    assert "note: job 31: pending for Dependency" in captured.err


def test_cli_apply_dry_run_and_bad_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from planner.slurm.commands import main

    plan = dict(copy.deepcopy(PLAN),
                objective={"admitted_gpus": {"1": 4}, "priority_value": 0,
                           "eviction_cost_gpu_s": 0, "evictions": 3},
                storm=[], warnings=[],
                solver={"engine": "cp-sat", "status": "OPTIMAL", "wall_s": 0.1, "gap": 0.0})
    for ev in plan["evictions"]:
        ev.update(flush_s=0.0, cost_gpu_s=0.0)
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    assert main(["apply", str(tmp_path / "plan.json"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "scancel --signal=TERM --batch 21" in out
    (tmp_path / "bad.json").write_text(json.dumps({"evictions": "x"}))
    assert main(["apply", str(tmp_path / "bad.json"), "--dry-run"]) == 2


def test_apply_does_not_evict_for_a_job_it_could_not_pin() -> None:
    fake = FakeSlurm({"21": 0.0, "22": 0.0, "23": 0.0}, fail={"ReqNodeList"})
    rep = apply_plan(PLAN, cfg_of(), runner=fake, clock=fake.clock, sleep=fake.sleep)
    assert not rep.ok and len(rep.failures) == 1
    assert not fake.commands("scancel") and not fake.commands("requeuehold")
    assert len(rep.problems) == 3 and all("could be pinned" in p for p in rep.problems)


def test_run_refuses_an_interval_that_is_not_a_positive_number(capsys) -> None:
    # NaN compared false with 0 and ran the loop with a NaN interval.
    import cli

    for bad in ("nan", "0", "-1"):
        assert cli.main(["slurm", "run", "--interval", bad, "--ticks", "1", "--dry-run"]) == 2
        err = capsys.readouterr().err
        assert f"error: --interval: must be a positive number of seconds, got {float(bad):g}" \
            in err, err


def test_a_field_of_the_wrong_type_is_bad_input_naming_the_job_or_the_node_list() -> None:
    # Slurm never writes gres_detail as a boolean, but a hand-edited or foreign file
    # may: that crashed the conversion with a traceback (9 distinct crash sites in a
    # fuzz of 3,000 mutated documents, none left). Now it is bad input naming the job
    # (which `slurm run` logs as an invalid snapshot for that tick, and `slurm
    # snapshot` reports with exit 2).
    squeue = load("22.05/squeue.json")
    assert squeue["jobs"][1]["job_id"] == 19
    squeue["jobs"][1]["gres_detail"] = True
    with pytest.raises(InputError) as exc:
        build_snapshot(squeue, load("22.05/sinfo.json"), cfg_of(**CFG_2205), now=NOW_2205,
                       read_sidecar=lambda j: ({}, []))
    assert exc.value.source == "squeue --json"
    assert exc.value.errors == [("jobs[1] (job 19): a field has a value of the wrong type or "
                                "range (TypeError: object of type 'bool' has no len())")]
    sinfo = load("22.05/sinfo.json")
    sinfo["nodes"][0]["partitions"] = 1.5
    with pytest.raises(InputError) as exc:
        build_snapshot(load("22.05/squeue.json"), sinfo, cfg_of(**CFG_2205), now=NOW_2205,
                       read_sidecar=lambda j: ({}, []))
    assert exc.value.source == "sinfo --json"
    assert exc.value.errors[0].startswith("nodes: a field has a value of the wrong type or "
                                          "range (TypeError: ")


def test_comment_values_beyond_the_contracts_limits_are_ignored_with_a_problem() -> None:
    # A user's comment must not invalidate the whole tick's snapshot: values beyond
    # the implementation limits (docs/format.md) are dropped like malformed ones.
    fields, problems = parse_comment("priority=10000000000 restore_s=2e9 size_gb=40")
    assert fields == {"size_gb": 40.0}
    assert len(problems) == 2
    assert any("priority must be within +-1e+09" in p for p in problems), problems
    assert any("restore_s must be a number from 0 to 1e+09" in p for p in problems), problems


# ------------------------------------------------------------- history (R15, R17)

def _evicting_cluster() -> FakeSlurm:
    """The 22.05 fixture cut to three jobs: tier-3 job 20 on gpu1 (GPUs 4-7), tier-1
    gang 27 on gpu2 and gpu3, and tier-1 job 30 (8 GPUs, pending): 30 can only go to
    gpu1, evicting 20 (tier 3, no immunity in CFG_2205), which stops at once."""
    sq = load("22.05/squeue.json")
    sq["jobs"] = [j for j in sq["jobs"] if str(j["job_id"]) in {"20", "27", "30"}]
    for j in sq["jobs"]:
        if j["job_id"] == 30:
            j.update(priority=100, tres_per_node="gres:gpu:8", state_reason="Priority")
    return FakeSlurm({"20": 0.0}, squeue=sq, nodes=load("22.05/sinfo.json"))


def test_run_keeps_its_evictions_across_a_restart(tmp_path: Path) -> None:
    # Tick 1 evicts job 20 and records it in the state file (atomically, with the
    # pins and preemption records). A new loop, as after a restart, reads the file:
    # its snapshot lists the eviction in recent_evictions (R15), at the time 20 was
    # signalled. Running jobs carry Slurm's EndTime as expected_end_at (R17): the
    # fixture's 525,600 min time limit after the start, 2026-11-29T09:34:23Z.
    from planner.slurm.run import run_loop

    state = tmp_path / "state.json"
    cfg = cfg_of(**CFG_2205, plan_dir=str(tmp_path / "ticks"), state_file=str(state))
    assert run_loop(cfg, interval_s=0.01, ticks=1, runner=_evicting_cluster()) == 0
    saved = json.loads(state.read_text())
    assert [(e["job"], e["gpus"]) for e in saved["evictions"]] == [("20", 4)]
    at = saved["evictions"][0]["at"]
    first = json.loads(next((tmp_path / "ticks").glob("tick-00001-*.json")).read_text())
    assert [e["job"] for e in first["plan"]["evictions"]] == ["20"]
    assert first["snapshot"]["recent_evictions"] == []
    ends = {j["id"]: j.get("expected_end_at") for j in first["snapshot"]["jobs"]}
    assert ends == {"20": "2027-11-29T09:34:23Z", "27": "2027-11-29T09:34:34Z", "30": None}

    cfg2 = cfg_of(**CFG_2205, plan_dir=str(tmp_path / "again"), state_file=str(state))
    assert run_loop(cfg2, interval_s=0.01, ticks=1, runner=_evicting_cluster(),
                    dry_run=True) == 0
    second = json.loads(next((tmp_path / "again").glob("tick-00001-*.json")).read_text())
    assert second["snapshot"]["recent_evictions"] == [{"job": "20", "at": at, "gpus": 4}]
    # and the snapshot command reads the same file
    snap = build_snapshot(_evicting_cluster().squeue, load("22.05/sinfo.json"), cfg2,
                          now=parse_time(at) + 60, state=AdapterState.load(state))
    assert snap.snapshot["recent_evictions"] == [{"job": "20", "at": at, "gpus": 4}]
    # a day later it is forgotten
    later = build_snapshot(_evicting_cluster().squeue, load("22.05/sinfo.json"), cfg2,
                           now=parse_time(at) + 86401, state=AdapterState.load(state))
    assert later.snapshot["recent_evictions"] == []


def test_a_state_file_with_broken_evictions_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "state.json"
    bad.write_text(json.dumps({"preempted": {}, "pinned": {}, "evictions": [{"at": 5}]}))
    with pytest.raises(ValueError, match="evictions must be a list"):
        AdapterState.load(bad)
