"""End to end against a real Slurm on this machine (tests/slurm_cluster.py).

Scenario: 4 nodes x 8 fake GPUs, partitions tier1/tier2/tier3 mapped to tiers
1-3. gpu1 holds a tier-2 job inside its immunity window (4 GPUs) and a cheap
tier-3 job; gpu2 and gpu3 two cheap tier-3 jobs each; gpu4 two expensive
tier-3 jobs. A tier-1 job of 2 nodes x 8 GPUs arrives and waits (the cluster is
full). A dry run must change nothing; one real tick later the tier-3 victims'
job scripts have trapped SIGTERM and written their checkpoint sidecars within
the grace, they are pending with a BeginTime at least the cooldown away and
restart_cnt 1, and the tier-1 job runs on the planned nodes; the immune job was
never touched.

A second scenario (`hidden`, after the first) hides GPUs from the adapter: a job
of partition tier2 holds 6 GPUs of gpu1, and the adapter's `commands.squeue` is a
wrapper that cuts tier2's jobs out of the real `squeue --json` (as another user's
view or a filtered squeue would). gpu1 then looks free to squeue; the node listing
still says 6 GPUs are in use, so they are held by `slurm-occupied@gpu1` and a
tier-1 job of 4 GPUs is never placed there (only 2 are free): it evicts a tier-3
job on another node instead.

Needs root and the Debian packages slurm-wlm and munge. When they are missing
the fixture installs them (root + apt-get; opt out with
PREEMPT_PLANNER_SLURM_INSTALL=0), else the tests are skipped with the reason.
With CI=true a setup problem fails the tests instead of skipping them.
"""

from __future__ import annotations

import calendar
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # tests/ is not a package
import slurm_cluster
from slurm_cluster import LocalSlurm, SlurmSetupError

pytestmark = pytest.mark.slurm

IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
GRACE_MIN_S = 5
COOLDOWN_S = 600


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"Slurm e2e setup failed in CI: {reason}", pytrace=False)
    pytest.skip(reason)


def _ensure_slurm() -> None:
    missing = slurm_cluster.missing_binaries()
    if not missing:
        return
    opt_out = os.environ.get("PREEMPT_PLANNER_SLURM_INSTALL", "") == "0"
    if os.geteuid() != 0 or shutil.which("apt-get") is None or opt_out:
        _unavailable(f"Slurm is not installed (missing {', '.join(missing)}); install it "
                     "with `bash .ci/slurm-setup.sh` as root (Debian: slurm-wlm, munge)")
        return
    try:
        slurm_cluster.install_packages()
    except (SlurmSetupError, subprocess.TimeoutExpired, OSError) as exc:
        _unavailable(f"cannot install slurm-wlm/munge: {exc}")
    still = slurm_cluster.missing_binaries()
    if still:
        _unavailable(f"Slurm still missing after install: {', '.join(still)}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    if os.geteuid() != 0:
        _unavailable("the local Slurm test cluster needs root (SlurmUser=root)")
    _ensure_slurm()
    root = tmp_path_factory.mktemp("slurm")
    c = LocalSlurm(root)
    try:
        c.start()
    except (SlurmSetupError, subprocess.TimeoutExpired, OSError) as exc:
        c.stop()
        _unavailable(f"cannot start the local Slurm cluster: {exc}")
    try:
        yield c
    finally:
        left = c.stop()
        assert not left and not c.daemons_alive(), f"daemons left running: {left}"


# ----------------------------------------------------------------- helpers

JOB_SCRIPT = """#!/bin/bash
# A training job that checkpoints on SIGTERM, as docs/slurm.md describes.
export PREEMPT_PLANNER_SIDECAR="{sidecar_dir}/$SLURM_JOB_ID.json"
on_term() {{
    received=$(date +%s.%N)
    # the "checkpoint": here only its metadata, written atomically
    printf '{{"size_gb": 1.0, "last_at": "%s", "signal": "SIGTERM", "reason": "signal", "received_at": %s}}\\n' \\
        "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$received" > "$PREEMPT_PLANNER_SIDECAR.tmp"
    mv "$PREEMPT_PLANNER_SIDECAR.tmp" "$PREEMPT_PLANNER_SIDECAR"
    exit 0
}}
trap on_term TERM
sleep 100000 &
wait
"""


def squeue_jobs(c: LocalSlurm) -> dict[str, dict[str, Any]]:
    data = json.loads(c.run("squeue", "--all", "--json"))
    return {str(j["job_id"]): j for j in data["jobs"]}


def sbatch(c: LocalSlurm, script: Path, *args: str) -> str:
    out = c.run("sbatch", "--parsable", f"--output={script.parent}/%j.out", *args, str(script))
    return out.strip().split(";")[0]


def wait_for(pred, timeout: float, what: str, interval: float = 0.3) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def cli(c: LocalSlurm, *args: str, timeout: float = 120, check: bool = True
        ) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "planner.adapters.slurm", *args], env=c.env,
                          capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def observable(jobs: dict[str, dict[str, Any]]) -> dict[str, tuple[Any, ...]]:
    """What a dry run must not change."""
    return {k: (j["job_state"], j["nodes"], j["restart_cnt"], j["required_nodes"],
                j["eligible_time"], tuple(j["gres_detail"]))
            for k, j in jobs.items()}


