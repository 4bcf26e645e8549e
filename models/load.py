"""Loading and validating snapshots and policies (contract sections 2, 7, 8).

Every problem of an input is collected and reported at once, each message
naming the field path (``jobs[3].placement[0].gpus: ...``).
"""

from __future__ import annotations

import gc
import json
import math
import signal as _signal
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import date, datetime
from functools import cache
from pathlib import Path
from typing import Any

import pydantic_core
from pydantic import ConfigDict, ValidationError

from models.kinds import wrong_document
from models.plan import Plan
from models.policy import MAX_PRIORITY, Policy
from models.snapshot import (
    PRIORITY_BRANCHES,
    Job,
    Node,
    NvlinkEdges,
    Snapshot,
    is_time_bound,
    priority_message,
    time_message,
)

_SIGNALS = {s.name for s in _signal.Signals}


class InputError(ValueError):
    """Bad input: ``errors`` lists one message per problem, each naming its field."""

    def __init__(self, errors: list[str], source: str | None = None):
        self.errors = errors
        self.source = source
        head = f"{source}: " if source else ""
        super().__init__(head + f"{len(errors)} problem(s):\n  " + "\n  ".join(errors))

    def __reduce__(self) -> tuple[type[InputError], tuple[list[str], str | None]]:
        # what crosses a process boundary (a worker pool, a pickled result): without
        # it the message string would come back as the list of problems
        return (type(self), (self.errors, self.source))


# what a field of the wrong type or range raises in code that converts a foreign
# document (kubectl's or Slurm's JSON): the adapters turn these into InputError
# (ArithmeticError: an overflow, decimal's InvalidOperation on a quantity "nan")
SHAPE_ERRORS = (TypeError, AttributeError, ValueError, KeyError, ArithmeticError)


MAX_SEED = 2**31 - 1  # a random seed: what CP-SAT's random_seed (an int32) takes


def range_problems(positive: Iterable[tuple[str, float | None]] = (),
                   at_least_one: Iterable[tuple[str, int | None]] = (),
                   seeds: Iterable[tuple[str, int | None]] = ()) -> list[str]:
    """One message per option out of range: ``positive`` (option, value) pairs must be
    finite numbers > 0, ``at_least_one`` pairs counts >= 1, ``seeds`` integers from 0
    to MAX_SEED; None is not given."""
    out = [f"{option}: must be a positive number, got {value:g}" for option, value in positive
           if value is not None and not (math.isfinite(value) and value > 0)]
    out += [f"{option}: must be at least 1, got {value}" for option, value in at_least_one
            if value is not None and value < 1]
    out += [f"{option}: must be a seed from 0 to {MAX_SEED:,}, got {value}"
            for option, value in seeds if value is not None and not 0 <= value <= MAX_SEED]
    return out


def field_paths(model: Any, prefix: str = "") -> list[str]:
    """The dotted path of every field of a pydantic ``model`` and of the records nested
    in it (lists and maps of records add no component): for typo suggestions."""
    from typing import get_args

    from pydantic import BaseModel

    out: list[str] = []
    todo: list[tuple[Any, str, frozenset[Any]]] = [(model, prefix, frozenset())]
    while todo:
        m, at, above = todo.pop()
        for name, f in m.model_fields.items():
            path = f"{at}{name}"
            out.append(path)
            types = [f.annotation]
            while types:
                t = types.pop()
                types.extend(get_args(t))
                if isinstance(t, type) and issubclass(t, BaseModel) and t not in above:
                    todo.append((t, f"{path}.", above | {m}))
    return sorted(out)


def did_you_mean(word: str, names: Iterable[str]) -> str | None:
    """The name of ``names`` closest to a misspelt one; None when none is close."""
    import difflib

    near = difflib.get_close_matches(word, sorted(names), n=1, cutoff=0.75)
    return near[0] if near else None


