"""Reading a sequence of snapshots of one cluster, each a little different from the
last: what a scheduling loop (``slurm run``, a client of the service) sends tick
after tick.

:class:`SnapshotCache` keeps each record (storage target, node, job) and the policy
of the last snapshot it read with a fingerprint of its document; a record whose
document has the same fingerprint in the next snapshot is taken over, not validated
again. Records are frozen, so a record taken over is the one validation would give,
and the planner, seeing the same objects, takes over what it derived from them
(``planner.core.problem.build_problem(snap, previous)``).

A file is read from its text (:func:`models.records.split_records` finds the text
of each record without parsing it): a record whose text is the last file's is the
last file's record, and only the others are parsed and validated, from their text
(a steady 12,500-node tick: 0.19-0.22 s, where parsing the whole file, a
fingerprint per record and matching them took 0.38-0.45 s). A document (a dict) is
read record by record, each record's fingerprint matched with the last one's. The
first file is read so too, to fill the tables the second one takes over from.

The snapshot is the one :func:`models.load.load_snapshot` gives, with the same
checks (tests/test_incremental.py, tests/test_records.py); any problem (a record
that does not validate, a document the fast way does not handle) is left to
``load_snapshot``, so errors are its errors, and the cache keeps what it had.
"""

from __future__ import annotations

import marshal
from itertools import compress, repeat
from operator import attrgetter, is_, is_not
from pathlib import Path
from typing import Any

import pydantic_core
from pydantic import BaseModel, TypeAdapter, ValidationError

from models.kinds import wrong_document
from models.load import (
    MAX_DEPTH,
    MAX_DOCUMENT_BYTES,
    InputError,
    check_snapshot,
    gc_paused,
    job_errors,
    load_policy,
    load_snapshot,
    placement_errors,
    priority_errors,
    read_document,
    recent_errors,
    time_errors,
)
from models.policy import Policy
from models.records import split_records
from models.snapshot import Job, Node, Snapshot, Storage

_ID = attrgetter("id")
_DEFAULT: dict[str, Any] = {}  # the policy of a snapshot that gives none (Policy())
# the lists of records taken over one by one, and their models
_LISTS: tuple[tuple[str, type[BaseModel]], ...] = (
    ("storage", Storage), ("nodes", Node), ("jobs", Job))


def fingerprint(doc: Any) -> bytes:
    """A record's document as bytes: equal for equal documents of JSON values with
    their keys in the same order (marshal format 2 writes no back-references, so
    shared objects do not change it). Raises ValueError for other values (a YAML
    timestamp): then the snapshot is read the usual way."""
    return marshal.dumps(doc, 2)