@dataclass
class Scenario:
    cluster: LocalSlurm
    config: Path
    sidecars: Path
    plans: Path
    immune: str
    fillers: dict[str, str]  # job id -> node
    tier1: str
    dry: dict[str, Any] = field(default_factory=dict)
    tick: dict[str, Any] = field(default_factory=dict)
    snapshot: dict[str, Any] = field(default_factory=dict)
    snapshot_err: str = ""


@pytest.fixture(scope="module")
def scenario(cluster: LocalSlurm) -> Scenario:
    work = cluster.root / "scenario"
    sidecars, plans = work / "sidecars", work / "plans"
    for d in (work, sidecars, plans):
        d.mkdir(parents=True, exist_ok=True)
    script = work / "train.sh"
    script.write_text(JOB_SCRIPT.format(sidecar_dir=sidecars))
    script.chmod(0o755)
    config = work / "slurm-planner.yaml"
    config.write_text(json.dumps({
        "tiers": {"partitions": {"tier1": 1, "tier2": 2, "tier3": 3}},
        "storage": [{"id": "nfs", "write_gb_per_s": 10}],
        "nodes": [{"match": "gpu[1-4]", "nvlink": "nvswitch", "block": "rack-1"}],
        "sidecar_dir": str(sidecars),
        # the tier-3 jobs' script traps SIGTERM; the others are not said to (the
        # default: signal null, priced as losing their work since start)
        "job_defaults_by_partition": {"tier3": {"checkpoint": {"signal": "SIGTERM"}}},
        "state_file": str(work / "state.json"),
        "policy": {
            "tiers": {"2": {"min_runtime_s": 3600}, "3": {"min_runtime_s": 0}},
            "grace": {"min_s": GRACE_MIN_S, "max_s": 60, "safety": 2.0},
            "backoff": {"cooldown_s": COOLDOWN_S},
        },
        "poll_interval_s": 0.5,
        "planner": {"deterministic": True, "time_limit_s": 2.0},
    }, indent=1))

    immune = sbatch(cluster, script, "-p", "tier2", "-w", "gpu1", "--gres=gpu:4",
                    "--comment=size_gb=1 restore_s=0")
    fillers = {sbatch(cluster, script, "-p", "tier3", "-w", "gpu1", "--gres=gpu:4",
                      "--comment=size_gb=1 restore_s=0"): "gpu1"}
    for node in ("gpu2", "gpu2", "gpu3", "gpu3"):
        fillers[sbatch(cluster, script, "-p", "tier3", "-w", node, "--gres=gpu:4",
                       "--comment=size_gb=1 restore_s=10")] = node
    for node in ("gpu4", "gpu4"):
        fillers[sbatch(cluster, script, "-p", "tier3", "-w", node, "--gres=gpu:4",
                       "--comment=size_gb=50 restore_s=600")] = node
    ids = [immune, *fillers]
    wait_for(lambda: all(squeue_jobs(cluster)[j]["job_state"] == "RUNNING" for j in ids), 60,
             "the 8 filler jobs to run")
    tier1 = sbatch(cluster, script, "-p", "tier1", "-N", "2", "--gpus-per-node=8",
                   "--comment=size_gb=100 restore_s=60")
    # the cluster is full: Slurm cannot start it on its own
    wait_for(lambda: squeue_jobs(cluster)[tier1]["state_reason"] in ("Resources", "Priority"),
             30, "the tier-1 job to wait for resources")
    return Scenario(cluster, config, sidecars, plans, immune, fillers, tier1)