def suggestion(path: str, model: Any, root: str = "") -> str | None:
    """For an unknown field at the dotted ``path`` (``root`` a prefix of it, such as
    ``config.``): the nearest field of ``model`` at that place, else the dotted path
    of the nearest one elsewhere in it (never the word itself)."""
    paths = field_paths(model)
    names = {p.rsplit(".", 1)[-1]: p for p in reversed(paths)}  # name -> its first path
    *above, word = path.removeprefix(root).split(".")
    parent = ".".join(p for p in above if p in names)  # (no list indices, map keys)
    here = [p.rsplit(".", 1)[-1] for p in paths if p.rpartition(".")[0] == parent]
    near = did_you_mean(word, here)
    if near is None:  # a field of another place: its whole path
        near = names.get(did_you_mean(word, names) or "")
    return near if near and near != word else None


def suggest_fields(errors: list[str], model: Any, root: str = "") -> list[str]:
    """Messages ``path.field: unknown field`` (or pydantic's "Extra inputs are not
    permitted") with "; did you mean 'x'?" added (see :func:`suggestion`)."""
    out = []
    for line in errors:
        path, sep, msg = line.partition(": ")
        if sep and ("unknown field" in msg or "Extra inputs are not permitted" in msg) \
                and "did you mean" not in msg:
            near = suggestion(path.replace("[", ".").replace("]", ""), model, root)
            if near:
                line += f"; did you mean {near!r}?"
        out.append(line)
    return out


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


def _pydantic_messages(err: ValidationError, prefix: tuple[Any, ...] = (),
                       model: Any = Snapshot) -> list[str]:
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
            near = suggestion(".".join(str(p) for p in loc), model,
                              "".join(f"{p}." for p in prefix))
            if near:
                msg += f"; did you mean {near!r}?"
        elif e["type"] == "literal_error":
            msg = f"{msg}, got {e.get('input')!r}"
        elif loc[-1:] and loc[-1] in PRIORITY_BRANCHES and loc[-2:-1] == ("priority",):
            loc, msg = loc[:-1], priority_message(e["input"])  # (one line for both)
        elif e["type"] in ("greater_than_equal", "less_than") and is_time_bound(e.get("ctx")):
            msg = time_message(e["input"])
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        line = f"{_path(loc)}: {msg}"
        if line not in seen:
            seen.add(line)
            msgs.append(line)
    return msgs


MAX_DOCUMENT_BYTES = 1 << 30  # 1 GiB: a 12,500-node snapshot is about 55 MB
MAX_DEPTH = 64  # nesting levels of a document (the contract's are at most 6)


def decode_text(data: bytes, where: str) -> str:
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


MAX_REPEATED = 1_000_000  # values YAML aliases may add to a document when expanded


def check_depth(doc: Any, where: str) -> None:
    """Refuse a document nested deeper than MAX_DEPTH, one that contains itself (a
    recursive YAML alias), or one whose YAML aliases repeat more than MAX_REPEATED
    values (an "alias bomb": 450 bytes that expand to a billion values). Each shared
    object is measured once, without recursion."""
    sizes: dict[int, tuple[int, int]] = {}  # id -> (height, values once expanded)
    open_ids: set[int] = set()  # on the path from the root
    written = 0  # values as written (each shared object once)
    stack: list[tuple[Any, bool]] = [(doc, False)]
    while stack:
        node, done = stack.pop()
        kids = list(node.values()) if isinstance(node, dict) else node
        if done:
            height, values = 1, 1
            for kid in kids:
                h, n = sizes[id(kid)] if isinstance(kid, dict | list) else (1, 1)
                height, values = max(height, h + 1), values + n
            open_ids.discard(id(node))
            sizes[id(node)] = (height, values)
            written += 1 + sum(1 for kid in kids if not isinstance(kid, dict | list))
            if height > MAX_DEPTH:
                raise InputError([(f"the document is nested more than {MAX_DEPTH} levels deep "
                                  "(the contract's documents need at most 6)")], where)
            if values - written > MAX_REPEATED:
                raise InputError([(f"the document's YAML aliases (*name) repeat more than "
                                  f"{MAX_REPEATED:,} values: refused (an alias bomb?)")], where)
            continue
        if not isinstance(node, dict | list) or id(node) in sizes:
            continue
        if id(node) in open_ids:
            raise InputError(["the document contains itself (a recursive YAML alias)"], where)
        open_ids.add(id(node))
        stack.append((node, True))
        stack.extend((kid, False) for kid in kids
                     if isinstance(kid, dict | list) and id(kid) not in sizes)


