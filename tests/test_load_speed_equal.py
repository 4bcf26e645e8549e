"""The quick ways of ``load_snapshot`` give what the detailed ones give: a JSON text,
YAML and a dict load to the same snapshot or the same messages (bad GPU lists among
them), and check_snapshot's one-pass check of all jobs (``_jobs_fine``) finds what
the per-job checks it stands in for find."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from test_load_ways import _ways

from models import Snapshot, check_snapshot, load_snapshot

INSTANCES = Path(__file__).resolve().parents[1] / "instances"
NOW = "2026-11-29T08:00:00Z"
BASE: dict[str, Any] = {
    "version": 1,
    "now": NOW,
    "_comment": "kept as the comment",
    "storage": [{"id": "fs", "write_gb_per_s": 40.0}],
    "nodes": [
        {"id": "n1", "gpus": 8},
        {"id": "n2", "gpus": 8, "nvlink": [[0, 1], [2, 3], [4, 5], [6, 7]]},
        {"id": "n3", "gpus": 4, "nvlink": {"edges": [[0, 1], [2, 3]]}},
    ],
    "jobs": [
        {"id": "a", "tier": 3, "state": "running", "gpus_per_node": 4,
         "started_at": "2026-11-29T07:00:00Z",
         "placement": [{"node": "n1", "gpus": [0, 1, 2, 3]}],
         "checkpoint": {"size_gb": 56, "last_at": "2026-11-29T07:30:00Z"}},
        {"id": "b", "tier": 2, "state": "running", "gpus_per_node": 2, "nodes": 2,
         "started_at": "2026-11-29T06:00:00Z", "last_preempted_at": "2026-11-29T05:00:00Z",
         "placement": [{"node": "n1", "gpus": [4, 5]}, {"node": "n2", "gpus": [0, 1]}]},
        {"id": "c", "tier": 1, "state": "running", "gpus_per_node": 4,
         "started_at": "2026-11-29T07:59:00Z", "checkpoint": {"signal": None},
         "placement": [{"node": "n3", "gpus": [3, 2, 1, 0]}]},
        {"id": "p", "tier": 1, "state": "pending", "gpus_per_node": 8, "priority": 2.5},
    ],
}


@pytest.mark.parametrize("path", sorted(INSTANCES.glob("*.json")), ids=lambda p: p.name)
def test_instances_load_as_validated_in_python(path: Path) -> None:
    doc = json.loads(path.read_text())
    snap = load_snapshot(path)
    assert snap == load_snapshot(doc)
    assert snap.model_dump(mode="json") == Snapshot.model_validate(doc).model_dump(mode="json")


DUP = "jobs[0].placement[0].gpus: GPU indices [0, 1, 1, 2] are not distinct"
NEG = "jobs[3].placement[0].gpus: GPU indices [-1, 0] must not be negative"


def _edit(doc: dict[str, Any], what: str) -> None:
    jobs = doc["jobs"]
    if what == "dup":
        jobs[0]["placement"][0]["gpus"] = [0, 1, 1, 2]
    elif what == "neg pending":  # (a pending job's placement is validated too)
        jobs[3]["placement"] = [{"node": "n1", "gpus": [-1, 0]}]
    elif what == "on b's GPUs":  # (R1: a fine list, GPUs job b holds too)
        jobs[0]["placement"][0]["gpus"] = [2, 3, 4, 5]
    elif what == "unknown node":
        jobs[0]["placement"][0]["node"] = "nx"
    elif what == "tier":
        jobs[1]["tier"] = 9
    elif what == "field":  # a problem pydantic finds
        doc["nodes"][0]["gpus"] = 0
    elif what == "late":
        jobs[2]["started_at"] = "2026-11-29T09:00:00Z"
    else:
        raise AssertionError(what)


@pytest.mark.parametrize(("edits", "messages"), [
    (["dup"], [DUP]),
    (["neg pending"], [NEG]),
    (["dup", "neg pending"], [DUP, NEG]),
    # pydantic's messages alone, as before check_snapshot (which would name these)
    (["dup", "unknown node"], [DUP]),
    (["unknown node", "neg pending"], [NEG]),
    (["dup", "tier"], [DUP]),
    (["dup", "late"], [DUP]),
    (["dup", "field"], ["nodes[0].gpus: Input should be greater than or equal to 1", DUP]),
    # check_snapshot's messages, the lists themselves fine
    (["on b's GPUs"], [f"jobs[1].placement[0].gpus: GPU {g} of node n1 is also used by "
                       "running job 'a' (R1)" for g in (4, 5)]),
    (["tier", "late"], None),
])
def test_bad_gpu_lists_keep_their_messages_every_way(
        tmp_path: Path, edits: list[str], messages: list[str] | None) -> None:
    doc = copy.deepcopy(BASE)
    for what in edits:
        _edit(doc, what)
    ways = _ways(tmp_path, doc)
    assert isinstance(ways["dict"], list)
    assert ways["json"] == ways["yaml"] == ways["dict"]
    if messages is not None:
        assert ways["json"] == messages


def _mutate(doc: dict[str, Any], rng: random.Random) -> None:
    """One random change that may or may not break a cross-record rule."""
    jobs, nodes = doc["jobs"], doc["nodes"]
    j = rng.choice(jobs)
    k = rng.randrange(12)
    if k == 0 and j.get("placement"):
        rng.choice(j["placement"])["node"] = rng.choice([*(n["id"] for n in nodes), "nx"])
    elif k == 1 and j.get("placement"):
        part = rng.choice(j["placement"])
        part["gpus"] = rng.sample(range(10), len(part["gpus"]))
    elif k == 2 and j.get("placement"):
        part = rng.choice(j["placement"])
        part["gpus"] = part["gpus"][:-1] or [0, 1]
    elif k == 3:
        j["tier"] = rng.choice([1, 2, 3, 4, 9])
    elif k == 4:
        j.setdefault("checkpoint", {})["signal"] = rng.choice(["SIGTERM", "SIGNOPE", None])
    elif k == 5:
        j[rng.choice(["started_at", "last_preempted_at"])] = rng.choice(
            ["2026-11-29T07:00:00Z", NOW, "2026-11-29T08:00:01Z"])
    elif k == 6:
        j.setdefault("checkpoint", {})["last_at"] = rng.choice([NOW, "2026-11-29T08:30:00Z"])
    elif k == 7:
        j["state"] = "pending" if j["state"] == "running" else "running"
    elif k == 8:
        if j.get("placement"):
            j.pop("placement")
        else:
            j["placement"] = [{"node": "n2", "gpus": list(range(j["gpus_per_node"]))}]
    elif k == 9:
        j["nodes"] = rng.choice([1, 2, 3])
    elif k == 10:
        j.pop("started_at", None)
    elif k == 11 and j.get("placement") and len(j["placement"]) > 1:
        j["placement"][1]["node"] = j["placement"][0]["node"]


def test_one_pass_check_finds_what_the_per_job_checks_find() -> None:
    """check_snapshot without ``owner`` takes _jobs_fine's word for the jobs when it
    finds nothing; with one, it runs the per-job checks: both must agree."""
    rng = random.Random(7)
    seen = {"clean": 0, "errors": 0}
    for _ in range(1500):
        doc = copy.deepcopy(BASE)
        for _ in range(rng.randint(1, 3)):
            _mutate(doc, rng)
        try:
            snap = Snapshot.model_validate(doc)
        except ValidationError:
            continue
        owner: dict[str, dict[int, str]] = {}
        detailed = check_snapshot(snap, owner)
        assert check_snapshot(snap) == detailed
        seen["errors" if detailed else "clean"] += 1
    assert min(seen.values()) >= 100  # (both kinds tried)