@pytest.fixture(scope="module")
def ticked(scenario: Scenario) -> Scenario:
    """Dry runs first (recording the cluster before and after), then one real tick."""
    c = scenario.cluster
    before = observable(squeue_jobs(c))
    snap_file = scenario.plans / "snapshot.json"
    snap = cli(c, "snapshot", "--config", str(scenario.config), "--out", str(snap_file))
    scenario.snapshot, scenario.snapshot_err = json.loads(snap_file.read_text()), snap.stderr
    from models import load_snapshot
    from planner import plan

    p = plan(load_snapshot(snap_file), deterministic=True, time_limit_s=2.0)
    plan_file = scenario.plans / "dry-plan.json"
    plan_file.write_text(p.model_dump_json(indent=1))
    dry_apply = cli(c, "apply", str(plan_file), "--dry-run", "--config", str(scenario.config))
    dry_run = cli(c, "run", "--ticks", "1", "--dry-run", "--config", str(scenario.config))
    time.sleep(1.0)
    scenario.dry = {"before": before, "after": observable(squeue_jobs(c)), "plan": p,
                    "apply_out": dry_apply.stdout, "run_out": dry_run.stdout,
                    "sidecars": sorted(scenario.sidecars.iterdir()),
                    "state_exists": (scenario.config.parent / "state.json").exists()}

    t0 = time.time()
    proc = cli(c, "run", "--ticks", "1", "--config", str(scenario.config),
               "--plan-dir", str(scenario.plans), timeout=150)
    t1 = time.time()
    tick_files = sorted(scenario.plans.glob("tick-*.json"))
    assert len(tick_files) == 1, (proc.stdout, proc.stderr)
    doc = json.loads(tick_files[0].read_text())
    placed = {pl["job"]: [part["node"] for part in pl["placement"]]
              for pl in doc["plan"]["placements"]}
    if scenario.tier1 in placed:
        nodes = placed[scenario.tier1]
        wait_for(lambda: squeue_jobs(c)[scenario.tier1]["job_state"] == "RUNNING", 60,
                 "the tier-1 job to start")
    else:
        nodes = []
    scenario.tick = {"t0": t0, "t1": t1, "doc": doc, "stderr": proc.stderr, "nodes": nodes,
                     "jobs": squeue_jobs(c)}
    return scenario


# ------------------------------------------------------------------- tests

def test_dry_run_changes_nothing(ticked: Scenario) -> None:
    dry = ticked.dry
    p = dry["plan"]
    assert [pl.job for pl in p.placements] == [ticked.tier1]
    assert dry["after"] == dry["before"]
    assert dry["sidecars"] == []  # nobody was signalled
    assert not dry["state_exists"]
    for out in (dry["apply_out"], dry["run_out"]):
        assert "ReqNodeList=" in out and "scancel --signal=TERM --batch" in out
        assert "scontrol requeuehold" in out and "StartTime=now+" in out


