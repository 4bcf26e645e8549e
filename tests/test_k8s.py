"""Kubernetes adapter on fixtures written from the Kubernetes API reference
(``kubectl get nodes -o json`` / ``kubectl get pods -A -o json`` of a small GPU
cluster) and on GPU Feature Discovery's MIG labels as NVIDIA documents them
(tests/fixtures/README.md says where each fixture comes from): no API server runs
here."""

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
from planner.adapters.gpu_models import model_layout
from planner.adapters.k8s import (
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
from planner.adapters.k8s.objects import pod_gpus

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
    # "nodes": where the snapshot saw each pod, which 'k8s apply' re-checks before
    # evicting; "uids" and "resource_versions": the Eviction's preconditions
    assert result.meta["jobs"]["llm/group:pretrain"] == {
        "namespace": "llm", "group": "pretrain", "state": "running",
        "pods": ["pretrain-worker-0", "pretrain-worker-1"],
        "nodes": {"pretrain-worker-0": "gpu-a-001", "pretrain-worker-1": "gpu-a-002"},
        "uids": {"pretrain-worker-0": "bdcc2153-fd64-5b61-b70c-013e74c27cd5",
                 "pretrain-worker-1": "adb1321f-377c-5dae-ba36-96e172826ea8"},
        "resource_versions": {"pretrain-worker-0": "48210001",
                              "pretrain-worker-1": "48210001"}}
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
    # The pretrain pods annotate size, barrier and restore but no signal. Before
    # job_defaults the contract's default SIGTERM applied (a trap nobody declared); now
    # the adapter's safe default, signal null, stands: nothing says the job saves on
    # SIGTERM, so an eviction is priced as losing its work since start.
    assert _job(snap, "llm/group:pretrain")["checkpoint"] == {
        "size_gb": 120.0, "barrier_s": 20.0, "restore_s": 900.0, "signal": None}


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
    # SIGBOGUS is ignored, so y keeps the default of pods without annotations: signal
    # null (it was the contract's SIGTERM, by omission, before job_defaults)
    assert _job(r.snapshot, "ml/y")["checkpoint"] == {"signal": None}
    text = "\n".join(r.warnings)
    assert "barrier-s='soon'" in text and "SIGBOGUS" in text and "already taken" in text
    load_snapshot(r.snapshot)


def test_running_pod_on_unknown_node_and_overcommit_are_dropped() -> None:
    extra = [_gpu_pod("ml", "ghost", 1, "cpu-001"),
             _gpu_pod("ml", "huge", 4, "gpu-c-001")]  # embed-0 already holds one of 4
    # (no priority_classes in K8sConfig(): every job would fall to the default tier, which
    # is refused unless asked for, as --default-tier does)
    r = build_snapshot(_load("nodes.json"), _pods_with(extra), K8sConfig(), NOW, default_tier=3)
    ids = {j["id"] for j in r.snapshot["jobs"]}
    assert "ml/ghost" not in ids and "ml/huge" not in ids
    assert any("ghost" in w for w in r.warnings) and any("huge" in w for w in r.warnings)


def test_default_config_and_bad_config(tmp_path: Path) -> None:
    # without a config no PriorityClass is mapped: refused (see
    # test_no_mapped_tier_is_refused_unless_default_tier_is_given) unless the default
    # tier is asked for; then every class maps to it and types stay raw
    r = build_snapshot(_load("nodes.json"), _load("pods.json"), None, NOW, default_tier=3)
    s = load_snapshot(r.snapshot)
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


@pytest.mark.parametrize("version", ["v1.29.14", "v1.32.2"])
def test_apply_objects_pass_the_kubernetes_schemas(result: Any, version: str) -> None:
    # tests/fixtures/k8s/schema: the strict standalone JSON schemas of policy/v1
    # Eviction and v1 Binding generated from Kubernetes' OpenAPI (see the README
    # there): no field of ours is unknown to the API (additionalProperties false), the
    # preconditions included
    from jsonschema import Draft7Validator

    schemas = {kind: json.loads((FIX / "schema" / f"{version}-{name}.json").read_text())
               for kind, name in (("Eviction", "eviction-policy-v1"), ("Binding", "binding-v1"))}
    items = object_list(load_plan(_hand_plan()), result.meta)["items"]
    assert sorted({i["kind"] for i in items}) == ["Binding", "Eviction"]
    assert all("preconditions" in i["deleteOptions"] for i in items if i["kind"] == "Eviction")
    for item in items:
        errors = [e.message for e in Draft7Validator(schemas[item["kind"]]).iter_errors(item)]
        assert errors == [], (item["metadata"]["name"], errors)
    # and the schema does refuse a field it does not know
    bad = dict(items[0], deleteOptions={"gracePeriodSeconds": 1, "preconditions": {"uid": "x",
                                                                                   "name": "y"}})
    assert list(Draft7Validator(schemas["Eviction"]).iter_errors(bad))


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
    # --now: the plan (for 08:00:00) is 30 s old, within the default limit of 60 s
    assert main(["k8s", "apply", str(plan_file), "--snapshot-meta", str(snap_file),
                 "--now", "2026-11-29T08:00:30Z",
                 "--format", "evictions", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["apiVersion"] == "v1" and doc["kind"] == "List"
    assert [i["kind"] for i in doc["items"]] == ["Eviction"] * 4 + ["Binding"] * 2
    assert doc == object_list(load_plan(_hand_plan()), result.meta)
    # --no-bindings: evictions only
    assert main(["k8s", "apply", str(plan_file), "--snapshot-meta", str(snap_file),
                 "--now", "2026-11-29T08:00:30Z", "--no-bindings", "--out", str(out)]) == 0
    assert {i["kind"] for i in json.loads(out.read_text())["items"]} == {"Eviction"}


def test_kubectl_script(result: Any) -> None:
    text = kubectl_script(load_plan(_hand_plan()), result.meta)
    lines = text.splitlines()
    assert lines[0] == "#!/bin/sh" and "set -eu" in lines
    assert ("kubectl create --raw /api/v1/namespaces/research/pods/sweep-17/eviction -f - "
            "<<'EOF'") in lines
    body = json.loads(lines[lines.index("kubectl create --raw /api/v1/namespaces/research/pods/"
                                        "sweep-17/eviction -f - <<'EOF'") + 1])
    # the pod the snapshot saw, unchanged, or the API server refuses (409 Conflict)
    assert body["deleteOptions"] == {"gracePeriodSeconds": 61, "preconditions": {
        "uid": "5e565a17-8a84-534d-8485-eeae8a34adfc", "resourceVersion": "48210001"}}
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
    from planner.checks.verify import verify

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
    from planner.adapters.k8s.apply import event_objects

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



# ------------------------------------------------- checkpoint defaults (job_defaults)
MODELS_NOW = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
MODELS_CFG: dict[str, Any] = {
    "priority_classes": {"batch-low": 3, "training": {"tier": 2, "priority": 10}},
    "storage": [{"id": "nfs-a", "write_gb_per_s": 40.0}], "default_storage": "nfs-a"}


def _models(cfg: dict[str, Any] | None = None, pods: Any = None, **kw: Any) -> Any:
    """The GPU-model fixtures (MIG, PCIe, GB200, ...) with MODELS_CFG and ``cfg`` on top."""
    return build_snapshot(_load("nodes-gpu-models.json"),
                          pods if pods is not None else _load("pods-gpu-models.json"),
                          load_config({**MODELS_CFG, **(cfg or {})}), MODELS_NOW, **kw)


def _cost(snap: dict[str, Any], job_id: str) -> float:
    from models import rules

    s = load_snapshot(snap)
    return rules.eviction_cost(s, next(j for j in s.jobs if j.id == job_id))


def test_unannotated_pods_are_not_free_to_evict() -> None:
    # Before job_defaults, a pod without annotations got the contract's default
    # checkpoint (signal SIGTERM, size 0, restore 0): evicting it cost 0 GPU-seconds,
    # however long it had run. Now its signal is null (no known trap), so it loses
    # everything since it started (objective item 4: lost_s = now - started_at).
    snap = _models().snapshot
    old = _job(snap, "research/since-2020")
    assert old["checkpoint"] == {"signal": None}
    # 1 GPU x (2020-01-01T00:00Z .. 2026-11-29T08:00Z): 2,524 days (2020 and 2024 are
    # leap years: 6 x 365 + 2 = 2,192 days to 2026-01-01, then 304 for Jan-Oct and 28 in
    # November) x 86,400 s + 8 h = 218,073,600 + 28,800 = 218,102,400 GPU-s
    assert _cost(snap, "research/since-2020") == 218_102_400.0
    # 2 GPUs started at 06:00, two hours before now: 2 x 7,200 = 14,400 GPU-s
    assert _cost(snap, "research/unannotated") == 14_400.0


def test_a_job_without_any_start_is_priced_as_started_when_its_node_joined() -> None:
    # research/eval-3 (8 GPUs on gpu-b-001, no checkpoint annotations: signal null) with
    # its startTime and creationTimestamp removed. "Started now" would make its
    # eviction free; the earliest it can have started is when gpu-b-001 joined the
    # cluster, 2026-11-20T10:00:00Z: 8 days 22 h = 770,400 s before now, on 8 GPUs
    # 6,163,200 GPU-s.
    pods = _load("pods.json")
    for pod in pods["items"]:
        if pod["metadata"]["name"] == "eval-3":
            del pod["metadata"]["creationTimestamp"]
            del pod["status"]["startTime"]
    cfg = load_config(FIX / "config.yaml")
    r = build_snapshot(_load("nodes.json"), pods, cfg, NOW)
    job = _job(r.snapshot, "research/eval-3")
    assert job["started_at"] == "2026-11-20T10:00:00Z"
    assert _cost(r.snapshot, "research/eval-3") == 6_163_200.0
    assert ("job research/eval-3: no pod has a status.startTime or creationTimestamp; taken as "
            "started when its node joined the cluster (creationTimestamp), "
            "2026-11-20T10:00:00Z, the earliest it can have started (its eviction is priced "
            "as losing all the work since)") in r.warnings
    # without the nodes' creationTimestamp: the earliest start of any GPU pod,
    # inference/embed-0's 2026-11-28T12:00:10Z (pods without GPUs, such as the DCGM
    # exporter of 2026-11-20, are not read)
    nodes = _load("nodes.json")
    for node in nodes["items"]:
        del node["metadata"]["creationTimestamp"]
    r = build_snapshot(nodes, pods, cfg, NOW)
    assert _job(r.snapshot, "research/eval-3")["started_at"] == "2026-11-28T12:00:10Z"
    assert any(w.startswith("job research/eval-3: no pod has a status.startTime or "
                            "creationTimestamp; taken as started at the earliest start of "
                            "any GPU pod, 2026-11-28T12:00:10Z") for w in r.warnings)


def test_checkpoint_defaults_by_namespace_then_class_then_annotations() -> None:
    # research/unannotated: namespace research, PriorityClass batch-low, 2 GPUs on a
    # node whose storage nfs-a writes 40 GB/s (no local limit).
    ns = {"job_defaults_by_namespace": {"research": {"checkpoint": {"signal": "SIGTERM",
                                                                    "restore_s": 300}}}}
    snap = _models(ns).snapshot
    assert _job(snap, "research/unannotated")["checkpoint"] == {"signal": "SIGTERM",
                                                                "restore_s": 300.0}
    # it now saves its progress on SIGTERM: 2 x (0 lost + 300 restore + 0 flush) = 600
    assert _cost(snap, "research/unannotated") == 600.0
    # another namespace keeps the global default (signal null): mig/single-user, 2 GPUs
    # since 07:00 -> 2 x 3,600 = 7,200
    assert _job(snap, "mig/single-user")["checkpoint"] == {"signal": None}
    assert _cost(snap, "mig/single-user") == 7_200.0
    # the PriorityClass wins over the namespace, field by field: restore 120 replaces
    # 300, size 80 GB is added, the namespace's SIGTERM stays
    cls = {**ns, "job_defaults_by_priority_class": {"batch-low": {"checkpoint": {
        "restore_s": 120, "size_gb": 80}}}}
    snap = _models(cls).snapshot
    assert _job(snap, "research/unannotated")["checkpoint"] == {
        "signal": "SIGTERM", "restore_s": 120.0, "size_gb": 80.0}
    # 2 x (0 lost + 120 restore + 80 GB / 40 GB/s = 2 s solo flush) = 2 x 122 = 244
    assert _cost(snap, "research/unannotated") == 244.0
    # the pod's annotations win over both: restore-s 60 -> 2 x (60 + 2) = 124
    pods = _load("pods-gpu-models.json")
    pod = next(p for p in pods["items"] if p["metadata"]["name"] == "unannotated")
    pod["metadata"]["annotations"]["preempt-planner.io/restore-s"] = "60"
    snap = _models(cls, pods).snapshot
    assert _job(snap, "research/unannotated")["checkpoint"]["restore_s"] == 60.0
    assert _cost(snap, "research/unannotated") == 124.0
    # an explicit 'signal: null' in a class override takes the namespace's trap away
    # again: 2 x (7,200 lost + 120 restore + 0 flush, nothing flushes without a signal)
    nulled = {**ns, "job_defaults_by_priority_class": {"batch-low": {"checkpoint": {
        "signal": None, "restore_s": 120}}}}
    snap = _models(nulled).snapshot
    assert _job(snap, "research/unannotated")["checkpoint"] == {"signal": None,
                                                                "restore_s": 120.0}
    assert _cost(snap, "research/unannotated") == 2 * (7_200 + 120)
    # the global job_defaults apply to every namespace without an override
    glob = {"job_defaults": {"checkpoint": {"signal": "USR1", "barrier_s": 5}}}
    snap = _models(glob).snapshot
    assert _job(snap, "mig/single-user")["checkpoint"] == {"signal": "SIGUSR1",
                                                           "barrier_s": 5.0}


def test_bad_job_defaults_are_config_errors() -> None:
    with pytest.raises(InputError) as exc:
        load_config({"job_defaults": {"checkpoint": {"signal": "SIGFOO", "restore_s": -1}},
                     "job_defaults_by_namespace": {"x": {"checkpoint": {"size_gb": None}}},
                     "job_defaults_by_priority_class": {"y": {"checkpiont": {}}}})
    said = "\n".join(exc.value.errors)
    assert "config.job_defaults.checkpoint.signal: unknown signal 'SIGFOO'" in said
    assert "config.job_defaults.checkpoint.restore_s: Input should be greater than or equal " \
           "to 0" in said
    assert "config.job_defaults_by_namespace.x.checkpoint: size_gb: must be a number" in said
    assert "config.job_defaults_by_priority_class.y.checkpiont: unknown field" in said


# ----------------------------------------------------------------- MIG and NVLink
def test_mig_resources_become_gpus_of_their_own_without_nvlink() -> None:
    r = _models()
    nodes = {n["id"]: n for n in r.snapshot["nodes"]}
    # GFD "mixed" strategy (labels from NVIDIA's MIG guide): an A100-SXM4-40GB split into
    # 1g.5gb, 2g.10gb and 3g.20gb, no nvidia.com/gpu at all: three contract nodes of one
    # GPU each, a gpu_type per profile, no NVLink (and no node for whole GPUs). The
    # product is an SXM board, which would be nvswitch whole: MIG slices are not linked.
    assert {k: (v["gpus"], v["gpu_type"], v["nvlink"]) for k, v in nodes.items()
            if k.startswith("a100-mixed")} == {
        "a100-mixed/mig-1g.5gb": (1, "MIG-1g.5gb", "none"),
        "a100-mixed/mig-2g.10gb": (1, "MIG-2g.10gb", "none"),
        "a100-mixed/mig-3g.20gb": (1, "MIG-3g.20gb", "none")}
    # "single" strategy: the 7 slices are nvidia.com/gpu, the product label ends in
    # -MIG-1g.5gb: one node of 7 GPUs of type MIG-1g.5gb (same name as under "mixed"),
    # no NVLink
    assert {k: nodes["a100-single"][k] for k in ("gpus", "gpu_type", "nvlink")} == {
        "gpus": 7, "gpu_type": "MIG-1g.5gb", "nvlink": "none"}
    # 6 whole H100 GPUs + 2 GPUs split into 7 x 1g.10gb each: 6 + 14 = 20 devices, each
    # counted once (the 1g.10gb.shared resource counts replicas, not devices, and the
    # label nvidia.com/gpu.count=8 is not read)
    assert (nodes["h100-part-mig"]["gpus"], nodes["h100-part-mig"]["nvlink"]) == (6, "nvswitch")
    assert nodes["h100-part-mig/mig-1g.10gb"]["gpus"] == 14
    assert sum(n["gpus"] for k, n in nodes.items() if k.startswith("h100-part-mig")) == 20
    assert r.meta["mig_nodes"]["h100-part-mig/mig-1g.10gb"] == {
        "node": "h100-part-mig", "resource": "nvidia.com/mig-1g.10gb"}
    # pods: a slice request is a job of that type, topology any (no NVLink to need)
    infer = _job(r.snapshot, "mig/infer-a")
    assert infer["placement"] == [{"node": "a100-mixed/mig-1g.5gb", "gpus": [0]}]
    assert (infer["gpu_type"], infer["topology"]) == ("MIG-1g.5gb", "any")
    wait = _job(r.snapshot, "mig/wait-slices")
    assert (wait["gpus_per_node"], wait["gpu_type"], wait["topology"]) == (3, "MIG-1g.10gb",
                                                                          "any")
    assert any("wait-slices: annotation preempt-planner.io/topology=nvlink ignored" in w
               for w in r.warnings)
    # a nodeSelector on the single-strategy product names the same MIG type
    assert _job(r.snapshot, "mig/wait-single")["gpu_type"] == "MIG-1g.5gb"
    # combo holds 1 whole GPU and 1 slice: two jobs, one per resource. On the 1g.10gb
    # node, combo sorts before infer-b: combo slice 0, infer-b slices 1-2; on the whole
    # GPUs combo (0) sorts before train-whole (1-4).
    assert _job(r.snapshot, "mig/combo")["placement"] == [{"node": "h100-part-mig",
                                                           "gpus": [0]}]
    assert _job(r.snapshot, "mig/combo@mig-1g.10gb")["placement"] == [
        {"node": "h100-part-mig/mig-1g.10gb", "gpus": [0]}]
    assert _job(r.snapshot, "mig/infer-b")["placement"][0]["gpus"] == [1, 2]
    assert _job(r.snapshot, "mig/train-whole")["placement"][0]["gpus"] == [1, 2, 3, 4]
    # a pending pod asking for both cannot be one contract job: left to the scheduler
    assert "mig/wait-both" not in {j["id"] for j in r.snapshot["jobs"]}
    assert any("mig/wait-both: requests several GPU resources" in w for w in r.warnings)
    # mig_resources: false reads only nvidia.com/gpu: the mixed A100 is no GPU node, the
    # part-MIG H100 has its 6 whole GPUs, and pods of slices are not GPU pods
    off = _models({"mig_resources": False})
    ids = {n["id"] for n in off.snapshot["nodes"]}
    assert not any("/" in i or i.startswith("a100-mixed") for i in ids)
    assert "mig/infer-a" not in {j["id"] for j in off.snapshot["jobs"]}
    assert _job(off.snapshot, "mig/combo")["placement"][0]["gpus"] == [0]


def test_mig_placements_bind_to_the_real_node_and_parts_are_evicted_once() -> None:
    r = _models()
    plan = {"version": 1, "now": "2026-11-29T08:00:00Z", "status": "feasible",
            "objective": {"admitted_gpus": {"1": 0, "2": 3, "3": 0}, "priority_value": 30,
                          "eviction_cost_gpu_s": 0.0, "evictions": 2},
            "evictions": [
                {"job": j, "tier": 3, "preemptors": ["mig/wait-slices"], "signal": None,
                 "grace_s": 60.0, "flush_s": 0.0, "cost_gpu_s": 1800.0,
                 "requeue_hold_until": "2026-11-29T08:31:00Z"}
                for j in ("mig/combo", "mig/combo@mig-1g.10gb")],
            "placements": [{"job": "mig/wait-slices", "start_after_s": 60.0, "placement": [
                {"node": "h100-part-mig/mig-1g.10gb", "gpus": [0, 3, 4]}]}],
            "deferred": [], "storm": [], "warnings": [],
            "solver": {"engine": "hand", "status": "FEASIBLE"}}
    p = load_plan(plan)
    # the two jobs of combo are one pod: evicted once
    assert [e["metadata"]["name"] for e in eviction_objects(p, r.meta)] == ["combo"]
    (b,) = binding_objects(p, r.meta)
    assert b["target"]["name"] == "h100-part-mig"  # the Node, not the contract node
    assert b["metadata"]["annotations"]["preempt-planner.io/gpu-ids"] == "0,3,4"
    script = kubectl_script(p, r.meta)
    assert script.count("/eviction -f -") == 1
    assert "# mig/combo: evicted above (planned as several jobs)" in script


@pytest.mark.parametrize("product,layout", [
    ("NVIDIA-H100-80GB-HBM3", "nvswitch"),  # H100 SXM5 (DGX/HGX H100)
    ("NVIDIA-H100-SXM5-80GB", "nvswitch"),
    ("NVIDIA-H200", "nvswitch"),
    ("NVIDIA-B200", "nvswitch"),
    ("NVIDIA-GB200", "nvswitch"),
    ("NVIDIA-A100-SXM4-80GB", "nvswitch"),
    ("A100-SXM4-40GB", "nvswitch"),  # older GFD: no NVIDIA- prefix
    ("NVIDIA-HGX-H20", "nvswitch"),
    ("NVIDIA-H100-PCIe", "none"),
    ("NVIDIA-A100-80GB-PCIe", "none"),
    ("NVIDIA-H100-NVL", "none"),  # PCIe cards, bridged in pairs at most
    ("NVIDIA-H200-NVL", "none"),
    ("NVIDIA-L4", "none"), ("NVIDIA-L40S", "none"), ("NVIDIA-A10", "none"),
    ("NVIDIA-A10G", "none"), ("Tesla-T4", "none"), ("NVIDIA-GeForce-RTX-4090", "none"),
    ("A100-SXM4-40GB-MIG-1g.5gb", "none"),  # MIG slices (single strategy)
    ("Tesla-V100-SXM2-16GB", None),  # DGX-1 hybrid cube-mesh: not all-to-all
    ("NVIDIA-H800", None), (None, None),
])
def test_nvlink_layout_known_from_the_gpu_model(product: str | None,
                                                layout: str | None) -> None:
    assert model_layout([product]).layout == layout


def test_gb200_nodes_without_a_clique_label_are_their_own_nvlink_domain() -> None:
    # Without nvidia.com/gpu.clique nothing says which GB200 nodes share an NVL72
    # rack: one domain per node (never a link claimed between nodes), said once
    nodes = _load("nodes-gpu-models.json")
    for n in nodes["items"]:
        n["metadata"]["labels"].pop("nvidia.com/gpu.clique", None)
    r = build_snapshot(nodes, _load("pods-gpu-models.json"), load_config(MODELS_CFG),
                       MODELS_NOW)
    got = {n["id"]: n.get("nvlink_domain") for n in r.snapshot["nodes"]
           if n["id"].startswith("gb200")}
    assert got == {"gb200-1": "gb200-1", "gb200-2": "gb200-2"}
    assert ("node(s) gb200-1, gb200-2: gb200 nodes share an NVLink domain (an NVL72 rack), "
            "but they have no nvidia.com/gpu.clique label: each node is taken as its own "
            "domain (a job that asks for one NVLink domain stays on one node); label them "
            "nvidia.com/gpu.clique (GPU Feature Discovery does) or set nvlink_domain_label"
            ) in r.warnings


def test_nvlink_precedence_and_unknown_models() -> None:
    r = _models()
    nodes = {n["id"]: n for n in r.snapshot["nodes"]}
    assert nodes["h100-pcie-1"]["nvlink"] == "none" and nodes["l40s-1"]["nvlink"] == "none"
    # GB200 NVL72: NVSwitch in the node and a shared multi-node NVLink domain (gpu.clique)
    assert nodes["gb200-1"]["nvlink"] == "nvswitch"
    assert nodes["gb200-1"]["nvlink_domain"] == nodes["gb200-2"]["nvlink_domain"] == \
        "8f2e1c3a-6d4b-4e0f-9a1b-2c3d4e5f6a7b.32766"
    # an unknown model (and a node without a product label) is "none", with one warning
    # per model: claiming nvswitch would let the planner put NVLink jobs on unlinked GPUs
    assert nodes["v100-dgx1"]["nvlink"] == "none" and nodes["nolabel-1"]["nvlink"] == "none"
    assert ("node(s) v100-dgx1: NVLink layout of GPU model 'Tesla-V100-SXM2-16GB' "
            "(nvidia.com/gpu.product) is not known ('sxm2' is an SXM2 board (DGX-1: P100, "
            "V100), whose GPUs are linked in a hybrid cube-mesh, not all to all); assuming "
            "none") in " ".join(r.warnings)
    assert any(w.startswith("node(s) nolabel-1: NVLink layout of GPU model (no "
                            "nvidia.com/gpu.product label) is not known") for w in r.warnings)
    # the config wins over the model; default_nvlink covers unknown models (no warning)
    # but not known ones; no setting gives MIG slices NVLink
    cfg = {"nvlink_by_product": {"NVIDIA-H100-PCIe": [[0, 1], [2, 3]]},
           "nvlink_by_node": {"a100-single": "nvswitch"}, "default_nvlink": "nvswitch"}
    r = _models(cfg)
    nodes = {n["id"]: n for n in r.snapshot["nodes"]}
    assert nodes["h100-pcie-1"]["nvlink"] == [[0, 1], [2, 3]]
    assert nodes["v100-dgx1"]["nvlink"] == "nvswitch" == nodes["nolabel-1"]["nvlink"]
    assert nodes["l40s-1"]["nvlink"] == "none"
    assert nodes["a100-single"]["nvlink"] == "none"
    assert not any("is not known" in w for w in r.warnings)
    assert any(w.startswith("node a100-single: nvlink_by_node gives NVLink layout "
                            '"nvswitch", but its GPUs are MIG slices') for w in r.warnings)
    # the fixture cluster's H100s and A100s are SXM boards: nvswitch without any config
    s = build_snapshot(_load("nodes.json"), _load("pods.json"), K8sConfig(), NOW,
                       default_tier=3).snapshot
    assert {n["id"]: n["nvlink"] for n in s["nodes"]} == {
        "gpu-a-001": "nvswitch", "gpu-a-002": "nvswitch", "gpu-b-001": "nvswitch",
        "gpu-b-002": "nvswitch", "gpu-c-001": "none"}  # NVIDIA-L4: PCIe


def test_shared_gpus_are_warned_about() -> None:
    nodes = _load("nodes-gpu-models.json")
    l40s = next(n for n in nodes["items"] if n["metadata"]["name"] == "l40s-1")
    l40s["metadata"]["labels"]["nvidia.com/gpu.replicas"] = "4"
    r = build_snapshot(nodes, _load("pods-gpu-models.json"), load_config(MODELS_CFG),
                       MODELS_NOW)
    assert ("node l40s-1: its GPUs are shared (4 replicas each, time-slicing or MPS): the 4 "
            "nvidia.com/gpu are replicas, not GPUs") in " ".join(r.warnings)


# ----------------------------------------------------------- tiers must be mapped
def test_no_mapped_tier_is_refused_unless_default_tier_is_given(tmp_path: Path,
                                                                capsys: Any) -> None:
    with pytest.raises(InputError) as exc:
        build_snapshot(_load("nodes.json"), _load("pods.json"), None, NOW)
    (msg,) = exc.value.errors
    assert msg.startswith("no job gets its tier from the config: the config maps no "
                          "PriorityClass, and no pod has the preempt-planner.io/tier "
                          "annotation, so all 9 job(s) would get default_tier 3")
    # the classes the GPU pods use, most used first, and what to add
    assert ("(PriorityClasses of the GPU pods: batch-low: 3 pod(s), training: 3 pod(s), "
            "training-critical: 3 pod(s), (none): 2 pod(s))") in msg
    assert "'priority_classes: {batch-low: T, training: T, training-critical: T}'" in msg
    assert "--default-tier N" in msg
    # a config whose classes no pod uses is refused the same way
    with pytest.raises(InputError) as exc:
        build_snapshot(_load("nodes.json"), _load("pods.json"),
                       K8sConfig(priority_classes={"Training": 1}), NOW)
    assert "the config maps ['Training'], which no pod uses" in exc.value.errors[0]
    # one tier annotation is a mapping: not refused (the others get default_tier)
    pods = _load("pods.json")
    pods["items"][2]["metadata"]["annotations"]["preempt-planner.io/tier"] = "2"
    s = build_snapshot(_load("nodes.json"), pods, None, NOW).snapshot
    assert _job(s, "research/sweep-17")["tier"] == 2
    # no GPU pod at all: nothing to map, nothing refused
    assert build_snapshot(_load("nodes.json"), {"kind": "PodList", "items": []}, None,
                          NOW).snapshot["jobs"] == []
    # the CLI: exit 2 naming the fix, no file written; --default-tier N plans all as N
    out = tmp_path / "s.json"
    args = ["k8s", "snapshot", "--nodes", str(FIX / "nodes.json"), "--pods",
            str(FIX / "pods.json"), "--now", "2026-11-29T08:00:00Z", "--out", str(out)]
    assert main(args) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "add a priority_classes mapping" in err.lower() and not out.exists()
    assert main([*args, "--default-tier", "2"]) == 0
    assert {j.tier for j in load_snapshot(out).jobs} == {2}
    # with the fixture config the mapped classes stand and --default-tier only sets the
    # tier of the unmapped ones (notebook-7f9c and embed-0 have no class)
    assert main([*args, "--config", str(FIX / "config.yaml"), "--default-tier", "2"]) == 0
    tiers = {j.id: j.tier for j in load_snapshot(out).jobs}
    assert tiers["research/notebook-7f9c"] == 2 and tiers["research/sweep-17"] == 3


# ------------------------------------------------- the wrong kind of document
def _one_error(capsys: Any, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip().startswith("- ")]
    assert len(lines) == 1, err  # one clear message, not one per object
    return " ".join(err.split())


def test_the_wrong_kind_of_document_is_one_clear_message(tmp_path: Path, capsys: Any,
                                                         result: Any) -> None:
    slurm = Path(__file__).parent / "fixtures" / "slurm"
    example = Path(__file__).parent.parent / "instances" / "example-70b.json"
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(_hand_plan()))
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps(result.snapshot))
    events = tmp_path / "events.json"
    events.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e.1", "namespace": "ml"},
         "reason": "Preempted", "involvedObject": {"kind": "Pod", "name": "x"}}]}))
    nodes, pods = str(FIX / "nodes.json"), str(FIX / "pods.json")
    base = ["k8s", "snapshot", "--config", str(FIX / "config.yaml"), "--now",
            "2026-11-29T08:00:00Z"]
    cases = [
        (["--nodes", pods, "--pods", pods],
         ("--nodes: this looks like a Pod list (the output of 'kubectl get pods -A -o json'); "
         "use it as --pods, and give the output of 'kubectl get nodes -o json' as --nodes")),
        (["--nodes", nodes, "--pods", nodes],
         ("--pods: this looks like a Node list (the output of 'kubectl get nodes -o json'); "
         "use it as --nodes")),
        (["--nodes", nodes, "--pods", str(events)],
         ("--pods: this looks like an Event list (the output of 'kubectl get events -A -o "
         "json'); use it as --events")),
        (["--nodes", nodes, "--pods", pods, "--events", pods],
         "--events: this looks like a Pod list"),
        (["--nodes", str(example), "--pods", pods],
         ("--nodes: this looks like a contract snapshot (preempt-planner's own format); plan "
         "it with 'preempt-planner plan FILE'")),
        (["--nodes", str(snap), "--pods", pods],
         ("--nodes: this looks like a contract snapshot written by 'preempt-planner k8s "
         "snapshot'")),
        (["--nodes", nodes, "--pods", str(plan)],
         ("--pods: this looks like a preempt-planner plan; give it to 'preempt-planner k8s "
         "apply PLAN'")),
        (["--nodes", nodes, "--pods", str(slurm / "23.11" / "squeue.json")],
         ("--pods: this looks like the output of 'squeue --json' (Slurm); read it with "
         "'preempt-planner slurm snapshot'")),
        (["--nodes", nodes, "--pods", str(slurm / "22.05" / "squeue.json")],
         "this looks like the output of 'squeue --json' (Slurm)"),
        (["--nodes", str(slurm / "22.05" / "sinfo.json"), "--pods", pods],
         ("--nodes: this looks like the output of 'sinfo --json' or 'scontrol show nodes "
         "--json' (Slurm)")),
        (["--nodes", str(slurm / "23.11" / "sinfo.json"), "--pods", pods],
         "this looks like the output of 'sinfo --json' or 'scontrol show nodes --json'"),
        (["--nodes", str(slurm / "23.11" / "scontrol_nodes.json"), "--pods", pods],
         "this looks like the output of 'sinfo --json' or 'scontrol show nodes --json'"),
    ]
    for extra, said in cases:
        err = _one_error(capsys, [*base, *extra])
        assert said in err, (extra, err)
    # the message names the file that was given
    err = _one_error(capsys, [*base, "--nodes", pods, "--pods", pods])
    assert f"error: {pods}: invalid input" in err
    # a list mixing kinds ('kubectl get nodes,pods -o json')
    mixed = {"kind": "List", "items": _load("nodes.json")["items"][:2]
             + _load("pods.json")["items"][:3]}
    with pytest.raises(InputError) as exc:
        build_snapshot(mixed, _load("pods.json"), load_config(FIX / "config.yaml"), NOW)
    assert exc.value.errors == [
        ("--nodes: this looks like a list that mixes kinds Node (2), Pod (3); give the output of "
        "'kubectl get nodes -o json' as --nodes alone")]


