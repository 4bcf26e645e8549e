"""``preempt-planner k8s``: the Kubernetes adapter.

``k8s snapshot`` turns ``kubectl get nodes -o json`` and ``kubectl get pods -A -o
json`` into a contract snapshot; ``k8s apply`` turns a plan into Eviction and
Binding objects or kubectl commands. See ``docs/kubernetes.md``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from models import InputError, load_plan, read_document
from planner.commands._common import check_output, err_console, write_output


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("k8s", help="Kubernetes adapter (snapshot from kubectl JSON, "
                                          "plan to Evictions/Bindings)",
                              description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="k8s_command", metavar="ACTION")
    sub.required = True

    s = sub.add_parser("snapshot", help="build a snapshot from kubectl JSON")
    s.add_argument("--nodes", required=True, help="output of 'kubectl get nodes -o json'")
    s.add_argument("--pods", required=True, help="output of 'kubectl get pods -A -o json'")
    s.add_argument("--events", help="output of 'kubectl get events -A -o json': its eviction "
                                    "events are the snapshot's recent_evictions (R15)")
    s.add_argument("--config", help="adapter config (JSON or YAML; see docs/kubernetes.md)")
    s.add_argument("--now", help="snapshot time, ISO-8601 with a zone (default: the clock)")
    s.add_argument("--out", help="write the snapshot here (default: stdout)")
    s.add_argument("--meta-out", help="also write the job-to-pods mapping to this file")
    s.set_defaults(func=run_snapshot)

    a = sub.add_parser("apply", help="turn a plan into Evictions/Bindings or kubectl commands")
    a.add_argument("plan", help="plan file (JSON)")
    a.add_argument("--snapshot-meta", help="the snapshot written by 'k8s snapshot' (or its "
                                           "--meta-out file): maps job ids to pods")
    a.add_argument("--format", choices=["evictions", "kubectl"], default="evictions",
                   help="evictions: a v1 List of Eviction and Binding objects (JSON); "
                        "kubectl: a shell script")
    a.add_argument("--no-bindings", action="store_true",
                   help="only evictions; let the cluster's scheduler place the pending pods")
    a.add_argument("--out", help="write here (default: stdout)")
    a.set_defaults(func=run_apply)


def run_snapshot(args: argparse.Namespace) -> int:
    from planner.k8s import build_snapshot, load_config
    from planner.k8s.objects import parse_time

    check_output(args.out, "--out")
    check_output(args.meta_out, "--meta-out")
    now = None
    if args.now:
        now = parse_time(args.now)
        if now is None:
            raise InputError([f"--now: {args.now!r} is not an ISO-8601 time with a zone"])
    cfg = load_config(args.config)
    events = read_document(args.events) if args.events else None
    result = build_snapshot(read_document(args.nodes), read_document(args.pods), cfg, now,
                            events)
    for w in result.warnings:
        err_console.print(f"[yellow]warning:[/] {w}", highlight=False)
    if args.meta_out:
        write_output(json.dumps(result.meta, indent=2), args.meta_out, "--meta-out")
    write_output(json.dumps(result.snapshot, indent=2), args.out)
    return 0


def run_apply(args: argparse.Namespace) -> int:
    from planner.k8s import kubectl_script, object_list, read_meta

    check_output(args.out, "--out")
    plan = load_plan(args.plan)
    meta = None
    if args.snapshot_meta:
        meta = read_meta(read_document(args.snapshot_meta), args.snapshot_meta)
        if meta.get("now") and meta["now"] != plan.model_dump(mode="json")["now"]:
            err_console.print(f"[yellow]warning:[/] the plan is for {plan.now.isoformat()} but "
                              f"the snapshot meta for {meta['now']}", highlight=False)
    if args.format == "kubectl":
        text = kubectl_script(plan, meta, bindings=not args.no_bindings)
    else:
        text = json.dumps(object_list(plan, meta, bindings=not args.no_bindings), indent=2)
    write_output(text, args.out)
    return 0