_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')
_AS_PARENS = bytes.maketrans(b"[]{}", b"()()")


def json_nests_at_most(text: str, levels: int) -> bool:
    """Whether a JSON text nests at most ``levels`` arrays and objects (on a text that
    is not JSON, True or False means nothing). Made of byte-string operations, a
    fraction of the cost of walking the parsed document: escaped backslashes and
    quotes are removed, then everything but brackets and quotes, then the strings;
    each pass of removing ``()`` takes one level off."""
    data = text.encode("utf-8", "surrogatepass")  # (ASCII bytes are ASCII characters)
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    kept = data.translate(_AS_PARENS, _NOT_STRUCTURE)
    marks = kept.replace(b'""', b"")  # the strings, when none holds a bracket
    if b'"' in marks:  # (then every other piece between quotes is outside the strings)
        marks = b"".join(kept.split(b'"')[::2])
    for _ in range(levels):
        if not marks:
            break
        marks = marks.replace(b"()", b"")
    return not marks


def check_json_depth(doc: Any, text: str, where: str) -> None:
    """:func:`check_depth` of ``doc`` parsed from the JSON ``text``: a tree (no shared
    values, so no alias to count), so only its height can be refused, and a text
    nesting fewer than MAX_DEPTH arrays and objects is within it (its scalars add
    one level)."""
    if not json_nests_at_most(text, MAX_DEPTH - 1):
        check_depth(doc, where)


def _yaml() -> Any:
    """The YAML module, imported when a document is read as YAML (a JSON input, the
    usual one, does without its import time)."""
    import yaml

    return yaml


DIGITS_RULE = "a number has more than 4,300 digits (no value of the contract needs that many)"
TOO_MANY_DIGITS = f"malformed JSON: {DIGITS_RULE}"


@cache
def _yaml_loader() -> Any:
    """PyYAML's safe loader, but a scalar it cannot convert (an integer of more than
    Python's 4,300 digits, a timestamp such as 2026-13-45) is a YAML error at its line
    and column instead of the ValueError PyYAML lets through, and so is a key given
    twice in one mapping (PyYAML keeps the last)."""
    import yaml

    class Loader(yaml.SafeLoader):
        def compose_mapping_node(self, anchor: Any) -> Any:
            # a key given twice in one mapping: PyYAML keeps the last in silence (a
            # second 'tiers:' in a policy replaced the first). Checked as written, when
            # the mapping is composed: merging (<<) adds keys to it later, in place,
            # and a merged key may be given again (that is what merging is for)
            node = super().compose_mapping_node(anchor)
            seen: dict[tuple[str, str], int] = {}
            for key, _value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    line = seen.get((key.tag, key.value))
                    if line is not None:
                        raise yaml.composer.ComposerError(
                            None, None, f"the key {key.value[:40]!r} is given twice in one "
                            f"mapping (first at line {line + 1})", key.start_mark)
                    seen[(key.tag, key.value)] = key.start_mark.line
            return node

        def construct_object(self, node: Any, deep: bool = False) -> Any:
            try:
                return super().construct_object(node, deep)
            except ValueError as exc:
                why = DIGITS_RULE if "integer string conversion" in str(exc) else (
                    f"cannot read {node.value[:40]!r} ({exc})" if isinstance(node.value, str)
                    else str(exc))
                raise yaml.constructor.ConstructorError(None, None, why,
                                                        node.start_mark) from None

    return Loader


