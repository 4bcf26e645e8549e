"""A snapshot is read the same whichever way it comes: a JSON file (validated by
pydantic-core from the text when it can), a YAML file, a dict, or
``Snapshot.model_validate``/``model_validate_json`` called directly. Comments
(keys starting with ``_``) are dropped at every level of records, and the
messages of values checked by pydantic-core (time limits, priorities) read as the
contract's (docs/format.md)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from models import InputError, Snapshot, load_snapshot
from models.load import MAX_DEPTH, json_nests_at_most, load_snapshot_text, parse_document

NOW = "2026-11-29T08:00:00Z"
BASE: dict[str, Any] = {
    "version": 1,
    "now": NOW,
    "nodes": [{"id": "n1", "gpus": 4, "nvlink": {"edges": [[0, 1]]}}],
    "jobs": [
        {"id": "a", "tier": 3, "state": "running", "gpus_per_node": 2, "priority": 7,
         "started_at": "2026-11-29T07:00:00Z", "placement": [{"node": "n1", "gpus": [0, 1]}],
         "checkpoint": {"size_gb": 10, "last_at": "2026-11-29T07:30:00Z"}},
        {"id": "p", "tier": 1, "state": "pending", "gpus_per_node": 2, "priority": 2.5},
    ],
}


def _ways(tmp_path: Path, doc: dict[str, Any]) -> dict[str, Any]:
    """What each way of loading ``doc`` gives: the snapshot dumped, or the messages."""
    out: dict[str, Any] = {}
    (tmp_path / "s.json").write_text(json.dumps(doc))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc))
    for way, source in (("json", tmp_path / "s.json"), ("yaml", tmp_path / "s.yaml"),
                        ("dict", copy.deepcopy(doc))):
        try:
            out[way] = load_snapshot(source).model_dump(mode="json")
        except InputError as exc:
            out[way] = exc.errors
    # a request's body: from its text where it can be, else parsed (the service's way)
    try:
        snap = load_snapshot_text(json.dumps(doc).encode())
        out["text"] = (snap or load_snapshot(json.loads(json.dumps(doc)))).model_dump(
            mode="json")
    except InputError as exc:
        out["text"] = exc.errors
    return out


def _commented() -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    doc["_comment"] = "the whole tick"
    doc["_source"] = {"tool": "x"}
    node = doc["nodes"][0]
    node["_rack"] = "r7"
    node["nvlink"]["_why"] = "a pair"
    job = doc["jobs"][0]
    job["_comment"] = "a job's comment is dropped (jobs have no comment field)"
    job["placement"][0]["_c"] = 1
    job["checkpoint"]["_c"] = [1]
    doc["policy"] = {"_c": 1, "tiers": {"3": {"_c": 1, "windows": [{"_c": 1, "days": ["mon"]}]}},
                     "pools": {"_x": [1]}}
    return doc


def test_comments_are_dropped_at_every_level(tmp_path: Path) -> None:
    doc = _commented()
    before = copy.deepcopy(doc)
    ways = _ways(tmp_path, doc)
    assert doc == before  # (the caller's document is not changed)
    dumped = ways["json"]
    assert ways["yaml"] == ways["dict"] == ways["text"] == dumped
    assert dumped["comment"] == "the whole tick"
    assert "_rack" not in json.dumps(dumped) and '"_c"' not in json.dumps(dumped)
    assert dumped["nodes"][0]["nvlink"] == {"edges": [[0, 1]]}
    assert dumped["jobs"][0]["placement"] == [{"node": "n1", "gpus": [0, 1]}]
    assert dumped["jobs"][0]["checkpoint"]["size_gb"] == 10.0
    assert dumped["policy"]["tiers"]["3"]["windows"][0]["days"] == ["mon"]
    # a key of a map is a name, not a comment: "_x" is a pool
    assert dumped["policy"]["pools"] == {"_x": [1]}
    # model_validate and model_validate_json take comments too
    assert Snapshot.model_validate(doc).model_dump(mode="json") == dumped
    assert Snapshot.model_validate_json(json.dumps(doc)).model_dump(mode="json") == dumped


def test_a_given_comment_field_wins_over_the_comment_key(tmp_path: Path) -> None:
    ways = _ways(tmp_path, {**BASE, "comment": "given", "_comment": "dropped"})
    assert [w["comment"] for w in ways.values()] == ["given"] * 4
    ways = _ways(tmp_path, {**BASE, "_comment": 5})
    assert ways["json"] == ways["yaml"] == ways["dict"] == ways["text"] == [
        "comment: Input should be a valid string"]


def test_numbers_keep_their_type_every_way(tmp_path: Path) -> None:
    for dumped in _ways(tmp_path, _commented()).values():
        assert [type(j["priority"]) for j in dumped["jobs"]] == [int, float]
    snap = load_snapshot(tmp_path / "s.json")
    assert (snap.jobs[0].priority, snap.jobs[1].priority) == (7, 2.5)
    assert isinstance(snap.jobs[0].priority, int)
    assert snap.model_fields_set == {"version", "now", "nodes", "jobs", "policy", "comment"}


OUTSIDE = "is outside 1970-01-01 to 9000-01-01"


@pytest.mark.parametrize(("where", "value", "message"), [
    (("now",), "9999-12-31T23:59:59Z", f"now: 9999-12-31T23:59:59+00:00 {OUTSIDE}"),
    (("now",), "8999-12-31T23:00:00-02:00", f"now: 8999-12-31T23:00:00-02:00 {OUTSIDE}"),
    (("now",), -5, f"now: 1969-12-31T23:59:55+00:00 {OUTSIDE}"),
    # naive: refused for that, inside the limits or not
    (("now",), "9999-12-31T23:59:59", "now: Input should have timezone info"),
    (("now",), "2026-11-29T08:00:00", "now: Input should have timezone info"),
    (("jobs", 0, "checkpoint", "last_at"), "0001-01-01T00:00:00Z",
     f"jobs[0].checkpoint.last_at: 0001-01-01T00:00:00+00:00 {OUTSIDE}"),
    (("jobs", 0, "priority"), "8", "jobs[0].priority: Input should be a valid number"),
    (("jobs", 0, "priority"), True, "jobs[0].priority: Input should be a valid number"),
    (("jobs", 0, "priority"), None, "jobs[0].priority: Input should be a valid number"),
    (("jobs", 1, "priority"), 10**400,
     "jobs[1].priority: Input should be less than or equal to 1000000000"),
    (("jobs", 1, "priority"), -2e9,
     "jobs[1].priority: Input should be greater than or equal to -1000000000"),
])
def test_limits_checked_by_pydantic_core_keep_their_messages(
        tmp_path: Path, where: tuple[Any, ...], value: Any, message: str) -> None:
    doc = copy.deepcopy(BASE)
    parent = doc
    for key in where[:-1]:
        parent = parent[key]
    parent[where[-1]] = value
    assert _ways(tmp_path, doc)["json"] == [message]
    assert _ways(tmp_path, doc)["dict"] == [message]
    assert _ways(tmp_path, doc)["text"] == [message]


def test_times_at_the_limits(tmp_path: Path) -> None:
    for now in ("1970-01-01T02:00:00+02:00", "8999-12-31T23:00:00+02:00",
                "8999-12-31T23:59:59.999999Z"):
        for dumped in _ways(tmp_path, {**BASE, "now": now, "jobs": []}).values():
            assert isinstance(dumped, dict) and dumped["now"] == now.replace("+00:00", "Z")


@pytest.mark.parametrize(("text", "within", "refused"), [
    ("1", True, False),
    ("[]", True, False),
    ("[" * 63 + "1" + "]" * 63, True, False),  # 64 levels with the number
    ("[" * 64 + "1" + "]" * 64, False, True),
    ("[" * 64 + "]" * 64, False, False),  # (the walk tells: 64 levels)
    ('["]", ' + "[" * 62 + "1" + "]" * 62 + ', "["]', True, False),
    ('{"a\\"[[": ' + "[" * 63 + "]" * 63 + "}", False, False),
    ('["\\\\", ' + "[" * 63 + "]" * 63 + "]", False, False),
    ('["\\\\\\"]]", ' + "[" * 62 + "1" + "]" * 62 + "]", True, False),
    ('["\\\\\\"]]", ' + "[" * 63 + "1" + "]" * 63 + "]", False, True),
])
def test_json_nesting_is_measured_on_the_text(text: str, within: bool, refused: bool) -> None:
    """A text nesting at most MAX_DEPTH - 1 arrays and objects, brackets in strings
    and escapes aside, is within the limit without walking the parsed document; any
    other is walked (models.load.check_depth)."""
    assert json_nests_at_most(text, MAX_DEPTH - 1) is within
    if refused:
        with pytest.raises(InputError, match="nested more than 64 levels deep"):
            parse_document(text, "x")
    else:
        assert parse_document(text, "x") == json.loads(text)


def test_reading_a_snapshot_makes_no_cyclic_garbage(tmp_path: Path) -> None:
    """load_snapshot and a loop's SnapshotCache read with the collector paused and
    then put what they made in the oldest generation (models.load.gc_paused,
    ``acyclic``): that is only right while reading leaves no reference cycles behind.
    Afterwards the collector runs as before, and a process's own frozen objects stay
    frozen."""
    import gc

    from models.cache import SnapshotCache
    from planner.sim.generate import generate

    doc = generate(nodes=24, pending=30, seed=3)
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(doc))
    moved = {**doc, "now": "2026-11-29T08:01:00Z"}
    gc.collect()
    was = gc.isenabled()
    try:
        gc.disable()  # (a collection of its own would hide what reading leaves)
        for snap in (load_snapshot(doc), load_snapshot(path)):
            del snap
        cache = SnapshotCache()
        for source in (path, doc, moved, path):
            snap = cache.load(source)
            del snap
        assert gc.collect() == 0  # no unreachable objects: nothing cyclic was left
        gc.enable()
        frozen = gc.get_freeze_count()
        load_snapshot(path)
        assert gc.isenabled() and gc.get_freeze_count() == frozen
        keep = [[] for _ in range(10)]
        gc.freeze()  # a process that keeps frozen objects: they stay frozen
        n = gc.get_freeze_count()
        load_snapshot(path)
        assert gc.get_freeze_count() == n and gc.isenabled()
        del keep
    finally:
        gc.unfreeze()
        if was:
            gc.enable()
        else:
            gc.disable()


def test_json_documents_read_as_json_loads_reads_them() -> None:
    """parse_document (read_document, every JSON file read) parses JSON with
    pydantic-core's parser and hands what it refuses to json.loads: the values are
    json.loads's, the refusals and their messages its own."""
    texts = ['{"a": NaN, "b": -Infinity, "c": 1e400, "d": 123456789012345678901234567890}',
             '{"a": 1, "a": 2}', '{"a": "\\ud800"}', '[0.1, 2.5e-7, 1E+2, -0.0]',
             '{"a": {"b": [true, false, null]}}']
    for text in texts:
        got, want = parse_document(text), json.loads(text)
        assert json.dumps(got) == json.dumps(want) and type(got) is type(want)
    with pytest.raises(InputError, match="malformed JSON at line 1 column 9"):
        parse_document('{"a": 1,}')