# ------------------------------------------------------------------ plan age
def test_apply_refuses_a_plan_older_than_max_plan_age(tmp_path: Path, capsys: Any,
                                                      result: Any) -> None:
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(_hand_plan()))  # now = 08:00:00
    snap_file = tmp_path / "snap.json"
    snap_file.write_text(json.dumps(result.snapshot))
    out = tmp_path / "apply.sh"
    base = ["k8s", "apply", str(plan_file), "--snapshot-meta", str(snap_file), "--format",
            "kubectl", "--out", str(out)]
    # the fixture config sets no interval: interval_s 30, limit 2 x 30 = 60 s (inclusive)
    assert result.meta["interval_s"] == 30.0 and result.meta["max_plan_age_s"] == 60.0
    assert main([*base, "--now", "2026-11-29T08:01:00Z"]) == 0
    # the script also refuses to run later than that: 08:00:00Z is 1,795,939,200 s after
    # the epoch, + 60 s = 1,795,939,260 (a script saved and run an hour later acts on
    # nothing)
    text = out.read_text()
    assert 'if [ "$(date -u +%s)" -gt 1795939260 ]; then' in text.splitlines()
    import subprocess

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "date").write_text("#!/bin/sh\necho \"$FAKE_EPOCH\"\n")  # the clock, injected
    (fake / "date").chmod(0o755)
    # and a kubectl that finds no pod (never the machine's own kubectl from a test)
    (fake / "kubectl").write_text("#!/bin/sh\necho \"kubectl $*\" >&2\nexit 1\n")
    (fake / "kubectl").chmod(0o755)

    def run_at(epoch: int) -> Any:
        return subprocess.run(["sh", str(out)], capture_output=True, text=True, check=False,
                              env={"PATH": f"{fake}:/usr/bin:/bin", "FAKE_EPOCH": str(epoch)},
                              timeout=60)

    late = run_at(1795939261)
    assert late.returncode == 1 and "is older than 60 s; nothing applied" in late.stderr
    on_time = run_at(1795939260)  # (the fake kubectl finds no pod: every victim skipped)
    assert on_time.returncode == 0 and "older" not in on_time.stderr
    assert "research/sweep-17 is gone or no longer on gpu-a-001" in on_time.stderr
    assert "/eviction" not in on_time.stderr  # nothing is evicted without its re-check
    out.unlink()
    assert main([*base, "--now", "2026-11-29T08:01:01Z"]) == 2  # 61 s old
    err = " ".join(capsys.readouterr().err.split())
    assert ("the plan is for 2026-11-29T08:00:00Z, 61 s before now (2026-11-29T08:01:01Z): "
            "older than 60 s") in err and "--force" in err
    assert not out.exists()
    assert main([*base, "--now", "2026-11-29T08:01:01Z", "--force"]) == 0
    assert "--force: applying a plan 61 s old" in " ".join(capsys.readouterr().err.split())
    assert "date -u +%s" not in out.read_text()  # forced: no deadline in the script either
    # --config: interval_s 10 -> 20 s; max_plan_age_s 300 wins over the interval
    cfg = tmp_path / "k8s.yaml"
    cfg.write_text("interval_s: 10\n")
    assert main([*base, "--config", str(cfg), "--now", "2026-11-29T08:00:20Z"]) == 0
    assert main([*base, "--config", str(cfg), "--now", "2026-11-29T08:00:21Z"]) == 2
    assert "older than 20 s (2 x interval_s = 2 x 10 s)" in " ".join(
        capsys.readouterr().err.split())
    cfg.write_text("interval_s: 10\nmax_plan_age_s: 300\n")
    assert main([*base, "--config", str(cfg), "--now", "2026-11-29T08:05:00Z"]) == 0
    assert main([*base, "--config", str(cfg), "--now", "2026-11-29T08:05:01Z"]) == 2
    # without --config, the limit 'k8s snapshot' wrote into the meta (interval 45 -> 90)
    slow = build_snapshot(_load("nodes.json"), _load("pods.json"),
                          load_config({**_yaml(FIX / "config.yaml"), "interval_s": 45}), NOW)
    snap_file.write_text(json.dumps(slow.snapshot))
    assert main([*base, "--now", "2026-11-29T08:01:30Z"]) == 0
    assert main([*base, "--now", "2026-11-29T08:01:31Z"]) == 2


