"""``preempt-planner k8s``: the Kubernetes adapter.

``k8s snapshot`` turns ``kubectl get nodes -o json`` and ``kubectl get pods -A -o
json`` into a contract snapshot; ``k8s apply`` turns a plan into Eviction and
Binding objects or kubectl commands. See ``docs/kubernetes.md``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from models import InputError, load_plan, read_document, suggest_fields
from planner.commands._common import (
    add_json_format,
    check_inputs_kept,
    check_output,
    stdin_options,
    warn,
    write_output,
)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("k8s", help="Kubernetes adapter (snapshot from kubectl JSON, "
                                          "plan to Evictions/Bindings)",
                              description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="k8s_command", metavar="ACTION")
    sub.required = True

    s = sub.add_parser("snapshot", help="build a snapshot from kubectl JSON")
    s.add_argument("--nodes", required=True, help="output of 'kubectl get nodes -o json' (- "
                                                  "reads standard input)")
    s.add_argument("--pods", required=True, help="output of 'kubectl get pods -A -o json'")
    s.add_argument("--events", help="output of 'kubectl get events -A -o json': its eviction "
                                    "events are the snapshot's recent_evictions (R15)")
    s.add_argument("--config", help="adapter config (JSON or YAML; see docs/kubernetes.md)")
    s.add_argument("--now", help="snapshot time, ISO-8601 with a zone (default: the clock)")
    s.add_argument("--default-tier", type=int, metavar="N",
                   help="plan pods without a mapped PriorityClass as tier N (sets default_tier); "
                        "without it, a snapshot where no job's tier comes from "
                        "priority_classes or a tier annotation is refused")
    s.add_argument("--out", help="write the snapshot here (default: stdout)")
    s.add_argument("--meta-out", help="also write the job-to-pods mapping to this file")
    add_json_format(s, "the snapshot")
    s.set_defaults(func=run_snapshot)

    a = sub.add_parser("apply", help="turn a plan into Evictions/Bindings or kubectl commands")
    a.add_argument("plan", help="plan file (JSON or YAML; - reads standard input)")
    a.add_argument("--snapshot-meta", help="the snapshot written by 'k8s snapshot' (or its "
                                           "--meta-out file): maps job ids to pods")
    a.add_argument("--emit", choices=["evictions", "kubectl"], default=None,
                   help="evictions (default): a v1 List of Eviction and Binding objects "
                        "(JSON); kubectl: a shell script of kubectl commands")
    a.add_argument("-o", "--format", choices=["json", "evictions", "kubectl"], default=None,
                   help="json: the List of objects (the default); 'evictions' and 'kubectl' "
                        "are the old names of --emit, still accepted with a warning")
    a.add_argument("--no-bindings", action="store_true",
                   help="only evictions; let the cluster's scheduler place the pending pods")
    a.add_argument("--config", help="adapter config (its interval_s and max_plan_age_s; default: "
                                    "the limit 'k8s snapshot' wrote into the meta, else 60 s)")
    a.add_argument("--now", help="the current time, ISO-8601 with a zone (default: the clock); "
                                 "the plan's age is measured from the plan's now to this")
    a.add_argument("--force", action="store_true",
                   help="apply a plan older than max_plan_age_s (default 2 x interval_s)")
    a.add_argument("--rehearse", action="store_true",
                   help="with --emit kubectl: a script whose every request is a server-side "
                        "dry run (dryRun=All), to try a plan on a real cluster with nothing "
                        "evicted, bound or recorded")
    a.add_argument("--out", help="write here (default: stdout)")
    a.set_defaults(func=run_apply)


def _now(text: str | None) -> Any:
    from planner.adapters.k8s.objects import parse_time, time_out_of_range

    if not text:
        return None
    now = parse_time(text)
    if now is None:
        what = ("is outside 1970-01-01 to 9000-01-01" if time_out_of_range(text)
                else "is not an ISO-8601 time with a zone")
        raise InputError([f"--now: {text!r} {what}"])
    return now


def run_snapshot(args: argparse.Namespace) -> int:
    from planner.adapters.k8s import build_snapshot

    check_output(args.out, "--out")
    check_output(args.meta_out, "--meta-out")
    inputs = [("--nodes", args.nodes), ("--pods", args.pods), ("--events", args.events),
              ("--config", args.config)]
    stdin_options(inputs)
    check_inputs_kept(inputs, [("--out", args.out), ("--meta-out", args.meta_out)])
    now = _now(args.now)
    cfg = _config(args.config)
    files = {"nodes": args.nodes, "pods": args.pods, "events": args.events}
    docs = {k: read_document(v) if v else None for k, v in files.items()}
    try:
        result = build_snapshot(docs["nodes"], docs["pods"], cfg, now, docs["events"],
                                default_tier=args.default_tier)
    except InputError as exc:
        named = files.get(exc.source or "")
        if named:  # name the file that was given
            raise InputError(exc.errors, named) from None
        raise
    for w in result.warnings:
        warn(w)
    if args.meta_out:
        write_output(json.dumps(result.meta, indent=2), args.meta_out, "--meta-out")
    write_output(json.dumps(result.snapshot, indent=2), args.out)
    return 0


def _config(path: str | None) -> Any:
    """The adapter config (InputError, with a suggestion for a misspelt field)."""
    from planner.adapters.k8s import load_config
    from planner.adapters.k8s.config import K8sConfig

    try:
        return load_config(path)
    except InputError as exc:
        raise InputError(suggest_fields(exc.errors, K8sConfig, "config."), exc.source) \
            from None


def run_apply(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from planner.adapters.k8s import kubectl_script, object_list, read_meta
    from planner.adapters.k8s.apply import EVENT_REASON, check_plan_age, plan_age_limit

    emit = args.emit or "evictions"
    if args.format in ("evictions", "kubectl"):
        warn(f"--format {args.format} is deprecated: it is --emit {args.format} now "
             "(-o/--format is the output format, json)")
        if args.emit and args.emit != args.format:
            raise InputError([f"--format {args.format} and --emit {args.emit}: give one"])
        emit = args.format
    elif args.format == "json" and emit == "kubectl":
        raise InputError(["-o json and --emit kubectl: a kubectl script is not JSON (give one)"])
    if args.rehearse and emit != "kubectl":
        raise InputError([("--rehearse: a rehearsal is a kubectl script of dry runs; give "
                           "it with --emit kubectl")])
    check_output(args.out, "--out")
    inputs = [("PLAN", args.plan), ("--snapshot-meta", args.snapshot_meta),
              ("--config", args.config)]
    stdin_options(inputs)
    check_inputs_kept(inputs, [("--out", args.out)])
    now = _now(args.now) or datetime.now(UTC)
    cfg = _config(args.config) if args.config else None
    doc = read_document(args.plan)  # (read once: it may be standard input)
    if not (isinstance(doc, dict) and "evictions" in doc and "placements" in doc):
        from planner.adapters.k8s.objects import what_is

        seen = what_is(doc)
        if seen is not None:  # the wrong file: one message, not the plan loader's pages
            raise InputError([(f"PLAN: this looks like {seen}; give the plan that "
                              "'preempt-planner plan SNAPSHOT --format json --out F' writes")],
                             args.plan)
    plan = load_plan(doc, args.plan)
    meta = None
    if args.snapshot_meta:
        meta = read_meta(read_document(args.snapshot_meta), args.snapshot_meta)
        if meta.get("now") and meta["now"] != plan.model_dump(mode="json")["now"]:
            warn(f"the plan is for {plan.now.isoformat()} but the snapshot meta for "
                 f"{meta['now']}")
    limit, source = plan_age_limit(meta, cfg)
    for w in check_plan_age(plan, now, limit, source, force=args.force):
        warn(w)
    if emit == "kubectl":
        text = kubectl_script(plan, meta, bindings=not args.no_bindings,
                              max_age_s=None if args.force else limit, rehearse=args.rehearse)
    else:
        text = json.dumps(object_list(plan, meta, bindings=not args.no_bindings), indent=2)
        if plan.evictions:
            warn(f"--emit evictions: the List holds the {len(plan.evictions)} eviction(s) but no "
                 f"{EVENT_REASON} Events, so the next 'k8s snapshot --events' does not count "
                 "them toward the rolling eviction budget (R15) unless you record them: "
                 f"create one Event of reason {EVENT_REASON} per evicted pod (as the script of "
                 "--emit kubectl does)")
    write_output(text, args.out)
    return 0
