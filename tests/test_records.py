"""A loop's files read from their text (models/records.py, models/cache.py): the
records of the lists found without parsing, each record whose text is the last
file's taken over, the others parsed and validated. The snapshot is the one
load_snapshot reads, and a text it cannot cut exactly is read the usual way, with
load_snapshot's errors."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest
from test_incremental import _sequence, reads_as_load_snapshot

from models import InputError, load_snapshot
from models.cache import SnapshotCache
from models.load import MAX_DEPTH
from models.records import split_records

KEYS = ("storage", "nodes", "jobs")
STYLES = ({}, {"indent": 2}, {"separators": (",", ":")}, {"indent": "\t"})


def _write(path: Path, doc: Any, **style: Any) -> Path:
    path.write_text(json.dumps(doc, **style))
    return path


@pytest.mark.parametrize("style", STYLES)
def test_the_records_are_the_texts_of_the_lists(style: dict[str, Any]) -> None:
    doc = _sequence(3, 1)[0]
    cut = split_records(json.dumps(doc, **style).encode(), KEYS, MAX_DEPTH)
    assert cut is not None
    for key in KEYS:
        assert [json.loads(t) for t in cut.lists[key]] == doc[key]
    assert json.loads(cut.skeleton) == {**doc, "storage": [], "nodes": [], "jobs": []}


@pytest.mark.parametrize(("case", "style"), [(c, s) for c in range(6) for s in STYLES[:2]])
def test_a_loops_files_read_as_load_snapshot_reads_them(tmp_path: Path, case: int,
                                                        style: dict[str, Any]) -> None:
    """Each file of a sequence: the snapshot load_snapshot reads, read from its text,
    a record whose text did not change being the last file's object."""
    cache = SnapshotCache()
    last = last_doc = None
    for k, doc in enumerate(_sequence(case, 5)):
        path = _write(tmp_path / f"tick-{k}.json", doc, **style)
        snap = cache.load(path)
        assert snap == load_snapshot(path)
        assert cache._texts and cache.validated + cache.reused == sum(len(doc[x]) for x in KEYS)
        if last is not None:
            before = {j.id: (j, json.dumps(j.model_dump(mode="json"))) for j in last.jobs}
            for j in snap.jobs:  # (a record taken over is the last one; a new one is new)
                old = before.get(j.id)
                if old is not None and old[0] is j:
                    assert json.dumps(j.model_dump(mode="json")) == old[1]
            assert cache.reused > 0
            # (the same policy text: the same object, for the planner to take over
            # what it derived from the last tick)
            assert (snap.policy is last.policy) == (doc.get("policy") == last_doc.get("policy"))
        last, last_doc = snap, doc


def test_a_record_whose_text_changed_is_read_again(tmp_path: Path) -> None:
    doc = _sequence(4, 1)[0]
    cache = SnapshotCache()
    first = cache.load(_write(tmp_path / "a.json", doc))
    job = doc["jobs"][0]
    text = json.dumps(doc).replace(json.dumps(job), json.dumps(job, indent=1), 1)
    (tmp_path / "b.json").write_text(text)  # (the same record, written otherwise)
    second = cache.load(tmp_path / "b.json")
    assert second == first and cache.validated == 1
    assert second.jobs[0] is not first.jobs[0] and second.jobs[1] is first.jobs[1]
    doc["jobs"][1]["priority"] = 77
    third = cache.load(_write(tmp_path / "c.json", doc))
    assert third.jobs[1].priority == 77 and third == load_snapshot(doc)


def _odd_texts(doc: dict[str, Any]) -> dict[str, str]:
    """Odd texts, valid or not (models.records cuts some: test_what_is_cut)."""
    text = json.dumps(doc)
    jobs = json.dumps(doc["jobs"])
    first, rest = json.dumps(doc["jobs"][0]), json.dumps(doc["jobs"][1:])[1:]
    return {
        "backslash": json.dumps({**doc, "comment": 'a "quoted" \\ word'}),
        "jobs twice": text[:-1] + ', "jobs": []}',
        "jobs twice, null last": text[:-1] + ', "jobs": null}',
        "jobs null then list": '{"jobs": null, ' + text[1:],
        "an element not an object": text.replace(jobs, "[1, " + jobs[1:], 1),
        "garbage between records": text.replace(jobs, "[" + first + " x, " + rest, 1),
        "no comma between records": text.replace(jobs, "[" + first + " " + rest, 1),
        "two commas": text.replace(jobs, "[" + first + ",, " + rest, 1),
        "a trailing comma": text.replace(jobs, jobs[:-1] + ",]", 1),
        "a list for an object": text.replace(jobs, "[[" + jobs[1:-1] + "]]", 1),
        "a mismatched bracket": text.replace(first, first[:-1] + "]", 1),
        "an unclosed string": text[:-1] + ', "x": "}',
        "too deep": text[:-1] + ', "_x": ' + "[" * 70 + "]" * 70 + "}",
        "a list at the top": "[" + text + "]",
        "a byte-order mark": "\ufeff" + text,
        "brackets in strings": json.dumps({**doc, "comment": "jobs: [{]} [",
                                           "jobs": [{**doc["jobs"][0], "team": "}]"},
                                                    *doc["jobs"][1:]]}),
        "trailing text": text + " {}",
        "not UTF-8 in a record": text.replace(first, first[:-1] + ', "_c": "\udcff"}', 1),
    }


