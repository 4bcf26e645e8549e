"""Loading and validating snapshots and policies (contract sections 2, 7, 8).

Every problem of an input is collected and reported at once, each message
naming the field path (``jobs[3].placement[0].gpus: ...``).
"""

from __future__ import annotations

import json
import math
import signal as _signal
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from models.plan import Plan
from models.policy import Policy
from models.snapshot import NvlinkEdges, Snapshot

_SIGNALS = {s.name for s in _signal.Signals}


class InputError(ValueError):
    """Bad input: ``errors`` lists one message per problem, each naming its field."""

    def __init__(self, errors: list[str], source: str | None = None):
        self.errors = errors
        self.source = source
        head = f"{source}: " if source else ""
        super().__init__(head + f"{len(errors)} problem(s):\n  " + "\n  ".join(errors))


# what a field of the wrong type or range raises in code that converts a foreign
# document (kubectl's or Slurm's JSON): the adapters turn these into InputError
SHAPE_ERRORS = (TypeError, AttributeError, ValueError, KeyError, OverflowError)


def range_problems(positive: Iterable[tuple[str, float | None]] = (),
                   at_least_one: Iterable[tuple[str, int | None]] = ()) -> list[str]:
    """One message per option out of range: ``positive`` (option, value) pairs must be
    finite numbers > 0, ``at_least_one`` pairs counts >= 1; None is not given."""
    out = [f"{option}: must be a positive number, got {value:g}" for option, value in positive
           if value is not None and not (math.isfinite(value) and value > 0)]
    out += [f"{option}: must be at least 1, got {value}" for option, value in at_least_one
            if value is not None and value < 1]
    return out


def _field_names() -> list[str]:
    """Every field name of the contract's records (for typo suggestions)."""
    from models import plan as plan_models
    from models import policy as policy_models
    from models import snapshot as snapshot_models

    names: set[str] = set()
    for module in (snapshot_models, policy_models, plan_models):
        for obj in vars(module).values():
            fields = getattr(obj, "model_fields", None)
            if isinstance(obj, type) and isinstance(fields, dict):
                names |= set(fields)
    return sorted(names)


def _did_you_mean(word: str) -> str | None:
    """The contract field name closest to a misspelt one (None when none is close)."""
    import difflib

    near = difflib.get_close_matches(word, _field_names(), n=1, cutoff=0.75)
    return near[0] if near else None


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    prev: Any = None
    for part in loc:
        if isinstance(part, int) and prev == "tiers":  # a map keyed by tier number
            out += f".{part}"
        elif isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
        prev = part
    return out


def _pydantic_messages(err: ValidationError, prefix: tuple[Any, ...] = ()) -> list[str]:
    msgs: list[str] = []
    seen: set[str] = set()
    for e in err.errors():
        loc = tuple(prefix) + tuple(e["loc"])
        msg = e["msg"]
        if "nvlink" in loc:  # a union: one clear message instead of one per branch
            loc = loc[: loc.index("nvlink") + 1]
            msg = ('must be "nvswitch", "none", a list of islands like [[0,1],[2,3]] '
                   'or {"edges": [[0,1], ...]}')
        elif e["type"] == "extra_forbidden":
            msg = "unknown field (not in the contract; comments start with '_')"
            near = _did_you_mean(str(loc[-1]) if loc else "")
            if near:
                msg += f"; did you mean {near!r}?"
        elif e["type"] == "literal_error":
            msg = f"{msg}, got {e.get('input')!r}"
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        line = f"{_path(loc)}: {msg}"
        if line not in seen:
            seen.add(line)
            msgs.append(line)
    return msgs


MAX_DOCUMENT_BYTES = 1 << 30  # 1 GiB: a 12,500-node snapshot is about 55 MB
MAX_DEPTH = 64  # nesting levels of a document (the contract's are at most 6)