def _yaml(path: Path) -> dict[str, Any]:
    import yaml

    return yaml.safe_load(path.read_text())


# ------------------------------------------- the script re-checks every victim
FAKE_KUBECTL = r"""#!/bin/sh
# a stand-in for kubectl: 'get pod -n NS NAME -o jsonpath=...' prints the node in
# $STATE/NS_NAME (an empty file: not bound) or fails like NotFound; the rest is logged
echo "$*" >> "$LOG"
if [ "$1" = get ] && [ "$2" = pod ]; then
  f="$STATE/$4_$5"
  [ -f "$f" ] || { echo "Error from server (NotFound): pods \"$5\" not found" >&2; exit 1; }
  cat "$f"; exit 0
fi
cat > /dev/null
"""


def _run_script(tmp_path: Path, script: str, pods: dict[str, str]) -> tuple[list[str], str]:
    import subprocess

    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir(exist_ok=True)
    state.mkdir(exist_ok=True)
    for f in state.iterdir():
        f.unlink()
    (bin_dir / "kubectl").write_text(FAKE_KUBECTL)
    (bin_dir / "kubectl").chmod(0o755)
    for ref, node in pods.items():
        (state / ref.replace("/", "_")).write_text(node)
    log = tmp_path / "log"
    log.write_text("")
    (tmp_path / "apply.sh").write_text(script)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "LOG": str(log), "STATE": str(state)}
    done = subprocess.run(["sh", str(tmp_path / "apply.sh")], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return [ln for ln in log.read_text().splitlines() if not ln.startswith("get ")], \
        done.stderr


def test_kubectl_script_rechecks_victims_before_acting(tmp_path: Path, result: Any) -> None:
    script = kubectl_script(load_plan(_hand_plan()), result.meta)
    lines = script.splitlines()
    # each victim pod: the node the snapshot saw, compared just before the eviction
    assert "# re-check: skipped if research/sweep-17 is gone or no longer on gpu-a-001" in lines
    assert ("if [ \"$(kubectl get pod -n research sweep-17 -o jsonpath='{.spec.nodeName}' "
            "2>/dev/null || echo -)\" = gpu-a-001 ]; then") in lines
    assert ("echo 'preempt-planner: skip: research/sweep-17 is gone or no longer on "
            "gpu-a-001; not evicted' >&2") in lines
    where = {"research/sweep-17": "gpu-a-001", "research/notebook-7f9c": "gpu-a-002",
             "llm/pretrain-worker-0": "gpu-a-001", "llm/pretrain-worker-1": "gpu-a-002",
             "llm/ft-gang-0": "", "llm/ft-gang-1": ""}  # the gang's pods: pending, unbound
    # 1. everything as the snapshot saw it: 4 evictions with their 4 events, the 3 waits
    #    of the placement, then its 2 bindings
    calls, err = _run_script(tmp_path, script, where)
    assert [c.split()[0:2] for c in calls].count(["create", "--raw"]) == 4 + 2
    assert sum("/eviction" in c for c in calls) == 4 and sum("/binding" in c for c in calls) == 2
    assert calls.count("create -f -") == 4 and sum(c.startswith("wait") for c in calls) == 3
    assert err == ""
    # 2. the notebook is gone: not evicted, and the gang waiting for it is not bound
    #    (its GPUs may have been taken by whatever the scheduler put there)
    calls, err = _run_script(tmp_path, script, {k: v for k, v in where.items()
                                                if k != "research/notebook-7f9c"})
    assert sum("/eviction" in c for c in calls) == 3 and not any("/binding" in c for c in calls)
    assert calls.count("create -f -") == 3  # no event for an eviction not done
    assert "preempt-planner: skip: research/notebook-7f9c is gone or no longer on gpu-a-002" \
        in err
    assert "preempt-planner: skip: not placing llm/group:ft-gang: a pod of its victims was " \
           "not evicted" in err
    # 3. sweep-17 is now a pod of the same name on another node (recreated): skipped too
    calls, err = _run_script(tmp_path, script, {**where, "research/sweep-17": "gpu-b-001"})
    assert not any("pods/sweep-17/eviction" in c for c in calls)
    assert "research/sweep-17 is gone or no longer on gpu-a-001; not evicted" in err
    # 4. a pod of the placed gang was bound meanwhile: the victims go, the gang is not bound
    calls, err = _run_script(tmp_path, script, {**where, "llm/ft-gang-1": "gpu-b-001"})
    assert sum("/eviction" in c for c in calls) == 4 and not any("/binding" in c for c in calls)
    assert "not placing llm/group:ft-gang: llm/ft-gang-1 is gone or already bound" in err
    # without the pods' nodes in the meta (an older meta, or none): only that they exist
    old = copy.deepcopy(result.meta)
    for entry in old["jobs"].values():
        entry.pop("nodes", None)
    text = kubectl_script(load_plan(_hand_plan()), old)
    assert ("# re-check: skipped if research/sweep-17 is gone (the snapshot meta does not say "
            "its node)") in text
    calls, err = _run_script(tmp_path, text, {k: v for k, v in where.items()
                                              if k != "research/sweep-17"})
    assert sum("/eviction" in c for c in calls) == 3 and "research/sweep-17 is gone" in err


def test_a_rehearsal_script_changes_nothing(tmp_path: Path, result: Any) -> None:
    # The plan of the test above, rehearsed: the same 4 evictions and 2 bindings
    # are sent, each as a server-side dry run (?dryRun=All: validated, admission
    # and PDBs checked, nothing stored), the 4 Events with --dry-run=server (so no
    # eviction is recorded for 'k8s snapshot --events'), and no wait is run for
    # pods a dry run does not delete (the 3 waits are said on stderr)
    plan = load_plan(_hand_plan())
    where = {"research/sweep-17": "gpu-a-001", "research/notebook-7f9c": "gpu-a-002",
             "llm/pretrain-worker-0": "gpu-a-001", "llm/pretrain-worker-1": "gpu-a-002",
             "llm/ft-gang-0": "", "llm/ft-gang-1": ""}
    script = kubectl_script(plan, result.meta, rehearse=True)
    assert script.splitlines()[2].startswith("# REHEARSAL (k8s apply --rehearse)")
    calls, err = _run_script(tmp_path, script, where)
    raw = [c for c in calls if c.startswith("create --raw")]
    assert len(raw) == 4 + 2 and all(c.split()[2].endswith("?dryRun=All") for c in raw)
    assert sum("/eviction?dryRun=All" in c for c in raw) == 4
    assert sum("/binding?dryRun=All" in c for c in raw) == 2
    assert calls.count("create --dry-run=server -f -") == 4 and "create -f -" not in calls
    assert not any(c.startswith("wait") for c in calls)
    assert err.count("preempt-planner: rehearsal: would run: kubectl wait --for=delete") == 3
    # the script without --rehearse sends the same requests, for real
    real, _err = _run_script(tmp_path, kubectl_script(plan, result.meta), where)
    assert [c.replace("?dryRun=All", "").replace(" --dry-run=server", "")
            for c in calls] == [c for c in real if not c.startswith("wait")]
    # the command: only as a script; a List of objects cannot carry the dry run
    plan_file, snap_file = tmp_path / "plan.json", tmp_path / "snap.json"
    plan_file.write_text(json.dumps(_hand_plan()))
    snap_file.write_text(json.dumps(result.snapshot))
    base = ["k8s", "apply", str(plan_file), "--snapshot-meta", str(snap_file),
            "--now", "2026-11-29T08:00:30Z", "--rehearse"]
    out = tmp_path / "apply.sh"
    assert main([*base, "--emit", "kubectl", "--out", str(out)]) == 0
    assert out.read_text() == kubectl_script(plan, result.meta, rehearse=True, max_age_s=60.0)
    out.unlink()
    assert main([*base, "--out", str(out)]) == 2 and not out.exists()


def test_assumption_warnings(result: Any) -> None:
    # The fixture cluster as it is: two pods without a mapped class, three running jobs
    # that say nothing about a signal, no events given. One line each, naming the jobs.
    assert result.warnings == [
        "pod research/gated-0: has scheduling gates (not yet admitted); skipped",
        ("2 job(s) have no PriorityClass in priority_classes ((none): 2): planned as "
        "default_tier 3 (inference/embed-0, research/notebook-7f9c)"),
        ("3 running job(s) say nothing about a checkpoint signal (no preempt-planner.io/signal "
        "or preempt-planner.io/checkpoint annotation, no job_defaults signal for their "
        "namespace or class): priced as losing their work since start, signal null "
        "(llm/group:pretrain, research/eval-3, research/stale-1)"),
        ("no events (k8s snapshot --events): recent_evictions is empty, so the rolling "
        "eviction budget (R15) counts no evictions of earlier ticks")]
    # a job_defaults signal for the namespace is a statement: research's jobs drop out
    cfg = {**_yaml(FIX / "config.yaml"),
           "job_defaults_by_namespace": {"research": {"checkpoint": {"signal": None}}}}
    r = build_snapshot(_load("nodes.json"), _load("pods.json"), load_config(cfg), NOW)
    assert any(w.startswith("1 running job(s) say nothing about a checkpoint signal")
               and w.endswith("(llm/group:pretrain)") for w in r.warnings)
    # GPU indices: on a node with NVLink islands the assumed indices matter (R3), so they
    # are named; on nvswitch nodes (every pair linked) they do not, and nothing is said
    pods = _load("pods.json")
    by_name = {p["metadata"]["name"]: p for p in pods["items"]}
    by_name["pretrain-worker-0"]["spec"]["activeDeadlineSeconds"] = 7200  # not worker-1
    by_name["sweep-17"]["spec"]["activeDeadlineSeconds"] = 1800  # 07:00 + 30 min < 08:00
    cfg = {**_yaml(FIX / "config.yaml"),
           "nvlink_by_node": {"gpu-a-001": [[0, 1, 2, 3], [4, 5, 6, 7]]}}
    r = build_snapshot(_load("nodes.json"), pods, load_config(cfg), NOW)
    said = "\n".join(r.warnings)
    assert ("node gpu-a-001: GPU indices of llm/pretrain-worker-0, research/sweep-17 assumed "
            "(no preempt-planner.io/gpu-ids annotation: the lowest free ones, pods in name "
            "order); its NVLink layout [[0, 1, 2, 3], [4, 5, 6, 7]] is not all-to-all") in said
    assert "node gpu-a-002: GPU indices" not in said
    assert ("job llm/group:pretrain: only some of its pods have activeDeadlineSeconds (and a "
            "startTime); no expected end") in said
    assert ("job research/sweep-17: its activeDeadlineSeconds ended at 2026-11-29T07:30:00Z, "
            "before now; the kubelet should have stopped it") in said
    assert _job(r.snapshot, "research/sweep-17")["expected_end_at"] == "2026-11-29T07:30:00Z"
    assert "expected_end_at" not in _job(r.snapshot, "llm/group:pretrain")


def test_apply_given_the_wrong_file_says_what_it_looks_like(tmp_path: Path,
                                                            capsys: Any) -> None:
    example = Path(__file__).parent.parent / "instances" / "example-70b.json"
    # a snapshot as the plan: one message instead of the plan loader's seven
    err = _one_error(capsys, ["k8s", "apply", str(example)])
    assert ("PLAN: this looks like a contract snapshot (preempt-planner's own format); give "
            "the plan that 'preempt-planner plan SNAPSHOT --format json --out F' writes") in err
    err = _one_error(capsys, ["k8s", "apply", str(FIX / "pods.json")])
    assert "PLAN: this looks like a Pod list (the output of 'kubectl get pods -A -o json')" in err
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(_hand_plan()))
    err = _one_error(capsys, ["k8s", "apply", str(plan), "--snapshot-meta",
                              str(FIX / "pods.json"), "--now", "2026-11-29T08:00:00Z"])
    assert ("--snapshot-meta: this looks like a Pod list (the output of 'kubectl get pods -A -o "
            "json'): not a snapshot written by 'preempt-planner k8s snapshot'") in err


