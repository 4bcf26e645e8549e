"""Where the output goes: standard streams closed by the caller (``<&-``, ``>&-``,
``2>&-``: a cron job, a daemon), standard output that cannot be written (/dev/full)
or whose reader went away (``| head``), and an --out naming one of the command's own
input files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import cli

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "instances" / "example-70b.json"
SIM = ROOT / "tests" / "data" / "sim"
TUNE = ROOT / "tests" / "data" / "tune"
ENTRY = [sys.executable, "-c", "import cli; cli.entry()"]
PLAN = ["plan", str(EXAMPLE), "--planner", "greedy"]


def _sh(args: list[str], redirect: str) -> subprocess.CompletedProcess[str]:
    """The console script run by sh with a redirection (``>&-``: stdout closed)."""
    import shlex

    line = " ".join(shlex.quote(a) for a in [*ENTRY, *args]) + " " + redirect
    return subprocess.run(["sh", "-c", line], capture_output=True, text=True, cwd=str(ROOT),
                          stdin=subprocess.DEVNULL, check=False)


def _no_traceback(err: str) -> None:
    assert "Traceback" not in err and "internal error" not in err and "Exception" not in err


@pytest.mark.parametrize("args", [PLAN, ["schema"]], ids=["plan", "schema"])
def test_standard_output_on_a_full_disk_is_an_error_exit_2(args: list[str]) -> None:
    # was an internal error (exit 3): OSError: [Errno 28] No space left on device
    with open("/dev/full", "w") as full:
        out = subprocess.run([*ENTRY, *args], stdout=full, stderr=subprocess.PIPE, text=True,
                             cwd=str(ROOT), stdin=subprocess.DEVNULL, check=False)
    assert out.returncode == 2
    assert out.stderr == ("error: cannot write the output to standard output: No space left "
                          "on device\n")


@pytest.mark.parametrize("args", [PLAN, ["schema"]], ids=["plan", "schema"])
def test_standard_output_closed_is_an_error_exit_2(args: list[str]) -> None:
    # was a traceback (plan: AttributeError, exit 1) or an internal error (schema)
    out = _sh(args, ">&-")
    assert out.returncode == 2
    assert out.stderr == ("error: cannot write the output to standard output: it is closed; "
                          "write the output to a file with --out FILE\n")


def test_standard_output_closed_with_out_writes_the_file(tmp_path: Path) -> None:
    target = tmp_path / "plan.json"
    out = _sh([*PLAN, "--out", str(target)], ">&-")
    assert (out.returncode, out.stderr) == (0, "")
    assert json.loads(target.read_text())["placements"]
    both = _sh([*PLAN, "--out", str(tmp_path / "again.json")], ">&- 2>&-")
    assert both.returncode == 0 and (tmp_path / "again.json").is_file()


def test_standard_error_closed_the_command_works() -> None:
    # was exit 1 (an AttributeError flushing sys.stderr, None, at exit)
    out = _sh([*PLAN, "-o", "json"], "2>&-")
    assert out.returncode == 0 and json.loads(out.stdout)["placements"]
    assert _sh(["plan", str(EXAMPLE), "--time-limit", "0"], "2>&-").returncode == 2
    assert _sh(PLAN, ">&- 2>&-").returncode == 2  # (no output, nowhere to say so)


def test_standard_input_closed_and_read_is_bad_input_naming_the_argument() -> None:
    out = _sh(["plan", "-", "--planner", "greedy"], "<&-")
    assert out.returncode == 2  # was an internal error: 'NoneType' has no 'buffer'
    assert "SNAPSHOT -: standard input is closed" in out.stderr
    _no_traceback(out.stderr)
    out = _sh(["verify", str(EXAMPLE), "-"], "<&-")
    assert out.returncode == 2 and "PLAN -: standard input is closed" in out.stderr
    out = _sh(["validate", "-", "-o", "json"], "<&-")
    assert out.returncode == 2
    assert "SNAPSHOT -: standard input is closed" in json.loads(out.stdout)["errors"][0]
    out = _sh([*PLAN, "-o", "json"], "<&-")  # (standard input not read: no matter)
    assert out.returncode == 0 and json.loads(out.stdout)["placements"]


def test_a_reader_gone_away_ends_the_output_quietly_status_141() -> None:
    # `preempt-planner schema --kind all | head -c 1`: head is gone before the write
    # (was an internal error: BrokenPipeError, exit 3)
    read, write = os.pipe()
    os.close(read)
    try:
        out = subprocess.run([*ENTRY, "schema", "--kind", "all"], stdout=write,
                             stderr=subprocess.PIPE, text=True, cwd=str(ROOT),
                             stdin=subprocess.DEVNULL, check=False)
    finally:
        os.close(write)
    assert (out.returncode, out.stderr) == (cli.EXIT_BROKEN_PIPE, "")


def test_two_inputs_from_standard_input_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", "-", "--policy", "-"]) == 2
    assert "SNAPSHOT, --policy: only one file can be read from standard input" in \
        capsys.readouterr().err


# --out naming an input file: refused before any work, the input left as it was

@pytest.fixture
def snap(tmp_path: Path) -> Path:
    path = tmp_path / "snap.json"
    shutil.copy(EXAMPLE, path)
    return path


def test_plan_out_over_its_snapshot_is_refused(snap: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    before = snap.read_bytes()
    assert cli.main(["plan", str(snap), "--out", str(snap)]) == 2
    assert (f"--out: {snap} is the input file SNAPSHOT; write the output to another file "
            "(it would replace the input)") in capsys.readouterr().err
    link = tmp_path / "link.json"
    link.symlink_to(snap)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["plan", "snap.json", "--metrics-out", "./link.json"]) == 2
    assert ("--metrics-out: ./link.json is the input file SNAPSHOT (snap.json)"
            in capsys.readouterr().err)
    policy = tmp_path / "policy.yaml"
    policy.write_text("tiers: {1: {}, 2: {}, 3: {}}\n")
    assert cli.main(["plan", "snap.json", "--policy", "policy.yaml", "--out",
                     str(policy)]) == 2
    assert "is the input file --policy" in capsys.readouterr().err
    assert cli.main(["plan", "snap.json", "--out", "p.json", "--metrics-out", "./p.json"]) == 2
    assert ("--metrics-out: ./p.json is also the file of --out; give each output its own file"
            in capsys.readouterr().err)
    assert snap.read_bytes() == before and policy.read_text().startswith("tiers")
    assert not (tmp_path / "p.json").exists()


def test_whatif_out_over_an_input_is_refused(snap: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    before = snap.read_bytes()
    assert cli.main(["whatif", str(snap), "--set", "policy.thrash=null", "--out",
                     str(snap)]) == 2
    assert f"--out: {snap} is the input file SNAPSHOT" in capsys.readouterr().err
    job = tmp_path / "job.json"
    job.write_text('{"id": "x", "tier": 1, "gpus_per_node": 1, "nodes": 1}\n')
    for given in (f"@{job}", str(job)):
        assert cli.main(["whatif", str(snap), "--add-job", given, "--out", str(job)]) == 2
        assert f"--out: {job} is the input file --add-job" in capsys.readouterr().err
    assert snap.read_bytes() == before and json.loads(job.read_text())["id"] == "x"


def test_compare_and_tune_out_folder_holding_an_input_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "report"
    report.mkdir()
    cluster = report / "metrics.json"  # (compare writes metrics.json into --out)
    shutil.copy(SIM / "cluster-1node.json", cluster)
    before = cluster.read_bytes()
    assert cli.main(["compare", "--cluster", str(cluster), "--trace",
                     str(SIM / "ping-pong.jsonl"), "--planners", "greedy", "--out",
                     str(report)]) == 2
    assert (f"--out: {report} would get metrics.json, which is the input file --cluster; "
            "give another folder") in capsys.readouterr().err
    assert cluster.read_bytes() == before and sorted(report.iterdir()) == [cluster]
    tuned = tmp_path / "tuned"
    tuned.mkdir()
    space = tuned / "policy.yaml"  # (tune writes the chosen policy.yaml into --out)
    shutil.copy(TUNE / "budget-space.yaml", space)
    before = space.read_bytes()
    assert cli.main(["tune", "--cluster", str(TUNE / "cluster-56.yaml"), "--trace",
                     str(TUNE / "burst.jsonl"), "--space", str(space), "--out",
                     str(tuned)]) == 2
    assert "would get policy.yaml, which is the input file --space" in capsys.readouterr().err
    assert space.read_bytes() == before and sorted(tuned.iterdir()) == [space]


def test_simulate_and_the_adapters_out_over_an_input_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = tmp_path / "cluster.json"
    shutil.copy(SIM / "cluster-1node.json", cluster)
    before = cluster.read_bytes()
    assert cli.main(["simulate", "--cluster", str(cluster), "--trace",
                     str(SIM / "ping-pong.jsonl"), "--planner", "greedy", "--no-progress",
                     "--metrics-out", str(cluster)]) == 2
    assert f"--metrics-out: {cluster} is the input file --cluster" in capsys.readouterr().err
    assert cluster.read_bytes() == before
    k8s = ROOT / "tests" / "fixtures" / "k8s"
    pods = tmp_path / "pods.json"
    shutil.copy(k8s / "pods.json", pods)
    assert cli.main(["k8s", "snapshot", "--nodes", str(k8s / "nodes.json"), "--pods", str(pods),
                     "--config", str(k8s / "config.yaml"), "--out", str(pods)]) == 2
    assert f"--out: {pods} is the input file --pods" in capsys.readouterr().err
    slurm = ROOT / "tests" / "fixtures" / "slurm" / "22.05"
    squeue = tmp_path / "squeue.json"
    shutil.copy(slurm / "squeue.json", squeue)
    assert cli.main(["slurm", "snapshot", "--squeue-json", str(squeue), "--nodes-json",
                     str(slurm / "sinfo.json"), "--out", str(squeue)]) == 2
    assert f"--out: {squeue} is the input file --squeue-json" in capsys.readouterr().err
    plan = tmp_path / "plan.json"
    plan.write_text('{"evictions": [], "placements": [], "deferred": []}\n')
    assert cli.main(["slurm", "apply", str(plan), "--dry-run", "--report", str(plan)]) == 2
    assert f"--report: {plan} is the input file PLAN" in capsys.readouterr().err
    assert (pods.read_bytes() == (k8s / "pods.json").read_bytes()
            and squeue.read_bytes() == (slurm / "squeue.json").read_bytes()
            and plan.read_text().startswith('{"evictions"'))


def test_out_dev_stdout_into_a_pipe_writes_the_output() -> None:
    # (/dev/stdout -> /proc/self/fd/1 -> 'pipe:[N]', which is no path: --out /dev/stdout
    # into a pipe was "cannot write /dev/stdout: No such file or directory", exit 2)
    done = subprocess.run([*ENTRY, *PLAN, "-o", "json", "--out", "/dev/stdout"],
                          capture_output=True, text=True, cwd=str(ROOT),
                          stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "feasible"  # (the greedy plan)


@pytest.mark.parametrize(("args", "redirect", "said"), [
    (["--version"], ">/dev/full", "No space left on device"),
    (["--help"], ">&-", "it is closed"),
    (["slurm", "--help"], ">/dev/full", "No space left on device"),
])
def test_help_and_version_into_an_output_that_cannot_be_written(
        args: list[str], redirect: str, said: str) -> None:
    # (a traceback and status 1, or "Exception ignored" and status 120 at exit)
    done = _sh(args, redirect)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == f"error: cannot write the output to standard output: {said}"


def test_output_lost_ends_the_command_through_any_except_exception() -> None:
    # a loop's "except Exception" for a failed tick (slurm run) logged it every tick and
    # went on, into a closed output or a pipe whose reader went away
    assert issubclass(cli._OutputLost, BaseException)
    assert not issubclass(cli._OutputLost, Exception)
