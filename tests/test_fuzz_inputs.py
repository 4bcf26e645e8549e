"""Fuzz of the input boundary: thousands of mutated snapshots, plans and adapter
documents (kubectl Node and Pod lists, squeue and sinfo/scontrol JSON), seeded, go
through the loaders and the adapters' conversions in-process. Each must end in
bad input (models.InputError with messages: the CLI's exit status 2) or in a
snapshot that plans, with a plan the verifier accepts; anything else (another
exception, a plan that breaks a rule) fails with the mutation that caused it."""

from __future__ import annotations

import copy
import json
import math
import random
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from models import InputError, load_plan, load_snapshot
from models.load import parse_document
from planner import plan
from planner.checks.verify import verify

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures"
SEEDS = sorted(p for p in (ROOT / "instances").glob("*.json") if not p.name.startswith("gen-"))

# values a mutation puts in place of another: wrong types, edges of ranges, ids
VALUES: list[Any] = [None, True, False, 0, -1, 1, 3, 8, 8.0, 2**31, 10**12, 10**30, -10**30, 0.5,
                     -0.25, 1e308, -1e-9, float("inf"), float("nan"), "", "x", "8", "true",
                     "SIGTERM", "nvswitch", "none", "running", "pending", "down", "drain",
                     "2026-11-29T08:00:00Z", "2026-11-29T09:00:00", "1970-01-01T00:00:00Z",
                     1796025600, [], {}, [0], [0, 0], [[0, 1]], {"edges": [[0, 1]]},
                     {"a": 1}, "x" * 300, "\u00e9\u0000"]