def parse_document(text: str, where: str | None = None, *, yaml_first: bool = False) -> Any:
    """A JSON or YAML document from its text; JSON is tried first (YAML when
    ``yaml_first``), and a text that is not JSON but YAML of a mapping or a list is
    read as YAML whatever the file is called. InputError naming ``where``. JSON is
    parsed by pydantic-core's parser, which reads every JSON value as json.loads
    does in half the time; a text it refuses (a lone surrogate, a mistake, YAML) goes
    to json.loads, which says why or lets YAML read it."""
    too_deep = [(f"the document is nested more than {MAX_DEPTH} levels deep (the contract's "
                "documents need at most 6)")]

    def as_yaml() -> Any:
        try:
            return _yaml().load(text, Loader=_yaml_loader())  # (safe_load's, see there)
        except RecursionError:
            raise InputError(too_deep, where) from None

    if yaml_first:
        try:
            doc = as_yaml()
        except _yaml().YAMLError as exc:
            raise InputError([f"malformed YAML: {exc}"], where) from None
    else:
        try:
            doc = pydantic_core.from_json(text, cache_strings="keys")  # (15% quicker than all)
        except ValueError:
            pass
        else:
            check_json_depth(doc, text, where or "document")
            return doc
        try:
            doc = json.loads(text)
        except RecursionError:
            raise InputError(too_deep, where) from None
        except json.JSONDecodeError as exc:  # (before ValueError: it is one)
            msg = f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
            if text.lstrip()[:1] in ("{", "["):  # JSON with a mistake, not YAML
                raise InputError([msg], where) from None
            try:
                doc = as_yaml()
            except _yaml().YAMLError:
                raise InputError([msg], where) from None
            if not isinstance(doc, dict | list):  # (broken JSON that YAML reads as text)
                raise InputError([msg], where) from None
        except ValueError:  # (Python's limit on the digits of an integer)
            raise InputError([TOO_MANY_DIGITS], where) from None
        else:
            check_json_depth(doc, text, where or "document")
            return doc
    check_depth(doc, where or "document")
    return doc


def read_text(source: str | Path) -> tuple[str, str, bool]:
    """The text of a JSON or YAML file (``-``: standard input), the name its messages
    give it, and whether it is read as YAML first (a ``.yaml`` or ``.yml`` file);
    raises InputError on a text that is not UTF-8, a binary file or one bigger than
    MAX_DOCUMENT_BYTES."""
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
    return decode_text(data, name), name, name.lower().endswith((".yaml", ".yml"))


def read_document(source: str | Path) -> Any:
    """Read a JSON or YAML file (``-``: standard input); raises InputError naming the
    file on a syntax error, a text that is not UTF-8, a binary file, a document nested
    too deep or bigger than MAX_DOCUMENT_BYTES."""
    text, name, yaml_first = read_text(source)
    return parse_document(text, name, yaml_first=yaml_first)


def load_policy(source: dict[str, Any] | Policy | str | Path | None) -> Policy:
    if isinstance(source, Policy):
        return source
    name = None
    if isinstance(source, (str, Path)):
        name = str(source)
        source = read_document(source)
    wrong = wrong_document(source, "policy") if source is not None else None
    if wrong:
        raise InputError([wrong], name)
    if source is not None and not isinstance(source, dict):
        raise InputError(["policy: must be an object"], name)
    try:
        pol = Policy.model_validate(source or {})
    except ValidationError as exc:
        raise InputError(_pydantic_messages(exc, ("policy",), Policy), name) from None
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
    if pol.reserve is not None:
        for v in pol.reserve.tiers:
            if v not in pol.tiers:
                errors.append(f"policy.reserve.tiers: tier {v} is not defined in the policy")
    return errors


