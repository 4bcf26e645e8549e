"""What ``preempt-planner tune`` writes: ``report.md`` (the front as a Markdown table,
the chosen policy and its per-window results against the default policy and naive),
``front.json`` (the whole record), ``front.png`` (a scatter of the front; needs
matplotlib, the ``plots`` extra) and ``policy.yaml`` (the chosen policy, ready for
``--policy``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from planner.tune.space import metric

__all__ = ["fmt_value", "front_rows", "policy_yaml", "report_markdown", "write_outputs",
           "write_scatter"]


def fmt_value(name: str, x: float | None) -> str:
    """A mean objective value in a unit that suits it."""
    if x is None:
        return "-"
    unit = metric(name)[1]
    if unit == "s":
        if x < 120:
            return f"{x:.0f} s"
        if x < 7200:
            return f"{x / 60:.1f} min"
        return f"{x / 3600:.1f} h"
    if unit == "GPU-h":
        if 0 < x < 0.005:
            return "< 0.01"
        return f"{x:,.2f}" if x < 10 else f"{x:,.1f}"
    if name == "evictions":
        return f"{x:.3f}"
    return f"{x:g}" if x == int(x) else f"{x:.2f}"


def _param_text(v: Any) -> str:
    return json.dumps(v) if not isinstance(v, str) else v


def front_rows(rec: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the front, then the two references."""
    keys = [p["key"] for p in rec["space"]["params"]]
    objs = [o["name"] for o in rec["objectives"]]
    chosen = (rec.get("chosen") or {}).get("trial")
    by = {t["trial"]: t for t in rec["trials"]}
    header = ["trial", *keys, *[metric(n)[0] for n in objs]]
    rows = []
    for name in rec["front"]:
        t = by[name]
        rows.append([name + (" (chosen)" if name == chosen else ""),
                     *[_param_text(t["params"][k]) for k in keys],
                     *[fmt_value(n, t["values"][n]) for n in objs]])
    for ref, label in (("default", "default policy"), ("naive", "naive planner")):
        r = rec["references"].get(ref)
        if r and "values" in r:
            rows.append([label, *["" for _ in keys], *[fmt_value(n, r["values"][n]) for n in objs]])
    return header, rows


def _md_table(header: list[str], rows: list[list[str]], left: int = 1) -> str:
    align = ["---"] * left + ["---:"] * (len(header) - left)
    return "\n".join(["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |",
                      *["| " + " | ".join(r) + " |" for r in rows]])


def _change(a: float, b: float) -> str:
    """``b`` against ``a`` as a relative change."""
    if a == b:
        return "same"
    if a == 0:
        return "from 0"
    return f"{100 * (b - a) / abs(a):+.0f}%"