def _text(data: bytes, where: str) -> str:
    """The document's text: UTF-8 (a BOM is allowed); anything else is refused with a
    message saying what it looks like (UTF-16/32, binary, another 8-bit encoding)."""
    for bom, name in ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"),
                      (b"\xff\xfe", "UTF-16"), (b"\xfe\xff", "UTF-16")):
        if data.startswith(bom):
            raise InputError([f"the file is {name} text; save it as UTF-8"], where)
    if b"\x00" in data[:4096]:
        head = data[:256]
        halves = (head[0::2].count(0), head[1::2].count(0))
        utf16 = len(head) >= 8 and max(halves) >= len(head) // 2 - 1 and min(halves) == 0
        looks = "UTF-16 text without a byte-order mark" if utf16 else "a binary file"
        raise InputError([(f"this is {looks}, not a JSON or YAML document; give a UTF-8 "
                          "JSON or YAML file")], where)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError([(f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                          f"{exc.start}; Latin-1 or another 8-bit encoding?); save it as "
                          "UTF-8")], where) from None


def _depth_problem(doc: Any, where: str) -> None:
    """Refuse a document nested deeper than MAX_DEPTH (iteratively: no recursion)."""
    stack = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InputError([(f"the document is nested more than {MAX_DEPTH} levels deep (the "
                              "contract's documents need at most 6)")], where)
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)


def parse_document(text: str, where: str | None = None, *, yaml_first: bool = False) -> Any:
    """A JSON or YAML document from its text; JSON is tried first (YAML when
    ``yaml_first``), and a text that is not JSON but YAML of a mapping or a list is
    read as YAML whatever the file is called. InputError naming ``where``."""
    too_deep = [(f"the document is nested more than {MAX_DEPTH} levels deep (the contract's "
                "documents need at most 6)")]

    def as_yaml() -> Any:
        try:
            return yaml.safe_load(text)
        except RecursionError:
            raise InputError(too_deep, where) from None

    if yaml_first:
        try:
            doc = as_yaml()
        except yaml.YAMLError as exc:
            raise InputError([f"malformed YAML: {exc}"], where) from None
    else:
        try:
            doc = json.loads(text)
        except RecursionError:
            raise InputError(too_deep, where) from None
        except json.JSONDecodeError as exc:
            msg = f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
            if text.lstrip()[:1] in ("{", "["):  # JSON with a mistake, not YAML
                raise InputError([msg], where) from None
            try:
                doc = as_yaml()
            except yaml.YAMLError:
                raise InputError([msg], where) from None
            if not isinstance(doc, dict | list):  # (broken JSON that YAML reads as text)
                raise InputError([msg], where) from None
    _depth_problem(doc, where or "document")
    return doc


def read_document(source: str | Path) -> Any:
    """Read a JSON or YAML file (``-``: standard input); raises InputError naming the
    file on a syntax error, a text that is not UTF-8, a binary file, a document nested
    too deep or bigger than MAX_DOCUMENT_BYTES."""
    import sys

    name = str(source)
    if name == "-":
        data = sys.stdin.buffer.read(MAX_DOCUMENT_BYTES + 1)
        name = "(standard input)"
    else:
        path = Path(source)
        try:
            if path.is_file() and path.stat().st_size > MAX_DOCUMENT_BYTES:
                raise InputError([(f"the file is {path.stat().st_size:,} bytes, more than the "
                                  f"limit of {MAX_DOCUMENT_BYTES:,}")], name)
            with open(path, "rb") as fh:
                data = fh.read(MAX_DOCUMENT_BYTES + 1)
        except OSError as exc:
            raise InputError([f"cannot read file: {exc.strerror or exc}"], name) from None
    if len(data) > MAX_DOCUMENT_BYTES:
        raise InputError([f"the document is more than {MAX_DOCUMENT_BYTES:,} bytes"], name)
    text = _text(data, name)
    return parse_document(text, name, yaml_first=name.lower().endswith((".yaml", ".yml")))