@contextmanager
def gc_paused(*, acyclic: bool = False) -> Iterator[None]:
    """Python's cyclic garbage collector paused (unless it already is), the caller's
    setting restored afterwards. Reading a large document, or planning on it, makes
    hundreds of thousands of objects and no reference cycles, and the collections
    they set off, each over all the objects made so far, cost as much as the work
    itself (half of load_snapshot on 12,500 nodes; 0.08 s per collection in a plan
    at 1,024 nodes).

    ``acyclic``: the work makes no cyclic garbage (reading a snapshot, planning:
    tests/test_load_ways.py and tests/test_gc.py check it). Resuming the collector
    would then walk every object made meanwhile once more, for nothing (0.17 s at
    12,500 nodes): instead the objects alive go to the oldest generation
    (``gc.freeze()`` then ``gc.unfreeze()``), where only a full collection looks at
    them. Not done when the process keeps frozen objects of its own
    (``gc.get_freeze_count()``), nor when the work raises."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    except BaseException:  # (an error's traceback may hold cycles: a usual collection)
        gc.enable()
        raise
    if acyclic and gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()
    gc.enable()


def load_snapshot(source: dict[str, Any] | Snapshot | str | Path,
                  policy: dict[str, Any] | Policy | str | Path | None = None) -> Snapshot:
    """Parse and check a snapshot. ``policy``, when given, replaces the snapshot's own
    (section 7). Raises InputError listing every problem."""
    with gc_paused(acyclic=True):
        return _load_snapshot(source, policy)


def _load_snapshot(source: dict[str, Any] | Snapshot | str | Path,
                   policy: dict[str, Any] | Policy | str | Path | None) -> Snapshot:
    name = None
    if isinstance(source, Snapshot):
        data: Any = source.model_dump(mode="json")
    elif isinstance(source, (str, Path)):
        name = str(source)
        text, where, yaml_first = read_text(source)
        snap = None if policy is not None or yaml_first else _snapshot_of_json(text)
        if snap is not None:
            return _checked(snap, name)
        data = parse_document(text, where, yaml_first=yaml_first)
    else:
        data = source
    wrong = wrong_document(data, "snapshot")
    if wrong:
        raise InputError([wrong], name)
    if not isinstance(data, dict):
        raise InputError(["snapshot: must be a JSON/YAML object"], name)
    if policy is not None:
        pol = load_policy(policy)
        data = {**data, "policy": pol.model_dump(mode="json")}
    try:
        snap = Snapshot.model_validate(data)
    except ValidationError as exc:
        raise InputError(_pydantic_messages(exc), name) from None
    return _checked(snap, name)


def load_snapshot_text(data: bytes) -> Snapshot | None:
    """The snapshot of a JSON text (a request's body) read and validated by
    pydantic-core from the text, as a file is read, and checked (InputError listing
    every problem); None for a text to parse and pass to :func:`load_snapshot`
    instead, which says what is wrong with it (not UTF-8, not JSON, a comment below
    the top level, a field out of range, ...)."""
    with gc_paused(acyclic=True):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return None
        snap = _snapshot_of_json(text)
        return None if snap is None else _checked(snap, None)


def _checked(snap: Snapshot, name: str | None) -> Snapshot:
    errors = check_snapshot(snap)
    if errors:
        raise InputError(errors, name)
    return snap


class _SnapshotText(Snapshot):
    """A snapshot that keeps the fields it does not know at its top level (in
    ``model_extra``) instead of refusing them: the comments of a JSON text.
    ``cache_strings=False``: each string value a new str object rather than one
    looked up in pydantic-core's cache (5-10% of the validation time at 12,500
    nodes; equal strings, not shared ones)."""

    model_config = ConfigDict(extra="allow", cache_strings=False)


def _snapshot_of_json(text: str) -> Snapshot | None:
    """The snapshot of a JSON text, read and validated by pydantic-core from the text
    (no Python object per value, no Python call per record); None when the text
    takes the general way instead, json.loads and validation in Python, whose
    messages the user gets: not JSON, nested too deep, a comment below the top level
    or a field it does not know, any problem. Both ways accept the same documents
    (tests/test_load_ways.py); one accepted is a snapshot, never a document of
    another kind (models.kinds), so that check is left to the general way."""
    if not json_nests_at_most(text, MAX_DEPTH - 1):
        return None
    try:
        doc = _SnapshotText.__pydantic_validator__.validate_json(text)
    except ValidationError:
        return None
    extra = doc.model_extra or {}
    if not all(k[:1] == "_" for k in extra):
        return None
    values = {k: getattr(doc, k) for k in Snapshot.model_fields}
    given = doc.model_fields_set & values.keys()
    if "_comment" in extra and "comment" not in given:
        if not isinstance(extra["_comment"], str | None):
            return None  # (the general way says why)
        values["comment"] = extra["_comment"]
        given.add("comment")
    return Snapshot.model_construct(given, **values)


def _dupes(kind: str, ids: list[str]) -> list[str]:
    if len(set(ids)) == len(ids):
        return []
    first: dict[str, int] = {}
    out = []
    for i, x in enumerate(ids):
        if x in first:
            out.append(f"{kind}[{i}].id: duplicate id {x!r} (also {kind}[{first[x]}])")
        else:
            first[x] = i
    return out


def _nvlink_errors(path: str, nvlink: Any, gpus: int) -> list[str]:
    errors: list[str] = []
    if isinstance(nvlink, list):
        flat = [g for island in nvlink for g in island]
        if len(set(flat)) == len(flat) and (not flat or (0 <= min(flat) and max(flat) < gpus)):
            return errors
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


def priority_errors(snap: Snapshot) -> list[str]:
    """Fractional priorities are scaled by a power of 10 to integers for the solver
    (models.rules.priority_scale): the scaled ones must stay within the limit."""
    from models.rules import priority_scale, scaled_priority

    if set(map(type, [j.priority for j in snap.jobs])) <= {int}:  # (scale 1, at C speed)
        return []
    scale = priority_scale(j.priority for j in snap.jobs)
    if scale == 1:
        return []
    over = [(i, j) for i, j in enumerate(snap.jobs)
            if abs(scaled_priority(j.priority, scale)) > MAX_PRIORITY]
    if not over:
        return []
    i, j = over[0]
    places = len(str(scale)) - 1
    return [(f"jobs[{i}].priority: {j.priority!r} times 10^{places} is beyond +-{MAX_PRIORITY:,}: "
             f"priorities are weighed as exact integers, scaled by 10^{places} for the most "
             f"decimal places given ({places}); use fewer decimal places or smaller "
             "priorities")]


def placement_errors(p: str, j: Job, nodes: dict[str, Node],
                      owner: dict[str, dict[int, str]]) -> list[str]:
    """The placement of the running job ``j`` (at ``p``): known and distinct nodes,
    gpus_per_node GPUs on each, in range, used by no other job (R1). ``owner`` maps
    node -> GPU -> job for the jobs before it, and gets this job's GPUs."""
    errors = []
    seen_nodes: set[str] = set()
    for k, part in enumerate(j.placement or []):
        node = nodes.get(part.node)
        if node is None:
            errors.append(f"{p}.placement[{k}].node: unknown node {part.node!r}")
            continue
        if part.node in seen_nodes:
            errors.append(f"{p}.placement[{k}].node: node {part.node!r} appears twice "
                          "(placement entries must be on distinct nodes)")
        seen_nodes.add(part.node)
        if len(part.gpus) != j.gpus_per_node:
            errors.append(f"{p}.placement[{k}].gpus: {len(part.gpus)} GPUs but the job has "
                          f"gpus_per_node={j.gpus_per_node}")
        used = owner.setdefault(node.id, {})
        mine = dict.fromkeys(part.gpus, j.id)
        if (part.gpus and len(mine) == len(part.gpus) and 0 <= min(mine)
                and max(mine) < node.gpus and used.keys().isdisjoint(mine)):
            used.update(mine)  # (the common case at C speed; the loop says what is wrong)
            continue
        for g in part.gpus:
            if not 0 <= g < node.gpus:
                errors.append(f"{p}.placement[{k}].gpus: GPU {g} out of range for node "
                              f"{node.id} ({node.gpus} GPUs)")
                continue
            other = used.get(g)
            if other is not None:
                errors.append(f"{p}.placement[{k}].gpus: GPU {g} of node {node.id} is also used "
                              f"by running job {other!r} (R1)")
            else:
                used[g] = j.id
    return errors