def _minutes(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


def _windows_text(s: dict[str, Any]) -> str:
    ws = ", ".join(w["label"] + (f" ({w['days']:g} days)" if w["days"] else "")
                   for w in s["windows"])
    loads = ", ".join(f"{x:g}x" for x in s["loads"])
    seeds = ", ".join(str(x) for x in s["seeds"])
    n = len(s["windows"]) * len(s["loads"]) * len(s["seeds"])
    return f"windows {ws}; loads {loads}; seeds {seeds} ({n} simulation(s) per policy)"


def report_markdown(rec: dict[str, Any], chart: str | None, skipped: str | None) -> str:
    s = rec["settings"]
    objs = [o["name"] for o in rec["objectives"]]
    sims = rec["simulations"]
    done = [t for t in rec["trials"] if t["state"] == "complete"]
    pruned = [t for t in rec["trials"] if t["state"] == "pruned"]
    failed = [t for t in rec["trials"] if t["state"] == "failed"]
    search = (f"grid of {len(rec['trials'])} point(s)" if s["search"] == "grid"
              else f"Optuna {s['sampler'].upper()} (seed {s['sampler_seed']}), "
                   f"{len(rec['trials'])} trial(s)")
    lines = [
        "# Policy tuning", "",
        (f"Cluster `{s['cluster']}`, trace `{s['trace']}`"
         f"{' (carry-over warm start)' if s['carry_over'] else ''}, planner {s['planner']}, "
         f"tick {s['tick_s']:g} s; {_windows_text(s)}."), "",
        "Space: " + "; ".join(f"`{p['key']}` {p['values']}" for p in rec["space"]["params"])
        + ("; fixed: " + ", ".join(f"`{k}={json.dumps(v)}`" for k, v in rec["space"]["fixed"])
           if rec["space"]["fixed"] else "") + ".", "",
        "Objectives (means over the simulations, all minimised): "
        + ", ".join(f"{o['title']} (weight {o['weight']:g})" for o in rec["objectives"])
        + (". Constraints: " + ", ".join(f"`{c}`" for c in rec["constraints"])
           if rec["constraints"] else "") + ".", "",
        (f"Search: {search}; {len(done)} complete, {len(pruned)} pruned (dominated on the "
         f"first windows), {len(failed)} failed. Simulations: {sims['run']} run, "
         f"{sims['cached']} from the cache, {s['where']}; wall time "
         f"{_minutes(rec['wall_s'])} ({rec['trials_per_minute']:.2f} trials per minute)."),
        "", "## Pareto front", "",
    ]
    if not rec["front_feasible"] and rec["front"]:
        lines += [("No trial meets every constraint: this is the front of all complete "
                   "trials."), ""]
    if rec["front"]:
        header, rows = front_rows(rec)
        lines += [_md_table(header, rows), ""]
    else:
        lines += ["No trial completed.", ""]
    if chart:
        lines += [f"![the front]({chart})", ""]
    elif skipped:
        lines += [skipped, ""]
    ch = rec.get("chosen")
    if ch:
        by = {t["trial"]: t for t in rec["trials"]}
        t = by[ch["trial"]]
        dflt, naive = rec["references"]["default"], rec["references"]["naive"]
        objs = objs + [c for c in t.get("constrained", {}) if c not in objs]

        def value(run: dict[str, Any], n: str) -> float:
            return float({**run["values"], **run.get("constrained", {})}[n])

        changes = ", ".join(f"`{k}={_param_text(v)}`" for k, v in
                            [*rec["space"]["fixed"], *ch["params"].items()])
        lines += [f"## Chosen: {ch['trial']}", "",
                  (f"The lowest weighted sum of the objectives, each scaled between its best "
                   f"and worst value on the front. Policy file: `policy.yaml` (the default "
                   f"policy with {changes})."), "",
                  ("Against the default policy and the naive planner (means over the "
                   "simulations):"), "",
                  _md_table(["objective", "chosen", "default policy", "change", "naive"],
                            [[metric(n)[0], fmt_value(n, value(t, n)),
                              fmt_value(n, value(dflt, n)),
                              _change(value(dflt, n), value(t, n)),
                              fmt_value(n, value(naive, n))] for n in objs]), "",
                  "### Per window", ""]
        header = ["window", "load", "seed", "run", *[metric(n)[0] for n in objs]]
        rows = []
        for k, cell in enumerate(t["cells"]):
            for label, run in (("chosen", t), ("default policy", dflt), ("naive", naive)):
                c = run["cells"][k]
                rows.append([cell["window"], f"{cell['load']:g}x", str(cell["seed"]), label,
                             *[fmt_value(n, c[n]) for n in objs]])
        lines += [_md_table(header, rows, left=4), ""]
    return "\n".join(lines)


def policy_yaml(rec: dict[str, Any]) -> str:
    ch = rec["chosen"]
    s = rec["settings"]
    changes = [*rec["space"]["fixed"], *ch["params"].items()]
    head = [(f"# The policy chosen by preempt-planner tune (trial {ch['trial']}) on "
             f"{s['trace']}, planner {s['planner']}:"),
            *[f"#   {k} = {json.dumps(v)}" for k, v in changes],
            "# means over the simulations: " + ", ".join(
                f"{n} {fmt_value(n, v)}" for n, v in ch["values"].items()),
            "# use: preempt-planner simulate --policy policy.yaml ... (or as a cluster's policy)"]
    body = yaml.safe_dump(_str_keys(ch["policy"]), sort_keys=False, default_flow_style=None)
    return "\n".join(head) + "\n" + body


def _str_keys(d: Any) -> Any:
    if isinstance(d, dict):
        return {str(k): _str_keys(v) for k, v in d.items()}
    if isinstance(d, list):
        return [_str_keys(v) for v in d]
    return d


def write_scatter(rec: dict[str, Any], path: Path) -> Path | None:
    """The first objective against each other one (a panel each): every complete trial
    in grey, the front in colour, the chosen trial starred, the references marked.
    None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    from planner.sim.report import PALETTE

    objs = [o["name"] for o in rec["objectives"]]
    pairs = [(objs[0], y) for y in objs[1:]] or [(objs[0], None)]
    done = [t for t in rec["trials"] if t["state"] == "complete"]
    front = [t for t in done if t["trial"] in rec["front"]]
    chosen = (rec.get("chosen") or {}).get("trial")
    fig, axes = plt.subplots(1, len(pairs), figsize=(4.2 * len(pairs), 3.8), squeeze=False)
    for ax, (xn, yn) in zip(axes[0], pairs, strict=True):
        sx, ux = _axis_scale(xn, [t["values"][xn] for t in done])
        sy, uy = _axis_scale(yn, [t["values"][yn] for t in done]) if yn else (1.0, "")

        def xy(ts: list[dict[str, Any]], xn: str = xn, yn: str | None = yn, sx: float = sx,
               sy: float = sy) -> tuple[list[float], list[float]]:
            return ([t["values"][xn] / sx for t in ts],
                    [t["values"][yn] / sy if yn else 0.0 for t in ts])

        ax.scatter(*xy(done), s=18, color="#BBBBBB", label="trials", zorder=1)
        for k, (ref, marker) in enumerate((("default", "s"), ("naive", "D"))):
            r = rec["references"].get(ref)
            if r and "values" in r:
                ax.scatter(*xy([r]), s=50, marker=marker, color=PALETTE[2 + k],
                           label=f"{ref}{' policy' if ref == 'default' else ' planner'}",
                           zorder=2, edgecolors="black", linewidths=0.5)
        # the front as rings on top: a front point on a reference stays visible
        ax.scatter(*xy(front), s=70, facecolors="none", edgecolors=PALETTE[0], linewidths=1.6,
                   marker="o", label="front", zorder=4)
        star = [t for t in front if t["trial"] == chosen]
        if star:
            ax.scatter(*xy(star), s=160, color=PALETTE[1], marker="*", label=f"chosen {chosen}",
                       zorder=5, edgecolors="black", linewidths=0.5)
        ax.set_xlabel(metric(xn)[0] + (f" ({ux})" if ux else ""))
        if yn:
            ax.set_ylabel(metric(yn)[0] + (f" ({uy})" if uy else ""))
        else:
            ax.set_yticks([])
        ax.grid(True, alpha=0.3)
    handles, labels = axes[0][-1].get_legend_handles_labels()
    legend = fig.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.0, 0.9),
                        fontsize=8, frameon=False)
    title = fig.suptitle("Pareto front (means over the simulations; lower is better)",
                         fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight", bbox_extra_artists=[legend, title])
    plt.close(fig)
    return path


def _axis_scale(name: str, values: list[float]) -> tuple[float, str]:
    """(divisor, unit) for an axis: waits in s, min or h by their size."""
    unit = metric(name)[1]
    if unit != "s":
        return 1.0, unit
    top = max(values, default=0.0)
    return (3600.0, "h") if top >= 7200 else (60.0, "min") if top >= 120 else (1.0, "s")


def write_outputs(rec: dict[str, Any], out: Path) -> dict[str, Any]:
    """Write the files; returns {"report", "front", "chart", "policy", "skipped"}."""
    from planner.trap import atomic_write

    def write_file(text: str, path: Path) -> None:  # (complete or untouched)
        atomic_write(path, (text if text.endswith("\n") else text + "\n").encode())

    out.mkdir(parents=True, exist_ok=True)
    chart = write_scatter(rec, out / "front.png") if rec["front"] else None
    skipped = None if chart or not rec["front"] else (
        "Chart skipped: matplotlib is not installed (pip install 'preempt-planner[plots]').")
    write_file(json.dumps(rec, indent=1, sort_keys=True), out / "front.json")
    write_file(report_markdown(rec, chart.name if chart else None, skipped), out / "report.md")
    policy = None
    if rec.get("chosen"):
        policy = out / "policy.yaml"
        write_file(policy_yaml(rec), policy)
    return {"report": out / "report.md", "front": out / "front.json", "chart": chart,
            "policy": policy, "skipped": skipped}