def load_policy(source: dict[str, Any] | Policy | str | Path | None) -> Policy:
    if isinstance(source, Policy):
        return source
    name = None
    if isinstance(source, (str, Path)):
        name = str(source)
        source = read_document(source)
    if source is not None and not isinstance(source, dict):
        raise InputError(["policy: must be an object"], name)
    try:
        pol = Policy.model_validate(source or {})
    except ValidationError as exc:
        raise InputError(_pydantic_messages(exc, ("policy",)), name) from None
    errors = _policy_errors(pol)
    if errors:
        raise InputError(errors, name)
    return pol


def _policy_errors(pol: Policy) -> list[str]:
    errors = []
    for t, tp in sorted(pol.tiers.items()):
        for v in tp.can_preempt:
            if v not in pol.tiers:
                errors.append(f"policy.tiers.{t}.can_preempt: tier {v} is not defined in the policy")
    if pol.thrash is not None:
        for v in pol.thrash.exempt_tiers:
            if v not in pol.tiers:
                errors.append(f"policy.thrash.exempt_tiers: tier {v} is not defined in the policy "
                              "(R15)")
    return errors


def load_snapshot(source: dict[str, Any] | Snapshot | str | Path,
                  policy: dict[str, Any] | Policy | str | Path | None = None) -> Snapshot:
    """Parse and check a snapshot. ``policy``, when given, replaces the snapshot's own
    (section 7). Raises InputError listing every problem."""
    name = None
    if isinstance(source, Snapshot):
        data: Any = source.model_dump(mode="json")
    elif isinstance(source, (str, Path)):
        name = str(source)
        data = read_document(source)
    else:
        data = source
    if not isinstance(data, dict):
        raise InputError(["snapshot: must be a JSON/YAML object"], name)
    if policy is not None:
        pol = load_policy(policy)
        data = {**data, "policy": pol.model_dump(mode="json")}
    try:
        snap = Snapshot.model_validate(data)
    except ValidationError as exc:
        raise InputError(_pydantic_messages(exc), name) from None
    errors = check_snapshot(snap)
    if errors:
        raise InputError(errors, name)
    return snap


def _dupes(kind: str, ids: list[str]) -> list[str]:
    first: dict[str, int] = {}
    out = []
    for i, x in enumerate(ids):
        if x in first:
            out.append(f"{kind}[{i}].id: duplicate id {x!r} (also {kind}[{first[x]}])")
        else:
            first[x] = i
    return out


def _nvlink_errors(path: str, nvlink: Any, gpus: int) -> list[str]:
    errors = []
    if isinstance(nvlink, list):
        seen: dict[int, int] = {}
        for k, island in enumerate(nvlink):
            for g in island:
                if not 0 <= g < gpus:
                    errors.append(f"{path}[{k}]: GPU {g} out of range (node has {gpus} GPUs)")
                elif g in seen:
                    errors.append(f"{path}[{k}]: GPU {g} is also in island {seen[g]} "
                                  "(islands must not overlap)")
                else:
                    seen[g] = k
    elif isinstance(nvlink, NvlinkEdges):
        for k, (a, b) in enumerate(nvlink.edges):
            if not (0 <= a < gpus and 0 <= b < gpus):
                errors.append(f"{path}.edges[{k}]: edge {[a, b]} out of range "
                              f"(node has {gpus} GPUs)")
            elif a == b:
                errors.append(f"{path}.edges[{k}]: self loop on GPU {a}")
    return errors


