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
from planner.adapters.slurm import apply as sapply
from planner.adapters.slurm.apply import UnsafeId, apply_plan
from planner.adapters.slurm.config import ConfigError, config_from_dict, load_config
from planner.adapters.slurm.hostlist import HostlistError, expand
from planner.adapters.slurm.parse import (
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
from planner.adapters.slurm.state import AdapterState

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
    # The test cluster's fake GPUs are untyped ("gpu:8"), a GPU model the adapter
    # cannot know: without this rule their NVLink layout is "none" (with a warning),
    # and an 8-GPU job with topology "nvlink" would fit nowhere. Real clusters say
    # the layout the same way (docs/slurm.md, "Assumptions and warnings").
    "nodes": [{"match": "gpu[1-4]", "nvlink": "nvswitch"}],
    "policy": {"grace": {"min_s": 5, "max_s": 60}, "tiers": {"3": {"min_runtime_s": 0}}},
}
CFG_2311: dict[str, Any] = {
    "tiers": {"qos": {"high": 1, "normal": 2, "low": 3}, "partitions": {"batch": 3, "train": 2}},
    "storage": [{"id": "lustre", "write_gb_per_s": 40}],
    # DGX H100: SXM5 boards on NVSwitch, which the bare GRES type "h100" does not say
    # (the H100 is also sold as a PCIe card): without "nvlink" a warning says so
    "nodes": [{"match": "dgx*", "block": "rack-1", "nvlink": "nvswitch"},
              {"match": "dgx[05-06]", "block": "rack-2", "local_write_gb_per_s": 4}],
}
TYPED: dict[str, Any] = {"tiers": {"default": 3},
                         # gpu:a100:8 does not say SXM4 (NVSwitch) or PCIe: say it
                         "nodes": [{"match": "gpu*", "nvlink": "nvswitch"}]}