# --------------------------------------------- real kubectl output (tests/fixtures/k8s/real)
# nodes-a16-vgpu.json: a real 'kubectl get nodes --output=json' of an RKE2 node with one
# NVIDIA A16 vGPU (GPU Feature Discovery's labels, product NVIDIA-A16-4Q); nodes-aks.json:
# a real one of three AKS nodes without GPUs; pods-kuard.json: a real 'kubectl get pods
# -o json' of one pod (no GPU); pods-kuard-gpu.edited.json: an edited copy of it (the pod
# given 1 GPU on node nori, and a pending copy with a tier annotation). Sources:
# tests/fixtures/README.md.
REAL = FIX / "real"
REAL_NOW = datetime(2022, 12, 23, 10, 36, 45, tzinfo=UTC)  # 1 h after the pod started


def _real(name: str) -> Any:
    return json.loads((REAL / name).read_text())


def test_real_nodes_and_pods_gpu_model_decides_nvlink() -> None:
    # The A16 is a PCIe card: its layout is "none" by the model, without any config;
    # the AKS nodes have no GPUs and are left out; the real pod holds no GPU: no job
    r = build_snapshot(_real("nodes-a16-vgpu.json"), _real("pods-kuard.json"), K8sConfig(),
                       REAL_NOW)
    assert r.snapshot["nodes"] == [{"id": "nori", "gpus": 1, "gpu_type": "NVIDIA-A16-4Q",
                                    "nvlink": "none", "pool": "default", "state": "up"}]
    assert r.snapshot["jobs"] == []
    assert not any("NVLink layout" in w for w in r.warnings)
    r = build_snapshot(_real("nodes-aks.json"), _real("pods-kuard.json"), K8sConfig(), REAL_NOW)
    assert r.snapshot["nodes"] == [] and r.snapshot["jobs"] == []