def check_snapshot(snap: Snapshot) -> list[str]:
    """Cross-record checks of sections 2, 7 and 8 (field checks are pydantic's)."""
    errors: list[str] = []
    errors += _dupes("storage", [s.id for s in snap.storage])
    errors += _dupes("nodes", [n.id for n in snap.nodes])
    errors += _dupes("jobs", [j.id for j in snap.jobs])
    errors += _policy_errors(snap.policy)
    storages = snap.storage_map()
    nodes = snap.node_map()
    for i, n in enumerate(snap.nodes):
        if n.storage is not None and n.storage not in storages:
            errors.append(f"nodes[{i}].storage: unknown storage target {n.storage!r}")
        elif n.storage is None and len(snap.storage) > 1:
            errors.append(f"nodes[{i}].storage: required when there are several storage targets "
                          f"({', '.join(sorted(storages))})")
        errors += _nvlink_errors(f"nodes[{i}].nvlink", n.nvlink, n.gpus)
    for i, e in enumerate(snap.recent_evictions):
        if e.at > snap.now:
            errors.append(f"recent_evictions[{i}].at: {e.at.isoformat()} is after now "
                          f"({snap.now.isoformat()}); only evictions already carried out count (R15)")
    owner: dict[tuple[str, int], str] = {}
    for i, j in enumerate(snap.jobs):
        p = f"jobs[{i}]"
        if j.tier not in snap.policy.tiers:
            errors.append(f"{p}.tier: tier {j.tier} of job {j.id!r} is not in the policy "
                          f"(tiers: {', '.join(str(t) for t in sorted(snap.policy.tiers))})")
        sig = j.checkpoint.signal
        if sig is not None and sig not in _SIGNALS:
            errors.append(f"{p}.checkpoint.signal: unknown signal {sig!r} (e.g. 'SIGTERM', "
                          "'SIGUSR1', or null for a job that cannot checkpoint on demand)")
        for field in ("last_preempted_at",):
            t = getattr(j, field)
            if t is not None and t > snap.now:
                errors.append(f"{p}.{field}: {t.isoformat()} is after now")
        if j.checkpoint.last_at is not None and j.checkpoint.last_at > snap.now:
            errors.append(f"{p}.checkpoint.last_at: {j.checkpoint.last_at.isoformat()} is after now")
        if j.state == "pending":
            if j.placement is not None:
                errors.append(f"{p}.placement: pending job {j.id!r} must not have a placement")
            continue
        if j.started_at is None:
            errors.append(f"{p}.started_at: required for running job {j.id!r}")
        elif j.started_at > snap.now:
            errors.append(f"{p}.started_at: {j.started_at.isoformat()} is after now "
                          f"({snap.now.isoformat()})")
        if j.placement is None:
            errors.append(f"{p}.placement: required for running job {j.id!r}")
            continue
        if len(j.placement) != j.nodes:
            errors.append(f"{p}.placement: {len(j.placement)} entries but the job has "
                          f"nodes={j.nodes}")
        seen_nodes: set[str] = set()
        for k, part in enumerate(j.placement):
            q = f"{p}.placement[{k}]"
            node = nodes.get(part.node)
            if node is None:
                errors.append(f"{q}.node: unknown node {part.node!r}")
                continue
            if part.node in seen_nodes:
                errors.append(f"{q}.node: node {part.node!r} appears twice (placement entries "
                              "must be on distinct nodes)")
            seen_nodes.add(part.node)
            if len(part.gpus) != j.gpus_per_node:
                errors.append(f"{q}.gpus: {len(part.gpus)} GPUs but the job has "
                              f"gpus_per_node={j.gpus_per_node}")
            for g in part.gpus:
                if not 0 <= g < node.gpus:
                    errors.append(f"{q}.gpus: GPU {g} out of range for node {node.id} "
                                  f"({node.gpus} GPUs)")
                    continue
                other = owner.get((node.id, g))
                if other is not None:
                    errors.append(f"{q}.gpus: GPU {g} of node {node.id} is also used by running "
                                  f"job {other!r} (R1)")
                else:
                    owner[(node.id, g)] = j.id
    return errors


def load_plan(source: dict[str, Any] | str | Path) -> Plan:
    name = None
    if isinstance(source, (str, Path)):
        name = str(source)
        source = read_document(source)
    try:
        return Plan.model_validate(source)
    except ValidationError as exc:
        raise InputError(_pydantic_messages(exc, ("plan",)), name) from None