def test_checkpoint_signal_comes_from_the_partition_default(ticked: Scenario) -> None:
    # No comment names a signal. Partition tier3's default says SIGTERM (its job
    # script traps it); the tier-2 job keeps the default, signal null, and is named in
    # the warning (the tier-1 job is pending: it has no work to lose).
    jobs = {j["id"]: j for j in ticked.snapshot["jobs"]}
    assert {jid: jobs[jid]["checkpoint"]["signal"] for jid in ticked.fillers} == \
        dict.fromkeys(ticked.fillers, "SIGTERM")
    assert jobs[ticked.immune]["checkpoint"]["signal"] is None
    assert ("warning: 1 running job(s) say nothing about a checkpoint signal (no signal in "
            "their comment or sidecar, no job_defaults signal for their partition, QOS or "
            "account): priced as losing their work since start, signal null "
            f"({ticked.immune})") in ticked.snapshot_err
    # the four victims (4 GPUs, 1 GB to nfs at 10 GB/s, restore 10 s, a trap):
    # 4 x 4 x (0 + 10 + 1 / 10) = 161.6 GPU-s
    assert ticked.dry["plan"].objective.eviction_cost_gpu_s == pytest.approx(161.6)


def test_one_tick_preempts_for_the_tier1_job(ticked: Scenario) -> None:
    doc, jobs = ticked.tick["doc"], ticked.tick["jobs"]
    plan = doc["plan"]
    assert "tick 1:" in ticked.tick["stderr"] and "4 eviction(s)" in ticked.tick["stderr"]
    assert [pl["job"] for pl in plan["placements"]] == [ticked.tier1]
    victims = {ev["job"]: ev for ev in plan["evictions"]}
    # the cheap tier-3 jobs of two whole nodes; gpu1 is blocked by the immune job
    assert sorted(ticked.fillers[v] for v in victims) == ["gpu2", "gpu2", "gpu3", "gpu3"]
    assert sorted(ticked.tick["nodes"]) == ["gpu2", "gpu3"]
    report = {v["job"]: v for v in doc["apply"]["victims"]}
    assert doc["apply"]["ok"], doc["apply"]
    for jid, ev in victims.items():
        assert ev["grace_s"] >= GRACE_MIN_S
        # the job script trapped SIGTERM and wrote its checkpoint within the grace
        side = json.loads((ticked.sidecars / f"{jid}.json").read_text())
        signalled = calendar.timegm(time.strptime(report[jid]["signalled_at"],
                                                  "%Y-%m-%dT%H:%M:%SZ"))
        assert signalled - 1 <= side["received_at"] <= signalled + 1 + ev["grace_s"]
        assert report[jid]["stopped_in_grace"] is True
        # requeued held, BeginTime >= cooldown away, released, restart_cnt 1
        j = jobs[jid]
        assert j["job_state"] == "PENDING" and j["restart_cnt"] == 1
        assert j["state_reason"] in ("BeginTime", "None")  # None until the scheduler looks
        assert j["eligible_time"] >= ticked.tick["t0"] + COOLDOWN_S
        assert j["priority"] != 0  # released, not held
    # the tier-1 job runs on the planned nodes with all their GPUs
    t1 = jobs[ticked.tier1]
    assert t1["job_state"] == "RUNNING"
    assert t1["gres_detail"] == ["gpu:8(IDX:0-7)", "gpu:8(IDX:0-7)"]
    state = json.loads((ticked.config.parent / "state.json").read_text())
    assert set(state["preempted"]) == set(victims)