def test_real_documents_of_the_wrong_kind_are_named() -> None:
    with pytest.raises(InputError) as exc:
        build_snapshot(_real("nodes-a16-vgpu.json"), _real("nodes-aks.json"), K8sConfig(),
                       REAL_NOW)
    assert exc.value.errors == [
        ("--pods: this looks like a Node list (the output of 'kubectl get nodes -o json'); use "
         "it as --nodes, and give the output of 'kubectl get pods -A -o json' as --pods")]
    with pytest.raises(InputError) as exc:
        build_snapshot(_real("pods-kuard.json"), _real("pods-kuard.json"), K8sConfig(),
                       REAL_NOW)
    assert exc.value.errors[0].startswith("--nodes: this looks like a Pod list")


def test_real_unannotated_pod_is_priced_and_a_config_is_required() -> None:
    # The running pod (no annotations, no PriorityClass, started 2022-12-23T09:36:45Z)
    # loses its hour of work if evicted: signal null, 1 GPU x 3,600 s = 3,600 GPU-s
    pods = _real("pods-kuard-gpu.edited.json")
    r = build_snapshot(_real("nodes-a16-vgpu.json"), pods, K8sConfig(), REAL_NOW,
                       default_tier=3)
    run = _job(r.snapshot, "default/queue-l4dv8")
    assert (run["state"], run["tier"], run["checkpoint"]) == ("running", 3, {"signal": None})
    assert _cost(r.snapshot, "default/queue-l4dv8") == 3600.0
    assert any(w.startswith("1 running job(s) say nothing about a checkpoint signal")
               for w in r.warnings)
    # without the tier annotation of the pending copy nothing maps a job to a tier:
    # refused, saying what to add
    for pod in pods["items"]:
        pod["metadata"].pop("annotations", None)
    with pytest.raises(InputError) as exc:
        build_snapshot(_real("nodes-a16-vgpu.json"), pods, K8sConfig(), REAL_NOW)
    assert exc.value.errors[0].startswith("no job gets its tier from the config")