class SnapshotCache:
    """Loads snapshots like :func:`models.load.load_snapshot`, taking over from the
    last one the records whose documents did not change. One per sequence (a
    cluster's ticks); not thread-safe."""

    def __init__(self) -> None:
        self._records: dict[str, dict[str, tuple[bytes, Any]]] = {k: {} for k, _ in _LISTS}
        # the same per list, record text -> record, of the last file read from its text
        self._texts: dict[str, dict[bytes, Any]] = {}
        self._policy: tuple[bytes, Policy] | None = None
        # the last snapshot read record by record (it passed the checks) and its
        # node -> GPU -> running job
        self._last: Snapshot | None = None
        self._owner: dict[str, dict[int, str]] = {}
        self.reused = 0  # records taken over by the last load
        self.validated = 0  # records validated by the last load

    def load(self, source: dict[str, Any] | Snapshot | str | Path,
             policy: dict[str, Any] | Policy | str | Path | None = None) -> Snapshot:
        """The snapshot of ``source`` (a document, a file, or a Snapshot), checked;
        ``policy`` replaces its own as in ``load_snapshot``. Raises InputError."""
        with gc_paused(acyclic=True):
            if isinstance(source, Snapshot):
                return load_snapshot(source, policy)
            if isinstance(source, (str, Path)) and policy is None:
                data = _file_bytes(source)
                texts = self._from_text(data) if data is not None else None
                if texts is not None:
                    return self._finish(texts[0], texts[2], texts[1], None, str(source))
            if isinstance(source, (str, Path)):
                try:
                    doc: Any = read_document(source)
                except InputError:
                    return load_snapshot(source, policy)  # (its error, naming the file)
            else:
                doc = source
            if policy is not None and isinstance(doc, dict):
                doc = {**doc, "policy": load_policy(policy).model_dump(mode="json")}
            try:
                snap, table, pol = self._taken_over(doc)
            except (ValueError, TypeError):  # (ValidationError is a ValueError)
                return load_snapshot(doc)  # raises, naming the field (or reads it so)
            return self._finish(snap, pol, None, table,
                                str(source) if isinstance(source, (str, Path)) else None)

    def load_text(self, data: bytes) -> Snapshot | None:
        """The snapshot of the JSON text ``data`` (a request's body), read from its
        text as a file is, checked (InputError); None for a text read so only by
        parsing it (then pass the parsed document to :meth:`load`, which says what
        is wrong with it)."""
        with gc_paused(acyclic=True):
            texts = self._from_text(data)
            if texts is None:
                return None
            return self._finish(texts[0], texts[2], texts[1], None, None)

    def _finish(self, snap: Snapshot, pol: tuple[bytes, Policy] | None,
                texts: dict[str, dict[bytes, Any]] | None,
                table: dict[str, dict[str, tuple[bytes, Any]]] | None,
                name: str | None) -> Snapshot:
        """Check ``snap`` (InputError naming ``name``) and keep it, its policy and the
        tables of the way it was read (``texts``, or the documents' ``table``)."""
        owner = self._checked(snap)
        if owner is None:
            errors = check_snapshot(snap)  # (its quick way where nothing is wrong)
            if errors:
                raise InputError(errors, name)
            owner = _owners(snap)
        self._texts = texts or {}
        self._records = table if table is not None else {k: {} for k, _ in _LISTS}
        self._policy, self._last, self._owner = pol, snap, owner
        return snap

    def _from_text(self, data: bytes) -> tuple[Snapshot, dict[str, dict[bytes, Any]],
                                               tuple[bytes, Policy] | None] | None:
        """The snapshot of a JSON text read from its text: each record whose text is
        the last one's (read so too) is the last one's record, the others are parsed
        and validated, and the text outside the records is parsed; with the next
        tables (record text -> record, per list). None for a text this does not read
        (one models.records does not cut, any problem): then it is read the usual
        way, which says what is wrong."""
        try:
            cut = split_records(data, tuple(k for k, _ in _LISTS), MAX_DEPTH)
            if cut is None:
                return None
            doc = pydantic_core.from_json(cut.skeleton, cache_strings="keys")
            if not isinstance(doc, dict) or wrong_document(doc, "snapshot"):
                return None
            tables: dict[str, dict[bytes, Any]] = {}
            reused = validated = 0
            for key, model in _LISTS:
                texts = cut.lists.get(key)
                if texts is None:  # (no such list, or not one: the skeleton has it)
                    continue
                if doc.get(key) != []:  # (the parser kept another value of the key)
                    return None
                last = self._texts.get(key, {})
                out: list[Any] = list(map(last.get, texts))
                missed = list(compress(range(len(out)), map(is_, out, repeat(None))))
                if missed:
                    objs = _validated_text(model, b"[" + b",".join([texts[k] for k in missed])
                                           + b"]")
                    for k, obj in zip(missed, objs, strict=True):
                        out[k] = obj
                reused, validated = reused + len(out) - len(missed), validated + len(missed)
                doc[key], tables[key] = out, dict(zip(texts, out, strict=True))
            snap, pol = self._snapshot_of(doc)
        except (ValueError, TypeError, IndexError):  # (ValidationError is a ValueError)
            return None
        self.reused, self.validated = reused, validated
        return snap, tables, pol

    def _taken_over(self, data: Any) -> tuple[Snapshot, dict[str, dict[str, tuple[bytes, Any]]],
                                              tuple[bytes, Policy] | None]:
        """The snapshot of ``data`` with the records of the last one whose documents did
        not change, and the next tables; ValueError/TypeError when it is not that kind
        of document (load_snapshot says what is wrong, or reads it)."""
        if not isinstance(data, dict) or wrong_document(data, "snapshot"):
            raise TypeError("not a snapshot document")
        values = dict(data)
        tables: dict[str, dict[str, tuple[bytes, Any]]] = {}
        reused = validated = 0
        dumps = marshal.dumps
        for key, model in _LISTS:
            docs = data.get(key, [])
            if not isinstance(docs, list):
                raise TypeError(key)
            last, table = self._records[key], {}
            out: list[Any] = []
            missed: list[tuple[int, str, bytes]] = []  # the documents validated again
            for doc in docs:
                jid = doc.get("id") if isinstance(doc, dict) else None
                if not isinstance(jid, str):
                    raise TypeError(key)
                fp = dumps(doc, 2)  # (fingerprint(doc), without a call per record)
                hit = last.get(jid)
                if hit is not None and hit[0] == fp:
                    out.append(hit[1])
                    table[jid] = hit
                else:
                    missed.append((len(out), jid, fp))
                    out.append(None)
            objs = _validated(model, [docs[k] for k, _i, _f in missed])
            for (k, jid, fp), obj in zip(missed, objs, strict=True):
                out[k] = obj
                table[jid] = (fp, obj)
            # (a table of a document with an id twice is not kept: check_snapshot refuses it)
            reused, validated = reused + len(docs) - len(missed), validated + len(missed)
            values[key], tables[key] = out, table
        snap, pol = self._snapshot_of(values)
        self.reused, self.validated = reused, validated
        return snap, tables, pol

    def _snapshot_of(self, values: dict[str, Any]) -> tuple[Snapshot, tuple[bytes, Policy] | None]:
        """The snapshot of a document whose lists of records hold records, and its policy
        with its fingerprint (the last one's where that is the same); ValueError when
        it is not valid."""
        pol = None
        doc = values.get("policy", _DEFAULT)  # (a snapshot without one has the default)
        if isinstance(doc, dict):
            fp = b"" if doc is _DEFAULT else fingerprint(doc)
            if self._policy is not None and self._policy[0] == fp:
                pol = self._policy
            else:
                pol = (fp, Policy() if doc is _DEFAULT else Policy.model_validate(doc))
            values = {**values, "policy": pol[1]}
        try:
            snap = Snapshot.model_validate(values)
        except ValidationError as exc:
            raise ValueError("not valid") from exc
        return snap, pol

    def _checked(self, snap: Snapshot) -> dict[str, dict[int, str]] | None:
        """check_snapshot's verdict on ``snap`` when it finds nothing, worked out from
        the last snapshot's (which passed): the GPUs of each node held by running jobs,
        or None when it is not sure (then check_snapshot decides, and says what is
        wrong). Taken over: what depends only on a record that is the last one's, with
        the same policy, nodes and storage targets, and its times where ``now`` did
        not go back; checked again: the ids, the priorities, and the records that
        changed, placements against the GPUs every other running job holds."""
        last = self._last
        if (last is None or snap.policy is not last.policy
                or len(snap.storage) != len(last.storage) or len(snap.nodes) != len(last.nodes)
                or any(a is not b for a, b in zip(snap.storage, last.storage, strict=True))):
            return None
        nodes, before = snap.node_map(), last.node_map()
        if len(nodes) != len(snap.nodes) or any(before.get(i) is not n for i, n in nodes.items()):
            return None
        jobs, kept = snap.job_map(), last.job_map()
        if len(jobs) != len(snap.jobs) or recent_errors(snap) or priority_errors(snap):
            return None
        owner = dict(self._owner)
        mine: set[str] = set()  # nodes whose GPU map is this snapshot's own copy

        def own(node: str) -> dict[int, str]:
            if node not in mine:
                owner[node] = dict(owner.get(node, {}))
                mine.add(node)
            return owner[node]

        # (C loops find the records that are not the last snapshot's: 0.013 s less than
        # a pass in Python over 40,000 jobs at 12,500 nodes)
        ids = list(kept)
        for j in compress(kept.values(), map(is_not, kept.values(), map(jobs.get, ids))):
            if j.state == "running":  # GPUs of running jobs that ended or changed: free
                for part in j.placement or []:
                    held = own(part.node)
                    for g in part.gpus:
                        if held.get(g) == j.id:
                            del held[g]
        now = snap.now
        # a job's times may not be after now: a record taken over passed at the last
        # now, so at a later one too
        if now < last.now and any(time_errors("", j, now) for j in snap.jobs):
            return None
        fresh = list(compress(snap.jobs, map(is_not, map(kept.get, map(_ID, snap.jobs)),
                                             snap.jobs)))
        for i, j in enumerate(fresh):
            errors = job_errors(f"jobs[{i}]", j, snap)
            if errors:
                return None
            if j.state == "running":
                for part in j.placement or []:
                    own(part.node)
                if placement_errors("", j, nodes, owner):
                    return None
        return owner