def check_snapshot(snap: Snapshot, owner: dict[str, dict[int, str]] | None = None
                   ) -> list[str]:
    """Cross-record checks of sections 2, 7 and 8 (field checks are pydantic's).
    ``owner``, when given, gets node -> GPU -> the running job using it."""
    errors: list[str] = []
    errors += _dupes("storage", [s.id for s in snap.storage])
    errors += _dupes("nodes", [n.id for n in snap.nodes])
    errors += _dupes("jobs", [j.id for j in snap.jobs])
    errors += _policy_errors(snap.policy)
    storages = snap.storage_map()
    nodes = snap.node_map()
    several = len(snap.storage) > 1
    for i, n in enumerate(snap.nodes):
        if n.storage is not None and n.storage not in storages:
            errors.append(f"nodes[{i}].storage: unknown storage target {n.storage!r}")
        elif n.storage is None and several:
            errors.append(f"nodes[{i}].storage: required when there are several storage targets "
                          f"({', '.join(sorted(storages))})")
        if not isinstance(n.nvlink, str):  # (a name has nothing to check)
            errors += _nvlink_errors(f"nodes[{i}].nvlink", n.nvlink, n.gpus)
    errors += recent_errors(snap)
    errors += priority_errors(snap)
    if owner is None:
        if _jobs_fine(snap):
            return errors
        owner = {}  # node -> GPU -> the running job using it
    for i, j in enumerate(snap.jobs):
        p = f"jobs[{i}]"
        errors += job_errors(p, j, snap)
        if j.state == "running" and j.placement is not None:
            errors += placement_errors(p, j, nodes, owner)
    return errors