@pytest.mark.parametrize("after", [False, True])
def test_odd_texts_read_as_load_snapshot_reads_them(tmp_path: Path, after: bool) -> None:
    """Valid or not, a text read as load_snapshot reads it (the same snapshot, or its
    errors), as a loop's first file and after another one."""
    doc = _sequence(8, 1)[0]
    for name, text in _odd_texts(doc).items():
        cache = SnapshotCache()
        if after:
            cache.load(_write(tmp_path / "first.json", doc))
        path = tmp_path / "odd.json"
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
        reads_as_load_snapshot(cache, path, name)


def test_what_is_cut() -> None:
    # the others are left to the usual reading; these are cut, and what is wrong with
    # them, if anything, found by parsing the text outside the records or the record
    doc = _sequence(8, 1)[0]
    odd = _odd_texts(doc)
    cut = {name for name, text in odd.items()
           if split_records(text.encode("utf-8", "surrogateescape"), KEYS, MAX_DEPTH)}
    assert cut == {"jobs null then list", "jobs twice, null last", "brackets in strings",
                   "not UTF-8 in a record", "a byte-order mark"}


def test_files_and_documents_in_one_loop(tmp_path: Path) -> None:
    """A loop given files and documents in turn: each snapshot load_snapshot's."""
    cache = SnapshotCache()
    for k, doc in enumerate(_sequence(5, 6)):
        source: Any = _write(tmp_path / f"t{k}.json", doc) if k % 2 else copy.deepcopy(doc)
        assert cache.load(source) == load_snapshot(doc)


def _mutated(r: random.Random, text: bytes) -> bytes:
    """``text`` with one to three random edits of bytes (JSON's structure, quotes and
    backslashes favoured)."""
    out = bytearray(text)
    for _ in range(r.randint(1, 3)):
        at = r.randrange(len(out) + 1)
        edit = r.random()
        if edit < 0.3 and at < len(out):
            del out[at:at + r.randint(1, 4)]
        elif edit < 0.7:
            out[at:at] = r.choice([b"{", b"}", b"[", b"]", b'"', b",", b":", b" ", b"\\",
                                   b"\n", b"0", b"x", b"\xff", b"null", b"\x00"])
        elif edit < 0.8 and at < len(out):
            out[at] = r.randrange(256)
        elif edit < 0.9 and at < len(out):  # (a digit for a digit, a letter for a letter:
            # mostly still JSON)
            c = out[at]
            if 48 <= c <= 57:
                out[at] = r.randrange(48, 58)
            elif 97 <= c <= 122:
                out[at] = r.randrange(97, 123)
        else:  # (a piece copied elsewhere: a record twice, a list twice)
            start = r.randrange(len(out))
            piece = out[start:start + r.randint(1, 200)]
            out[at:at] = piece
    return bytes(out)


@pytest.mark.parametrize("seed", range(4))
def test_mutated_texts_read_as_load_snapshot_reads_them(seed: int) -> None:
    """Random edits of a tick's text (800 per seed), as a loop's first text and after
    the unedited one: read from the text, the snapshot load_snapshot reads from the
    parsed document, or InputError with its errors; or None (left to parsing);
    nothing else."""
    r = random.Random(seed)
    doc = _sequence(seed, 1)[0]
    text = json.dumps(doc, indent=r.choice([None, 1])).encode()
    read = cut = 0
    for k in range(800):
        data = _mutated(r, text)
        cache = SnapshotCache()
        if k % 2:
            assert cache.load_text(text) == load_snapshot(doc)
        try:
            got = cache.load_text(data)
        except InputError as exc:
            with pytest.raises(InputError) as want:
                load_snapshot(json.loads(data))
            assert exc.errors == want.value.errors, data
            cut += 1
            continue
        if got is None:
            continue
        read += 1
        assert got == load_snapshot(json.loads(data)), data
    assert read > 25 and cut > 3  # (not vacuous: 32-66 and 5-11 over the seeds)