def test_real_plan_evicts_with_preconditions_and_goes_stale(tmp_path: Path, capsys: Any
                                                            ) -> None:
    # The tier-1 pending copy takes nori's only GPU from the tier-3 pod. The Eviction
    # names the real pod's uid and resourceVersion; a minute (2 x interval_s) later the
    # plan is refused as stale.
    from planner import plan

    r = build_snapshot(_real("nodes-a16-vgpu.json"), _real("pods-kuard-gpu.edited.json"),
                       K8sConfig(), REAL_NOW, default_tier=3)
    p = plan(load_snapshot(r.snapshot), deterministic=True)
    assert [(e.job, e.cost_gpu_s) for e in p.evictions] == [("default/queue-l4dv8", 3600.0)]
    assert [pl.job for pl in p.placements] == ["default/queue-urgent"]
    (ev,) = eviction_objects(p, r.meta)
    assert ev["deleteOptions"] == {"gracePeriodSeconds": 60, "preconditions": {
        "uid": "d8aa9a47-ad0f-4bbe-bc12-ab31605d3211", "resourceVersion": "550088"}}
    plan_file, snap_file = tmp_path / "plan.json", tmp_path / "snap.json"
    plan_file.write_text(p.model_dump_json())
    snap_file.write_text(json.dumps(r.snapshot))
    base = ["k8s", "apply", str(plan_file), "--snapshot-meta", str(snap_file),
            "--out", str(tmp_path / "objects.json")]
    assert main([*base, "--now", "2022-12-23T10:37:45Z"]) == 0  # 60 s: the limit
    capsys.readouterr()
    assert main([*base, "--now", "2022-12-23T10:37:46Z"]) == 2
    assert "older than 60 s" in capsys.readouterr().err


def test_unreadable_annotations_are_ignored_with_the_documented_warnings() -> None:
    # docs/kubernetes.md, "Assumptions and warnings": each unreadable value is named,
    # ignored, and the default stands (here on the real pod of the edited copy)
    pods = _real("pods-kuard-gpu.edited.json")
    pods["items"][0]["metadata"]["annotations"] = {
        "preempt-planner.io/topology": "ring",
        "preempt-planner.io/same-block": "yes please",
        "preempt-planner.io/checkpoint": json.dumps(
            {"size_gb": -1, "restore_s": 30, "last_at": "yesterday", "signal": "SIGBOGUS"})}
    r = build_snapshot(_real("nodes-a16-vgpu.json"), pods, K8sConfig(), REAL_NOW,
                       default_tier=3)
    ref = "pod default/queue-l4dv8: annotation preempt-planner.io/"
    for text in ("topology='ring' is not nvlink or any; ignored",
                 "same-block='yes please' is not true/false; ignored",
                 "checkpoint: size_gb=-1 is not a number from 0 to 1e+09; ignored",
                 "checkpoint: last_at='yesterday' is not a time; ignored",
                 "checkpoint: unknown signal 'SIGBOGUS'; ignored"):
        assert ref + text in r.warnings, text
    job = _job(r.snapshot, "default/queue-l4dv8")
    # the defaults stand; the readable restore_s of the sidecar is kept
    assert (job["topology"], job.get("same_block", False)) == ("nvlink", False)
    assert job["checkpoint"] == {"signal": None, "restore_s": 30.0}


# ------------------------------------------- pods that are never victims, bad values
def _gpu_nodes(*specs: tuple[str, dict[str, str]]) -> dict[str, Any]:
    """Ready H100 nodes (NVSwitch boards: no NVLink warning), each with its allocatable."""
    return {"apiVersion": "v1", "kind": "NodeList", "items": [
        {"apiVersion": "v1", "kind": "Node",
         "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
         "status": {"allocatable": alloc, "conditions": [{"type": "Ready", "status": "True"}]}}
        for name, alloc in specs]}


def _eight(*names: str) -> dict[str, Any]:
    return _gpu_nodes(*((n, {"nvidia.com/gpu": "8"}) for n in names))


def _cluster(nodes: dict[str, Any], pods: list[dict[str, Any]], **cfg: Any) -> Any:
    """A snapshot of ``pods`` on ``nodes``: every pod without a tier annotation is tier 3
    (default_tier), and no events are given."""
    return build_snapshot(nodes, {"kind": "PodList", "items": pods}, load_config(cfg), NOW,
                          default_tier=3)


def _plan_of(result: Any) -> Any:
    from planner import plan

    return plan(load_snapshot(result.snapshot), deterministic=True)


URGENT = {"preempt-planner.io/tier": "1"}  # a tier-1 pending pod evicts tier 3 for room


def test_a_group_name_outside_the_safe_characters_is_no_group() -> None:
    # A group name becomes part of a job id, which 'k8s apply --emit kubectl' writes into
    # its script: a name with a newline in it ran the rest of it as a command. Such a
    # name is no group: the running pods' GPUs are occupied (a stand-in job, tier 9),
    # never evicted, and nothing is planned onto them.
    evil = "x\ntouch /tmp/pwned\n#"
    g = "scheduling.k8s.io/group-name"
    pods = [_gpu_pod("team", "victim-0", 8, "n1", {g: evil}),
            _gpu_pod("team", "victim-1", 8, "n2", {g: evil}),
            _gpu_pod("prod", "urgent", 8, None, URGENT),
            # 'a+pending' would have been the id of the pending part of group 'a'
            _gpu_pod("t", "a-0", 4, "n3", {g: "a"}), _gpu_pod("t", "a-1", 4, None, {g: "a"}),
            _gpu_pod("t", "b-0", 4, None, {g: "a+pending"}),
            _gpu_pod("t", "b-1", 4, None, {g: "a+pending"})]
    r = _cluster(_eight("n1", "n2", "n3"), pods)
    jobs = {j["id"]: j for j in r.snapshot["jobs"]}
    assert sorted(jobs) == ["k8s-occupied@n1", "k8s-occupied@n2", "prod/urgent", "t/group:a",
                            "t/group:a+pending"]
    # the pending part of group 'a' is a-1 alone; the pods of 'a+pending' are left out
    assert r.meta["jobs"]["t/group:a+pending"]["pods"] == ["a-1"]
    assert r.meta["jobs"]["t/group:a"]["pods"] == ["a-0"]
    for n in ("n1", "n2"):
        assert jobs[f"k8s-occupied@{n}"] == {
            "id": f"k8s-occupied@{n}", "tier": 9, "priority": 0, "state": "running",
            "gpus_per_node": 8, "nodes": 1, "topology": "any", "started_at": "2026-11-29T08:00:00Z",
            "placement": [{"node": n, "gpus": list(range(8))}], "checkpoint": {"signal": None}}
    assert r.meta["occupied"] == {"k8s-occupied@n1": ["team/victim-0"],
                                  "k8s-occupied@n2": ["team/victim-1"]}
    # tier 9 is added to the policy, not preemptible (the default policy has 1 to 3)
    assert r.snapshot["policy"] == {"tiers": {"9": {"preemptible": False, "min_runtime_s": 0,
                                                    "can_preempt": []}}}
    assert ("pod(s) team/victim-0, team/victim-1: group name 'x\\ntouch /tmp/pwned\\n#' "
            "(annotation scheduling.k8s.io/group-name) is not a name of the form "
            "[A-Za-z0-9][A-Za-z0-9._-]{0,252}; not planned: running pods' GPUs are occupied "
            "(never evicted), pending pods left out") in r.warnings
    assert any(w.startswith("pod(s) t/b-0, t/b-1: group name 'a+pending'") for w in r.warnings)
    assert not any("\n" in w for w in r.warnings)  # each warning stays one line
    # the tier-1 pod needs a whole node: n1 and n2 are held by pods never evicted, so it
    # evicts the running part of group 'a' (4 GPUs of n3, tier 3) and goes to n3
    p = _plan_of(r)
    assert [e.job for e in p.evictions] == ["t/group:a"]
    assert [(pl.job, pl.placement[0].node) for pl in p.placements] == [("prod/urgent", "n3")]