def _jobs_fine(snap: Snapshot) -> bool:
    """Whether job_errors and placement_errors have nothing to report on any job of
    ``snap`` (False: maybe they do). The same checks at under half the cost: no message
    made, and the GPUs of each node gathered in one list, checked once for being in
    range and distinct (none used twice, by one job or two). It restates their
    conditions: a check added to them belongs here too
    (tests/test_load_speed_equal.py compares both over random mutations)."""
    tiers, now, nodes = snap.policy.tiers, snap.now, snap.node_map()
    held: dict[str, list[list[int]]] = {}  # node -> the GPU lists placed on it
    for j in snap.jobs:
        ck, placement = j.checkpoint, j.placement
        if not (j.tier in tiers and (ck.signal is None or ck.signal in _SIGNALS)
                and (j.last_preempted_at is None or j.last_preempted_at <= now)
                and (ck.last_at is None or ck.last_at <= now)):
            return False
        if j.state == "pending":
            if placement is not None:
                return False
            continue
        if (j.started_at is None or j.started_at > now or placement is None
                or len(placement) != j.nodes):
            return False
        if len(placement) > 1 and len({part.node for part in placement}) != len(placement):
            return False
        for part in placement:
            if len(part.gpus) != j.gpus_per_node:
                return False
            lists = held.get(part.node)
            if lists is None:
                held[part.node] = [part.gpus]
            else:
                lists.append(part.gpus)
    for name, lists in held.items():
        node = nodes.get(name)
        if node is None:
            return False
        flat = lists[0] if len(lists) == 1 else [g for gpus in lists for g in gpus]
        if flat and (len(set(flat)) != len(flat) or min(flat) < 0 or max(flat) >= node.gpus):
            return False
    return True


def recent_errors(snap: Snapshot) -> list[str]:
    return [f"recent_evictions[{i}].at: {e.at.isoformat()} is after now "
            f"({snap.now.isoformat()}); only evictions already carried out count (R15)"
            for i, e in enumerate(snap.recent_evictions) if e.at > snap.now]


