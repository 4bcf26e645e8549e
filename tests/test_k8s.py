"""Kubernetes adapter on fixtures written from the Kubernetes API reference
(``kubectl get nodes -o json`` / ``kubectl get pods -A -o json`` of a small GPU
cluster): no API server runs here."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from cli import main
from models import InputError, load_plan, load_snapshot
from planner.k8s import (
    K8sConfig,
    binding_objects,
    build_snapshot,
    eviction_objects,
    grace_seconds,
    kubectl_script,
    load_config,
    object_list,
    read_meta,
)
from planner.k8s.objects import pod_gpus

FIX = Path(__file__).parent / "fixtures" / "k8s"
NOW = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)


def _load(name: str) -> Any:
    return json.loads((FIX / name).read_text())


@pytest.fixture(scope="module")
def result() -> Any:
    return build_snapshot(_load("nodes.json"), _load("pods.json"),
                          load_config(FIX / "config.yaml"), NOW)


@pytest.fixture(scope="module")
def snap(result: Any) -> dict[str, Any]:
    return result.snapshot


def _job(snap: dict[str, Any], job_id: str) -> dict[str, Any]:
    return next(j for j in snap["jobs"] if j["id"] == job_id)


def _node(snap: dict[str, Any], node_id: str) -> dict[str, Any]:
    return next(n for n in snap["nodes"] if n["id"] == node_id)


# ------------------------------------------------------------------ snapshot
def test_snapshot_passes_the_loader(snap: dict[str, Any]) -> None:
    s = load_snapshot(snap)
    assert s.now == NOW
    assert {n.id for n in s.nodes} == {"gpu-a-001", "gpu-a-002", "gpu-b-001", "gpu-b-002",
                                       "gpu-c-001"}
    assert [j.id for j in s.jobs] == sorted(j.id for j in s.jobs)
    assert [st.id for st in s.storage] == ["nfs-a"]


def test_skips_non_gpu_completed_and_gated_pods(result: Any) -> None:
    ids = {j["id"] for j in result.snapshot["jobs"]}
    assert ids == {
        "inference/embed-0", "llm/finetune-70b", "llm/group:ft-gang", "llm/group:pretrain",
        "research/eval-3", "research/notebook-7f9c", "research/prep-data-1",
        "research/stale-1", "research/sweep-17",
    }
    assert not any("coredns" in i or "dcgm" in i or "old-train" in i for i in ids)
    assert any("gated-0" in w and "scheduling gates" in w for w in result.warnings)


def test_nodes_gpu_type_pool_block_nvlink_storage(snap: dict[str, Any]) -> None:
    a1 = _node(snap, "gpu-a-001")
    assert a1 == {"id": "gpu-a-001", "gpus": 8, "gpu_type": "H100", "nvlink": "nvswitch",
                  "pool": "standard", "block": "rack-a01", "storage": "nfs-a",
                  "local_write_gb_per_s": 4.0, "state": "up"}
    c1 = _node(snap, "gpu-c-001")
    assert c1["gpus"] == 4 and c1["gpu_type"] == "L4" and c1["nvlink"] == "none"
    assert c1["pool"] == "inference"
    assert c1["block"] == "us-east-1c"  # no block label: falls back to the zone label
    assert c1["local_write_gb_per_s"] == 2.0  # node annotation overrides the config
    assert _node(snap, "gpu-b-002")["gpu_type"] == "A100"


def test_node_states(snap: dict[str, Any]) -> None:
    states = {n["id"]: n["state"] for n in snap["nodes"]}
    assert states == {"gpu-a-001": "up", "gpu-a-002": "up", "gpu-b-001": "drain",
                      "gpu-b-002": "down", "gpu-c-001": "up"}


def test_gpu_pods_across_nodes_get_deterministic_indices(snap: dict[str, Any]) -> None:
    # gpu-a-001: pretrain-worker-0 sorts before sweep-17, so it takes the low indices
    assert _job(snap, "research/sweep-17")["placement"] == [{"node": "gpu-a-001",
                                                             "gpus": [4, 5, 6, 7]}]
    # gpu-a-002: the notebook's gpu-ids annotation is honoured, the gang pod fills from 0
    assert _job(snap, "research/notebook-7f9c")["placement"] == [{"node": "gpu-a-002",
                                                                  "gpus": [6, 7]}]
    assert _job(snap, "research/eval-3")["placement"] == [{"node": "gpu-b-001",
                                                           "gpus": list(range(8))}]
    emb = _job(snap, "inference/embed-0")
    assert emb["placement"] == [{"node": "gpu-c-001", "gpus": [0]}]
    assert emb["started_at"] == "2026-11-28T12:00:10Z"


def test_volcano_gang_is_one_job(snap: dict[str, Any], result: Any) -> None:
    g = _job(snap, "llm/group:pretrain")
    assert g["state"] == "running"
    assert g["nodes"] == 2 and g["gpus_per_node"] == 4
    assert g["placement"] == [{"node": "gpu-a-001", "gpus": [0, 1, 2, 3]},
                              {"node": "gpu-a-002", "gpus": [0, 1, 2, 3]}]
    assert g["started_at"] == "2026-11-29T06:00:05Z"  # the gang runs once its last pod does
    assert result.meta["jobs"]["llm/group:pretrain"] == {
        "namespace": "llm", "group": "pretrain", "state": "running",
        "pods": ["pretrain-worker-0", "pretrain-worker-1"]}
    p = _job(snap, "llm/group:ft-gang")
    assert p["state"] == "pending" and p["nodes"] == 2 and p["gpus_per_node"] == 8
    assert p["gpu_type"] == "H100"  # from the required node affinity
    assert p["submitted_at"] == "2026-11-29T07:50:00Z"
    assert result.meta["jobs"]["llm/group:ft-gang"]["pods"] == ["ft-gang-0", "ft-gang-1"]


def test_priority_classes_to_tiers(snap: dict[str, Any]) -> None:
    tiers = {j["id"]: (j["tier"], j["priority"]) for j in snap["jobs"]}
    assert tiers["llm/group:pretrain"] == (1, 0)  # training-critical: 1
    assert tiers["llm/finetune-70b"] == (1, 0)
    assert tiers["research/eval-3"] == (2, 10)  # training: {tier: 2, priority: 10}
    assert tiers["llm/group:ft-gang"] == (2, 10)
    assert tiers["research/sweep-17"] == (3, 0)  # batch-low: 3
    assert tiers["research/notebook-7f9c"] == (3, 0)  # no class: default_tier
    assert _job(snap, "research/sweep-17")["team"] == "research"


def test_annotations_to_checkpoint_fields(snap: dict[str, Any]) -> None:
    sw = _job(snap, "research/sweep-17")
    assert sw["checkpoint"] == {"size_gb": 52.5, "signal": "SIGUSR1", "barrier_s": 10.0,
                                "cleanup_s": 5.0, "restore_s": 650.0,
                                "last_at": "2026-11-29T07:40:00Z"}
    assert sw["preemptions"] == 1
    assert sw["last_preempted_at"] == "2026-11-29T06:30:00Z"
    # the trap's sidecar JSON in the checkpoint annotation
    nb = _job(snap, "research/notebook-7f9c")["checkpoint"]
    assert nb == {"size_gb": 2.5, "signal": "SIGTERM", "barrier_s": 1.0, "cleanup_s": 1.0,
                  "restore_s": 30.0, "last_at": "2026-11-29T07:55:00Z"}
    emb = _job(snap, "inference/embed-0")
    assert emb["checkpoint"] == {"signal": None} and emb["topology"] == "any"
    assert _job(snap, "llm/group:pretrain")["checkpoint"] == {
        "size_gb": 120.0, "barrier_s": 20.0, "restore_s": 900.0}


def test_pending_pods(snap: dict[str, Any]) -> None:
    ft = _job(snap, "llm/finetune-70b")
    assert ft["state"] == "pending" and "placement" not in ft
    assert ft["gpus_per_node"] == 4 and ft["gpu_type"] == "H100"  # from the nodeSelector
    prep = _job(snap, "research/prep-data-1")
    assert prep["gpus_per_node"] == 4  # init container 4 > containers 1 + 2


def test_pod_gpus_rules() -> None:
    def p(containers: list[int], init: Sequence[tuple[int, bool]] = ()) -> dict[str, Any]:
        def c(n: int) -> dict[str, Any]:
            return {"resources": {"limits": {"nvidia.com/gpu": str(n)}}}
        return {"spec": {"containers": [c(n) for n in containers],
                         "initContainers": [dict(c(n), **({"restartPolicy": "Always"}
                                                         if side else {}))
                                            for n, side in init]}}
    assert pod_gpus(p([1, 2]), "nvidia.com/gpu") == 3
    assert pod_gpus(p([1, 2], [(4, False)]), "nvidia.com/gpu") == 4
    assert pod_gpus(p([2], [(1, True), (2, False)]), "nvidia.com/gpu") == 3  # sidecar adds
    req_only = {"spec": {"containers": [{"resources": {"requests": {"nvidia.com/gpu": 2}}}]}}
    assert pod_gpus(req_only, "nvidia.com/gpu") == 2
    assert pod_gpus({"spec": {"containers": [{}]}}, "nvidia.com/gpu") == 0


def test_deterministic_output(result: Any) -> None:
    pods = _load("pods.json")
    pods["items"].reverse()
    nodes = _load("nodes.json")
    nodes["items"].reverse()
    again = build_snapshot(nodes, pods, load_config(FIX / "config.yaml"), NOW)
    assert json.dumps(again.snapshot, sort_keys=True) == json.dumps(result.snapshot,
                                                                    sort_keys=True)


def _pods_with(extra: list[dict[str, Any]]) -> dict[str, Any]:
    pods = _load("pods.json")
    pods["items"] += extra
    return pods


def _gpu_pod(ns: str, name: str, gpus: int, node: str | None = None,
             ann: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "annotations": ann or {},
                         "creationTimestamp": "2026-11-29T07:00:00Z"},
            "spec": {"nodeName": node, "containers": [
                {"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
            if node else {"containers": [
                {"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": "Running" if node else "Pending",
                       "startTime": "2026-11-29T07:00:01Z"}}


def test_partly_running_group_and_bad_annotations() -> None:
    extra = [
        _gpu_pod("ml", "w-0", 1, "gpu-c-001", {"scheduling.k8s.io/group-name": "g",
                                               "preempt-planner.io/barrier-s": "soon"}),
        _gpu_pod("ml", "w-1", 1, None, {"scheduling.k8s.io/group-name": "g"}),
        _gpu_pod("ml", "x", 1, "gpu-c-001", {"preempt-planner.io/gpu-ids": "3"}),
        _gpu_pod("ml", "y", 1, "gpu-c-001", {"preempt-planner.io/gpu-ids": "3",  # x has it
                                             "preempt-planner.io/signal": "SIGBOGUS"}),
    ]
    r = build_snapshot(_load("nodes.json"), _pods_with(extra),
                       load_config(FIX / "config.yaml"), NOW)
    ids = {j["id"] for j in r.snapshot["jobs"]}
    assert {"ml/group:g", "ml/group:g+pending", "ml/x", "ml/y"} <= ids
    # annotated indices are claimed first; the rest fill the lowest free ones by name
    gpus = {j["id"]: j["placement"][0]["gpus"] for j in r.snapshot["jobs"]
            if j.get("placement") and j["placement"][0]["node"] == "gpu-c-001"}
    assert gpus == {"ml/x": [3], "inference/embed-0": [0], "ml/group:g": [1], "ml/y": [2]}
    assert "signal" not in _job(r.snapshot, "ml/y")["checkpoint"]
    text = "\n".join(r.warnings)
    assert "barrier-s='soon'" in text and "SIGBOGUS" in text and "already taken" in text
    load_snapshot(r.snapshot)


def test_running_pod_on_unknown_node_and_overcommit_are_dropped() -> None:
    extra = [_gpu_pod("ml", "ghost", 1, "cpu-001"),
             _gpu_pod("ml", "huge", 4, "gpu-c-001")]  # embed-0 already holds one of 4
    r = build_snapshot(_load("nodes.json"), _pods_with(extra), K8sConfig(), NOW)
    ids = {j["id"] for j in r.snapshot["jobs"]}
    assert "ml/ghost" not in ids and "ml/huge" not in ids
    assert any("ghost" in w for w in r.warnings) and any("huge" in w for w in r.warnings)


def test_default_config_and_bad_config(tmp_path: Path) -> None:
    r = build_snapshot(_load("nodes.json"), _load("pods.json"), None, NOW)
    s = load_snapshot(r.snapshot)
    # without the config every class maps to the default tier 3 and types stay raw
    assert {j.tier for j in s.jobs} == {3}
    assert s.node_map()["gpu-a-001"].gpu_type == "NVIDIA-H100-80GB-HBM3"
    bad = tmp_path / "bad.yaml"
    bad.write_text("priority_classes: {x: {tier: one}}\ngpu_resourse: amd.com/gpu\n")
    with pytest.raises(InputError) as exc:
        load_config(bad)
    assert any("gpu_resourse: unknown field" in e for e in exc.value.errors)
    with pytest.raises(InputError):
        build_snapshot(_load("nodes.json"), _load("pods.json"),
                       K8sConfig(priority_classes={"training": 7}), NOW)  # tier 7 not in policy


def test_not_a_list_is_input_error() -> None:
    with pytest.raises(InputError) as exc:
        build_snapshot({"kind": "Status"}, _load("pods.json"), None, NOW)
    assert "kubectl get nodes -o json" in exc.value.errors[0]


# --------------------------------------------------------------------- apply
def _hand_plan() -> dict[str, Any]:
    """A plan written by hand for the fixture snapshot (apply does not re-check rules)."""
    ev = {"signal": "SIGTERM", "flush_s": 0.0, "cost_gpu_s": 0.0,
          "requeue_hold_until": "2026-11-29T08:31:00Z"}
    return {
        "version": 1, "now": "2026-11-29T08:00:00Z", "status": "feasible",
        "objective": {"admitted_gpus": {"1": 0, "2": 16, "3": 0}, "priority_value": 160,
                      "eviction_cost_gpu_s": 0.0, "evictions": 3},
        "evictions": [
            dict(ev, job="research/sweep-17", tier=3, preemptors=["llm/group:ft-gang"],
                 signal="SIGUSR1", grace_s=60.2, flush_s=13.125),
            dict(ev, job="research/notebook-7f9c", tier=3, preemptors=["llm/group:ft-gang"],
                 grace_s=60.0),
            dict(ev, job="llm/group:pretrain", tier=1, preemptors=["llm/group:ft-gang"],
                 grace_s=90.5),
        ],
        "placements": [
            {"job": "llm/group:ft-gang", "start_after_s": 90.5,
             "placement": [{"node": "gpu-a-002", "gpus": list(range(8))},
                           {"node": "gpu-a-001", "gpus": list(range(8))}]},
        ],
        "deferred": [{"job": "llm/finetune-70b", "reason": "OUTRANKED"},
                     {"job": "research/prep-data-1", "reason": "OUTRANKED"}],
        "storm": [], "warnings": ["research/stale-1 runs on down node gpu-b-002"],
        "solver": {"engine": "hand", "status": "FEASIBLE"},
    }


def test_grace_rounding() -> None:
    assert grace_seconds(60.0) == 60
    assert grace_seconds(60.2) == 61
    assert grace_seconds(60.0000000001) == 60  # float noise is not a second
    assert grace_seconds(0) == 1  # 0 would mean 'delete now, no SIGTERM wait'


def test_evictions_per_pod_with_rounded_grace(result: Any) -> None:
    plan = load_plan(_hand_plan())
    evs = eviction_objects(plan, result.meta)
    assert [(e["metadata"]["namespace"], e["metadata"]["name"],
             e["deleteOptions"]["gracePeriodSeconds"]) for e in evs] == [
        ("research", "sweep-17", 61),
        ("research", "notebook-7f9c", 60),
        ("llm", "pretrain-worker-0", 91),
        ("llm", "pretrain-worker-1", 91),
    ]
    for e in evs:
        assert e["apiVersion"] == "policy/v1" and e["kind"] == "Eviction"
        assert set(e) == {"apiVersion", "kind", "metadata", "deleteOptions"}


def test_bindings_map_gang_pods_in_name_order(result: Any) -> None:
    plan = load_plan(_hand_plan())
    bs = binding_objects(plan, result.meta)
    assert [(b["metadata"]["name"], b["target"]["name"]) for b in bs] == [
        ("ft-gang-0", "gpu-a-002"), ("ft-gang-1", "gpu-a-001")]
    b = bs[0]
    assert b["apiVersion"] == "v1" and b["kind"] == "Binding"
    assert b["target"] == {"apiVersion": "v1", "kind": "Node", "name": "gpu-a-002"}
    assert b["metadata"]["namespace"] == "llm"
    assert b["metadata"]["annotations"] == {"preempt-planner.io/gpu-ids": "0,1,2,3,4,5,6,7",
                                            "preempt-planner.io/start-after-s": "91"}


def test_object_list_and_cli(tmp_path: Path, result: Any) -> None:
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(_hand_plan()))
    snap_file = tmp_path / "snap.json"
    snap_file.write_text(json.dumps(result.snapshot))
    out = tmp_path / "objs.json"
    assert main(["k8s", "apply", str(plan_file), "--snapshot-meta", str(snap_file),
                 "--format", "evictions", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["apiVersion"] == "v1" and doc["kind"] == "List"
    assert [i["kind"] for i in doc["items"]] == ["Eviction"] * 4 + ["Binding"] * 2
    assert doc == object_list(load_plan(_hand_plan()), result.meta)
    # --no-bindings: evictions only
    assert main(["k8s", "apply", str(plan_file), "--snapshot-meta", str(snap_file),
                 "--no-bindings", "--out", str(out)]) == 0
    assert {i["kind"] for i in json.loads(out.read_text())["items"]} == {"Eviction"}


def test_kubectl_script(result: Any) -> None:
    text = kubectl_script(load_plan(_hand_plan()), result.meta)
    lines = text.splitlines()
    assert lines[0] == "#!/bin/sh" and "set -eu" in lines
    assert ("kubectl create --raw /api/v1/namespaces/research/pods/sweep-17/eviction -f - "
            "<<'EOF'") in lines
    body = json.loads(lines[lines.index("kubectl create --raw /api/v1/namespaces/research/pods/"
                                        "sweep-17/eviction -f - <<'EOF'") + 1])
    assert body["deleteOptions"] == {"gracePeriodSeconds": 61}
    wait = [ln for ln in lines if ln.startswith("kubectl wait")]
    assert "kubectl wait --for=delete pod/pretrain-worker-0 pod/pretrain-worker-1 -n llm " \
           "--timeout=151s" in wait
    # every binding comes after every wait for its victims
    first_bind = next(i for i, ln in enumerate(lines) if "/binding" in ln)
    assert all(lines.index(w) < first_bind for w in wait)
    assert text.count("/binding -f -") == 2 and text.count("/eviction -f -") == 4


def test_apply_without_meta_maps_plain_pod_ids_only() -> None:
    plan = load_plan(_hand_plan())
    with pytest.raises(InputError) as exc:
        eviction_objects(plan, None)
    assert any("llm/group:pretrain" in e and "--snapshot-meta" in e for e in exc.value.errors)
    single = copy.deepcopy(_hand_plan())
    single["evictions"] = single["evictions"][:1]
    single["placements"] = []
    evs = eviction_objects(load_plan(single), None)
    assert evs[0]["metadata"] == {"name": "sweep-17", "namespace": "research"}


def test_apply_rejects_pod_count_mismatch(result: Any) -> None:
    bad = _hand_plan()
    bad["placements"][0]["placement"] = bad["placements"][0]["placement"][:1]
    with pytest.raises(InputError) as exc:
        binding_objects(load_plan(bad), result.meta)
    assert "2 pod(s)" in exc.value.errors[0]


def test_read_meta_accepts_snapshot_or_meta(result: Any) -> None:
    assert read_meta(result.snapshot) == result.meta
    assert read_meta(json.loads(json.dumps(result.meta))) == result.meta
    with pytest.raises(InputError):
        read_meta({"version": 1, "jobs": []})


def test_cli_snapshot_writes_valid_files(tmp_path: Path) -> None:
    out, meta = tmp_path / "s.json", tmp_path / "m.json"
    assert main(["k8s", "snapshot", "--nodes", str(FIX / "nodes.json"),
                 "--pods", str(FIX / "pods.json"), "--config", str(FIX / "config.yaml"),
                 "--now", "2026-11-29T08:00:00Z", "--out", str(out),
                 "--meta-out", str(meta)]) == 0
    s = load_snapshot(out)
    assert len(s.jobs) == 9
    assert read_meta(json.loads(meta.read_text()))["jobs"]["llm/group:ft-gang"]["pods"] == [
        "ft-gang-0", "ft-gang-1"]
    assert main(["k8s", "snapshot", "--nodes", str(FIX / "nodes.json"),
                 "--pods", str(FIX / "pods.json"), "--now", "yesterday"]) == 2


def test_a_field_of_the_wrong_type_is_bad_input_naming_the_object(tmp_path: Path,
                                                                   capsys: Any) -> None:
    # kubectl never writes annotations that are a number, but a hand-edited file may:
    # that crashed the conversion with a traceback (25 distinct crash sites in a fuzz
    # of 3,000 mutated documents, none left). Now it is bad input naming the object,
    # and the CLI exits 2 without writing the snapshot.
    pods = _load("pods.json")
    pods["items"][2]["metadata"]["annotations"] = 5
    assert pods["items"][2]["metadata"]["name"] == "sweep-17"
    with pytest.raises(InputError) as exc:
        build_snapshot(_load("nodes.json"), pods, load_config(FIX / "config.yaml"), NOW)
    assert exc.value.source == "pods"
    assert exc.value.errors == [
        ("items[2] (sweep-17): a field has a value of the wrong type or range (TypeError: "
        "'int' object is not iterable); give the output of 'kubectl get pods -A -o json' "
        "unchanged")]
    bad, out = tmp_path / "pods.json", tmp_path / "s.json"
    bad.write_text(json.dumps(pods))
    assert main(["k8s", "snapshot", "--nodes", str(FIX / "nodes.json"), "--pods", str(bad),
                 "--config", str(FIX / "config.yaml"), "--out", str(out)]) == 2
    assert "items[2] (sweep-17)" in capsys.readouterr().err
    assert not out.exists()


def test_annotation_values_beyond_the_contracts_limits_are_ignored_with_a_warning() -> None:
    # One pod's annotation must not invalidate the whole snapshot: a priority beyond
    # +-10^9 and a checkpoint size beyond 10^9 GB (docs/format.md, "Limits") are
    # ignored with a warning, like malformed ones.
    pods = _load("pods.json")
    meta = pods["items"][2]["metadata"]
    assert meta["name"] == "sweep-17"
    meta.setdefault("annotations", {}).update({"preempt-planner.io/priority": "10000000000",
                                               "preempt-planner.io/checkpoint-size-gb": "2e9"})
    res = build_snapshot(_load("nodes.json"), pods, load_config(FIX / "config.yaml"), NOW)
    load_snapshot(res.snapshot)
    said = " ".join(res.warnings)
    assert "preempt-planner.io/priority='10000000000' is not an integer within +-1e+09" in said
    assert "preempt-planner.io/checkpoint-size-gb='2e9' is not a number from 0 to 1e+09" in said


# ---------------------------------------------------------------- end to end
def test_end_to_end_plan_verify_apply(result: Any) -> None:
    planner = pytest.importorskip("planner")
    if not hasattr(planner, "plan"):
        pytest.skip("planner.plan is not available yet")
    from planner.verify import verify

    snap = load_snapshot(result.snapshot)
    plan = planner.plan(snap, time_limit_s=5.0, deterministic=True)
    assert verify(snap, plan) == []
    # tier-1 finetune-70b (4 H100 GPUs) takes the notebook's GPUs 6,7 plus free 4,5 on
    # gpu-a-002: the cheapest victim (sweep-17 would cost far more to restore)
    assert [e.job for e in plan.evictions] == ["research/notebook-7f9c"]
    placed = {p.job: p for p in plan.placements}
    assert placed["llm/finetune-70b"].placement[0].node == "gpu-a-002"
    assert sorted(placed["llm/finetune-70b"].placement[0].gpus) == [4, 5, 6, 7]
    evs = eviction_objects(plan, result.meta)
    assert evs[0]["metadata"] == {"name": "notebook-7f9c", "namespace": "research"}
    assert evs[0]["deleteOptions"]["gracePeriodSeconds"] == grace_seconds(
        plan.evictions[0].grace_s)
    bs = binding_objects(plan, result.meta)
    assert {(b["metadata"]["name"], b["target"]["name"]) for b in bs} == {
        ("finetune-70b", "gpu-a-002")}


# ------------------------------------------------------------------ history (R15, R17)


def test_eviction_events_are_the_history_and_deadlines_the_expected_end(result: Any) -> None:
    # k8s apply's script records each evicted pod in an Event (reason
    # PreemptPlannerEviction, at the plan's time). Read back by 'k8s snapshot --events'
    # 10 min later, they are the snapshot's recent_evictions: one per job (the two
    # pods of llm/group:pretrain are one eviction), with kube-scheduler's Preempted
    # events (a pod no longer in the cluster keeps its namespace/name) and without
    # other reasons, events of other kinds, or events older than a day.
    from planner.k8s.apply import event_objects

    plan = load_plan(_hand_plan())
    events = event_objects(plan, result.meta)
    assert [e["involvedObject"]["name"] for e in events] == [
        "sweep-17", "notebook-7f9c", "pretrain-worker-0", "pretrain-worker-1"]
    assert all(e["reason"] == "PreemptPlannerEviction" and e["lastTimestamp"] ==
               "2026-11-29T08:00:00Z" for e in events)
    script = kubectl_script(plan, result.meta)
    assert script.count('"reason":"PreemptPlannerEviction"') == 4
    other = [
        {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "x.1"}, "reason": "Preempted",
         "involvedObject": {"kind": "Pod", "namespace": "ml", "name": "gone"},
         "lastTimestamp": "2026-11-29T07:40:00Z"},
        {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "x.2"}, "reason": "Pulled",
         "involvedObject": {"kind": "Pod", "namespace": "ml", "name": "gone"},
         "lastTimestamp": "2026-11-29T07:41:00Z"},
        {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "x.3"}, "reason": "Evicted",
         "involvedObject": {"kind": "Node", "name": "gpu-a-001"},
         "lastTimestamp": "2026-11-29T07:42:00Z"},
        {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "x.4"}, "reason": "Evicted",
         "involvedObject": {"kind": "Pod", "namespace": "ml", "name": "old"},
         "lastTimestamp": "2026-11-28T07:59:00Z"}]
    later = datetime(2026, 11, 29, 8, 10, tzinfo=UTC)
    snap = build_snapshot(_load("nodes.json"), _load("pods.json"),
                          load_config(FIX / "config.yaml"), later,
                          {"kind": "EventList", "items": events + other}).snapshot
    gpus = {j["id"]: j["gpus_per_node"] * j["nodes"] for j in snap["jobs"]}
    assert snap["recent_evictions"] == [
        {"job": "ml/gone", "at": "2026-11-29T07:40:00Z"},  # (GPUs unknown: no such job)
        {"job": "llm/group:pretrain", "at": "2026-11-29T08:00:00Z",
         "gpus": gpus["llm/group:pretrain"]},
        {"job": "research/notebook-7f9c", "at": "2026-11-29T08:00:00Z",
         "gpus": gpus["research/notebook-7f9c"]},
        {"job": "research/sweep-17", "at": "2026-11-29T08:00:00Z",
         "gpus": gpus["research/sweep-17"]}]
    assert gpus["llm/group:pretrain"] == 8
    assert load_snapshot(snap).recent_evictions[0].job == "ml/gone"
    # activeDeadlineSeconds: the kubelet's limit, start + deadline (the earliest pod's)
    pods = _load("pods.json")
    pod = next(p for p in pods["items"] if p["metadata"]["name"] == "sweep-17")
    pod["spec"]["activeDeadlineSeconds"] = 7200
    start = datetime.fromisoformat(pod["status"]["startTime"])
    snap = build_snapshot(_load("nodes.json"), pods, load_config(FIX / "config.yaml"), NOW).snapshot
    want = (start.timestamp() + 7200)
    got = _job(snap, "research/sweep-17")["expected_end_at"]
    assert datetime.fromisoformat(got).timestamp() == want
    assert "expected_end_at" not in _job(snap, "llm/group:pretrain")


def test_events_of_the_wrong_shape_are_bad_input_naming_the_event() -> None:
    bad = {"kind": "EventList", "items": [
        {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1"}, "reason": "Evicted",
         "involvedObject": ["Pod", "p"], "lastTimestamp": "2026-11-29T07:00:00Z"}]}
    with pytest.raises(InputError) as exc:
        build_snapshot(_load("nodes.json"), _load("pods.json"), load_config(FIX / "config.yaml"),
                       NOW, bad)
    assert "events" in str(exc.value) and "items[0] (e1)" in str(exc.value)