def _paths(doc: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path to a value in ``doc`` (the root included)."""
    yield at
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*at, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, (*at, i))


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def mutate(doc: Any, rng: random.Random) -> tuple[Any, list[str]]:
    """``doc`` changed by 1 to 3 random mutations, and what they were (for a failing
    test to say)."""
    doc = copy.deepcopy(doc)
    said = []
    for _ in range(rng.randint(1, 3)):
        paths = list(_paths(doc))
        path = rng.choice(paths[1:] or paths)
        parent, key = (_get(doc, path[:-1]), path[-1]) if path else (None, None)
        value = _get(doc, path)
        op = rng.choice(["value", "value", "number", "delete", "copy", "unknown", "id"])
        if parent is None:
            continue
        if op == "value":
            parent[key] = rng.choice(VALUES)
        elif op == "number" and isinstance(value, int | float) and not isinstance(value, bool) \
                and math.isfinite(value):
            parent[key] = rng.choice([value * -1, value * 1000, value + 1, value - 1, value / 3,
                                      int(value) if isinstance(value, float) else value + 0.5])
        elif op == "delete":
            del parent[key]
        elif op == "copy" and isinstance(parent, list):
            parent.append(copy.deepcopy(value))
        elif op == "unknown" and isinstance(value, dict):
            value[rng.choice(["gpus_per_nod", "extra", "_comment", "kind", "status"])] = \
                rng.choice(VALUES)
        elif op == "id":  # another object's id or name in its place
            strings = [v for p in paths if isinstance(v := _get(doc, p), str) and len(v) < 40]
            if strings:
                parent[key] = rng.choice(strings)
        else:
            continue
        said.append(f"{op} at {'.'.join(map(str, path))}")
    return doc, said


def check_plans(snap: Any, rng: random.Random, why: list[str]) -> None:
    """A snapshot that loaded plans, and the plan passes the verifier."""
    planner = rng.choice(["cpsat", "greedy", "greedy", "k8s", "slurm"])
    result = plan(snap, time_limit_s=0.5, deterministic=True, planner=planner)
    assert verify(snap, result) == [], (planner, why)
    assert load_plan(json.loads(result.to_json())) == result, why


def expect_bad_input_or(run: Callable[[], Any], why: list[str]) -> Any:
    """``run()``'s value, or None after an InputError with messages; any other
    exception fails the test, naming the mutations."""
    try:
        return run()
    except InputError as exc:
        assert exc.errors and all(isinstance(e, str) and e for e in exc.errors), why
        return None
    except Exception as exc:  # pragma: no cover - what the fuzz is looking for
        raise AssertionError(f"{type(exc).__name__}: {exc} after {why}") from exc


# ------------------------------------------------------------------ snapshots


def test_mutated_snapshots_are_bad_input_or_plan() -> None:
    rng = random.Random(26)
    seeds = [json.loads(p.read_text()) for p in SEEDS]
    planned = refused = 0
    for _ in range(2500):
        doc, why = mutate(rng.choice(seeds), rng)
        snap = expect_bad_input_or(lambda doc=doc: load_snapshot(doc), why)
        if snap is None:
            refused += 1
            continue
        planned += 1
        if planned % 4 == 0:  # (planning every one would take minutes)
            check_plans(snap, rng, why)
    assert planned > 200 and refused > 1000  # (the mutations reach both sides)


def test_mutated_snapshot_texts_are_bad_input_or_load() -> None:
    # the text of a document: cut, doubled characters, YAML, bytes of another encoding
    rng = random.Random(2026)
    texts = [p.read_text() for p in SEEDS[:4]]
    for _ in range(1500):
        text = rng.choice(texts)
        cut = rng.randrange(len(text))
        text = rng.choice([text[:cut], text[:cut] + text[cut - 5:], text.replace(":", ": ", 1),
                           text[:cut] + rng.choice("{}[]\":,&*!|>-\\\t\n#") + text[cut:],
                           "version: 1\n" + text[cut:]])
        why = [f"text cut at {cut}: {text[max(0, cut - 20):cut + 20]!r}"]
        doc = expect_bad_input_or(lambda text=text: parse_document(text, "fuzz"), why)
        if doc is not None:
            expect_bad_input_or(lambda doc=doc: load_snapshot(doc), why)


def _mutated_text(text: str, rng: random.Random, extra: list[str]) -> tuple[str, list[str]]:
    """``text`` with 1 to 4 characters (or pieces of ``extra``) put in or taken out."""
    chars, said = list(text), []
    for _ in range(rng.randint(1, 4)):
        pos = rng.randrange(len(chars) + 1)
        if rng.random() < 0.5 or not chars:
            piece = rng.choice(extra)
            chars[pos:pos] = list(piece)
            said.append(f"put {piece!r} at {pos}")
        else:
            said.append(f"took {chars.pop(min(pos, len(chars) - 1))!r} at {pos}")
    return "".join(chars), said


def test_mutated_yaml_texts_are_bad_input_or_load() -> None:
    # YAML as users write it by hand: anchors, merge keys, tags, flow and block styles
    import yaml

    rng = random.Random(56)
    texts = [yaml.safe_dump(json.loads(p.read_text()), sort_keys=False) for p in SEEDS[:3]]
    texts.append("a: &x {b: 1, c: 2}\nd:\n  <<: *x\n  b: 3\ne: [*x, *x]\n")
    extra = [*":-[]{}&*<!|>'\"#%@`,?\n \t0123456789x\\", "<<", "&a", "*a", "!!binary",
             "!!python/object", "\u00e9", "\ufeff", "2026-13-45", "9" * 5000]
    for _ in range(600):
        text, why = _mutated_text(rng.choice(texts), rng, extra)
        doc = expect_bad_input_or(lambda text=text: parse_document(text, "fuzz",
                                                                   yaml_first=True), why)
        if isinstance(doc, dict):
            expect_bad_input_or(lambda doc=doc: load_snapshot(doc), why)


def test_mutated_trace_texts_are_bad_input_or_load(tmp_path: Path) -> None:
    # the simulator's trace readers (Philly and openb CSV, JSONL), row by row
    from planner.sim.traces import load_trace

    rng = random.Random(56)
    data = ROOT / "tests" / "data" / "sim"
    texts = {name: "".join((data / name).read_text().splitlines(keepends=True)[:20])
             for name in ("philly-slice.csv", "openb-slice.csv", "ping-pong.jsonl")}
    extra = [*",\n\"'-.0123456789eE+:TZ\t{}[]", "nan", "inf", "1e400", "9" * 400, "\u00e9",
             "2017-13-45 25:61:61", "null", "true"]
    records = [json.loads(line) for line in texts["ping-pong.jsonl"].splitlines()
               if line.startswith("{")]
    for _ in range(600):
        name = rng.choice(sorted(texts))
        if name.endswith(".jsonl") and rng.random() < 0.5:  # a record's value replaced
            i = rng.randrange(len(records))
            record, why = mutate(records[i], rng)
            if rng.random() < 0.2:
                key = rng.choice(sorted(record))
                record[key], why = 10**400, [*why, f"{key}: 10**400"]
            lines = [json.dumps(r) for r in records]
            lines[i] = json.dumps(record)
            text = "\n".join(lines) + "\n"
        else:
            text, why = _mutated_text(texts[name], rng, extra)
        path = tmp_path / name
        path.write_text(text)
        expect_bad_input_or(lambda path=path: load_trace(path), [name, *why])


def test_mutated_plans_are_bad_input_or_verify() -> None:
    rng = random.Random(7)
    cases = []
    for path in SEEDS[:6]:
        snap = load_snapshot(path)
        cases.append((snap, json.loads(plan(snap, deterministic=True).to_json())))
    for _ in range(1500):
        snap, doc = rng.choice(cases)
        mutated, why = mutate(doc, rng)
        p = expect_bad_input_or(lambda mutated=mutated: load_plan(mutated), why)
        if p is not None:
            verify(snap, p)  # (any answer; it must not crash)


# ------------------------------------------------------------------ adapters


def _json(rel: str) -> Any:
    return json.loads((FIX / rel).read_text())


def test_mutated_kubectl_lists_are_bad_input_or_plan() -> None:
    from planner.adapters.k8s import build_snapshot, load_config

    cfg = load_config(FIX / "k8s" / "config.yaml")
    now = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
    docs = [(_json("k8s/nodes.json"), _json("k8s/pods.json")),
            (_json("k8s/nodes-gpu-models.json"), _json("k8s/pods-gpu-models.json"))]
    rng = random.Random(8)
    snapshots = 0
    for n in range(1500):
        nodes, pods = rng.choice(docs)
        if n % 2:
            nodes, why = mutate(nodes, rng)
        else:
            pods, why = mutate(pods, rng)
        result = expect_bad_input_or(
            lambda nodes=nodes, pods=pods: build_snapshot(nodes, pods, cfg, now,
                                                          default_tier=3), why)
        if result is None:
            continue
        snap = expect_bad_input_or(lambda r=result: load_snapshot(r.snapshot), why)
        assert snap is not None, ("k8s snapshot wrote a snapshot the loader refuses", why)
        snapshots += 1
        if snapshots % 10 == 0:
            check_plans(snap, rng, why)
    assert snapshots > 100


SLURM = [("slurm/22.05/squeue.json", "slurm/22.05/sinfo.json", 1795944887, {
              "tiers": {"partitions": {"tier1": 1, "tier2": 2, "tier3": 3}},
              "storage": [{"id": "nfs", "write_gb_per_s": 10}],
              "nodes": [{"match": "gpu[1-4]", "nvlink": "nvswitch"}]}),
         ("slurm/23.11/squeue.json", "slurm/23.11/scontrol_nodes.json", 1795945000, {
              "tiers": {"qos": {"high": 1, "normal": 2, "low": 3}},
              "storage": [{"id": "lustre", "write_gb_per_s": 40}],
              "nodes": [{"match": "dgx*", "nvlink": "nvswitch"}]}),
         ("slurm/23.11/squeue.json", "slurm/23.11/sinfo.json", 1795945000, {
              "tiers": {"default": 3}, "nodes": [{"match": "dgx*", "nvlink": "nvswitch"}]})]


@pytest.mark.parametrize("squeue,nodes,now,cfg", SLURM, ids=["22.05", "23.11-scontrol",
                                                               "23.11-sinfo"])
def test_mutated_squeue_and_sinfo_are_bad_input_or_plan(squeue: str, nodes: str, now: int,
                                                        cfg: dict[str, Any]) -> None:
    from planner.adapters.slurm.config import config_from_dict
    from planner.adapters.slurm.parse import build_snapshot

    config = config_from_dict(cfg)
    docs = (_json(squeue), _json(nodes))
    rng = random.Random(now)
    snapshots = 0
    for n in range(600):
        jobs, listing = docs
        if n % 2:
            jobs, why = mutate(jobs, rng)
        else:
            listing, why = mutate(listing, rng)
        result = expect_bad_input_or(
            lambda jobs=jobs, listing=listing: build_snapshot(
                jobs, listing, config, now=now, read_sidecar=lambda _j: ({}, [])), why)
        if result is None:
            continue
        # ('slurm snapshot' checks what it writes: a job listed twice is bad input)
        snap = expect_bad_input_or(lambda r=result: load_snapshot(r.snapshot), why)
        if snap is None:
            continue
        snapshots += 1
        if snapshots % 10 == 0:
            check_plans(snap, rng, why)
    assert snapshots > 50


def test_mutated_files_through_the_command_line_exit_0_or_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the same through cli.main, as a script runs it: exit status 0 or 2, never 3
    import cli

    rng = random.Random(3)
    seeds = [json.loads(p.read_text()) for p in SEEDS]
    path = tmp_path / "snapshot.json"
    seen = set()
    for n in range(300):
        doc, why = mutate(rng.choice(seeds), rng)
        path.write_text(json.dumps(doc))
        command = (["validate", str(path), "-o", "json"] if n % 3 else
                   ["plan", str(path), "--planner", "greedy", "-o", "json"])
        status = cli.main(command)
        err = capsys.readouterr().err
        assert status in (0, 2) and "internal error" not in err, (command, why, err)
        seen.add(status)
    assert seen == {0, 2}
