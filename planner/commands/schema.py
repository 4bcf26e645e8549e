"""``preempt-planner schema``: JSON Schema (Draft 2020-12) of the contract's
documents, generated from the pydantic models so it cannot drift from the loader.

The generated schema is adjusted where the loader is more lenient than pydantic's
own schema says: keys starting with ``_`` are comments and allowed everywhere,
timestamps may also be Unix epoch seconds, and tier maps are keyed by integers.
The cross-record checks (unknown node, shared GPU, ...) cannot be expressed in
JSON Schema: ``validate`` is the full check.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from models import Plan, Policy, Snapshot
from planner.commands._common import EXIT_OK, add_json_format, check_output, write_output

DRAFT = "https://json-schema.org/draft/2020-12/schema"
KINDS = ("snapshot", "policy", "plan")
_TITLES = {
    "snapshot": "preempt-planner snapshot (contract v1, section 2)",
    "policy": "preempt-planner policy (contract v1, section 3)",
    "plan": "preempt-planner plan (contract v1, section 6)",
}
_DESCRIPTIONS = {
    "snapshot": "One scheduling tick: nodes, storage targets, running and pending jobs and "
                "an optional policy. Cross-record rules are checked by `preempt-planner "
                "validate`.",
    "policy": "Tier rights, pools, backoff, grace and budgets; every field is optional and "
              "merges over the defaults.",
    "plan": "The planner's output: evictions, placements, deferred jobs, storm loads.",
}


def _adjust(node: Any, *, accept_epoch: bool) -> Any:
    """Walk a generated schema and apply the loader's leniencies (see module doc)."""
    if isinstance(node, list):
        return [_adjust(x, accept_epoch=accept_epoch) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _adjust(v, accept_epoch=accept_epoch) for k, v in node.items()}
    if out.get("type") == "object" and out.get("additionalProperties") is False:
        out["patternProperties"] = {"^_": {"description": "comment; ignored"}}
    if accept_epoch and out.get("format") == "date-time" and out.get("type") == "string":
        return {"anyOf": [{"type": "string", "format": "date-time"},
                          {"type": "number", "description": "Unix epoch seconds"}]}
    return out


def build_schema(kind: str) -> dict[str, Any]:
    """JSON Schema of one kind of document: ``snapshot``, ``policy`` or ``plan``."""
    if kind == "plan":
        schema = _adjust(Plan.model_json_schema(mode="serialization"), accept_epoch=False)
    else:
        model = Snapshot if kind == "snapshot" else Policy
        schema = _adjust(model.model_json_schema(mode="validation"), accept_epoch=True)
        tiers = (schema["properties"]["tiers"] if kind == "policy"
                 else schema["$defs"]["Policy"]["properties"]["tiers"])
        tiers["propertyNames"] = {"pattern": "^-?[0-9]+$"}
        if kind == "snapshot":
            schema["properties"].pop("comment", None)  # the loader's name for `_comment`
    schema = {"$schema": DRAFT, "$id": f"urn:preempt-planner:v1:{kind}",
              **schema, "title": _TITLES[kind], "description": _DESCRIPTIONS[kind]}
    return schema


def all_schemas() -> dict[str, Any]:
    """One document holding the three schemas under ``$defs``."""
    return {"$schema": DRAFT, "$id": "urn:preempt-planner:v1",
            "title": "preempt-planner data contract v1",
            "$defs": {k: build_schema(k) for k in KINDS}}


def run(args: argparse.Namespace) -> int:
    check_output(args.out, "--out")
    doc = all_schemas() if args.kind == "all" else build_schema(args.kind)
    write_output(json.dumps(doc, indent=2), args.out)
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("schema", help="print the JSON Schema of the contract's documents",
                       description="JSON Schema (Draft 2020-12) generated from the models.")
    p.add_argument("--kind", choices=[*KINDS, "all"], default="snapshot",
                   help="which document (default: snapshot)")
    p.add_argument("--out", help="write to FILE instead of stdout")
    add_json_format(p, "the schema")
    p.set_defaults(func=run)