def time_errors(p: str, j: Job, now: datetime) -> list[str]:
    """The checks of one job record (at ``p``) that depend on ``now``: its times."""
    errors = []
    if j.last_preempted_at is not None and j.last_preempted_at > now:
        errors.append(f"{p}.last_preempted_at: {j.last_preempted_at.isoformat()} is after now")
    if j.checkpoint.last_at is not None and j.checkpoint.last_at > now:
        errors.append(f"{p}.checkpoint.last_at: {j.checkpoint.last_at.isoformat()} is after now")
    if j.state == "running" and j.started_at is not None and j.started_at > now:
        errors.append(f"{p}.started_at: {j.started_at.isoformat()} is after now "
                      f"({now.isoformat()})")
    return errors


def job_errors(p: str, j: Job, snap: Snapshot) -> list[str]:
    """The checks of one job record (at ``p``) but its GPUs against other jobs'."""
    errors = []
    tiers = snap.policy.tiers
    if j.tier not in tiers:
        errors.append(f"{p}.tier: tier {j.tier} of job {j.id!r} is not in the policy "
                      f"(tiers: {', '.join(str(t) for t in sorted(tiers))})")
    ck = j.checkpoint
    if ck.signal is not None and ck.signal not in _SIGNALS:
        errors.append(f"{p}.checkpoint.signal: unknown signal {ck.signal!r} (e.g. 'SIGTERM', "
                      "'SIGUSR1', or null for a job that cannot checkpoint on demand)")
    errors += time_errors(p, j, snap.now)
    if j.state == "pending":
        if j.placement is not None:
            errors.append(f"{p}.placement: pending job {j.id!r} must not have a placement")
        return errors
    if j.started_at is None:
        errors.append(f"{p}.started_at: required for running job {j.id!r}")
    if j.placement is None:
        errors.append(f"{p}.placement: required for running job {j.id!r}")
    elif len(j.placement) != j.nodes:
        errors.append(f"{p}.placement: {len(j.placement)} entries but the job has "
                      f"nodes={j.nodes}")
    return errors


def load_plan(source: dict[str, Any] | str | Path, name: str | None = None) -> Plan:
    """Parse and check a plan as strictly as a snapshot: ``version`` required, no
    numbers or booleans as strings, unknown fields refused; a document of another
    kind (a snapshot given as the plan, ...) is one message saying what it looks
    like. Raises InputError naming ``name`` (default: the file)."""
    if isinstance(source, (str, Path)):
        name = name or str(source)
        source = read_document(source)
    wrong = wrong_document(source, "plan")
    if wrong:
        raise InputError([wrong], name)
    if not isinstance(source, dict):
        raise InputError(["plan: must be a JSON/YAML object"], name)
    missing = [] if "version" in source else ["plan.version: Field required"]
    odd = _not_finite(source, "plan")
    if odd is not None:
        raise InputError(missing + [f"{odd}: Input should be a finite number"], name)
    try:
        plan = Plan.model_validate_json(json.dumps(source, default=_json_value), strict=True)
    except ValidationError as exc:
        raise InputError(missing + _pydantic_messages(exc, ("plan",), Plan), name) from None
    if missing:
        raise InputError(missing, name)
    return plan


def _not_finite(doc: Any, path: str) -> str | None:
    """The path of the first NaN or infinity in a document (the contract's numbers
    are finite), or None."""
    if isinstance(doc, float):
        return None if math.isfinite(doc) else path
    if isinstance(doc, dict):
        items: Any = doc.items()
    elif isinstance(doc, list):
        items = enumerate(doc)
    else:
        return None
    for k, v in items:
        found = _not_finite(v, f"{path}[{k}]" if isinstance(k, int) else f"{path}.{k}")
        if found is not None:
            return found
    return None


def _json_value(value: Any) -> Any:
    """What json.dumps cannot write of a YAML document: its timestamps."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not a JSON value")