def _owners(snap: Snapshot) -> dict[str, dict[int, str]]:
    """Node -> GPU -> the running job holding it, of a snapshot that passed
    check_snapshot (which gives the same map, at twice the cost: 0.13 s at 12,500
    nodes, checking each placement as it goes)."""
    owner: dict[str, dict[int, str]] = {}
    for j in snap.running():
        for part in j.placement or ():
            held = owner.get(part.node)
            if held is None:
                held = owner[part.node] = {}
            held.update(dict.fromkeys(part.gpus, j.id))
    return owner


def _file_bytes(source: str | Path) -> bytes | None:
    """The bytes of a JSON file to read from its text; None for YAML, standard input,
    a file that cannot be read or is too big (read_text says why)."""
    name = str(source)
    if name == "-" or name.lower().endswith((".yaml", ".yml")):
        return None
    try:
        with open(source, "rb") as fh:
            data = fh.read(MAX_DOCUMENT_BYTES + 1)
    except OSError:
        return None
    return data if len(data) <= MAX_DOCUMENT_BYTES else None


_BATCH: dict[type[BaseModel], TypeAdapter[list[Any]]] = {}


def _batch(model: type[BaseModel]) -> TypeAdapter[list[Any]]:
    batch = _BATCH.get(model)
    if batch is None:
        batch = _BATCH[model] = TypeAdapter(list[model])  # type: ignore[valid-type]
    return batch


def _validated_text(model: type[BaseModel], text: bytes) -> list[Any]:
    """The records of the JSON list ``text``, validated from the text in one call (no
    Python object per value: tests/test_load_ways.py holds that it accepts what
    validation of the parsed documents accepts), or as :func:`_validated` validates
    the parsed documents when that fails (a record's own comments, or an error)."""
    try:
        return _batch(model).validate_json(text)
    except ValidationError:
        return _validated(model, pydantic_core.from_json(text, cache_strings="keys"))


def _validated(model: type[BaseModel], docs: list[Any]) -> list[Any]:
    """The records of ``docs``, validated as a list in one call (as the snapshot's
    validation does), or one by one (``model.model_validate``: a record's own
    comments dropped) when that fails."""
    if not docs:
        return []
    try:
        return _batch(model).validate_python(docs)
    except ValidationError:
        return [model.model_validate(doc) for doc in docs]
