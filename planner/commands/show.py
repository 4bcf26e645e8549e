"""``preempt-planner show``: a human view of one snapshot.

Header (time, totals), nodes grouped by pool and state with one coloured cell per
GPU (the tier of the job holding it), the running jobs that R6 makes immune, and
the pending queue with backoff (R9) and cascade-guard (R10) holds. Big clusters
get an aggregate table instead of one row per node. Works without a terminal:
every cell also carries a character, so the view survives in logs and tests.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from models import InputError, Job, Node, Snapshot
from models.rules import cascade_guarded, cooldown_until, immune_for_s
from models.snapshot import NvlinkEdges, age_s
from planner.commands._common import (
    EXIT_OK,
    add_snapshot_args,
    load_snapshot_arg,
    out_console,
    stdin_options,
    titled_table,
    write_output,
)

TIER_STYLE = {1: "bold white on red", 2: "bold black on yellow", 3: "bold white on green"}
OTHER_TIER_STYLE = "bold white on blue"
STATE_ORDER: dict[str, int] = {"up": 0, "drain": 1, "down": 2}
CUBE_MESH = {(0, 1), (0, 2), (0, 3), (0, 4), (1, 2), (1, 3), (1, 5), (2, 3), (2, 6), (3, 7),
             (4, 5), (4, 6), (4, 7), (5, 6), (5, 7), (6, 7)}
FREE, DRAIN_FREE, DOWN_FREE = "·", "-", "x"


# ------------------------------------------------------------------ small formatters


def iso(t: datetime | None) -> str:
    if t is None:
        return "-"
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def duration(seconds: float) -> str:
    """``3725`` -> ``1h02m``; ``90`` -> ``1m30s``; ``2 days`` -> ``2d00h``."""
    s = round(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s" if s % 60 else f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def nvlink_label(node: Node) -> str:
    nv = node.nvlink
    if isinstance(nv, str):
        return nv
    if isinstance(nv, NvlinkEdges):
        edges = {tuple(sorted(e)) for e in nv.edges}
        return "cube-mesh" if node.gpus == 8 and edges == CUBE_MESH else f"{len(edges)} edges"
    sizes = sorted({len(i) for i in nv})
    if len(nv) and all(len(i) == 2 for i in nv):
        return f"pairs x{len(nv)}"
    return f"{len(nv)} islands ({'/'.join(str(s) for s in sizes)})"


def shape(job: Job) -> str:
    parts = [f"{job.nodes}x{job.gpus_per_node}" if job.nodes > 1 else f"{job.gpus_per_node} GPU"]
    if job.gpu_type:
        parts.append(job.gpu_type)
    parts.append(job.topology)
    if job.same_block:
        parts.append("same_block")
    if job.same_nvlink_domain:
        parts.append("same_nvlink_domain")
    return " ".join(parts)


def tier_style(tier: int) -> str:
    return TIER_STYLE.get(tier, OTHER_TIER_STYLE)


def tier_char(tier: int) -> str:
    return str(tier) if 0 <= tier <= 9 else "#"


# ------------------------------------------------------------------ view


class View:
    """Precomputed lookups for one snapshot."""

    def __init__(self, snap: Snapshot):
        self.snap = snap
        self.now = snap.now
        self.nodes = snap.node_map()
        self.holder: dict[tuple[str, int], Job] = {}
        self.jobs_on: dict[str, list[Job]] = defaultdict(list)
        for job in snap.running():
            for part in job.placement or []:
                self.jobs_on[part.node].append(job)
                for g in part.gpus:
                    self.holder[(part.node, g)] = job
        self.on_down = [j for j in snap.running()
                        if any(self.nodes[p.node].state == "down" for p in j.placement or [])]

    def held(self, node: Node) -> int:
        return sum(1 for g in range(node.gpus) if (node.id, g) in self.holder)

    def cells(self, node: Node) -> Text:
        text = Text()
        for g in range(node.gpus):
            job = self.holder.get((node.id, g))
            if job is not None:
                style = tier_style(job.tier)
                if node.state == "down":
                    style += " strike"
                text.append(tier_char(job.tier), style=style)
            elif node.state == "up":
                text.append(FREE, style="dim")
            elif node.state == "drain":
                text.append(DRAIN_FREE, style="dim yellow")
            else:
                text.append(DOWN_FREE, style="dim red")
            if g % 8 == 7 and g + 1 < node.gpus:
                text.append(" ")
        return text


def header(view: View, console: Console) -> None:
    snap = view.snap
    states = Counter(n.state for n in snap.nodes)
    total = sum(n.gpus for n in snap.nodes)
    held = len(view.holder)
    usable_free = sum(n.gpus - view.held(n) for n in snap.nodes if n.state == "up")
    console.print(Text.assemble(("Snapshot at ", "bold"), (iso(snap.now), "bold cyan"),
                                f" ({snap.now.astimezone(UTC).strftime('%a')})"))
    if snap.comment:
        console.print(Text(snap.comment, style="dim italic"))
    console.print(f"nodes {len(snap.nodes)} (up {states['up']}, drain {states['drain']}, "
                  f"down {states['down']}) | GPUs {total}: {held} held, {total - held} free "
                  f"({usable_free} placeable on up nodes) | jobs: {len(snap.running())} running, "
                  f"{len(snap.pending())} pending", highlight=False)
    if snap.storage:
        console.print("storage: " + ", ".join(f"{s.id} {s.write_gb_per_s:g} GB/s"
                                              for s in snap.storage), highlight=False)
    else:
        console.print("storage: none (only local bandwidth limits flushes)")


def tiers_table(view: View) -> Table:
    pol = view.snap.policy
    t = titled_table("Policy", show_edge=False)
    for col in ("Tier", "Preemptible now", "Min runtime", "Can preempt", "Windows", "Jobs"):
        t.add_column(col)
    count = Counter(j.tier for j in view.snap.jobs)
    for tier, tp in sorted(pol.tiers.items()):
        if not tp.preemptible:
            now_ok = "no"
        elif tp.windows:
            now_ok = "yes (in window)" if tp.preemptible_at(view.now) else "no (outside windows)"
        else:
            now_ok = "yes"
        wins = "; ".join(f"{','.join(w.days) or 'every day'} {w.start}-{w.end}"
                         for w in tp.windows) or "-"
        t.add_row(Text(tier_char(tier), style=tier_style(tier)), now_ok,
                  duration(tp.min_runtime_s), ", ".join(map(str, tp.can_preempt)) or "-",
                  wins, str(count.get(tier, 0)))
    return t


def policy_line(view: View) -> str:
    pol = view.snap.policy
    parts = []
    if pol.pools:
        parts.append("pools: " + "; ".join(f"{p} -> tiers {', '.join(map(str, ts)) or 'none'}"
                                           for p, ts in sorted(pol.pools.items())))
    b, g = pol.backoff, pol.grace
    parts.append(f"backoff {b.cooldown_s:g}s, {b.free_preemptions} free, x{b.factor:g}, "
                 f"max {b.max_s:g}s")
    parts.append(f"grace {g.min_s:g}-{g.max_s:g}s x{g.safety:g}")
    if pol.max_evictions_per_tick is not None:
        parts.append(f"max {pol.max_evictions_per_tick} evictions/tick")
    if pol.max_evicted_gpu_fraction is not None:
        parts.append(f"max {pol.max_evicted_gpu_fraction:g} of GPUs evicted")
    if pol.cascade_guard_s:
        parts.append(f"cascade guard {pol.cascade_guard_s:g}s")
    return " | ".join(parts)


def node_tables(view: View, console: Console) -> None:
    groups: dict[tuple[str, str], list[Node]] = defaultdict(list)
    for n in view.snap.nodes:
        groups[(n.pool, n.state)].append(n)
    id_width = max((len(n.id) for n in view.snap.nodes), default=4)
    for (pool, state), members in sorted(groups.items(),
                                         key=lambda kv: (kv[0][0], STATE_ORDER[kv[0][1]])):
        gpus = sum(n.gpus for n in members)
        free = sum(n.gpus - view.held(n) for n in members)
        mark = {"up": "", "drain": " [DRAIN: no new placements]",
                "down": " [DOWN: no capacity]"}[state]
        t = titled_table(f"pool {pool} | {state}{mark} | {len(members)} nodes, {gpus} GPUs, "
                         f"{free} free", show_edge=False)
        t.add_column("Node", no_wrap=True, min_width=id_width)
        t.add_column("Type")
        t.add_column("NVLink")
        t.add_column("Block")
        t.add_column("Free", justify="right")
        t.add_column("GPUs", no_wrap=True)
        t.add_column("Jobs", overflow="fold")
        for n in members:
            jobs = Text()
            for k, j in enumerate(sorted({j.id: j for j in view.jobs_on[n.id]}.values(),
                                         key=lambda j: j.id)):
                if k:
                    jobs.append(" ")
                jobs.append(j.id, style=tier_style(j.tier).replace("on ", "").replace("bold ", ""))
            t.add_row(n.id, n.gpu_type or "-", nvlink_label(n), n.block or "-",
                      f"{n.gpus - view.held(n)}/{n.gpus}", view.cells(n), jobs)
        console.print(t)
    console.print(Text.assemble(
        "cells: ", ("1", tier_style(1)), ("2", tier_style(2)), ("3", tier_style(3)),
        " GPU held by a job of that tier, ", (FREE, "dim"), " free, ",
        (DRAIN_FREE, "dim yellow"), " free on a drain node, ", (DOWN_FREE, "dim red"),
        " down"))


def node_summary(view: View, console: Console) -> None:
    """Aggregate by pool, state and GPU type (big clusters)."""
    tiers = sorted({j.tier for j in view.snap.running()} | {1, 2, 3})
    rows: dict[tuple[str, str, str], Counter[str]] = defaultdict(Counter)
    for n in view.snap.nodes:
        c = rows[(n.pool, n.state, n.gpu_type or "-")]
        held = view.held(n)
        c["nodes"] += 1
        c["gpus"] += n.gpus
        c["free"] += n.gpus - held
        c["full" if held == n.gpus else "empty" if held == 0 else "partial"] += 1
        for g in range(n.gpus):
            job = view.holder.get((n.id, g))
            if job is not None:
                c[f"t{job.tier}"] += 1
    t = titled_table(f"Nodes by pool, state and GPU type ({len(view.snap.nodes)} nodes; "
                     "--max-nodes to list them)", show_edge=False)
    for col in ("Pool", "State", "Type", "Nodes", "GPUs"):
        t.add_column(col, justify="right" if col in ("Nodes", "GPUs") else "left")
    for tier in tiers:
        t.add_column(Text(f"T{tier}", style=tier_style(tier)), justify="right")
    for col in ("Free", "Full", "Partial", "Empty"):
        t.add_column(col, justify="right")
    for (pool, state, gtype), c in sorted(rows.items(),
                                          key=lambda kv: (kv[0][0], STATE_ORDER[kv[0][1]],
                                                          kv[0][2])):
        t.add_row(pool, state, gtype, str(c["nodes"]), str(c["gpus"]),
                  *[str(c[f"t{tier}"]) for tier in tiers],
                  str(c["free"]), str(c["full"]), str(c["partial"]), str(c["empty"]))
    console.print(t)


def placement_label(job: Job, limit: int = 3) -> str:
    parts = job.placement or []
    names = [p.node for p in parts[:limit]]
    more = f" +{len(parts) - limit}" if len(parts) > limit else ""
    if len(parts) == 1:
        return f"{parts[0].node}:{','.join(map(str, parts[0].gpus))}"
    return " ".join(names) + more


def immune_table(view: View, console: Console, max_jobs: int) -> None:
    snap = view.snap
    running = snap.running()
    immune = sorted(((immune_for_s(snap.policy, view.now, j), j) for j in running
                     if immune_for_s(snap.policy, view.now, j) > 0), key=lambda x: (x[0], x[1].id))
    by_tier = Counter(j.tier for j in running)
    protected = sum(1 for j in running if not snap.policy.tier(j.tier).preemptible_at(view.now))
    console.print(f"Running: {len(running)} jobs ("
                  + ", ".join(f"tier {t}: {c}" for t, c in sorted(by_tier.items()))
                  + f"); {len(immune)} immune (R6), {protected} not preemptible now (R5/R8)",
                  highlight=False)
    for j in view.on_down[:5]:
        console.print(f"[yellow]warning:[/] running job {escape(j.id)} has GPUs on a down node; "
                      "it is ignored by the planner", highlight=False)
    if len(view.on_down) > 5:
        console.print(f"[yellow]warning:[/] ... and {len(view.on_down) - 5} more running jobs "
                      "on down nodes", highlight=False)
    if not immune:
        return
    t = titled_table("Immune running jobs (started less than their tier's min_runtime ago)",
                     show_edge=False)
    for col in ("Job", "Tier", "Prio", "Shape", "Placement", "Started", "Immune for"):
        t.add_column(col, no_wrap=col in ("Job", "Started"))
    for left, j in immune[:max_jobs]:
        t.add_row(j.id, Text(tier_char(j.tier), style=tier_style(j.tier)), str(j.priority),
                  shape(j), placement_label(j), iso(j.started_at),
                  f"{duration(left)} (until {iso(view.now + timedelta(seconds=left))})")
    console.print(t)
    if len(immune) > max_jobs:
        console.print(f"... and {len(immune) - max_jobs} more immune jobs (--max-jobs)")


def hold_text(view: View, job: Job) -> Text:
    pol = view.snap.policy
    until = cooldown_until(pol, job)
    if until is not None and view.now < until:
        k = job.preemptions
        left = duration((until - view.now).total_seconds())
        return Text(f"cooldown until {iso(until)} (in {left}; hold "
                    f"{duration(pol.backoff.cooldown(k))} after preemption {k})", style="yellow")
    if cascade_guarded(pol, view.now, job):
        assert job.last_preempted_at is not None
        end = job.last_preempted_at + timedelta(seconds=pol.cascade_guard_s)
        return Text(f"cascade guard until {iso(end)}: free GPUs only", style="magenta")
    if until is not None:
        return Text(f"ready (cooldown ended {iso(until)})", style="green")
    return Text("ready", style="green")


def pending_table(view: View, console: Console, max_jobs: int) -> None:
    pending = sorted(view.snap.pending(), key=lambda j: (j.tier, -j.priority, j.id))
    total = sum(j.total_gpus for j in pending)
    console.print(f"Pending: {len(pending)} jobs, {total} GPUs ("
                  + ", ".join(f"tier {t}: {c}" for t, c in
                              sorted(Counter(j.tier for j in pending).items())) + ")",
                  highlight=False)
    if not pending:
        return
    t = titled_table("Pending queue (by tier, then priority)", show_edge=False)
    for col in ("Job", "Tier", "Prio", "Team", "Shape", "GPUs", "Waiting", "Preempted", "Hold"):
        t.add_column(col, no_wrap=col in ("Job",),
                     justify="right" if col in ("Prio", "GPUs") else "left")
    for j in pending[:max_jobs]:
        waited = duration(age_s(view.now, j.submitted_at)) if j.submitted_at else "-"
        pre = (f"{j.preemptions}x, {duration(age_s(view.now, j.last_preempted_at))} ago"
               if j.last_preempted_at else (f"{j.preemptions}x" if j.preemptions else "-"))
        t.add_row(j.id, Text(tier_char(j.tier), style=tier_style(j.tier)), str(j.priority),
                  j.team or "-", shape(j), str(j.total_gpus), waited, pre, hold_text(view, j))
    console.print(t)
    if len(pending) > max_jobs:
        console.print(f"... and {len(pending) - max_jobs} more pending jobs (--max-jobs)")


def render(snap: Snapshot, console: Console, *, max_nodes: int = 64, max_jobs: int = 50) -> None:
    """Print the whole view of ``snap`` on ``console``."""
    view = View(snap)
    header(view, console)
    console.print()
    if len(snap.nodes) <= max_nodes:
        node_tables(view, console)
    else:
        node_summary(view, console)
    console.print()
    immune_table(view, console, max_jobs)
    console.print()
    pending_table(view, console, max_jobs)
    console.print()
    console.print(tiers_table(view))
    console.print(policy_line(view), highlight=False)


def as_json(snap: Snapshot) -> dict[str, Any]:
    """What the view shows, as data (``show -o json``): every node and job, no limits."""
    view = View(snap)
    now = view.now
    pol = snap.policy

    def hold(job: Job) -> dict[str, Any]:
        until = cooldown_until(pol, job)
        if until is not None and now < until:
            return {"kind": "cooldown", "until": iso(until),
                    "after_preemption": job.preemptions}
        if cascade_guarded(pol, now, job):
            assert job.last_preempted_at is not None
            end = job.last_preempted_at + timedelta(seconds=pol.cascade_guard_s)
            return {"kind": "cascade_guard", "until": iso(end)}
        return {"kind": "ready", "until": None}

    def placement(job: Job) -> list[dict[str, Any]]:
        return [{"node": p.node, "gpus": list(p.gpus)} for p in job.placement or []]

    states: Counter[str] = Counter(n.state for n in snap.nodes)
    total = sum(n.gpus for n in snap.nodes)
    running = snap.running()
    immune = sorted(((immune_for_s(pol, now, j), j) for j in running),
                    key=lambda x: (x[0], x[1].id))
    pending = sorted(snap.pending(), key=lambda j: (j.tier, -j.priority, j.id))
    return {
        "now": iso(now), "comment": snap.comment,
        "nodes_by_state": {s: states[s] for s in STATE_ORDER},
        "gpus": {"total": total, "held": len(view.holder), "free": total - len(view.holder),
                 "placeable": sum(n.gpus - view.held(n) for n in snap.nodes if n.state == "up")},
        "storage": [{"id": s.id, "write_gb_per_s": s.write_gb_per_s} for s in snap.storage],
        "nodes": [{"id": n.id, "pool": n.pool, "state": n.state, "gpu_type": n.gpu_type,
                   "nvlink": nvlink_label(n), "block": n.block, "gpus": n.gpus,
                   "free": n.gpus - view.held(n),
                   "holders": [getattr(view.holder.get((n.id, g)), "id", None)
                               for g in range(n.gpus)]}
                  for n in sorted(snap.nodes, key=lambda n: (n.pool, STATE_ORDER[n.state], n.id))],
        "running": [{"job": j.id, "tier": j.tier, "priority": j.priority, "shape": shape(j),
                     "gpus": j.total_gpus, "placement": placement(j),
                     "started_at": iso(j.started_at),
                     "immune_for_s": max(0, left),
                     "preemptible_now": pol.tier(j.tier).preemptible_at(now),
                     "on_down_node": j in view.on_down}
                    for left, j in immune],
        "pending": [{"job": j.id, "tier": j.tier, "priority": j.priority, "team": j.team,
                     "shape": shape(j), "gpus": j.total_gpus,
                     "waiting_s": age_s(now, j.submitted_at) if j.submitted_at else None,
                     "preemptions": j.preemptions,
                     "last_preempted_at": iso(j.last_preempted_at) if j.last_preempted_at
                     else None, "hold": hold(j)} for j in pending],
        "tiers": [{"tier": t, "preemptible_now": tp.preemptible_at(now),
                   "min_runtime_s": tp.min_runtime_s, "can_preempt": list(tp.can_preempt),
                   "windows": [{"days": list(w.days), "start": w.start, "end": w.end}
                               for w in tp.windows],
                   "jobs": sum(1 for j in snap.jobs if j.tier == t)}
                  for t, tp in sorted(pol.tiers.items())],
        "policy": policy_line(view),
    }


def run(args: argparse.Namespace) -> int:
    bad = [f"{option}: must be 0 or more, got {value}" for option, value in
           (("--max-nodes", args.max_nodes), ("--max-jobs", args.max_jobs)) if value < 0]
    if bad:
        raise InputError(bad)
    stdin_options([("SNAPSHOT", args.snapshot), ("--policy", args.policy)])
    snap = load_snapshot_arg(args.snapshot, args.policy)
    if args.format == "json":
        write_output(json.dumps(as_json(snap), indent=2), None)
        return EXIT_OK
    if args.width is not None and args.width < MIN_WIDTH:
        raise InputError([f"--width: at least {MIN_WIDTH} columns, got {args.width}"])
    console = out_console()
    if args.width:
        console.width = args.width
    render(snap, console, max_nodes=args.max_nodes, max_jobs=args.max_jobs)
    return EXIT_OK


MIN_WIDTH = 40  # (narrower, a table's columns have no room at all)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("show", help="display a snapshot: nodes, GPU occupancy, queue",
                       description="Show a snapshot: nodes by pool and state with one cell per "
                       "GPU coloured by the tier holding it, immune running jobs and the "
                       "pending queue with backoff holds.")
    add_snapshot_args(p)
    p.add_argument("-o", "--format", choices=["table", "json"], default="table",
                   help="table (default): the view; json: the same facts as data, every node "
                        "and job")
    p.add_argument("--max-nodes", type=int, default=64, metavar="N",
                   help="list nodes one by one up to N nodes, else aggregate (64; 0: always "
                        "aggregate)")
    p.add_argument("--max-jobs", type=int, default=50, metavar="N",
                   help="rows per job table (50; 0: none, only the counts)")
    p.add_argument("--width", type=int, default=None,
                   help="output width (default: the terminal's; when not a terminal, as wide "
                        "as the content)")
    p.set_defaults(func=run)