def test_immune_job_is_never_touched(ticked: Scenario) -> None:
    jobs = ticked.tick["jobs"]
    victims = {ev["job"] for ev in ticked.tick["doc"]["plan"]["evictions"]}
    assert ticked.immune not in victims
    j = jobs[ticked.immune]
    assert j["job_state"] == "RUNNING" and j["restart_cnt"] == 0 and j["nodes"] == "gpu1"
    assert not (ticked.sidecars / f"{ticked.immune}.json").exists()
    untouched = [k for k in ticked.fillers if k not in victims]
    assert all(jobs[k]["job_state"] == "RUNNING" and jobs[k]["restart_cnt"] == 0
               for k in untouched)


def test_run_loop_stops_cleanly_on_sigterm(ticked: Scenario) -> None:
    c = ticked.cluster
    plans = ticked.plans / "loop"
    proc = subprocess.Popen(
        [sys.executable, "-m", "planner.adapters.slurm", "run", "--interval", "1",
         "--config", str(ticked.config), "--plan-dir", str(plans)],
        env=c.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: len(list(plans.glob("tick-*.json"))) >= 2 if plans.exists() else False,
                 60, "two ticks of the loop")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "SIGTERM received" in err and "stopped after" in err
    for f in plans.glob("tick-*.json"):
        doc = json.loads(f.read_text())
        assert doc["plan"]["evictions"] == []  # nothing more to do: no new evictions
        assert doc["apply"]["ok"]
    jobs = squeue_jobs(c)
    assert jobs[ticked.tier1]["job_state"] == "RUNNING"


# ------------------------------------------- GPUs held by a job squeue hides

HIDE_SQUEUE = """#!{python}
# squeue as a user sees it who cannot see partition {hidden}: its jobs are cut out
# of the --json output; every other call (the adapter's status queries) passes.
import json
import subprocess
import sys

args = sys.argv[1:]
proc = subprocess.run([{squeue!r}, *args], capture_output=True, text=True, check=False)
out = proc.stdout
if proc.returncode == 0 and "--json" in args:
    doc = json.loads(out)
    doc["jobs"] = [j for j in doc.get("jobs", []) if j.get("partition") != {hidden!r}]
    out = json.dumps(doc)
sys.stdout.write(out)
sys.stderr.write(proc.stderr)
sys.exit(proc.returncode)
"""


@dataclass
class Hidden:
    cluster: LocalSlurm
    config: Path
    plans: Path
    hidden: str
    fillers: dict[str, str]
    tier1: str
    snapshot: dict[str, Any] = field(default_factory=dict)
    snapshot_err: str = ""
    doc: dict[str, Any] = field(default_factory=dict)
    run_err: str = ""
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)


def _no_active_jobs(c: LocalSlurm) -> bool:
    return not [j for j in squeue_jobs(c).values()
                if j["job_state"] in ("RUNNING", "COMPLETING", "CONFIGURING", "PENDING")]