def test_running_and_pending_jobs_in_the_snapshots_order_each_call_a_new_list() -> None:
    # jobs p1 (pending), r1 (running), p2 (pending), r2 (running): running() gives
    # r1, r2 and pending() p1, p2, in that order; a caller changing a list it got
    # changes neither the snapshot nor the next call's list
    def job(jid: str, state: str) -> dict[str, Any]:
        out: dict[str, Any] = {"id": jid, "tier": 2, "state": state, "gpus_per_node": 1}
        if state == "running":
            out["placement"] = [{"node": "n1", "gpus": [int(jid[1]) - 1]}]
            out["started_at"] = "2026-11-30T07:00:00Z"
        return out

    snap = load_snapshot({"version": 1, "now": "2026-11-30T08:00:00Z",
                          "nodes": [{"id": "n1", "gpus": 8}],
                          "jobs": [job("p1", "pending"), job("r1", "running"),
                                   job("p2", "pending"), job("r2", "running")]})
    running, pending = snap.running(), snap.pending()
    assert [j.id for j in running] == ["r1", "r2"]
    assert [j.id for j in pending] == ["p1", "p2"]
    running.clear()
    pending.reverse()
    assert [j.id for j in snap.running()] == ["r1", "r2"]
    assert [j.id for j in snap.pending()] == ["p1", "p2"]
    assert snap.running() is not snap.running()
    # a copy with other jobs answers from its own (the lookups asked above are not
    # carried over): r2 dropped, p1's priority 2.5
    assert snap.integer_priorities() and set(snap.job_map()) == {"p1", "r1", "p2", "r2"}
    jobs = [j if j.id != "p1" else j.model_copy(update={"priority": 2.5})
            for j in snap.jobs if j.id != "r2"]
    copy = snap.model_copy(update={"jobs": jobs})
    assert [j.id for j in copy.running()] == ["r1"] and set(copy.job_map()) == {"p1", "r1", "p2"}
    assert not copy.integer_priorities()
    assert snap.model_copy().running() == snap.running()  # (no change: the same answers)