def test_no_text_of_a_meta_or_plan_leaves_its_line_in_the_kubectl_script(tmp_path: Path
                                                                          ) -> None:
    # A meta written before group names were checked (or edited by hand) and a plan may
    # hold any text in job ids and node names. The script writes them into comment lines
    # with every control character escaped: a newline no longer ends the comment.
    from planner.adapters.k8s.apply import one_line

    assert one_line("a\nb\r\x1bc\u2028d\te") == "a\\nb\\r\\x1bc\\u2028d\\te"
    marker = tmp_path / "pwned"
    evil = f"team/group:x\ntouch {marker}\n#"
    node = f"n2\ntouch {marker}\n#"
    meta = {"kind": "preempt-planner/k8s-meta", "version": 1, "jobs": {
        evil: {"namespace": "team", "group": "x", "state": "running",
               "pods": ["victim-0", "victim-1"], "nodes": {"victim-0": "n1", "victim-1": node}},
        "prod/urgent": {"namespace": "prod", "group": None, "state": "pending",
                        "pods": ["urgent"]}}}
    plan = load_plan({
        "version": 1, "now": "2026-11-29T08:00:00Z", "status": "feasible",
        "objective": {"admitted_gpus": {"1": 8}, "priority_value": 0,
                      "eviction_cost_gpu_s": 0.0, "evictions": 1},
        "evictions": [{"job": evil, "tier": 3, "preemptors": ["prod/urgent"],
                       "signal": None, "grace_s": 60.0, "flush_s": 0.0, "cost_gpu_s": 0.0,
                       "requeue_hold_until": "2026-11-29T08:31:00Z"}],
        "placements": [{"job": "prod/urgent", "start_after_s": 60.0,
                        "placement": [{"node": node, "gpus": list(range(8))}]}],
        "deferred": [], "storm": [], "warnings": [],
        "solver": {"engine": "hand", "status": "FEASIBLE"}})
    script = kubectl_script(plan, meta)
    lines = script.splitlines()
    assert f"# evict team/group:x\\ntouch {marker}\\n# (tier 3, grace 60 s) for prod/urgent" \
        in lines
    assert f"# re-check: skipped if team/victim-1 is gone or no longer on n2\\ntouch {marker}\\n#" \
        in lines
    assert f"# place prod/urgent on n2\\ntouch {marker}\\n#" in lines
    # (the node name is also compared with what kubectl prints: as one quoted word, data)
    # run against the stand-in kubectl (victim-0 on n1, victim-1 gone, urgent unbound):
    # victim-0 is evicted, victim-1 skipped, so the urgent pod is not bound; and no
    # 'touch' has run
    calls, err = _run_script(tmp_path, script, {"team/victim-0": "n1", "prod/urgent": ""})
    assert not marker.exists()
    assert [c.split()[2] for c in calls if c.startswith("create --raw")] == [
        "/api/v1/namespaces/team/pods/victim-0/eviction"]
    assert "preempt-planner: skip: team/victim-1 is gone or no longer on n2" in err
    assert not any("/binding" in c for c in calls)  # its victim was not wholly evicted


def test_annotations_beyond_the_contract_limits_do_not_refuse_the_snapshot(
        tmp_path: Path, capsys: Any) -> None:
    # Each value parses but breaks a contract limit (docs/format.md, "Limits"): before,
    # the snapshot of the whole cluster was refused (exit 2), or the conversion crashed
    # (1e20 seconds overflow a datetime: exit 3). Now each is ignored with a warning
    # naming the pod and the annotation, or the pod is left out.
    ck = "preempt-planner.io/checkpoint"
    g = "scheduling.k8s.io/group-name"
    pods = [
        _gpu_pod("ml", "t7", 4, "n1", {"preempt-planner.io/tier": "7"}),
        _gpu_pod("ml", "t0", 4, "n1", {"preempt-planner.io/tier": "0"}),
        _gpu_pod("ml", "pre", 2, "n2", {"preempt-planner.io/preemptions": "1000001"}),
        _gpu_pod("ml", "pre-ok", 2, "n2", {"preempt-planner.io/preemptions": "1000000"}),
        _gpu_pod("ml", "old", 2, "n2",
                 {"preempt-planner.io/last-preempted-at": "0001-01-01T00:00:00Z"}),
        _gpu_pod("ml", "ck", 2, "n2", {
            "preempt-planner.io/last-checkpoint-at": "1e20",
            ck: json.dumps({"size_gb": 2e9, "barrier_s": 1e300, "restore_s": 30,
                            "last_at": "inf"})}),
        # a gang whose shards are each within 1e9 GB but add up to 1.2e9
        _gpu_pod("ml", "g-0", 8, "n3", {g: "big", ck: json.dumps({"size_gb": 6e8})}),
        _gpu_pod("ml", "g-1", 8, "n4", {g: "big", ck: json.dumps({"size_gb": 6e8})}),
        # pending pods no node can hold
        _gpu_pod("ml", "huge", 2000, None),
        _gpu_pod("ml", "wide", 16, None),
        _gpu_pod("ml", "pg-0", 8, None, {g: "pg"}), _gpu_pod("ml", "pg-1", 16, None, {g: "pg"}),
    ]
    r = _cluster(_eight("n1", "n2", "n3", "n4"), pods)
    load_snapshot(r.snapshot)
    jobs = {j["id"]: j for j in r.snapshot["jobs"]}
    assert sorted(jobs) == ["ml/ck", "ml/group:big", "ml/old", "ml/pre", "ml/pre-ok", "ml/t0",
                            "ml/t7"]
    assert jobs["ml/t7"]["tier"] == 3 and jobs["ml/t0"]["tier"] == 3  # default_tier stands
    assert "preemptions" not in jobs["ml/pre"] and jobs["ml/pre-ok"]["preemptions"] == 1_000_000
    assert "last_preempted_at" not in jobs["ml/old"]
    # the sidecar's restore_s is kept, the rest ignored: no size, no barrier, no last_at
    assert jobs["ml/ck"]["checkpoint"] == {"signal": None, "restore_s": 30.0}
    assert jobs["ml/group:big"]["checkpoint"] == {"signal": None}  # 1.2e9 GB: ignored
    said = r.warnings
    p = "pod ml/{}: annotation preempt-planner.io/{}"
    for w in (p.format("t7", "tier='7' is not a tier of the policy (1, 2, 3); ignored"),
              p.format("t0", "tier='0' is not a tier of the policy (1, 2, 3); ignored"),
              p.format("pre", "preemptions='1000001' is not a whole number from 0 to "
                              "1,000,000; ignored"),
              p.format("old", "last-preempted-at='0001-01-01T00:00:00Z' is outside "
                              "1970-01-01 to 9000-01-01; ignored"),
              p.format("ck", "last-checkpoint-at='1e20' is outside 1970-01-01 to "
                             "9000-01-01; ignored"),
              p.format("ck", "checkpoint: size_gb=2000000000.0 is not a number from 0 to "
                             "1e+09; ignored"),
              p.format("ck", "checkpoint: barrier_s=1e+300 is not a number from 0 to 1e+09; "
                             "ignored"),
              p.format("ck", "checkpoint: last_at='inf' is outside 1970-01-01 to 9000-01-01; "
                             "ignored"),
              ("job ml/group:big: the size_gb of its pods' preempt-planner.io/checkpoint "
               "annotations add up to 1.2e+09 GB, more than 1e+09; ignored"),
              ("pod ml/huge: requests 2000 nvidia.com/gpu, more than the 1,024 the contract "
               "allows on one node; left out"),
              ("pod ml/wide: requests 16 nvidia.com/gpu, more than any node has (the largest "
               "has 8); left out"),
              ("job ml/group:pg: pod ml/pg-1 requests 16 nvidia.com/gpu, more than any node "
               "has (the largest has 8); its pending pods are left out")):
        assert w in said, w
    # --now beyond the contract's times: bad input (exit 2), not a crash (exit 3)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(_hand_plan()))
    for now in ("1e20", "inf"):
        assert main(["k8s", "snapshot", "--nodes", str(FIX / "nodes.json"), "--pods",
                     str(FIX / "pods.json"), "--config", str(FIX / "config.yaml"),
                     "--now", now]) == 2
        assert f"--now: '{now}' is outside 1970-01-01 to 9000-01-01" in capsys.readouterr().err
        assert main(["k8s", "apply", str(plan_file), "--now", now]) == 2
        assert f"--now: '{now}' is outside 1970-01-01 to 9000-01-01" in capsys.readouterr().err


def test_the_occupied_tier_is_nobody_elses() -> None:
    # The stand-ins' tier (occupied_tier, 9) holds GPUs never evicted: a PriorityClass
    # or the default tier mapped to it would make those pods unevictable too, so such
    # a config is refused naming each use; another occupied_tier is accepted
    with pytest.raises(InputError) as exc:
        load_config({"priority_classes": {"infra": 9, "batch": {"tier": 9, "priority": 1},
                                          "prod": 1}, "default_tier": 9})
    assert exc.value.errors == [
        ("config.occupied_tier: tier 9 is also used by default_tier, priority_classes.batch, "
         "priority_classes.infra; set occupied_tier to a tier number nothing else uses (it "
         "holds the GPUs of pods never evicted)")]
    assert load_config({"priority_classes": {"infra": 9}, "occupied_tier": 10}).occupied_tier == 10


def test_pods_of_other_namespaces_keep_their_gpus() -> None:
    # 'namespaces: [prod]' used to drop the research pod entirely: its 8 GPUs on n1
    # looked free, and the urgent pod was bound onto them. Now a stand-in job holds
    # them (tier 9, never evicted); research's pending pod is still not planned.
    pods = [_gpu_pod("research", "train", 8, "n1"), _gpu_pod("research", "queued", 8, None),
            _gpu_pod("prod", "urgent", 8, None, URGENT),
            _gpu_pod("prod", "batch", 4, "n2", {"preempt-planner.io/gpu-ids": "0,1,2,3"})]
    r = _cluster(_eight("n1", "n2"), pods, namespaces=["prod"])
    jobs = {j["id"]: j for j in r.snapshot["jobs"]}
    assert sorted(jobs) == ["k8s-occupied@n1", "prod/batch", "prod/urgent"]
    assert jobs["k8s-occupied@n1"]["placement"] == [{"node": "n1", "gpus": list(range(8))}]
    assert r.meta["occupied"] == {"k8s-occupied@n1": ["research/train"]}
    assert [w for w in r.warnings if "research" in w] == [
        ("1 running GPU pod(s) outside the config's namespaces (research/train): never "
         "evicted; their GPUs count as occupied (k8s-occupied@<node> jobs, tier 9, which "
         "nothing is planned onto)")]
    # the tier-1 pod's 8 GPUs: n1 is held, so it evicts prod/batch (tier 3) on n2
    p = _plan_of(r)
    assert [e.job for e in p.evictions] == ["prod/batch"]
    assert [(pl.job, pl.placement[0].node) for pl in p.placements] == [("prod/urgent", "n2")]
    # a stand-in maps to no pods: 'k8s apply' refuses to act on it
    hand = copy.deepcopy(p.model_dump(mode="json"))
    hand["evictions"][0]["job"] = "k8s-occupied@n1"
    with pytest.raises(InputError) as exc:
        eviction_objects(load_plan(hand), r.meta)
    assert exc.value.errors[0].startswith("job 'k8s-occupied@n1': stands for the GPUs of pods "
                                          "the planner must never evict")
    # a policy that makes the stand-ins' tier preemptible is a config error (tier 2
    # of the default policy; tier 3, the default tier, is refused as taken)
    with pytest.raises(InputError) as exc:
        _cluster(_eight("n1"), pods[:1], namespaces=["prod"], occupied_tier=2)
    assert exc.value.errors[0].startswith("config: occupied_tier 2 is preemptible")
    with pytest.raises(InputError) as exc:
        _cluster(_eight("n1"), pods[:1], namespaces=["prod"], occupied_tier=3)
    assert exc.value.errors[0].startswith(
        "config.occupied_tier: tier 3 is also used by default_tier")