@pytest.fixture(scope="module")
def hidden(ticked: Scenario) -> Hidden:
    """After the first scenario: an empty cluster, then the hidden tier-2 job (6 GPUs of
    gpu1), two tier-3 jobs of 4 GPUs on each of gpu2-gpu4, and a tier-1 job of 4 GPUs
    that Slurm cannot start (gpu1 has 2 free GPUs, the others none)."""
    c = ticked.cluster
    c.cancel_all()
    wait_for(lambda: _no_active_jobs(c), 60, "the first scenario's jobs to end")
    work = c.root / "hidden"
    plans = work / "plans"
    plans.mkdir(parents=True, exist_ok=True)
    wrapper = work / "squeue-without-tier2"
    wrapper.write_text(HIDE_SQUEUE.format(python=sys.executable, hidden="tier2",
                                          squeue=shutil.which("squeue", path=c.env["PATH"])))
    wrapper.chmod(0o755)
    cfg = json.loads(ticked.config.read_text())
    cfg.update(commands={"squeue": str(wrapper)}, state_file=str(work / "state.json"))
    config = work / "slurm-planner.yaml"
    config.write_text(json.dumps(cfg, indent=1))
    script = ticked.config.parent / "train.sh"
    hidden_job = sbatch(c, script, "-p", "tier2", "-w", "gpu1", "--gres=gpu:6",
                        "--comment=size_gb=1 restore_s=0")
    fillers = {}
    for node in ("gpu2", "gpu2", "gpu3", "gpu3", "gpu4", "gpu4"):
        fillers[sbatch(c, script, "-p", "tier3", "-w", node, "--gres=gpu:4",
                       "--comment=size_gb=1 restore_s=10")] = node
    ids = [hidden_job, *fillers]
    wait_for(lambda: all(squeue_jobs(c)[j]["job_state"] == "RUNNING" for j in ids), 60,
             "the hidden job and the 6 fillers to run")
    tier1 = sbatch(c, script, "-p", "tier1", "--gres=gpu:4", "--comment=size_gb=1 restore_s=60")
    wait_for(lambda: squeue_jobs(c)[tier1]["state_reason"] in ("Resources", "Priority"), 30,
             "the tier-1 job to wait for resources")
    h = Hidden(c, config, plans, hidden_job, fillers, tier1)
    snap = cli(c, "snapshot", "--config", str(config))
    h.snapshot, h.snapshot_err = json.loads(snap.stdout), snap.stderr
    proc = cli(c, "run", "--ticks", "1", "--config", str(config), "--plan-dir", str(plans),
               timeout=150)
    h.run_err = proc.stderr
    (tick_file,) = plans.glob("tick-*.json")
    h.doc = json.loads(tick_file.read_text())
    if h.doc["plan"]["placements"]:
        wait_for(lambda: squeue_jobs(c)[tier1]["job_state"] == "RUNNING", 60,
                 "the tier-1 job to start")
    h.jobs = squeue_jobs(c)
    return h


def test_gpus_of_a_job_squeue_hides_are_occupied(hidden: Hidden) -> None:
    jobs = {j["id"]: j for j in hidden.snapshot["jobs"]}
    assert hidden.hidden not in jobs  # the wrapper hides it from the adapter ...
    occ = jobs["slurm-occupied@gpu1"]  # ... but sinfo says gpu1 has 6 GPUs in use
    assert (occ["tier"], occ["gpus_per_node"]) == (9, 6)
    # 22.05 reports untyped GRES without IDX: 6 of the 8 stand for the hidden job's
    assert occ["placement"] == [{"node": "gpu1", "gpus": [0, 1, 2, 3, 4, 5]}]
    assert ("warning: slurm-occupied@gpu1: 6 GPU(s) of gpu1 are in use by 'gpu:6' but the "
            "snapshot's jobs hold 0") in hidden.snapshot_err


def test_the_planner_never_places_onto_them(hidden: Hidden) -> None:
    plan, jobs = hidden.doc["plan"], hidden.jobs
    # gpu1 has 8 - 6 = 2 free GPUs, the tier-1 job needs 4: it goes elsewhere, in
    # place of exactly one tier-3 job of 4 GPUs (not onto "free" gpu1 as before)
    (placement,) = plan["placements"]
    assert placement["job"] == hidden.tier1
    (part,) = placement["placement"]
    assert part["node"] != "gpu1" and len(part["gpus"]) == 4
    (victim,) = plan["evictions"]
    assert hidden.fillers[victim["job"]] == part["node"]
    assert any(w.startswith("slurm-occupied@gpu1: ") for w in plan["warnings"])
    assert hidden.doc["apply"]["ok"], hidden.doc["apply"]
    # Slurm started the tier-1 job there; the hidden job was never touched
    assert jobs[hidden.tier1]["job_state"] == "RUNNING"
    assert jobs[hidden.tier1]["nodes"] == part["node"]
    h = jobs[hidden.hidden]
    assert (h["job_state"], h["restart_cnt"], h["nodes"]) == ("RUNNING", 0, "gpu1")