def jobs_by_id(snap: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {j["id"]: j for j in snap["jobs"]}


def unsaid(*job_ids: str) -> str:
    """The warning naming the running jobs priced without a checkpoint signal."""
    return (f"{len(job_ids)} running job(s) say nothing about a checkpoint signal (no signal "
            "in their comment or sidecar, no job_defaults signal for their partition, QOS or "
            "account): priced as losing their work since start, signal null "
            f"({', '.join(job_ids)})")


def parse_iso_now(epoch: float) -> str:
    from planner.adapters.slurm.parse import iso

    return iso(epoch)


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
    # the comment "size_gb=50 restore_s=600" says no signal: no known trap (signal null),
    # so an eviction loses the work since start; the five running jobs say none
    assert jobs["25"]["checkpoint"] == {"size_gb": 50.0, "signal": None, "barrier_s": 0,
                                        "cleanup_s": 0, "restore_s": 600.0}
    assert unsaid("19", "20", "25", "26", "27") in res.warnings
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
    # 103: no comment, its sidecar unreadable: the default, no known trap
    assert jobs["103"]["checkpoint"]["signal"] is None
    # 101's sidecar and 104's comment (signal=none) say; 102's sidecar and comment do not
    assert unsaid("102", "103") in res.warnings


def test_sidecar_reader_without_directory() -> None:
    assert sidecar_reader(None)("123") == ({}, [])


# ------------------------------------------------------- checkpoint defaults

def test_checkpoint_defaults_by_account_partition_and_qos() -> None:
    # 23.11: 101 train/normal/llm (comment: every checkpoint field), 102 batch/low/vision
    # (comment: size_gb=20 restore_s=120 last_at), 103 batch/low/no account (no
    # comment), 104 batch/low/vision (comment: signal=none), 111 pending in
    # "batch,train", account vision, no QOS. Field by field, later ones winning:
    # job_defaults < account < partition < QOS < comment < sidecar.
    layered = dict(CFG_2311,
                   job_defaults={"checkpoint": {"restore_s": 30}},
                   job_defaults_by_account={"vision": {"checkpoint": {"signal": "SIGUSR1",
                                                                      "size_gb": 5}}},
                   job_defaults_by_partition={"batch": {"checkpoint": {"signal": "SIGTERM",
                                                                       "barrier_s": 7}}},
                   job_defaults_by_qos={"low": {"checkpoint": {"cleanup_s": 3}}})
    res = build_snapshot(load("23.11/squeue.json"), load("23.11/scontrol_nodes.json"),
                         cfg_of(**layered), now=NOW_2311, read_sidecar=lambda j: ({}, []))
    ck = {k: j["checkpoint"] for k, j in jobs_by_id(res.snapshot).items()}
    assert ck["101"] == {"size_gb": 140.0, "signal": "SIGUSR1", "barrier_s": 20.0,
                         "cleanup_s": 5.0, "restore_s": 900.0}  # its comment says all
    # vision's SIGUSR1 and 5 GB, batch's SIGTERM (over vision's) and 7 s barrier, low's
    # 3 s cleanup, then the comment's 20 GB and 120 s restore
    assert ck["102"] == {"size_gb": 20.0, "signal": "SIGTERM", "barrier_s": 7.0,
                         "cleanup_s": 3.0, "restore_s": 120.0,
                         "last_at": "2026-11-29T09:20:00Z"}
    assert ck["103"] == {"size_gb": 0.0, "signal": "SIGTERM", "barrier_s": 7.0,
                         "cleanup_s": 3.0, "restore_s": 30.0}  # no account
    assert ck["104"]["signal"] is None and ck["104"]["size_gb"] == 5.0  # comment: none
    # pending in two partitions: the first with an override (batch); no QOS
    assert ck["111"] == {"size_gb": 5.0, "signal": "SIGTERM", "barrier_s": 7.0,
                         "cleanup_s": 0.0, "restore_s": 30.0}
    assert not [w for w in res.warnings if "checkpoint signal" in w]  # every job says
    # `signal: null` for QOS low takes batch's trap away again; a configured null is a
    # statement too: no warning
    cfg = cfg_of(**dict(layered, job_defaults_by_qos={"low": {"checkpoint": {"signal": None}}}))
    res = build_snapshot(load("23.11/squeue.json"), load("23.11/scontrol_nodes.json"), cfg,
                         now=NOW_2311, read_sidecar=lambda j: ({}, []))
    ck = {k: j["checkpoint"] for k, j in jobs_by_id(res.snapshot).items()}
    assert (ck["102"]["signal"], ck["103"]["signal"], ck["111"]["signal"]) == \
        (None, None, "SIGTERM")
    assert not [w for w in res.warnings if "checkpoint signal" in w]
    # a null number is refused (only the signal can be null), so is an unknown field
    with pytest.raises(ConfigError, match="size_gb: must be a number >= 0, not null"):
        cfg_of(job_defaults_by_partition={"batch": {"checkpoint": {"size_gb": None}}})
    with pytest.raises(ConfigError, match="job_defaults_by_qos.low.topology"):
        cfg_of(job_defaults_by_qos={"low": {"topology": "any"}})


def _full_cluster(*running: tuple[int, str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """22.05 squeue and sinfo with 8-GPU tier-3 jobs ``(id, node, comment)`` that fill
    their nodes, started 2 h before NOW_2205, and pending tier-1 job 42 asking for 8
    GPUs on one node; only the nodes of `running` are listed."""
    real = load("22.05/squeue.json")
    run_tpl = next(j for j in real["jobs"] if j["job_id"] == 25)
    pend = copy.deepcopy(next(j for j in real["jobs"] if j["job_id"] == 29))
    jobs = []
    for jid, node, comment in running:
        j = copy.deepcopy(run_tpl)
        j.update(job_id=jid, nodes=node, batch_host=node, required_nodes=node,
                 comment=comment, start_time=NOW_2205 - 7200, submit_time=NOW_2205 - 7300,
                 gres_detail=["gpu:8(IDX:0-7)"], tres_per_node="gres:gpu:8")
        j["job_resources"]["nodes"] = node
        j["job_resources"]["allocated_nodes"][0]["nodename"] = node
        jobs.append(j)
    pend.update(job_id=42, partition="tier1", comment="")
    squeue = dict(real, jobs=[*jobs, pend])
    nodes = load("22.05/sinfo.json")
    names = {node for _, node, _ in running}
    nodes["nodes"] = [dict(n, gres_used="gpu:8(IDX:0-7)", state="allocated")
                      for n in nodes["nodes"] if n["name"] in names]
    return squeue, nodes


def test_an_unannotated_job_is_priced_as_losing_its_work_since_start() -> None:
    # Job 40 on gpu1: 8 GPUs, started 2 h ago, no comment, no sidecar. With no known
    # trap (signal null) evicting it loses its work since start (docs/format.md section
    # 5, objective item 4: cost = gpus x (lost_s + restore_s + solo_flush_s), lost_s =
    # now - started_at, solo_flush_s 0 without a signal):
    #   8 x (7200 + 0 + 0) = 57,600 GPU-s.
    # Job 41 on gpu2 traps SIGTERM and says its checkpoint: 80 GB to nfs at 10 GB/s,
    # restore 600 s:  8 x (0 + 600 + 80 / 10) = 8 x 608 = 4,864 GPU-s.
    # Tier-1 job 42 needs one whole node: the planner evicts 41, the cheaper.
    a, b = (40, "gpu1", ""), (41, "gpu2", "signal=TERM size_gb=80 restore_s=600")
    squeue, nodes = _full_cluster(a, b)
    res = build_snapshot(squeue, nodes, cfg_of(**CFG_2205), now=NOW_2205,
                         read_sidecar=lambda j: ({}, []))
    jobs = jobs_by_id(res.snapshot)
    assert jobs["40"]["checkpoint"] == {"size_gb": 0.0, "signal": None, "barrier_s": 0.0,
                                        "cleanup_s": 0.0, "restore_s": 0.0}
    assert jobs["40"]["started_at"] == "2026-11-29T07:34:47Z"  # NOW_2205 - 2 h
    assert res.warnings == [unsaid("40")]  # 41 says SIGTERM in its comment
    p = _plan(res.snapshot)
    assert [(e.job, e.cost_gpu_s) for e in p.evictions] == [("41", 4864.0)]
    assert [(pl.job, pl.placement[0].node) for pl in p.placements] == [("42", "gpu2")]
    # 40 alone: it is the only way in, at its full price
    squeue, nodes = _full_cluster(a)
    res = build_snapshot(squeue, nodes, cfg_of(**CFG_2205), now=NOW_2205,
                         read_sidecar=lambda j: ({}, []))
    p = _plan(res.snapshot)
    assert [(e.job, e.cost_gpu_s) for e in p.evictions] == [("40", 57600.0)]
    assert p.objective.eviction_cost_gpu_s == 57600.0
    # the old default restated (every job traps SIGTERM, saves 0 GB at once): 40 is
    # priced 8 x (0 + 0 + 0) = 0 and evicted in place of 41, with no warning
    squeue, nodes = _full_cluster(a, b)
    trusting = cfg_of(**CFG_2205, job_defaults={"checkpoint": {"signal": "SIGTERM"}})
    res = build_snapshot(squeue, nodes, trusting, now=NOW_2205, read_sidecar=lambda j: ({}, []))
    assert res.warnings == []
    p = _plan(res.snapshot)
    assert [(e.job, e.cost_gpu_s) for e in p.evictions] == [("40", 0.0)]
    # ... and the same for partition tier3 only (the override of docs/slurm.md)
    by_part = cfg_of(**CFG_2205,
                     job_defaults_by_partition={"tier3": {"checkpoint": {"signal": "SIGTERM"}}})
    res = build_snapshot(squeue, nodes, by_part, now=NOW_2205, read_sidecar=lambda j: ({}, []))
    assert jobs_by_id(res.snapshot)["40"]["checkpoint"]["signal"] == "SIGTERM"
    assert res.warnings == []


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
    """Records commands; victims stop `stop_after` seconds after their signal.

    `where` (job -> hostlist) makes the status query answer ``id|STATE|nodes`` as
    real squeue does with ``%N``; without it only ``id|STATE`` (nodes unknown).
    `fail` fails every command containing one of its strings; `fail_times` fails
    such a command only that many times. `ends` (job -> state) is the state a victim
    ends in when it stops (default COMPLETED)."""

    def __init__(self, running: dict[str, float], fail: frozenset[str] | set[str] = frozenset(),
                 squeue: dict[str, Any] | None = None, nodes: dict[str, Any] | None = None,
                 where: dict[str, str] | None = None, fail_times: int | None = None):
        self.t = 1000.0
        self.stop_after = dict(running)  # job -> seconds to stop after the signal (inf: never)
        self.signalled: dict[str, float] = {}
        self.state = {j: "RUNNING" for j in running}
        self.calls: list[tuple[float, list[str]]] = []
        self.fail = fail
        self.fail_times = fail_times
        self.squeue, self.nodes = squeue, nodes
        self.where = where
        self.ends: dict[str, str] = {}

    def clock(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s

    def _update(self) -> None:
        for j, at in self.signalled.items():
            if self.state.get(j) == "RUNNING" and self.t >= at + self.stop_after[j]:
                self.state[j] = self.ends.get(j, "COMPLETED")

    def __call__(self, argv: list[str], timeout: float) -> tuple[int, str, str]:
        self.calls.append((self.t, argv))
        self._update()
        text = " ".join(argv)
        if any(f in text for f in self.fail) and (self.fail_times is None or self.fail_times > 0):
            if self.fail_times is not None:
                self.fail_times -= 1
            return 1, "", "slurm_update error: Access/permission denied"
        if argv[0] == "squeue" and "--json" in argv:
            return 0, json.dumps(self.squeue), ""
        if argv[0] == "sinfo":
            return 0, json.dumps(self.nodes), ""
        if argv[0] == "squeue" and any(a.startswith("--jobs=") for a in argv):
            ids = next(a for a in argv if a.startswith("--jobs="))[7:].split(",")
            if self.where is None:
                return 0, "".join(f"{j}|{self.state[j]}\n" for j in ids if j in self.state), ""
            return 0, "".join(
                f"{j}|{self.state[j]}|{self.where.get(j, '') if self.state[j] == 'RUNNING' else ''}\n"
                for j in ids if j in self.state), ""
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


def _plan_document(now: str | None = None) -> dict[str, Any]:
    """PLAN as a complete plan document (what `slurm apply` reads), made for `now`
    (default: PLAN's 1970 time)."""
    plan = dict(copy.deepcopy(PLAN),
                objective={"admitted_gpus": {"1": 4}, "priority_value": 0,
                           "eviction_cost_gpu_s": 0, "evictions": 3},
                storm=[], warnings=[],
                solver={"engine": "cp-sat", "status": "OPTIMAL", "wall_s": 0.1, "gap": 0.0})
    for ev in plan["evictions"]:
        ev.update(flush_s=0.0, cost_gpu_s=0.0)
    if now is not None:
        plan["now"] = now
    return plan


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
    # ("now" added with the plan age check: a plan without one is refused, its age
    # unknown; 1000 is the fake clock, so the plan is 0 s old)
    plan = {"now": 1000, "evictions": [
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
    from planner.adapters.slurm.run import run_loop

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
    from planner.adapters.slurm.run import run_loop

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
    from planner.adapters.slurm.run import run_loop

    def broken(argv: list[str], timeout: float) -> tuple[int, str, str]:
        return 1, "", "slurm_load_jobs error: Unable to contact slurm controller"

    # (a config with a tier mapping: cfg_of() maps no job and is now refused with
    # status 2 before any tick, test_run_refuses_a_config_without_tiers)
    assert run_loop(cfg_of(**CFG_2205), interval_s=0.01, ticks=2, runner=broken) == 1


def test_cli_snapshot_from_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from planner.commands.slurm import main

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
    import time

    from planner.commands.slurm import main

    # PLAN's now is 1970 (the fake clock); against the real clock that plan is now
    # refused as stale (test_cli_apply_refuses_a_stale_plan), so this one is fresh
    plan = _plan_document(parse_iso_now(time.time()))
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    assert main(["apply", str(tmp_path / "plan.json"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "scancel --signal=TERM --batch 21" in out
    (tmp_path / "bad.json").write_text(json.dumps({"evictions": "x"}))
    assert main(["apply", str(tmp_path / "bad.json"), "--dry-run"]) == 2


def test_cli_apply_keeps_victims_gpus_from_its_snapshot(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # `slurm apply` with a state file hands apply_plan each running job's GPUs from
    # --snapshot (kept with the evictions, R15's GPU budget); without --snapshot
    # there are none, and it says what that costs. (apply_plan is a stand-in: no
    # Slurm command runs.)
    import time

    import planner.adapters.slurm.apply as slurm_apply
    from planner.adapters.slurm.apply import ApplyReport
    from planner.commands.slurm import main

    seen: list[Any] = []

    def fake(plan: Any, cfg: Any, **kw: Any) -> ApplyReport:
        seen.append(kw["gpus"])
        return ApplyReport(dry_run=kw["dry_run"])

    monkeypatch.setattr(slurm_apply, "apply_plan", fake)
    (tmp_path / "plan.json").write_text(json.dumps(_plan_document(parse_iso_now(time.time()))))
    (tmp_path / "c.json").write_text(json.dumps({**CFG_2205,
                                                 "state_file": str(tmp_path / "state.json")}))
    snap = {"jobs": [{"id": "21", "state": "running", "gpus_per_node": 2, "nodes": 2,
                      "_slurm": {"job_id": "21"}},
                     {"id": "22@gpu1", "state": "running", "gpus_per_node": 1,
                      "_slurm": {"job_id": "22"}},
                     {"id": "22@gpu2", "state": "running", "gpus_per_node": 3,
                      "_slurm": {"job_id": "22"}}]}
    (tmp_path / "snap.json").write_text(json.dumps(snap))
    base = ["apply", str(tmp_path / "plan.json"), "--config", str(tmp_path / "c.json")]
    assert main([*base, "--snapshot", str(tmp_path / "snap.json")]) == 0
    assert seen == [{"21": 4, "22": 4}]  # 2 x 2; 1 + 3 on two nodes
    assert "without their GPUs" not in capsys.readouterr().err
    assert main(base) == 0
    assert seen[-1] is None
    assert ("warning: no --snapshot: the evictions are kept in the state file without their "
            "GPUs") in capsys.readouterr().err


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
    # The cut removes 19 (4 GPUs of gpu1) and 25 + 26 (gpu4's 8): the node listing
    # must say so too, or the gres_used cross-check rightly keeps their GPUs
    # occupied (test_partial_squeue_keeps_unseen_gpus_occupied) and 30 fits nowhere.
    sinfo = load("22.05/sinfo.json")
    used = {"gpu1": "gpu:4", "gpu4": "gpu:0"}
    for n in sinfo["nodes"]:
        n["gres_used"] = used.get(n["name"], n["gres_used"])
    return FakeSlurm({"20": 0.0}, squeue=sq, nodes=sinfo)


def test_run_keeps_its_evictions_across_a_restart(tmp_path: Path) -> None:
    # Tick 1 evicts job 20 and records it in the state file (atomically, with the
    # pins and preemption records). A new loop, as after a restart, reads the file:
    # its snapshot lists the eviction in recent_evictions (R15), at the time 20 was
    # signalled. Running jobs carry Slurm's EndTime as expected_end_at (R17): the
    # fixture's 525,600 min time limit after the start, 2026-11-29T09:34:23Z.
    from planner.adapters.slurm.run import run_loop

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


# ------------------------------------- 1. GPUs in use: the gres_used cross-check

def _without(doc: dict[str, Any], *job_ids: int) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    out["jobs"] = [j for j in out["jobs"] if j["job_id"] not in job_ids]
    return out


def _nodes_with(doc: dict[str, Any], **used: str) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    for n in out["nodes"]:
        n["gres_used"] = used.get(n["name"], n["gres_used"])
    return out


def _plan(snapshot: dict[str, Any]):
    from models import load_snapshot
    from planner import plan

    return plan(load_snapshot(snapshot), deterministic=True, time_limit_s=2.0)


def test_partial_squeue_keeps_unseen_gpus_occupied() -> None:
    # Real 22.05 output with job 19 (tier 2, GPUs 0-3 of gpu1) cut out of squeue, as a
    # partial squeue or another user's view would show it. gpu1's sinfo record still
    # says gres_used "gpu:8": 8 in use, the listed jobs hold 4 (job 20: GPUs 4-7), so
    # 8 - 4 = 4 GPUs are occupied by slurm-occupied@gpu1. 22.05 gives no IDX for an
    # untyped GRES, so which 4 is a guess: the lowest free ones, 0-3 (here right).
    # Job 29 is made a 4-GPU tier-1 job: gpu2 and gpu3 hold tier-1 job 27 (not
    # preemptible), gpu4 is drained, so the only way in is evicting tier-3 job 20 on
    # gpu1 and taking its GPUs 4-7. Without the cross-check gpu1's GPUs 0-3 looked
    # free and 29 was placed there, onto GPUs that job 19 holds.
    squeue = _without(load("22.05/squeue.json"), 19)
    for j in squeue["jobs"]:
        if j["job_id"] == 29:
            j.update(partition="tier1", tres_per_job="gres:gpu:4")
    res = build_snapshot(squeue, load("22.05/sinfo.json"), cfg_of(**CFG_2205), now=NOW_2205,
                         read_sidecar=lambda j: ({}, []))
    jobs = jobs_by_id(res.snapshot)
    occ = jobs["slurm-occupied@gpu1"]
    assert (occ["state"], occ["tier"], occ["gpus_per_node"], occ["started_at"]) == \
        ("running", 9, 4, "2026-11-29T09:34:47Z")
    assert occ["placement"] == [{"node": "gpu1", "gpus": [0, 1, 2, 3]}]
    assert res.snapshot["policy"]["tiers"]["9"]["preemptible"] is False
    assert sum(1 for j in jobs.values() if j["state"] == "running") == 4 + 1  # 20 25 26 27 + occ
    warned = [w for w in res.warnings if w.startswith("slurm-occupied@gpu1: ")]
    assert len(warned) == 1 and "8 GPU(s) of gpu1 are in use by 'gpu:8' but the snapshot's " \
        "jobs hold 4" in warned[0] and "GPU(s) 0,1,2,3 stand for the 4 unseen one(s)" in warned[0]
    p = _plan(res.snapshot)
    assert [(pl.job, pl.placement[0].node, pl.placement[0].gpus) for pl in p.placements] == \
        [("29", "gpu1", [4, 5, 6, 7])]
    assert [e.job for e in p.evictions] == ["20"]
    # the same cut with a node listing that agrees (gpu1 "gpu:4"): GPUs 0-3 are
    # really free, 29 takes them and nobody is evicted
    agreeing = _nodes_with(load("22.05/sinfo.json"), gpu1="gpu:4")
    res2 = build_snapshot(squeue, agreeing, cfg_of(**CFG_2205), now=NOW_2205,
                          read_sidecar=lambda j: ({}, []))
    assert "slurm-occupied@gpu1" not in jobs_by_id(res2.snapshot)
    p2 = _plan(res2.snapshot)
    assert [(pl.placement[0].node, pl.placement[0].gpus) for pl in p2.placements] == \
        [("gpu1", [0, 1, 2, 3])] and p2.evictions == []


def test_unseen_gpus_are_occupied_by_index_where_the_node_gives_idx() -> None:
    # Real 22.05 output of typed GRES (gpu:a100:8): gres_used has IDX, gpu1
    # "gpu:a100:8(IDX:0-7)", gpu2 "gpu:a100:7(IDX:0-6)". Cut job 1 (gpu1 GPUs 0-2)
    # and job 3 (gpu2 GPU 2) out of squeue: gpu1's listed jobs hold 3-7 (piece 2@gpu1),
    # so 0-7 minus 3-7 = 0,1,2 are occupied; gpu2's hold 0,1 (2@gpu2) and 3-6 (job 5),
    # so 0-6 minus those = 2. Exactly, no guess: no "without indices" warning.
    squeue = _without(load("22.05-typed/squeue.json"), 1, 3)
    res = build_snapshot(squeue, load("22.05-typed/sinfo.json"), cfg_of(**TYPED),
                         now=NOW_2205_TYPED, read_sidecar=lambda j: ({}, []))
    jobs = jobs_by_id(res.snapshot)
    assert jobs["slurm-occupied@gpu1"]["placement"] == [{"node": "gpu1", "gpus": [0, 1, 2]}]
    assert jobs["slurm-occupied@gpu2"]["placement"] == [{"node": "gpu2", "gpus": [2]}]
    # (job 2's comment says signal=none; job 5 says nothing)
    assert res.warnings[0] == unsaid("5")
    assert [w.split(":")[0] for w in res.warnings[1:]] == ["slurm-occupied@gpu1",
                                                           "slurm-occupied@gpu2"]
    assert "GPU(s) 0,1,2 of gpu1 are in use by the node's gres_used 'gpu:a100:8(IDX:0-7)' " \
        "but held by no job in the snapshot" in res.warnings[1]
    from models import load_snapshot
    load_snapshot(res.snapshot)
    # the full squeue agrees with the nodes: no synthetic job, no warning
    full = build_snapshot(load("22.05-typed/squeue.json"), load("22.05-typed/sinfo.json"),
                          cfg_of(**TYPED), now=NOW_2205_TYPED,
                          read_sidecar=lambda j: ({}, []))
    assert not [j for j in full.snapshot["jobs"] if j["id"].startswith("slurm-occupied@")]
    assert full.warnings == [unsaid("1", "3", "5")]


def test_node_and_job_views_that_disagree_are_warnings() -> None:
    cfg = cfg_of(**TYPED)
    typed_q, typed_n = load("22.05-typed/squeue.json"), load("22.05-typed/sinfo.json")
    # a job says it holds GPU 2 of gpu2, the node says only 0,1,3-6 are in use:
    # job 3 keeps it (the safe side), with a warning; nothing is occupied
    res = build_snapshot(typed_q, _nodes_with(typed_n, gpu2="gpu:a100:6(IDX:0-1,3-6)"), cfg,
                         now=NOW_2205_TYPED, read_sidecar=lambda j: ({}, []))
    assert jobs_by_id(res.snapshot)["3"]["placement"] == [{"node": "gpu2", "gpus": [2]}]
    assert res.warnings == [unsaid("1", "3", "5"),
                            ("job 3: holds GPU(s) 2 of gpu2 by its gres_detail, but the node's "
                            "gres_used 'gpu:a100:6(IDX:0-1,3-6)' says they are free; kept as held")]
    # a count that disagrees with its own index list: the indices count (0-7 = 8)
    res = build_snapshot(typed_q, _nodes_with(typed_n, gpu1="gpu:a100:7(IDX:0-7)"), cfg,
                         now=NOW_2205_TYPED, read_sidecar=lambda j: ({}, []))
    assert res.warnings == [unsaid("1", "3", "5"),
                            ("node gpu1: gres_used 'gpu:a100:7(IDX:0-7)' counts 7 GPU(s) in use "
                            "but lists 8 indices; the indices count")]
    # an index beyond the node's GPUs (8 on an 8-GPU node, 0..7) is ignored
    res = build_snapshot(typed_q, _nodes_with(typed_n, gpu1="gpu:a100:9(IDX:0-8)"), cfg,
                         now=NOW_2205_TYPED, read_sidecar=lambda j: ({}, []))
    assert "node gpu1: gres_used 'gpu:a100:9(IDX:0-8)' names GPU(s) 8 beyond its 8 GPUs; " \
        "ignored" in res.warnings
    # counts only (22.05 untyped): the jobs on gpu1 (19, 20) hold 8, the node says 6
    q, n = load("22.05/squeue.json"), load("22.05/sinfo.json")
    res = build_snapshot(q, _nodes_with(n, gpu1="gpu:6"), cfg_of(**CFG_2205), now=NOW_2205,
                         read_sidecar=lambda j: ({}, []))
    assert "node gpu1: the listed jobs hold 8 GPU(s) but the node reports 6 in use ('gpu:6'); " \
        "the jobs' GPUs are kept as held" in res.warnings
    # and the four nodes without IDX are named once
    assert "GPUs in use on 4 node(s) (gpu1, gpu2, gpu3, gpu4) are reported without indices " \
        "(IDX): only their number was cross-checked with the jobs' gres_detail (typed GRES " \
        "with File= in gres.conf, or `scontrol show nodes --json`, give IDX)" in res.warnings
    # a node that reports nothing in use at all cannot be cross-checked: said once
    res = build_snapshot(q, _nodes_with(n, gpu1=None), cfg_of(**CFG_2205), now=NOW_2205,
                         read_sidecar=lambda j: ({}, []))
    assert any(w.startswith("1 node(s) (gpu1) report no GPUs in use (gres_used) at all")
               for w in res.warnings), res.warnings


def test_a_left_out_running_job_still_occupies_its_gpus() -> None:
    # Job 20 (gpu1, GPUs 4-7) with a gres_detail without IDX (a GRES without File=)
    # cannot enter the snapshot: that is a warning now, not a note, and the node's
    # "gpu:8" in use against the 4 GPUs of job 19 occupies the other 4 (4-7).
    squeue = load("22.05/squeue.json")
    for j in squeue["jobs"]:
        if j["job_id"] == 20:
            j["gres_detail"] = ["gpu:4"]
    res = build_snapshot(squeue, load("22.05/sinfo.json"), cfg_of(**CFG_2205), now=NOW_2205,
                         read_sidecar=lambda j: ({}, []))
    jobs = jobs_by_id(res.snapshot)
    assert "20" not in jobs
    assert jobs["slurm-occupied@gpu1"]["placement"] == [{"node": "gpu1", "gpus": [4, 5, 6, 7]}]
    assert any(w.startswith("job 20: running on gpu1 but gres_detail gives no GPU indices on "
                            "gpu1 ('gpu:4'") for w in res.warnings), res.warnings
    assert any(w.startswith("slurm-occupied@gpu1: ") and "running job(s) 20 left out of the "
               "snapshot hold GPUs there" in w for w in res.warnings), res.warnings


def test_real_sinfo_of_another_cluster_with_gpus_nobody_listed() -> None:
    # tests/fixtures/slurm/21.08-rivos: sinfo --json of Slurm 21.08 (openapi v0.0.37)
    # and its squeue, which lists no GPU job. cs2 (gpu:a100:8, mps:20) reports
    # "gpu:a100:3(IDX:0-2),mps:10": GPUs 0,1,2 are occupied, exactly; its MPS use is
    # a warning (shared GPUs are not seen as occupied). cs3 mixes gpu:a100:4 and
    # gpu:h100:2 (6 GPUs, no gpu_type, no NVLink) and reports "gpu:a100:1,gpu:h100:2"
    # without IDX: 1 + 2 = 3 occupied, the lowest free ones 0,1,2 as a stand-in.
    res = build_snapshot(load("21.08-rivos/squeue.json"), load("21.08-rivos/sinfo.json"),
                         cfg_of(tiers={"default": 3}), now=1685737600,
                         read_sidecar=lambda j: ({}, []))
    nodes = {n["id"]: n for n in res.snapshot["nodes"]}
    assert {k: (n["gpus"], n["gpu_type"], n["nvlink"]) for k, n in nodes.items()} == {
        "cs2.example.company.com": (8, "a100", "none"),
        "cs3.example.company.com": (6, None, "none")}
    # "a100" alone may be SXM4 boards (NVSwitch) or PCIe cards (no NVLink): the
    # conservative layout, said
    assert ("NVLink layout not known for GPU model 'a100' on 1 node(s) "
            "(cs2.example.company.com): 'a100' is sold both as SXM boards (NVSwitch) and as "
            "PCIe cards (no NVLink), and the name does not say which; assumed \"none\"") in \
        " ".join(res.warnings)
    jobs = jobs_by_id(res.snapshot)
    assert sorted(jobs) == ["slurm-occupied@cs2.example.company.com",
                            "slurm-occupied@cs3.example.company.com"]
    assert [p["gpus"] for j in jobs.values() for p in j["placement"]] == [[0, 1, 2], [0, 1, 2]]
    assert any("shared GPU GRES in use (mps:10)" in w for w in res.warnings)
    assert any(w.startswith("node cs3.example.company.com has several GPU types (a100:4, "
                            "h100:2)") for w in res.warnings)
    assert res.tiers.gpu_jobs == 0  # the squeue's two jobs ask for no GPUs
    from models import load_snapshot
    load_snapshot(res.snapshot)


def test_manual_path_puts_the_snapshot_warnings_into_the_plan(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # slurm snapshot -> plan -> slurm apply: the rivos fixture's two nodes hold GPUs
    # of jobs squeue does not list (slurm-occupied@cs2 and @cs3). The snapshot file
    # carries its warnings (the contract's optional snapshot.warnings) and plan()
    # copies them into plan.warnings, which slurm apply and a reader see.
    from planner.commands.slurm import main

    cfg = tmp_path / "slurm.yaml"
    cfg.write_text(json.dumps({"tiers": {"default": 3}}))
    out = tmp_path / "snap.json"
    assert main(["snapshot", "--config", str(cfg),
                 "--squeue-json", str(FIX / "21.08-rivos/squeue.json"),
                 "--nodes-json", str(FIX / "21.08-rivos/sinfo.json"),
                 "--now", "1685737600", "--out", str(out)]) == 0
    snap = json.loads(out.read_text())
    occupied = [w for w in snap["warnings"] if w.startswith("slurm-occupied@")]
    assert [w.split(":")[0] for w in occupied] == ["slurm-occupied@cs2.example.company.com",
                                                   "slurm-occupied@cs3.example.company.com"]
    p = _plan(snap)
    assert p.warnings[:len(snap["warnings"])] == snap["warnings"]
    assert [w.split(":")[0] for w in p.warnings if w.startswith("slurm-occupied@")] == \
        ["slurm-occupied@cs2.example.company.com", "slurm-occupied@cs3.example.company.com"]


def test_completing_jobs_explain_the_gpus_they_still_hold() -> None:
    # 23.11: dgx04 reports GPU 0 in use; the only job there is 112, COMPLETING
    # (left out: its GPUs are about to be free). It explains GPU 0: no synthetic job.
    res = build_snapshot(load("23.11/squeue.json"), load("23.11/scontrol_nodes.json"),
                         cfg_of(**CFG_2311), now=NOW_2311, read_sidecar=lambda j: ({}, []))
    assert not [j for j in res.snapshot["jobs"] if j["id"].startswith("slurm-occupied@")]
    # (101 and 104 name a signal in their comment, 102 and 103 do not)
    assert res.warnings == [unsaid("102", "103")]


def test_tick_puts_the_snapshot_warnings_into_the_plan(tmp_path: Path) -> None:
    # One dry-run tick on the 22.05 fixture without job 19: the written plan's
    # warnings name slurm-occupied@gpu1 (and the other snapshot warnings).
    from planner.adapters.slurm.run import run_loop

    fake = FakeSlurm({}, squeue=_without(load("22.05/squeue.json"), 19),
                     nodes=load("22.05/sinfo.json"))
    cfg = cfg_of(**CFG_2205, plan_dir=str(tmp_path))
    assert run_loop(cfg, interval_s=0.01, ticks=1, runner=fake, dry_run=True) == 0
    doc = json.loads(next(tmp_path.glob("tick-*.json")).read_text())
    warnings = doc["plan"]["warnings"]
    assert [w for w in warnings if w.startswith("slurm-occupied@gpu1: 8 GPU(s) of gpu1 are in "
                                                "use by 'gpu:8'")]
    assert warnings == doc["snapshot"]["warnings"]
    assert "slurm-occupied@gpu1" in {j["id"] for j in doc["snapshot"]["jobs"]}


def test_cli_snapshot_prints_the_warnings(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    from planner.commands.slurm import main

    (tmp_path / "c.json").write_text(json.dumps(CFG_2205))
    (tmp_path / "sq.json").write_text(json.dumps(_without(load("22.05/squeue.json"), 19)))
    status = main(["snapshot", "--config", str(tmp_path / "c.json"),
                   "--squeue-json", str(tmp_path / "sq.json"),
                   "--nodes-json", str(FIX / "22.05/sinfo.json"), "--now", str(NOW_2205)])
    captured = capsys.readouterr()
    assert status == 0
    assert "warning: slurm-occupied@gpu1: 8 GPU(s) of gpu1 are in use by 'gpu:8'" in captured.err
    assert "warning: no state_file in the config" in captured.err
    snap = json.loads(captured.out)
    assert [j["placement"] for j in snap["jobs"] if j["id"] == "slurm-occupied@gpu1"] == \
        [[{"node": "gpu1", "gpus": [0, 1, 2, 3]}]]


# ------------------------------------------------------- 2. MIG, PCIe, NVLink

NOW_MIG = 1722274706  # last_update of the slurmrestd node listing


def test_mig_and_pcie_nodes_from_real_slurmrestd_output() -> None:
    # tests/fixtures/slurm/23.11-mig: real slurmrestd v0.0.40 nodes (Slurm 23.11.1)
    # with MIG GRES gpu:1g.10gb:21 on n0161-n0163, PCIe A100s (n0160, n0164) and H100
    # HBM3 boards (n0999, n1000); the squeue is an edited copy of the same cluster's
    # job listing with GPU jobs on them.
    cfg = cfg_of(tiers={"partitions": {"gpu": 2, "gpulong": 3}})
    res = build_snapshot(load("23.11-mig/squeue.json"), load("23.11-mig/scontrol_nodes.json"),
                         cfg, now=NOW_MIG, read_sidecar=lambda j: ({}, []))
    nodes = {n["id"]: (n["gpus"], n["gpu_type"], n["nvlink"], n["state"])
             for n in res.snapshot["nodes"]}
    assert nodes == {
        # 21 MIG slices are 21 GPUs without NVLink, typed per profile (not one
        # 21-GPU NVSwitch island)
        "n0161": (21, "MIG-1g.10gb", "none", "up"),
        "n0162": (21, "MIG-1g.10gb", "none", "up"),
        "n0163": (21, "MIG-1g.10gb", "none", "up"),
        # "pcie" in the GRES type: no NVLink
        "n0160": (1, "nvidia_a100_80gb_pcie", "none", "up"),
        "n0164": (3, "nvidia_a100_80gb_pcie", "none", "drain"),
        # h100 (SXM, HBM3): one NVSwitch island
        "n0999": (4, "nvidia_h100_80gb_hbm3", "nvswitch", "drain"),
        "n1000": (8, "nvidia_h100_80gb_hbm3", "nvswitch", "up"),
    }  # n0397 has no GPUs: left out
    jobs = jobs_by_id(res.snapshot)
    # n0161 reports IDX 0 in use and no listed job there; n0163 IDX 0-4 with job
    # 7800004 holding 0-3: 4 is unseen. n0162's 0-3,5-9 are exactly 7800002 + 7800003.
    assert jobs["slurm-occupied@n0161"]["placement"] == [{"node": "n0161", "gpus": [0]}]
    assert jobs["slurm-occupied@n0163"]["placement"] == [{"node": "n0163", "gpus": [4]}]
    assert "slurm-occupied@n0162" not in jobs
    mig_job = jobs["7800005"]  # --gres=gpu:1g.10gb:2
    assert (mig_job["gpu_type"], mig_job["topology"], mig_job["gpus_per_node"]) == \
        ("MIG-1g.10gb", "any", 2)
    # the four running jobs are real records of a cluster whose jobs say "requeue":
    # false (JobRequeue=0): Slurm refuses to requeue them, so they are never victims
    # (tier 9, not preemptible, a note each) and their signal is not asked for
    assert {j: jobs[j]["tier"] for j in ("7800001", "7800002", "7800003", "7800004")} == \
        dict.fromkeys(("7800001", "7800002", "7800003", "7800004"), 9)
    assert [n for n in res.notes if "never a victim" in n] == [
        f"job {j}: not requeueable (--no-requeue, or JobRequeue=0): never a victim; its GPUs "
        "are occupied in tier 9, not preemptible"
        for j in ("7800001", "7800002", "7800003", "7800004")]
    assert res.warnings == [w for w in res.warnings if w.startswith("slurm-occupied@")]
    p = _plan(res.snapshot)
    where = {pl.job: pl.placement for pl in p.placements}
    # the MIG job goes to MIG slices that are free (not 0 of n0161, 4 of n0163,
    # 0-3/5-9 of n0162) ...
    (part,) = where["7800005"]
    busy = {"n0161": {0}, "n0162": {0, 1, 2, 3, 5, 6, 7, 8, 9}, "n0163": {0, 1, 2, 3, 4}}
    assert part.node in busy and not set(part.gpus) & busy[part.node]
    # ... and the 2-GPU job with topology "nvlink" can only use the H100 board: MIG
    # slices and PCIe cards have no NVLink (before, the MIG nodes were NVSwitch too)
    assert [x.node for x in where["7800006"]] == ["n1000"]
    assert p.evictions == []


def test_gpu_models_and_their_nvlink_layout() -> None:
    from planner.adapters.gpu_models import AMBIGUOUS, SXM2, model_layout
    from planner.adapters.slurm.parse import contract_gpu_type, mig_profile

    for names, layout in [
            (["b200"], "nvswitch"), (["gb200"], "nvswitch"), (["nvidia_h100_80gb_hbm3"],
                                                               "nvswitch"),
            (["nvidia_a100-sxm4-80gb"], "nvswitch"), (["gpu", "hgx"], "nvswitch"),
            (["nvidia_h200"], "nvswitch"),  # NVML's name of the H200 SXM; the NVL says nvl
            (["nvidia_a100_80gb_pcie"], "none"), (["h100", "pcie"], "none"),
            (["l4"], "none"), (["l40"], "none"), (["l40s"], "none"), (["a10"], "none"),
            (["tesla_t4"], "none"), (["nvidia_h100_nvl"], "none"), (["nvidia_h200_nvl"], "none"),
            (["rtx6000"], "none"), ([], None), (["a1000"], None),
            # sold as SXM boards and as PCIe cards: the bare name does not say which
            (["a100"], None), (["h100"], None), (["h200"], None), (["nvidia_a100"], None),
            # SXM2 (DGX-1) is a hybrid cube-mesh, not all-to-all, unlike SXM3 and later
            (["tesla_v100-sxm2-16gb"], None), (["tesla_v100-sxm3-32gb"], "nvswitch")]:
        assert model_layout(names).layout == layout, names
    assert model_layout(["a100"]).caveat == AMBIGUOUS
    assert model_layout(["tesla_v100-sxm2-16gb"]).caveat == SXM2
    assert model_layout(["gb200"]).nvl72 and not model_layout(["b200"]).nvl72
    # "a10" is a whole word: an a100 is not an A10 (it is ambiguous, not "none")
    assert model_layout(["nvidia_a100"]).word == "a100"
    assert mig_profile("1g.10gb") == "1g.10gb" and mig_profile("3g.20gb") == "3g.20gb"
    assert mig_profile("nvidia_a100_3g.39gb") == "3g.39gb" and mig_profile("a100") is None
    assert mig_profile("nvidia_a100_80gb_pcie") is None
    cfg = cfg_of(gpu_types={"h100": "H100", "2g.20gb": "A100-2g"})
    assert [contract_gpu_type(t, cfg) for t in ("h100", "a100", "1g.10gb", "2g.20gb", None)] == \
        ["H100", "a100", "MIG-1g.10gb", "A100-2g", None]


def _nodes_doc(*records: tuple[str, str, str, list[str]]) -> dict[str, Any]:
    """A minimal sinfo --json (v0.0.38 shape): (name, gres, gres_used, features)."""
    return {"nodes": [{"name": n, "state": "idle", "state_flags": [], "gres": g,
                       "gres_used": u, "features": ",".join(f), "partitions": ["p"]}
                      for n, g, u, f in records]}


def test_nvlink_default_from_the_model_rules_and_features() -> None:
    doc = _nodes_doc(("a1", "gpu:a100:8", "gpu:a100:0(IDX:N/A)", []),
                     ("u1", "gpu:8", "gpu:0", []),
                     ("u2", "gpu:8", "gpu:0", ["h100", "sxm5"]),
                     ("u3", "gpu:4", "gpu:0", ["l40s"]),
                     ("m1", "gpu:3g.20gb:2", "gpu:3g.20gb:0(IDX:N/A)", []),
                     ("m2", "gpu:1g.10gb:14,gpu:3g.20gb:2", "gpu:0", []))
    res = build_snapshot({"jobs": []}, doc, cfg_of(tiers={"default": 3}), now=NOW_2205)
    nodes = {n["id"]: (n["gpu_type"], n["nvlink"]) for n in res.snapshot["nodes"]}
    assert nodes == {"a1": ("a100", "none"),  # a100: SXM4 or PCIe? conservative, said
                     "u1": (None, "none"),  # unknown model: conservative, with a warning
                     "u2": (None, "nvswitch"), "u3": (None, "none"),  # from the features
                     "m1": ("MIG-3g.20gb", "none"), "m2": (None, "none")}
    assert any(w.startswith("NVLink layout unknown for GPU model \"untyped GRES 'gpu'\" and no "
                            "known model in its features on 1 node(s) (u1)") for w in res.warnings)
    assert any(w.startswith("NVLink layout not known for GPU model 'a100' on 1 node(s) (a1): "
                            "'a100' is sold both as SXM boards") for w in res.warnings)
    assert any(w.startswith("node m2 has several GPU types (1g.10gb:14, 3g.20gb:2)")
               for w in res.warnings)
    # the config's node rules keep precedence, and silence the unknown-model warning;
    # against MIG they lose, with a warning
    cfg = cfg_of(tiers={"default": 3}, nodes=[
        {"match": "a1", "nvlink": [[0, 1, 2, 3], [4, 5, 6, 7]]},
        {"match": "u*", "nvlink": "nvswitch"}, {"match": "m1", "nvlink": "nvswitch"}])
    res = build_snapshot({"jobs": []}, doc, cfg, now=NOW_2205)
    nodes = {n["id"]: n["nvlink"] for n in res.snapshot["nodes"]}
    assert nodes == {"a1": [[0, 1, 2, 3], [4, 5, 6, 7]], "u1": "nvswitch", "u2": "nvswitch",
                     "u3": "nvswitch", "m1": "none", "m2": "none"}
    assert not any(w.startswith("NVLink layout") for w in res.warnings)
    assert "node m1: its GPUs are MIG slices (3g.20gb); the nodes rule 'm1' sets nvlink " \
        "'nvswitch', which is ignored (MIG slices have no NVLink and keep their own type " \
        "'MIG-3g.20gb')" in res.warnings


def test_sxm2_and_gb200_nodes() -> None:
    # A DGX-1 (V100 SXM2: a hybrid cube-mesh, not all-to-all) is not nvswitch; GB200
    # nodes are NVSwitch inside and one NVL72 domain per rack, which Slurm's output
    # does not give: each node is its own domain, said once, unless a rule says it
    doc = _nodes_doc(("v1", "gpu:tesla_v100-sxm2-16gb:8", "gpu:0", []),
                     ("gb1", "gpu:gb200:4", "gpu:0", []), ("gb2", "gpu:gb200:4", "gpu:0", []))
    res = build_snapshot({"jobs": []}, doc, cfg_of(tiers={"default": 3}), now=NOW_2205)
    nodes = {n["id"]: (n["nvlink"], n.get("nvlink_domain")) for n in res.snapshot["nodes"]}
    assert nodes == {"v1": ("none", None), "gb1": ("nvswitch", "gb1"),
                     "gb2": ("nvswitch", "gb2")}
    assert ("NVLink layout not known for GPU model 'tesla_v100-sxm2-16gb' on 1 node(s) (v1): "
            "'sxm2' is an SXM2 board (DGX-1: P100, V100), whose GPUs are linked in a hybrid "
            "cube-mesh, not all to all; assumed \"none\"") in " ".join(res.warnings)
    assert ("gb200 node(s) gb1, gb2: Slurm's output does not say which nodes share an NVLink "
            "domain (an NVL72 rack): each node is taken as its own domain (a job that asks "
            "for one NVLink domain stays on one node); set `nvlink_domain` in a `nodes` rule "
            "of the config") in res.warnings
    cfg = cfg_of(tiers={"default": 3}, nodes=[{"match": "gb[1-2]", "nvlink_domain": "nvl72-a"}])
    res = build_snapshot({"jobs": []}, doc, cfg, now=NOW_2205)
    assert {n["id"]: n.get("nvlink_domain") for n in res.snapshot["nodes"]} == {
        "v1": None, "gb1": "nvl72-a", "gb2": "nvl72-a"}
    assert not any(w.startswith("gb200 node(s)") for w in res.warnings)


# --------------------------------------- 3. tier mapping and foreign documents

def test_snapshot_refuses_a_config_without_tiers(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    # No config at all: every running job would be unmanaged, every pending one left
    # out, the plan empty, exit 0. Now: exit 2 saying what to add.
    from planner.commands.slurm import main

    monkeypatch.delenv("PREEMPT_PLANNER_SLURM_CONFIG", raising=False)
    files = ["--squeue-json", str(FIX / "22.05/squeue.json"),
             "--nodes-json", str(FIX / "22.05/sinfo.json"), "--now", str(NOW_2205)]
    assert main(["snapshot", *files]) == 2
    err = capsys.readouterr().err
    assert "slurm config (none given: no --config, $PREEMPT_PLANNER_SLURM_CONFIG unset)" in err
    assert "the config maps no Slurm job to a tier" in err
    assert "tiers: {partitions: {prod: 1, research: 2, spot: 3}}" in err
    assert "--default-tier N" in err
    # --default-tier 3 maps every job: the 5 running GPU jobs (19, 20, 25, 26, 27)
    # and the one pending job that can be planned (29) are all tier 3
    assert main(["snapshot", *files, "--default-tier", "3"]) == 0
    snap = json.loads(capsys.readouterr().out)
    assert sorted((j["id"], j["tier"]) for j in snap["jobs"]) == [
        ("19", 3), ("20", 3), ("25", 3), ("26", 3), ("27", 3), ("29", 3)]
    assert main(["snapshot", *files, "--default-tier", "0"]) == 2


def test_a_document_of_another_tool_is_named_before_the_missing_tier_mapping(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # No config and a kubectl PodList as the job listing: the wrong document is the
    # first thing to fix, so that is what the message says (not the tier mapping)
    from planner.commands.slurm import main

    monkeypatch.delenv("PREEMPT_PLANNER_SLURM_CONFIG", raising=False)
    assert main(["snapshot", "--squeue-json", str(FIX.parent / "k8s" / "pods.json"),
                 "--nodes-json", str(FIX / "22.05/sinfo.json"), "--now", str(NOW_2205)]) == 2
    err = capsys.readouterr().err
    assert "this looks like a Kubernetes PodList (kubectl get pods -o json)" in err
    assert "maps no Slurm job to a tier" not in err


def test_snapshot_refuses_a_config_that_maps_none_of_the_jobs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A mapping that matches nothing (a typo, another cluster's partitions): the
    # 22.05 squeue lists 12 GPU jobs, running 19, 20, 25, 26, 27 and pending 21-24,
    # 29, 30, 31, in partitions tier1, tier2, tier3, none of them mapped.
    from planner.commands.slurm import main

    (tmp_path / "c.json").write_text(json.dumps({"tiers": {"partitions": {"gpu": 1}}}))
    status = main(["snapshot", "--config", str(tmp_path / "c.json"),
                   "--squeue-json", str(FIX / "22.05/squeue.json"),
                   "--nodes-json", str(FIX / "22.05/sinfo.json"), "--now", str(NOW_2205)])
    err = capsys.readouterr().err
    assert status == 2
    assert "none of the 12 GPU job(s) in squeue maps to a tier of the config (they have: " \
        "partitions tier1, tier2, tier3)" in err


def test_run_refuses_a_config_without_tiers(monkeypatch: pytest.MonkeyPatch) -> None:
    from planner.adapters.slurm.run import run_loop

    calls: list[list[str]] = []

    def runner(argv: list[str], timeout: float) -> tuple[int, str, str]:
        calls.append(argv)
        return 1, "", "not reached"

    # statically: before any command runs
    assert run_loop(cfg_of(), interval_s=0.01, ticks=3, runner=runner) == 2
    assert calls == []
    # a mapping none of the listed GPU jobs matches: the first tick stops the loop
    fake = _fake_cluster()
    assert run_loop(cfg_of(tiers={"partitions": {"gpu": 1}}), interval_s=0.01, ticks=3,
                    runner=fake) == 2
    assert [a[0] for _, a in fake.calls] == ["squeue", "sinfo"]  # one read, no apply
    # and through the command line, also for `slurm run`
    import cli

    monkeypatch.delenv("PREEMPT_PLANNER_SLURM_CONFIG", raising=False)
    assert cli.main(["slurm", "run", "--ticks", "1", "--dry-run"]) == 2


def test_accounts_map_tiers_after_qos_and_partition() -> None:
    # 23.11: 101 is QOS normal (tier 2 by QOS, whatever its account); with only an
    # accounts mapping, 101 (account llm) -> 1 and 102 (vision) -> 3; 103 has no
    # account and is unmanaged (tier 9).
    cfg = cfg_of(tiers={"accounts": {"llm": 1, "vision": 3}})
    res = build_snapshot(load("23.11/squeue.json"), load("23.11/scontrol_nodes.json"), cfg,
                         now=NOW_2311, read_sidecar=lambda j: ({}, []))
    jobs = jobs_by_id(res.snapshot)
    assert (jobs["101"]["tier"], jobs["102"]["tier"], jobs["103"]["tier"]) == (1, 3, 9)
    res = build_snapshot(load("23.11/squeue.json"), load("23.11/scontrol_nodes.json"),
                         cfg_of(tiers={"qos": {"normal": 2}, "accounts": {"llm": 1}}),
                         now=NOW_2311, read_sidecar=lambda j: ({}, []))
    assert jobs_by_id(res.snapshot)["101"]["tier"] == 2


_PLAN_DOC = {"version": 1, "now": "2026-11-29T08:00:00Z", "status": "optimal",
             "objective": {}, "evictions": [], "placements": [], "deferred": [],
             "solver": {"engine": "cp-sat", "status": "OPTIMAL"}}


@pytest.mark.parametrize(("where", "doc", "message"), [
    ("squeue", "k8s/pods.json",
     ("this looks like a Kubernetes PodList (kubectl get pods -o json); use the output of "
     "`squeue --all --json` here (a Kubernetes cluster has its own adapter: "
     "`preempt-planner k8s snapshot`)")),
    ("nodes", "k8s/nodes.json",
     ("this looks like a Kubernetes NodeList (kubectl get nodes -o json); use the output of "
     "`sinfo --json` or `scontrol show nodes --json` here (a Kubernetes cluster has its own "
     "adapter: `preempt-planner k8s snapshot`)")),
    ("squeue", "../../instances/example-70b.json",
     ("this looks like a preempt-planner snapshot (contract v1), not Slurm output; use the "
     "output of `squeue --all --json` here (a snapshot is planned as it is: "
     "`preempt-planner plan FILE`)")),
    ("squeue", _PLAN_DOC,
     ("this looks like a preempt-planner plan; use the output of `squeue --all --json` here "
     "(a plan is carried out with `preempt-planner slurm apply FILE`)")),
    ("squeue", "slurm/22.05/sinfo.json",
     ("this looks like `sinfo --json` or `scontrol show nodes --json` output (a node list); use "
     "the output of `squeue --all --json` here (and give this one as the node listing, "
     "--nodes-json)")),
    ("squeue", "slurm/23.11/sinfo.json",
     ("this looks like `sinfo --json` output (a node list); use the output of `squeue --all "
     "--json` here (and give this one as the node listing, --nodes-json)")),
    ("nodes", "slurm/22.05/squeue.json",
     ("this looks like `squeue --json` output (a job list); use the output of `sinfo --json` "
     "or `scontrol show nodes --json` here (and give this one as the job listing, "
     "--squeue-json)")),
    ("squeue", [1, 2],
     ("this looks like a JSON list, not a JSON object; use the output of `squeue --all --json` "
     "here")),
])
def test_a_document_of_another_tool_is_refused_with_one_message(
        where: str, doc: Any, message: str) -> None:
    if isinstance(doc, str):
        doc = json.loads((FIX.parent / doc).read_text())
    squeue = doc if where == "squeue" else load("22.05/squeue.json")
    nodes = doc if where == "nodes" else load("22.05/sinfo.json")
    with pytest.raises(InputError) as exc:
        build_snapshot(squeue, nodes, cfg_of(**CFG_2205), now=NOW_2205)
    assert exc.value.errors == [message]


def test_cli_refuses_a_foreign_document_with_exit_2(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from planner.commands.slurm import main

    (tmp_path / "c.json").write_text(json.dumps(CFG_2205))
    pods = FIX.parent / "k8s/pods.json"
    status = main(["snapshot", "--config", str(tmp_path / "c.json"), "--squeue-json", str(pods),
                   "--nodes-json", str(FIX / "22.05/sinfo.json")])
    err = capsys.readouterr().err
    assert status == 2
    assert f"--squeue-json {pods}: 1 problem(s)" in err
    assert "this looks like a Kubernetes PodList (kubectl get pods -o json)" in err
    # and a squeue document given to `slurm apply` as the plan
    status = main(["apply", str(FIX / "22.05/squeue.json"), "--dry-run"])
    err = capsys.readouterr().err
    assert status == 2
    assert "this looks like `squeue --json` output (a job list); use a plan " \
        "(`preempt-planner plan SNAPSHOT --format json`) here" in err


# -------------------------------------------- 4. apply: plan age and re-checks

def test_apply_refuses_a_stale_plan() -> None:
    from planner.adapters.slurm.apply import StalePlan

    # PLAN was made for t = 1000 (1970-01-01T00:16:40Z); interval_s 30 by default,
    # so max_plan_age_s null means 2 x 30 = 60 s
    fake = FakeSlurm({"21": 0.0, "22": 0.0, "23": 0.0})
    fake.t = 1061.0
    with pytest.raises(StalePlan) as exc:
        apply_plan(PLAN, cfg_of(), runner=fake, clock=fake.clock, sleep=fake.sleep)
    assert exc.value.errors == [
        ("the plan is 61 s old (made for 1970-01-01T00:16:40Z, now 1970-01-01T00:17:41Z), older "
        "than max_plan_age_s 60 s: the cluster has moved on since; make a new plan (or give "
        "--force)")]
    assert fake.calls == []  # nothing ran: no pin, no signal
    fake.t = 1060.0  # exactly 60 s old: still fresh
    assert apply_plan(PLAN, cfg_of(), runner=fake, clock=fake.clock, sleep=fake.sleep).ok
    fake = FakeSlurm({"21": 0.0, "22": 0.0, "23": 0.0})
    fake.t = 1061.0  # a configured limit of 120 s
    assert apply_plan(PLAN, cfg_of(max_plan_age_s=120), runner=fake, clock=fake.clock,
                      sleep=fake.sleep).ok
    fake = FakeSlurm({"21": 0.0, "22": 0.0, "23": 0.0})
    fake.t = 939.0  # a plan from 61 s in the future: the clocks disagree
    with pytest.raises(StalePlan, match="61 s ahead of this host's clock"):
        apply_plan(PLAN, cfg_of(), runner=fake, clock=fake.clock, sleep=fake.sleep)
    fake.t = 5000.0  # --force: carried out, with a warning
    rep = apply_plan(PLAN, cfg_of(), runner=fake, clock=fake.clock, sleep=fake.sleep,
                     force=True)
    assert rep.warnings[0].startswith("the plan is 4000 s old") and \
        rep.warnings[0].endswith("; applied anyway (--force)")
    assert len(fake.commands("requeuehold")) == 3


def test_cli_apply_refuses_a_stale_plan(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    from planner.commands.slurm import main

    (tmp_path / "plan.json").write_text(json.dumps(_plan_document()))  # made in 1970
    assert main(["apply", str(tmp_path / "plan.json"), "--dry-run"]) == 2
    captured = capsys.readouterr()
    assert "older than max_plan_age_s 60 s" in captured.err and "scancel" not in captured.out
    assert main(["apply", str(tmp_path / "plan.json"), "--dry-run", "--force"]) == 0
    captured = capsys.readouterr()
    assert "scancel --signal=TERM --batch 21" in captured.out
    assert "; applied anyway (--force)" in captured.err


def test_cli_apply_prints_each_warning_once(tmp_path: Path) -> None:
    # `slurm apply --force` of PLAN, made in 1970: one warning about its age. Without
    # --dry-run the victims are re-checked, and a fake squeue says all three (21, 22,
    # 23) run on gpu4, none of the nodes the plan frees for 27 (gpu2, gpu3): three
    # warnings more, nobody signalled. Each is printed once on stderr (the adapter's
    # logger printed each a second time). A process of its own, so that the log goes
    # to stderr as it does for a user (under pytest it goes to pytest's handler).
    import subprocess
    import sys

    fake = tmp_path / "fake-slurm"  # every Slurm command: exit 0, squeue answers
    fake.write_text("#!/bin/sh\ncase \"$*\" in *--jobs=*) "
                    "printf '21|RUNNING|gpu4\\n22|RUNNING|gpu4\\n23|RUNNING|gpu4\\n';; esac\n"
                    "exit 0\n")
    fake.chmod(0o755)
    (tmp_path / "c.json").write_text(json.dumps({
        "commands": {c: str(fake) for c in ("squeue", "sinfo", "scontrol", "scancel")},
        "state_file": str(tmp_path / "state.json")}))
    (tmp_path / "plan.json").write_text(json.dumps(_plan_document()))

    def apply(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "planner.adapters.slurm", "apply", str(tmp_path / "plan.json"),
             "--force", "--config", str(tmp_path / "c.json"), *extra],
            capture_output=True, text=True, timeout=120, check=False,
            cwd=Path(__file__).resolve().parent.parent)

    dry = apply("--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stderr.count("the plan is ") == 1
    assert dry.stderr.count("; applied anyway (--force)") == 1
    real = apply()
    assert real.returncode == 0, real.stderr
    assert real.stderr.count("the plan is ") == 1
    for jid in ("21", "22", "23"):
        assert real.stderr.count(f"victim {jid}") == 1, real.stderr
        assert (f"warning: victim {jid}: now runs on gpu4, none of the nodes the plan frees "
                "for its preemptors (gpu2,gpu3): it moved; not evicted") in real.stderr
    assert "scancel" not in real.stderr and "requeuehold" not in real.stderr


def test_apply_skips_a_victim_that_moved() -> None:
    # 27 is planned on gpu2 and gpu3, so every victim must still hold GPUs there;
    # 21 now runs on gpu4 (requeued and restarted elsewhere since the snapshot):
    # skipped, reported; 22 (gpu2) and 23 (gpu[2-3]) are evicted.
    fake = FakeSlurm({"21": 0.0, "22": 0.0, "23": 0.0},
                     where={"21": "gpu4", "22": "gpu2", "23": "gpu[2-3]"})
    state = AdapterState()
    rep = apply_plan(PLAN, cfg_of(), runner=fake, clock=fake.clock, sleep=fake.sleep,
                     state=state)
    assert rep.ok
    assert fake.commands("scancel") == [["scancel", "--signal=USR1", "--batch", "22"]]
    assert sorted(a[2] for a in fake.commands("requeuehold")) == ["22", "23"]
    out = {v.job: v for v in rep.victims}
    assert out["21"].skipped == ("now runs on gpu4, none of the nodes the plan frees for its "
                                 "preemptors (gpu2,gpu3): it moved")
    assert rep.warnings == [f"victim 21: {out['21'].skipped}; not evicted"]
    assert set(state.preempted) == {"22", "23"}
    # both finished at the first poll (22 stopped at once, 23 has no signal), in plan order
    assert [e["job"] for e in state.evictions] == ["22", "23"]


def test_apply_skips_a_victim_not_on_its_snapshot_nodes() -> None:
    # With the snapshot's nodes (`slurm run`, or `slurm apply --snapshot`), the check
    # is exact: 22 held gpu2 and gpu3 in the snapshot and now runs on gpu2 only.
    fake = FakeSlurm({"21": 0.0, "22": 0.0, "23": 0.0},
                     where={"21": "gpu2", "22": "gpu2", "23": "gpu3"})
    rep = apply_plan(PLAN, cfg_of(), runner=fake, clock=fake.clock, sleep=fake.sleep,
                     expected_nodes={"21": {"gpu2"}, "22": {"gpu2", "gpu3"}, "23": {"gpu3"}})
    out = {v.job: v for v in rep.victims}
    assert out["22"].skipped == "now runs on gpu2, not on gpu2,gpu3 as in the snapshot (it moved)"
    assert [a[-1] for a in fake.commands("scancel")] == ["21"]
    assert out["21"].requeued and out["23"].requeued and not out["22"].requeued


def test_apply_signals_nobody_when_the_recheck_fails() -> None:
    fake = FakeSlurm({"21": 0.0, "22": 0.0, "23": 0.0}, fail={"--jobs="})
    rep = apply_plan(PLAN, cfg_of(), runner=fake, clock=fake.clock, sleep=fake.sleep)
    assert not rep.ok
    assert rep.problems == [("cannot re-check the victims' state (squeue failed): no victim "
                            "signalled this time")]
    assert not fake.commands("scancel") and not fake.commands("requeuehold")
    assert len(fake.commands("ReqNodeList")) == 1  # the pin was set before (harmless)


def test_requeuehold_is_retried_for_a_signalled_victim() -> None:
    # requeuehold of 21 fails twice, then works: 3 calls, then StartTime and release;
    # the two failed tries were retried successfully, so the report is ok.
    fake = FakeSlurm({"21": 0.0, "22": 0.0, "23": 0.0}, fail={"requeuehold 21"}, fail_times=2)
    rep = apply_plan(PLAN, cfg_of(), runner=fake, clock=fake.clock, sleep=fake.sleep)
    assert [a[2] for a in fake.commands("requeuehold 21")] == ["21", "21", "21"]
    assert rep.ok and {v.job: v for v in rep.victims}["21"].released
    assert ["scontrol", "release", "21"] in fake.commands("release")
    # always failing: 3 tries, then reported loudly; never released
    fake = FakeSlurm({"21": 0.0, "22": 0.0, "23": 0.0}, fail={"requeuehold 21"})
    rep = apply_plan(PLAN, cfg_of(), runner=fake, clock=fake.clock, sleep=fake.sleep)
    assert len(fake.commands("requeuehold 21")) == 3 and len(rep.failures) == 3
    assert "victim 21 was signalled but requeuehold failed 3 times: it is not held back; hold " \
        "it by hand: scontrol requeuehold 21" in rep.problems
    assert not [a for a in fake.commands("21") if a[:2] == ["scontrol", "release"]]


def test_an_interrupted_apply_still_holds_back_what_it_signalled() -> None:
    # 21 and 22 never stop; the first poll sleep is interrupted (a second SIGINT).
    # 23 (no signal) was finished at once; 21 and 22 were signalled, so they are
    # requeue-held before the interrupt goes on, with StartTime up to their hold:
    # 21's is 1605 - 1000 = 605 s away.
    fake = FakeSlurm({"21": float("inf"), "22": float("inf"), "23": 0.0})

    def interrupted(_: float) -> None:
        raise KeyboardInterrupt

    state = AdapterState()
    with pytest.raises(KeyboardInterrupt):
        apply_plan(PLAN, cfg_of(), runner=fake, clock=fake.clock, sleep=interrupted,
                   state=state)
    assert sorted(a[2] for a in fake.commands("requeuehold")) == ["21", "22", "23"]
    starts = {a[2]: a[3] for a in fake.commands("StartTime=")}
    assert starts["JobId=21"] == "StartTime=now+605" and starts["JobId=22"] == "StartTime=now+608"
    assert set(state.preempted) == {"21", "22", "23"}


def test_a_victim_that_overruns_its_grace_is_a_warning() -> None:
    fake = FakeSlurm({"21": 0.0, "22": float("inf"), "23": 0.0},
                     where={"21": "gpu2", "22": "gpu2", "23": "gpu3"})
    rep = apply_plan(PLAN, cfg_of(poll_interval_s=0.5), runner=fake, clock=fake.clock,
                     sleep=fake.sleep)
    assert rep.ok and rep.warnings == [
        ("victim 22 did not exit within its grace of 8 s after SIGUSR1: requeuehold stops it "
        "(does the job trap the signal and checkpoint in time?)")]


def test_expected_nodes_of_a_snapshot_merge_pieces_and_skip_synthetic_jobs() -> None:
    # what `slurm run` (and `slurm apply --snapshot`) re-check victims against:
    # 22.05-typed job 2 is two pieces (2@gpu1, 2@gpu2), one Slurm job on both nodes;
    # with job 1 cut out, slurm-occupied@gpu1 is no Slurm job and not listed.
    from planner.adapters.slurm.run import expected_nodes

    res = build_snapshot(_without(load("22.05-typed/squeue.json"), 1),
                         load("22.05-typed/sinfo.json"), cfg_of(tiers={"default": 3}),
                         now=NOW_2205_TYPED, read_sidecar=lambda j: ({}, []))
    assert expected_nodes(res.snapshot) == {"2": {"gpu1", "gpu2"}, "3": {"gpu2"},
                                            "5": {"gpu2"}}


def test_running_gpus_of_a_snapshot_sum_pieces_and_skip_synthetic_jobs() -> None:
    # the GPUs the state file keeps with each eviction (R15's GPU budget), from the
    # snapshot of the test above: job 2 holds 5 GPUs on gpu1 and 2 on gpu2 (7), job 3
    # one, job 5 four; slurm-occupied@gpu1 (3 GPUs of no listed job) is no victim.
    # A snapshot given by hand whose counts are not whole numbers loses those jobs.
    from planner.adapters.slurm.run import running_gpus

    res = build_snapshot(_without(load("22.05-typed/squeue.json"), 1),
                         load("22.05-typed/sinfo.json"), cfg_of(tiers={"default": 3}),
                         now=NOW_2205_TYPED, read_sidecar=lambda j: ({}, []))
    assert running_gpus(res.snapshot) == {"2": 7, "3": 1, "5": 4}
    odd = {"jobs": [{"id": "7", "state": "running", "gpus_per_node": "8"},
                    {"id": "8", "state": "running", "gpus_per_node": 2, "nodes": 3},
                    {"id": "9", "state": "pending", "gpus_per_node": 4}, "junk"]}
    assert running_gpus(odd) == {"8": 6}


# ------------------------- 5. jobs Slurm cannot requeue: arrays, het jobs, no-requeue

def _tick_evicting(**job20: Any):
    """One tick of _evicting_cluster with job 20's squeue record updated by `job20`
    (a value None deletes the field): (result, fake). In the unchanged cluster 30
    (tier 1, 8 GPUs, pending) fits only on gpu1, by evicting 20 (tier 3, GPUs 4-7);
    gpu2 and gpu3 hold 27 (tier 1) and gpu4 is drained."""
    from planner.adapters.slurm.run import tick

    fake = _evicting_cluster()
    for j in fake.squeue["jobs"]:
        if j["job_id"] == 20:
            for key, value in job20.items():
                if value is None:
                    j.pop(key, None)
                else:
                    j[key] = value
    result = tick(cfg_of(**CFG_2205), AdapterState(), runner=fake, clock=fake.clock,
                  sleep=fake.sleep)
    return result, fake


def _slurm_actions(fake: FakeSlurm) -> list[tuple[str, ...]]:
    """The scancel/scontrol commands a fake Slurm received, as (verb, job) pairs."""
    out = []
    for _, a in fake.calls:
        if a[0] == "scancel":
            out.append(("scancel", a[-1]))
        elif a[0] == "scontrol":
            job = a[2].removeprefix("JobId=")
            out.append((a[1] if a[1] != "update" else a[3].partition("=")[0], job))
    return out


NEVER_NOTE = "job 20: {}: never a victim; its GPUs are occupied in tier 9, not preemptible"


@pytest.mark.parametrize("fields,why", [
    # task 7 of array 20: Slurm keeps the array's id for its last-started task, and a
    # command on the bare id 20 (update, requeuehold, release) acts on every task
    ({"array_job_id": 20, "array_task_id": 7}, "task 7 of job array 20"),
    # the same in 23.02+'s number objects
    ({"array_job_id": {"set": True, "infinite": False, "number": 20},
      "array_task_id": {"set": True, "infinite": False, "number": 7}},
     "task 7 of job array 20"),
    # a task with an id of its own (20 = task 0 of array 12)
    ({"array_job_id": 12, "array_task_id": 0}, "task 0 of job array 12"),
    # sbatch --no-requeue (or JobRequeue=0): requeuehold is refused (ESLURM_DISABLED)
    ({"requeue": False}, "not requeueable (--no-requeue, or JobRequeue=0)"),
    # salloc/srun: only batch jobs are requeued (ESLURM_BATCH_ONLY)
    ({"batch_flag": False}, "not a batch job (salloc or srun): Slurm requeues batch jobs only"),
    # component +1 of het job 19: requeue is refused but for the leader
    # (ESLURM_NOT_HET_JOB_LEADER), and the leader's requeues every component
    ({"het_job_id": 19, "het_job_offset": 1, "het_job_id_set": "19-20"},
     "a component of heterogeneous job 19"),
    # every squeue --json (21.08 on) says batch_flag; without it 20 is not taken for
    # a batch job (Slurm has no default: it depends on the submitting command)
    ({"batch_flag": None}, "not known to be a batch job (squeue gives no batch_flag)"),
    # a value that says neither yes nor no is not a yes
    ({"requeue": "maybe"}, "not known to be requeueable (requeue 'maybe')"),
    # several reasons: all of them
    ({"array_job_id": 20, "array_task_id": 7, "requeue": False},
     "task 7 of job array 20; not requeueable (--no-requeue, or JobRequeue=0)"),
])
def test_a_job_slurm_cannot_requeue_alone_is_never_a_victim(fields: dict[str, Any],
                                                             why: str) -> None:
    # 20 (even with a checkpoint signal) enters in tier 9, the unmanaged tier the
    # adapter adds to the policy as not preemptible, with a note naming it; 30 then
    # fits nowhere: nothing is pinned, signalled or requeued.
    result, fake = _tick_evicting(comment="signal=TERM", **fields)
    job = jobs_by_id(result.snapshot)["20"]
    assert (job["tier"], job["_slurm"]["never_victim"]) == (9, why)
    assert job["placement"] == [{"node": "gpu1", "gpus": [4, 5, 6, 7]}]
    assert result.snapshot["policy"]["tiers"]["9"] == {"preemptible": False,
                                                       "min_runtime_s": 0, "can_preempt": []}
    assert NEVER_NOTE.format(why) in result.snapshot["_slurm"]["notes"]
    assert result.plan.evictions == [] and result.plan.placements == []
    assert [d.job for d in result.plan.deferred] == ["30"]
    assert _slurm_actions(fake) == []


def test_a_job_without_a_requeue_field_is_requeueable_as_slurms_default() -> None:
    # `requeue` missing: Slurm's default (JobRequeue=1) is a requeueable job, so 20
    # is evicted as in the unchanged cluster: 30 pinned to gpu1; 20 has no
    # checkpoint signal (its comment is size_gb=1 restore_s=0), so it is not
    # signalled but requeue-held at once, given its StartTime and released.
    result, fake = _tick_evicting(requeue=None)
    assert [e.job for e in result.plan.evictions] == ["20"]
    assert jobs_by_id(result.snapshot)["20"]["tier"] == 3
    assert _slurm_actions(fake) == [("ReqNodeList", "30"), ("requeuehold", "20"),
                                    ("StartTime", "20"), ("release", "20")]


@pytest.mark.parametrize("fields,what", [
    # `sbatch --array=0-9 --gres=gpu:8`: one pending record for ten tasks, whose id
    # names them all (pinning it would pin every task)
    ({"array_job_id": 30, "array_task_id": None, "array_task_string": "0-9"},
     "tasks 0-9 of job array 30"),
    # a pending task split out of its array (23.02+ number objects)
    ({"array_job_id": {"set": True, "infinite": False, "number": 12},
      "array_task_id": {"set": True, "infinite": False, "number": 3},
      "array_task_string": ""}, "task 3 of job array 12"),
    # a pending het job's leader: its components start together or not at all
    ({"het_job_id": 30, "het_job_offset": 0, "het_job_id_set": "30-31"},
     "a component of heterogeneous job 30"),
])
def test_pending_array_and_het_records_are_left_out(fields: dict[str, Any], what: str) -> None:
    fake = _evicting_cluster()
    (job30,) = [j for j in fake.squeue["jobs"] if j["job_id"] == 30]
    job30.update(fields)
    res = build_snapshot(fake.squeue, fake.nodes, cfg_of(**CFG_2205), now=NOW_2205,
                         read_sidecar=lambda j: ({}, []))
    assert sorted(jobs_by_id(res.snapshot)) == ["20", "27"]
    assert res.notes == [(f"job 30: pending, {what}: left out (the planner places no array "
                         "task or het job component: Slurm's commands on such an id can act "
                         "on the whole array or het job)")]
    # a record without array fields in either shape is no array task: 20 and 27
    assert res.snapshot["jobs"][0]["tier"] == 3


# ------------------------------- 6. victims that end on their own, before or after

def test_a_completing_victim_at_the_recheck_is_left_alone() -> None:
    # 22 finished its work on its own between the snapshot and the re-check and is
    # COMPLETING (its epilog runs): it is on its way out, so it is not signalled nor
    # requeued (requeuing it would run a finished job again). 21 and 23 are evicted.
    fake = FakeSlurm({"21": 0.0, "22": float("inf"), "23": 0.0},
                     where={"21": "gpu2", "22": "gpu2", "23": "gpu3"})
    fake.state["22"] = "COMPLETING"
    state = AdapterState()
    rep = apply_plan(PLAN, cfg_of(), runner=fake, clock=fake.clock, sleep=fake.sleep,
                     state=state)
    assert rep.ok
    assert [a for a in _slurm_actions(fake) if a[1] == "22"] == []
    out = {v.job: v for v in rep.victims}
    assert out["22"].skipped == "was COMPLETING before the signal (ended or requeued on its own)"
    assert rep.warnings == [("victim 22: was COMPLETING before the signal (ended or requeued on "
                            "its own); not evicted")]
    assert out["21"].requeued and out["23"].requeued and set(state.preempted) == {"21", "23"}


@pytest.mark.parametrize("end,why", [
    ("CANCELLED", "cancelled by its owner or an admin"),
    ("TIMEOUT", "it reached its time limit"),
    ("NODE_FAIL", "a node of it failed"),
    ("DEADLINE", "it reached its deadline"),
    ("BOOT_FAIL", "a node of it failed to boot"),
    ("OUT_OF_MEMORY", "it ran out of memory"),
    ("PREEMPTED", "preempted by Slurm itself: is Slurm's own preemption still on for it?"),
])
def test_a_victim_that_ends_otherwise_after_its_signal_is_left_alone(end: str, why: str) -> None:
    # 21 gets SIGTERM at t = 1000 and ends 1 s later in `end`, for a reason of its
    # own: not requeued (no requeuehold, StartTime nor release), named in the
    # report. Its eviction (signalled at 1000) still counts for R15; it gets no
    # preemption record (it is not coming back by the planner's requeue). 22 (no
    # exit) and 23 (no signal) are requeued as usual.
    fake = FakeSlurm({"21": 1.0, "22": float("inf"), "23": 0.0})
    fake.ends["21"] = end
    state = AdapterState()
    rep = apply_plan(PLAN, cfg_of(), runner=fake, clock=fake.clock, sleep=fake.sleep,
                     state=state)
    assert rep.ok
    assert [a for a in _slurm_actions(fake) if a[1] == "21"] == [("scancel", "21")]
    out = {v.job: v for v in rep.victims}
    note = f"ended {end} after its signal ({why}): not requeued, left alone"
    assert (out["21"].ended, out["21"].requeued, out["21"].note) == (end, False, note)
    assert out["21"].stopped_at == "1970-01-01T00:16:41Z"  # the poll at t = 1001
    assert f"victim 21: {note}" in rep.warnings
    assert out["22"].requeued and out["23"].requeued
    assert {"job": "21", "at": "1970-01-01T00:16:40Z"} in state.evictions
    assert set(state.preempted) == {"22", "23"}


@pytest.mark.parametrize("end", ["COMPLETED", "FAILED"])
def test_a_victim_that_exits_after_its_signal_is_requeued(end: str) -> None:
    # a trap that checkpoints and exits ends the job COMPLETED (exit 0) or FAILED:
    # 21 exits 1 s after SIGTERM and is requeued at the poll of t = 1001:
    # requeuehold, StartTime now + (1605 - 1001) = 604 s (its requeue_hold_until is
    # 00:26:45 = 1605), release.
    fake = FakeSlurm({"21": 1.0, "22": float("inf"), "23": 0.0})
    fake.ends["21"] = end
    rep = apply_plan(PLAN, cfg_of(), runner=fake, clock=fake.clock, sleep=fake.sleep)
    assert rep.ok
    assert [a for _, a in fake.calls if a[-1] in ("21", "JobId=21") or a[2:3] == ["JobId=21"]
            ] == [["scancel", "--signal=TERM", "--batch", "21"],
                  ["scontrol", "requeuehold", "21"],
                  ["scontrol", "update", "JobId=21", "StartTime=now+604"],
                  ["scontrol", "release", "21"]]
    out = {v.job: v for v in rep.victims}["21"]
    assert (out.ended, out.requeued, out.released, out.stopped_in_grace) == \
        (None, True, True, True)


# ------------------------------------------------------------ 7. the unmanaged tier

@pytest.mark.parametrize("change,names", [
    ({"tiers": {"partitions": {"tier1": 1, "tier3": 9}}}, "tiers.partitions.tier3"),
    ({"tiers": {"qos": {"low": 9}, "accounts": {"ops": 9}}}, "tiers.qos.low, tiers.accounts.ops"),
    ({"tiers": {"partitions": {"tier1": 1}, "default": 9}}, "tiers.default"),
    ({"tiers": {"partitions": {"tier1": 1}},
      "policy": {"tiers": {"9": {"preemptible": True}}}}, "policy.tiers.9"),
    ({"tiers": {"partitions": {"tier1": 1, "tier3": 4}, "unmanaged": 4}},
     "tiers.partitions.tier3"),
])
def test_the_unmanaged_tier_must_be_a_tier_nothing_else_uses(change: dict[str, Any],
                                                             names: str) -> None:
    # The unmanaged tier holds GPUs the planner must never take (unmapped jobs, jobs
    # Slurm cannot requeue) and is added to the policy as not preemptible only when
    # the policy does not have it: a mapping to it, or a policy tier of that number,
    # would make those jobs victims. Refused, naming what collides.
    tier = change["tiers"].get("unmanaged", 9)
    with pytest.raises(ConfigError) as exc:
        cfg_of(**change)
    assert str(exc.value) == (
        f"config: tiers.unmanaged: tier {tier} is also used by {names}; the unmanaged tier "
        "holds the GPUs of jobs the planner must never evict (jobs no mapping covers, array "
        "tasks, jobs Slurm cannot requeue), in a tier the adapter makes non-preemptible, so "
        "no mapping, default or policy tier may use it: set tiers.unmanaged to a tier "
        "number nothing else uses")


def test_an_unmanaged_tier_collision_is_exit_2_on_the_command_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    from planner.commands.slurm import main

    snap = ["snapshot", "--squeue-json", str(FIX / "22.05/squeue.json"),
            "--nodes-json", str(FIX / "22.05/sinfo.json"), "--now", str(NOW_2205)]
    # a site whose lowest tier is 9: tier3 mapped to 9, the unmanaged tier's default
    (tmp_path / "c.yaml").write_text("tiers: {partitions: {tier1: 1, tier3: 9}}\n")
    assert main([*snap, "--config", str(tmp_path / "c.yaml")]) == 2
    err = capsys.readouterr().err
    assert "tiers.unmanaged: tier 9 is also used by tiers.partitions.tier3;" in err
    assert "Value error" not in err
    # --default-tier 9 with the unmanaged tier 9
    (tmp_path / "ok.yaml").write_text("tiers: {partitions: {tier1: 1}}\n")
    assert main([*snap, "--config", str(tmp_path / "ok.yaml"), "--default-tier", "9"]) == 2
    assert "tiers.unmanaged: tier 9 is also used by --default-tier;" in capsys.readouterr().err
    # a policy_file with tier 9 (read when the snapshot is made)
    (tmp_path / "policy.yaml").write_text("tiers: {'9': {preemptible: true}}\n")
    (tmp_path / "pf.yaml").write_text("tiers: {partitions: {tier1: 1, tier3: 3}}\n"
                                      "policy_file: policy.yaml\n")
    assert main([*snap, "--config", str(tmp_path / "pf.yaml")]) == 2
    collision = (f"tiers.unmanaged: tier 9 is also used by policy_file "
                 f"{tmp_path / 'policy.yaml'}: tiers.9;")
    assert collision in capsys.readouterr().err
    # `slurm run` refuses it before its first tick (no Slurm command: none exists here)
    (tmp_path / "pf.yaml").write_text("tiers: {partitions: {tier1: 1, tier3: 3}}\n"
                                      "policy_file: policy.yaml\n"
                                      "commands: {squeue: /nonexistent/squeue}\n")
    assert main(["run", "--config", str(tmp_path / "pf.yaml"), "--ticks", "1"]) == 2
    assert collision in caplog.text and "/nonexistent/squeue" not in caplog.text
    # the unmanaged tier moved out of the way: accepted, and tier3's jobs are in 9
    (tmp_path / "moved.yaml").write_text("tiers: {partitions: {tier1: 1, tier2: 2, tier3: 9}, "
                                         "unmanaged: 10}\n"
                                         "policy: {tiers: {'9': {min_runtime_s: 0}}}\n")
    assert main([*snap, "--config", str(tmp_path / "moved.yaml")]) == 0
    assert jobs_by_id(json.loads(capsys.readouterr().out))["20"]["tier"] == 9


# ------------------------------------------------- 8. the state file: interrupts, lock

def test_an_interrupted_tick_keeps_what_it_did_in_the_state_file(tmp_path: Path) -> None:
    # 20 traps TERM and never exits; the first sleep of the poll is interrupted (a
    # second SIGINT/SIGTERM). Everything runs at the fake clock's t = 1000
    # (1970-01-01T00:16:40Z): pin 30 to gpu1, signal 20, requeue-hold it on the way
    # out. The state file holds all of it: the pin, 20's preemption (count 1) and
    # its eviction with its 4 GPUs (gpu1's 4-7).
    from planner.adapters.slurm.run import tick

    fake = _evicting_cluster()
    for j in fake.squeue["jobs"]:
        if j["job_id"] == 20:
            j["comment"] = "signal=TERM"
    fake.stop_after["20"] = float("inf")

    def interrupted(_: float) -> None:
        raise KeyboardInterrupt

    path = tmp_path / "state.json"
    with pytest.raises(KeyboardInterrupt):
        tick(cfg_of(**CFG_2205, state_file=str(path)), AdapterState.load(path), runner=fake,
             clock=fake.clock, sleep=interrupted)
    assert _slurm_actions(fake) == [("ReqNodeList", "30"), ("scancel", "20"),
                                    ("requeuehold", "20"), ("StartTime", "20"),
                                    ("release", "20")]
    at = "1970-01-01T00:16:40Z"
    assert json.loads(path.read_text()) == {
        "pinned": {"30": ["gpu1"]}, "preempted": {"20": {"at": at, "count": 1}},
        "evictions": [{"job": "20", "at": at, "gpus": 4}]}


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_cli_apply_keeps_the_state_when_interrupted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    # `slurm apply` interrupted (Ctrl-C, or SIGTERM, which it turns into the same
    # interrupt) after it pinned 27 and evicted 21: the state file holds both
    # (apply_plan is a stand-in that records them and is interrupted); the status
    # is 130, and SIGTERM's handler is the one before again
    import time

    import planner.adapters.slurm.apply as slurm_apply
    from planner.commands.slurm import main

    def interrupted(plan: Any, cfg: Any, **kw: Any) -> Any:
        kw["state"].pinned["27"] = ["gpu2", "gpu3"]
        kw["state"].record_eviction("21", "2026-11-29T09:00:00Z", 4)
        if how == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # (the handler interrupts this at once)
            raise AssertionError("SIGTERM did not interrupt the apply")
        raise KeyboardInterrupt

    before = signal.getsignal(signal.SIGTERM)

    monkeypatch.setattr(slurm_apply, "apply_plan", interrupted)
    (tmp_path / "plan.json").write_text(json.dumps(_plan_document(parse_iso_now(time.time()))))
    (tmp_path / "c.json").write_text(json.dumps({**CFG_2205,
                                                 "state_file": str(tmp_path / "state.json")}))
    assert main(["apply", str(tmp_path / "plan.json"), "--config", str(tmp_path / "c.json")]) \
        == 130
    assert json.loads((tmp_path / "state.json").read_text()) == {
        "pinned": {"27": ["gpu2", "gpu3"]}, "preempted": {},
        "evictions": [{"job": "21", "at": "2026-11-29T09:00:00Z", "gpus": 4}]}
    assert signal.getsignal(signal.SIGTERM) is before
    # the lock was let go on the way out
    from planner.adapters.slurm.state import state_lock

    with state_lock(tmp_path / "state.json") as lock:
        assert lock == tmp_path / "state.json.lock"


def test_run_holds_the_state_lock_for_its_life_and_apply_is_refused_meanwhile(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    import time

    from planner.adapters.slurm.run import run_loop
    from planner.adapters.slurm.state import StateLockError, state_lock
    from planner.commands.slurm import main

    state = tmp_path / "state.json"
    lock = tmp_path / "state.json.lock"
    cfg = cfg_of(**CFG_2205, state_file=str(state))
    fake = _fake_cluster()
    refused: list[str] = []

    def runner(argv: list[str], timeout: float) -> tuple[int, str, str]:
        # while the loop runs, another instance cannot take the lock
        try:
            with state_lock(state):
                refused.append("not locked")
        except StateLockError as exc:
            refused.append(str(exc))
        return fake(argv, timeout)

    assert run_loop(cfg, interval_s=0.01, ticks=2, runner=runner) == 0
    assert refused and all(r.startswith(f"{lock} is locked: another `slurm run` or `slurm "
                                        f"apply` (pid {os.getpid()}) holds it") for r in refused)
    # after the loop the lock is free again; held by someone else, a loop and an
    # apply fail at once (status 2), before any Slurm command
    with state_lock(state):
        fake = _fake_cluster()
        assert run_loop(cfg, interval_s=0.01, ticks=1, runner=fake) == 2
        assert fake.calls == []
        assert f"{lock} is locked: another `slurm run` or `slurm apply`" in caplog.text
        marker = tmp_path / "ran"
        script = tmp_path / "slurm-cmd"
        script.write_text(f"#!/bin/sh\ntouch {marker}\nexit 0\n")
        script.chmod(0o755)
        (tmp_path / "c.json").write_text(json.dumps({
            **CFG_2205, "state_file": str(state),
            "commands": {c: str(script) for c in ("squeue", "sinfo", "scontrol", "scancel")}}))
        (tmp_path / "plan.json").write_text(
            json.dumps(_plan_document(parse_iso_now(time.time()))))
        args = ["apply", str(tmp_path / "plan.json"), "--config", str(tmp_path / "c.json")]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert f"error: {lock} is locked: another `slurm run` or `slurm apply`" in err
        assert not marker.exists()
        # a dry run changes nothing and takes no lock
        assert main([*args, "--dry-run"]) == 0
        assert not marker.exists()


BAD_STATES = [
    ("", "it is empty (a JSON object was expected)"),
    ("[]", "it holds a list, not a JSON object with preempted, pinned and evictions"),
    ("{not json", ("it is not valid JSON (Expecting property name enclosed in double quotes at "
                  "line 1 column 2)")),
    ('{"preempted": {"21": "2026-01-01"}}',
     'preempted["21"] must be an object {"at": time, "count": n}, not a string'),
    ('{"preempted": {"21": {"at": "yesterday", "count": 1}}}',
     "preempted[\"21\"].at must be an ISO-8601 time, not 'yesterday'"),
    ('{"pinned": {"30": "gpu1"}}',
     'pinned["30"] must be a list of node names (strings), not "gpu1"'),
    ('{"pinned": {"30": [1, 2]}}', ('pinned["30"] must be a list of node names (strings), not '
                                   "[1, 2]")),
    ('{"pinned": []}', "pinned must be an object (job -> list of nodes), not a list"),
    ('{"evictions": {"20": "2026-11-29T09:00:00Z"}}',
     'evictions must be a list of {"job": id, "at": ISO-8601 time, "gpus": n} records'),
    ('{"evictions": ["20"]}',
     'evictions must be a list of {"job": id, "at": ISO-8601 time, "gpus": n} records'),
]


@pytest.mark.parametrize("text,what", BAD_STATES)
def test_a_broken_state_file_is_refused_naming_the_file_and_the_fault(
        tmp_path: Path, text: str, what: str) -> None:
    from planner.adapters.slurm.state import StateFileError

    path = tmp_path / "state.json"
    path.write_text(text)
    with pytest.raises(StateFileError) as exc:
        AdapterState.load(path)
    assert str(exc.value) == (
        f"{path}: not a valid adapter state file: {what}. Fix it, or move it aside to start "
        "with an empty history (the evictions of the last day, the preemption times and the "
        "pins it holds are then forgotten)")


def test_a_broken_state_file_is_exit_2_in_snapshot_apply_and_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    import time

    from planner.commands.slurm import main

    state = tmp_path / "state.json"
    state.write_text('{"preempted": {"21": "2026-01-01"}}')
    fault = (f"{state}: not a valid adapter state file: preempted[\"21\"] must be an object "
             '{"at": time, "count": n}, not a string.')
    never = tmp_path / "never-run"  # (every Slurm command: not reached)
    (tmp_path / "c.json").write_text(json.dumps({
        **CFG_2205, "state_file": str(state),
        "commands": {c: str(never) for c in ("squeue", "sinfo", "scontrol", "scancel")}}))
    cfg = ["--config", str(tmp_path / "c.json")]
    assert main(["snapshot", *cfg, "--squeue-json", str(FIX / "22.05/squeue.json"),
                 "--nodes-json", str(FIX / "22.05/sinfo.json"), "--now", str(NOW_2205)]) == 2
    assert f"error: {fault}" in capsys.readouterr().err
    (tmp_path / "plan.json").write_text(json.dumps(_plan_document(parse_iso_now(time.time()))))
    for extra in ([], ["--dry-run"]):
        assert main(["apply", str(tmp_path / "plan.json"), *cfg, *extra]) == 2
        assert f"error: {fault}" in capsys.readouterr().err
    assert main(["run", *cfg, "--ticks", "1"]) == 2
    assert fault in caplog.text
    assert state.read_text() == '{"preempted": {"21": "2026-01-01"}}'  # untouched


def test_the_state_is_saved_durably(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the file's data and then its directory entry are fsync'd (atomic_write): a
    # crash after a tick cannot lose the evictions the tick recorded
    import stat

    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    state = AdapterState(path=tmp_path / "sub" / "state.json")
    state.record_eviction("20", "2026-11-29T09:00:00Z", 4)
    state.save()
    assert synced == ["file", "dir"]
    assert AdapterState.load(tmp_path / "sub" / "state.json").evictions == [
        {"job": "20", "at": "2026-11-29T09:00:00Z", "gpus": 4}]
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["state.json"]


# --------------------------------------------------------------- 9. smaller ones

def test_a_job_id_must_be_a_whole_number() -> None:
    from planner.adapters.slurm.scalars import job_id

    assert [job_id(v) for v in (20, "20", "20_7", "1_000", 20.0, True, "", "-3", 0, "２",
                                {"set": True, "number": 20}, None)] == \
        [20, 20, None, None, None, None, None, None, None, None, None, None]
    assert num("20_7") is None  # (float() reads it as 207)
    # "20_7" (array task 7 of 20, as squeue prints it) was job 207. Now it is left out
    # with a note; its 4 GPUs of gpu1 are still in use by gpu1's gres_used ("gpu:4",
    # no IDX) and held by no listed job: slurm-occupied@gpu1 holds them, the lowest
    # free indices 0-3 standing in.
    fake = _evicting_cluster()
    for j in fake.squeue["jobs"]:
        if j["job_id"] == 20:
            j["job_id"] = "20_7"
        if j["job_id"] == 27:
            j["job_id"] = "27"  # all digits: job 27
    res = build_snapshot(fake.squeue, fake.nodes, cfg_of(**CFG_2205), now=NOW_2205,
                         read_sidecar=lambda j: ({}, []))
    jobs = jobs_by_id(res.snapshot)
    assert sorted(jobs) == ["27", "30", "slurm-occupied@gpu1"]
    assert jobs["slurm-occupied@gpu1"]["placement"] == [{"node": "gpu1", "gpus": [0, 1, 2, 3]}]
    assert "jobs[0]: job_id '20_7' is not a Slurm job id (a whole number); left out (its GPUs " \
        "count as occupied where the node's gres_used reports them)" in res.notes


def test_recent_evictions_dated_after_now_count_as_now() -> None:
    # now = 1000 s after the epoch. A day is kept: 1000 - 86400 <= t. An eviction
    # 120 s in the future (another host's clock ahead, or this one set back) is
    # counted at now, not dropped; one of 86,401 s ago is forgotten.
    now = 86400.0 + 1000
    state = AdapterState(evictions=[
        {"job": "1", "at": parse_iso_now(now + 120), "gpus": 8},
        {"job": "2", "at": parse_iso_now(now - 60)},
        {"job": "3", "at": parse_iso_now(now - 86401), "gpus": 2}])
    assert state.recent_evictions(now) == [
        {"job": "2", "at": parse_iso_now(now - 60)},
        {"job": "1", "at": parse_iso_now(now), "gpus": 8}]
    assert [e["job"] for e in state.evictions] == ["1", "2"]  # (kept as recorded)
    assert state.evictions[0]["at"] == parse_iso_now(now + 120)


def test_apply_with_a_snapshot_whose_jobs_are_not_objects(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # {"jobs": ["27"]}: entries that are not job objects are skipped (no victim's
    # nodes or GPUs from them), not a traceback
    import time

    from planner.adapters.slurm.run import expected_nodes, running_gpus
    from planner.commands.slurm import main

    odd = {"jobs": ["27", {"id": "21", "state": "running", "placement": "gpu1"},
                   {"id": "22", "state": "running", "_slurm": [],
                    "placement": [{"node": "gpu2"}, "gpu3", {"gpus": [0]}]}]}
    assert expected_nodes(odd) == {"21": set(), "22": {"gpu2"}}
    assert running_gpus(odd) == {} and expected_nodes({"jobs": "x"}) == {}
    (tmp_path / "snap.json").write_text(json.dumps({"jobs": ["27"]}))
    (tmp_path / "plan.json").write_text(json.dumps(_plan_document(parse_iso_now(time.time()))))
    assert main(["apply", str(tmp_path / "plan.json"), "--dry-run", "--snapshot",
                 str(tmp_path / "snap.json")]) == 0
    assert "scancel --signal=TERM --batch 21" in capsys.readouterr().out
