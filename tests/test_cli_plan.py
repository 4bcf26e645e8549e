"""`preempt-planner plan`: contract JSON on stdout, --out, --metrics-out, table
view, and bad input (exit 2, nothing written)."""

from __future__ import annotations

import json
from pathlib import Path

import cli

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = str(ROOT / "instances" / "example-70b.json")


def test_json_is_the_contract_example(capsys) -> None:
    assert cli.main(["plan", EXAMPLE, "--format", "json", "--deterministic"]) == 0
    p = json.loads(capsys.readouterr().out)
    # section 6 of the contract: flush 52.5/4 = 13.125 s, grace max(60, 2 x 28.125) = 60 s,
    # cost 8 x (650 + 13.125) = 5305, hold 08:00 + 60 s + 1800 s = 08:31:00
    assert p["status"] == "optimal"
    assert p["objective"] == {"admitted_gpus": {"1": 8, "2": 0, "3": 0}, "priority_value": 400,
                              "eviction_cost_gpu_s": 5305.0, "evictions": 1}
    (e,) = p["evictions"]
    assert (e["job"], e["grace_s"], e["flush_s"], e["cost_gpu_s"]) == ("sweep-17", 60, 13.125,
                                                                        5305.0)
    assert e["requeue_hold_until"] == "2026-11-29T08:31:00Z"
    assert p["placements"] == [{"job": "finetune-70b", "start_after_s": 60,
                                "placement": [{"node": "dgx-002", "gpus": list(range(8))}]}]
    assert p["storm"] == [{"storage": "nfs-a", "flush_gb": 52.5, "flush_s": 1.3125}]


def test_out_and_metrics_files(tmp_path: Path, capsys) -> None:
    out, prom = tmp_path / "plan.json", tmp_path / "tick.prom"
    assert cli.main(["plan", EXAMPLE, "--deterministic", "--out", str(out),
                     "--metrics-out", str(prom)]) == 0
    table = capsys.readouterr().out
    assert "sweep-17" in table and "finetune-70b" in table and "optimal" in table
    assert json.loads(out.read_text())["objective"]["evictions"] == 1
    assert "preempt_plan_evictions_total 1.0" in prom.read_text()


def test_bad_input_exits_2_and_writes_nothing(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.json"
    data = json.loads(Path(EXAMPLE).read_text())
    data["jobs"][0]["placement"][0]["node"] = "dgx-404"
    bad.write_text(json.dumps(data))
    out = tmp_path / "plan.json"
    assert cli.main(["plan", str(bad), "--out", str(out)]) == 2
    assert "jobs[0].placement[0].node: unknown node 'dgx-404'" in capsys.readouterr().err
    assert not out.exists()


def test_baseline_planners_on_the_example(capsys) -> None:
    for name in ("greedy", "k8s", "slurm"):
        assert cli.main(["plan", EXAMPLE, "--format", "json", "--planner", name]) == 0
        p = json.loads(capsys.readouterr().out)
        assert p["solver"]["engine"] == name
        assert [e["job"] for e in p["evictions"]] == ["sweep-17"]


def test_bad_output_paths_and_options_exit_2_before_any_work(tmp_path: Path, capsys) -> None:
    # An output path that cannot be written is bad input: named, exit status 2, checked
    # before planning (a simulation may run for hours), nothing written anywhere (the
    # temporary file of a folder given as --out went to its parent folder before).
    (tmp_path / "a-file").write_text("x")
    cases = [
        (["plan", EXAMPLE, "--out", str(tmp_path / "missing" / "p.json")],
         f"--out: folder {tmp_path / 'missing'} does not exist"),
        (["plan", EXAMPLE, "--out", str(tmp_path)], (f"--out: {tmp_path} is a folder; give a "
         "file name")),
        (["plan", EXAMPLE, "--metrics-out", str(tmp_path / "a-file" / "m.prom")],
         f"--metrics-out: folder {tmp_path / 'a-file'} does not exist"),
        (["plan", EXAMPLE, "--time-limit", "nan"],
         "--time-limit: must be a positive number of seconds, got nan"),
        (["plan", EXAMPLE, "--time-limit", "0"],
         "--time-limit: must be a positive number of seconds, got 0"),
        (["plan", EXAMPLE, "--workers", "0"], "--workers: must be at least 1, got 0"),
        (["generate", "--nodes", "4", "--out", str(tmp_path)],
         f"--out: {tmp_path} is a folder; give a file name"),
        (["schema", "--out", str(tmp_path / "missing" / "s.json")],
         f"--out: folder {tmp_path / 'missing'} does not exist"),
        (["simulate", "--cluster", EXAMPLE, "--trace", "no-such-trace",
          "--result-out", str(tmp_path / "missing" / "r.json")],
         f"--result-out: folder {tmp_path / 'missing'} does not exist"),
        (["compare", "--cluster", EXAMPLE, "--trace", "no-such-trace",
          "--out", str(tmp_path / "a-file")], (f"--out: {tmp_path / 'a-file'} is a file; give a "
         "folder")),
    ]
    for argv, said in cases:
        assert cli.main(argv) == 2, argv
        err = " ".join(capsys.readouterr().err.split())
        assert f"error: invalid input (1 problem(s)) - {said}" in err, (argv, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]
    # (the old temporary file of --out FOLDER: .<folder name>.tmp beside it)
    assert [p.name for p in tmp_path.parent.iterdir() if p.name.startswith(f".{tmp_path.name}")
            ] == []


def test_the_table_shows_max_jobs_rows_and_counts_the_rest(tmp_path: Path, capsys) -> None:
    from planner.sim.generate import generate

    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps(generate(nodes=8, pending=12, seed=3)))
    assert cli.main(["plan", str(snap), "--deterministic", "-o", "json"]) == 0
    deferred = json.loads(capsys.readouterr().out)["deferred"]
    assert len(deferred) > 2
    assert cli.main(["plan", str(snap), "--deterministic", "--max-jobs", "2"]) == 0
    table = capsys.readouterr().out
    counts: dict[str, int] = {}
    for d in deferred:
        counts[d["reason"]] = counts.get(d["reason"], 0) + 1
    by = ", ".join(f"{r} {n}" for r, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    assert (f"... and {len(deferred) - 2} more deferred jobs (all deferred: {by}) "
            "(--max-jobs; every one in the plan JSON: -o json or --out)") in " ".join(
                table.split())
    shown = [d["job"] for d in deferred if f"│ {d['job']} " in table]
    assert shown == [d["job"] for d in deferred[:2]]
    assert cli.main(["plan", str(snap), "--deterministic", "--max-jobs", "-1"]) == 2
    assert "--max-jobs: must be 0 (all rows) or more, got -1" in capsys.readouterr().err