def test_a_group_asking_for_different_gpu_resources_or_types_is_left_out() -> None:
    # One pod of group g asks for a MIG slice, the other for a whole GPU: no one job
    # can hold both (it was planned as MIG slices, and the whole-GPU pod bound onto
    # one). Group h's running pods name different GPU types. Both are left out, and
    # h's GPUs stay occupied.
    g, h = {"scheduling.k8s.io/group-name": "g"}, {"scheduling.k8s.io/group-name": "h"}
    mig = _gpu_pod("t", "g-master", 1, None, g)
    mig["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/mig-1g.10gb": "1"}
    pods = [mig, _gpu_pod("t", "g-worker", 1, None, g),
            _gpu_pod("t", "h-0", 4, "n1", {**h, "preempt-planner.io/gpu-type": "H100"}),
            _gpu_pod("t", "h-1", 4, "n2", {**h, "preempt-planner.io/gpu-type": "A100"}),
            _gpu_pod("t", "solo", 2, None)]
    nodes = _gpu_nodes(("n1", {"nvidia.com/gpu": "8"}), ("n2", {"nvidia.com/gpu": "8"}),
                       ("m1", {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "7"}))
    r = _cluster(nodes, pods)
    jobs = {j["id"]: j for j in r.snapshot["jobs"]}
    assert sorted(jobs) == ["k8s-occupied@n1", "k8s-occupied@n2", "t/solo"]
    assert jobs["k8s-occupied@n1"]["placement"] == [{"node": "n1", "gpus": [0, 1, 2, 3]}]
    assert jobs["k8s-occupied@n2"]["placement"] == [{"node": "n2", "gpus": [0, 1, 2, 3]}]
    assert ("job t/group:g: its pods ask for different GPU resources (nvidia.com/gpu, "
            "nvidia.com/mig-1g.10gb); left out (its running pods' GPUs are occupied, never "
            "evicted)") in r.warnings
    assert ("job t/group:h: its pods ask for different GPU types ('A100', 'H100'); left out "
            "(its running pods' GPUs are occupied, never evicted)") in r.warnings


def test_terminating_daemonset_and_static_pods_are_never_victims() -> None:
    # A terminating pod is going already (its GPUs stay taken until it has gone); a
    # DaemonSet's pod comes back at once; a static pod cannot be evicted through the
    # API. The tier-1 pod used to evict them; now it evicts the plain tier-3 pod on n4.
    leaving = _gpu_pod("t", "leaving", 8, "n1")
    leaving["metadata"]["deletionTimestamp"] = "2026-11-29T08:09:00Z"
    going = _gpu_pod("t", "going", 8, None)
    going["metadata"]["deletionTimestamp"] = "2026-11-29T07:59:00Z"
    agent = _gpu_pod("kube-system", "gpu-agent-x7k2p", 8, "n2")
    agent["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                                             "name": "gpu-agent", "uid": "u1"}]
    mirror = _gpu_pod("kube-system", "infer-n3", 4, "n3",
                      {"kubernetes.io/config.mirror": "abc"})
    owned = _gpu_pod("kube-system", "probe-n3", 4, "n3")
    owned["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": "n3",
                                             "uid": "u2"}]
    pods = [leaving, going, agent, mirror, owned, _gpu_pod("t", "plain", 8, "n4"),
            _gpu_pod("prod", "urgent", 8, None, URGENT)]
    r = _cluster(_eight("n1", "n2", "n3", "n4"), pods)
    jobs = {j["id"]: j for j in r.snapshot["jobs"]}
    assert sorted(jobs) == ["k8s-occupied@n1", "k8s-occupied@n2", "k8s-occupied@n3",
                            "prod/urgent", "t/plain"]
    assert all(jobs[f"k8s-occupied@{n}"]["placement"] == [{"node": n, "gpus": list(range(8))}]
               for n in ("n1", "n2", "n3"))
    assert r.meta["occupied"]["k8s-occupied@n3"] == ["kube-system/infer-n3",
                                                     "kube-system/probe-n3"]
    held = ("never evicted; their GPUs count as occupied (k8s-occupied@<node> jobs, tier 9, "
            "which nothing is planned onto)")
    for w in ((f"1 running GPU pod(s) terminating (metadata.deletionTimestamp is set) "
               f"(t/leaving): {held}"),
              ("1 pending GPU pod(s) terminating (metadata.deletionTimestamp is set): left out, "
               "not planned (t/going)"),
              f"1 running GPU pod(s) of a DaemonSet (kube-system/gpu-agent-x7k2p): {held}",
              ("2 running GPU pod(s) static (mirror pods of the kubelet's own manifests) "
               f"(kube-system/infer-n3, kube-system/probe-n3): {held}")):
        assert w in r.warnings, w
    p = _plan_of(r)
    assert [e.job for e in p.evictions] == ["t/plain"]
    assert [(pl.job, pl.placement[0].node) for pl in p.placements] == [("prod/urgent", "n4")]


def test_apply_refuses_a_broken_meta_and_says_the_objects_record_no_events(
        tmp_path: Path, capsys: Any, result: Any) -> None:
    plan_file, meta_file = tmp_path / "plan.json", tmp_path / "meta.json"
    plan_file.write_text(json.dumps(_hand_plan()))
    base = ["k8s", "apply", str(plan_file), "--snapshot-meta", str(meta_file),
            "--now", "2026-11-29T08:00:30Z"]
    # a job entry without 'pods' (hand-edited): bad input naming the job, not a KeyError
    meta = copy.deepcopy(result.meta)
    del meta["jobs"]["llm/group:pretrain"]["pods"]
    meta_file.write_text(json.dumps(meta))
    assert main(base) == 2
    assert ("job 'llm/group:pretrain': its entry in the snapshot meta has no 'pods' list "
            "(a hand-edited meta?)") in " ".join(capsys.readouterr().err.split())
    # names that are no Kubernetes names would go into the API path of the eviction
    meta["jobs"]["llm/group:pretrain"]["pods"] = ["../../../namespaces/kube-system/pods/x"]
    meta_file.write_text(json.dumps(meta))
    assert main(base) == 2
    assert ("names pod '../../../namespaces/kube-system/pods/x', which Kubernetes does not "
            "allow as a name") in " ".join(capsys.readouterr().err.split())
    # the List of --emit evictions records nothing for R15: one warning says so, with how;
    # the script of --emit kubectl creates the Events itself and says nothing
    meta_file.write_text(json.dumps(result.meta))
    assert main(base) == 0
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("warning:")]
    assert len(lines) == 1, err
    assert ("--emit evictions: the List holds the 3 eviction(s) but no PreemptPlannerEviction "
            "Events, so the next 'k8s snapshot --events' does not count them toward the "
            "rolling eviction budget (R15) unless you record them: create one Event of reason "
            "PreemptPlannerEviction per evicted pod (as the script of --emit kubectl does)"
            ) in " ".join(err.split())
    assert main([*base, "--emit", "kubectl"]) == 0
    assert capsys.readouterr().err == ""


def test_apply_refuses_meta_fields_of_the_wrong_type_or_range(
        tmp_path: Path, capsys: Any, result: Any) -> None:
    # A hand-edited meta: "prefix": 5 was a TypeError (exit 3) when the annotations
    # were named, "max_plan_age_s": 1e300 an OverflowError in the script's deadline.
    # Each is bad input naming the field, and nothing is written.
    plan_file, meta_file, out = tmp_path / "plan.json", tmp_path / "meta.json", tmp_path / "o"
    plan_file.write_text(json.dumps(_hand_plan()))
    base = ["k8s", "apply", str(plan_file), "--snapshot-meta", str(meta_file),
            "--now", "2026-11-29T08:00:10Z", "--out", str(out)]
    for field, value, said in (
            ("prefix", 5, "prefix: must be a string, got 5"),
            ("max_plan_age_s", 1e300, ("max_plan_age_s: must be a number of seconds > 0 and "
                                       "at most 2e+09, got 1e+300")),
            ("interval_s", 1.5e9, ("interval_s: must be a number of seconds > 0 and at most "
                                   "1e+09, got 1500000000.0")),
            ("max_plan_age_s", -1, "max_plan_age_s: must be a number of seconds > 0"),
            ("interval_s", True, "interval_s: must be a number of seconds > 0"),
            ("now", 7, "now: must be a string, got 7"),
            ("mig_nodes", [], "mig_nodes: must be an object, got []"),
            ("jobs", {"llm/x": [1]}, "jobs.llm/x: must be an object, got [1]")):
        meta = copy.deepcopy(result.meta)
        meta[field] = value
        meta_file.write_text(json.dumps(meta))
        for emit in ("evictions", "kubectl"):
            err = _one_error(capsys, [*base, "--emit", emit])
            assert f"--snapshot-meta: {said}" in err, err
            assert not out.exists()
    meta_file.write_text(json.dumps(result.meta))
    assert main([*base, "--emit", "kubectl"]) == 0 and out.exists()
    # what 'k8s snapshot' writes from a config of the longest interval_s, 1e9 (its
    # plans may be twice as old: max_plan_age_s 2e9), is read back
    out.unlink()
    meta_file.write_text(json.dumps({**result.meta, "interval_s": 1e9,
                                     "max_plan_age_s": 2e9}))
    assert main([*base, "--emit", "kubectl"]) == 0 and out.exists()


def test_a_node_nvlink_label_that_is_no_layout_of_its_gpus_is_ignored() -> None:
    # Like a pod's annotation, one node's label must not refuse the snapshot: islands
    # that overlap, or a GPU beyond the node's 8, are ignored with a warning, and the
    # layout known for the board (H100 80GB HBM3: NVSwitch) stands.
    nodes = _eight("n1", "n2", "n3")
    for node, value in zip(nodes["items"], ("[[0,1],[1,2]]", "[[0,1,2,3,4,5,6,7,8]]",
                                            "[[0,1],[2,3]]"), strict=True):
        node["metadata"]["labels"]["preempt-planner.io/nvlink"] = value
    r = _cluster(nodes, [_gpu_pod("t", "a", 2, "n1")])
    assert {n["id"]: n["nvlink"] for n in r.snapshot["nodes"]} == {
        "n1": "nvswitch", "n2": "nvswitch", "n3": [[0, 1], [2, 3]]}
    assert ("node n1: preempt-planner.io/nvlink='[[0,1],[1,2]]' is no NVLink layout of its 8 "
            "GPUs (GPU 1 is also in island 0 (islands must not overlap)); using the configured "
            "layout") in r.warnings
    assert ("node n2: preempt-planner.io/nvlink='[[0,1,2,3,4,5,6,7,8]]' is no NVLink layout of "
            "its 8 GPUs (GPU 8 out of range (node has 8 GPUs)); using the configured layout"
            ) in r.warnings
