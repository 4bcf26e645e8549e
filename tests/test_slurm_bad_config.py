"""Bad input to the Slurm adapter found by the fuzzing pass: each is refused before
anything runs, exit status 2, with a message naming the field or option and the
rule (nothing written), instead of an internal error, a hang, a traceback, a loop
of failing ticks or silent acceptance."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from planner.adapters.slurm import apply as sapply
from planner.adapters.slurm.config import ConfigError, config_from_dict
from planner.adapters.slurm.hostlist import (
    MAX_HOSTS,
    HostlistError,
    HostlistTooLarge,
    count,
    expand,
)
from planner.adapters.slurm.parse import build_snapshot
from planner.commands.slurm import main

FIX = Path(__file__).parent / "fixtures" / "slurm"
NOW = 1795944887
SNAP = ["snapshot", "--squeue-json", str(FIX / "22.05/squeue.json"),
        "--nodes-json", str(FIX / "22.05/sinfo.json"), "--now", str(NOW)]
NO_SLURM = "commands: {squeue: /nonexistent/squeue}\n"  # (a tick would fail on it)


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str], tmp_path: Path) -> str:
    """Exit status 2, nothing written to --out; the error text on one line."""
    out = tmp_path / "out.json"
    assert main([*argv, "--out", str(out)] if argv[0] == "snapshot" else argv) == 2
    assert not out.exists()
    return " ".join(capsys.readouterr().err.split())


def _deep(levels: int = 5000) -> str:
    return "[" * levels + "]" * levels


# ------------------------------------------------------------ hostlist sizes

def test_a_hostlist_size_is_found_from_its_ranges_before_anything_is_expanded() -> None:
    # gpu[0-99999][0-99999] passed the per-range check (each range < MAX_HOSTS) and
    # was expanded to ten billion names (a hang); now the product of the ranges says
    # so at once, and so does a list whose words together name too many
    assert count("gpu[1-3,7],cpu01") == 5 and count("r[1-2]-n[01-04]") == 8
    for huge in ("gpu[0-99999][0-99999]", "a[1-60000],a[1-60000]",
                 "gpu[0-99999999999999999]", "n[" + ",".join(["0-99999"] * 200) + "]"):
        with pytest.raises(HostlistTooLarge, match=f"names more than {MAX_HOSTS:,} nodes"):
            expand(huge)
    # ranges of ASCII digits only, at most 18 of them (Python's int('١') is 1)
    for bad in ("g[١]", "g[" + "9" * 5000 + "]"):
        with pytest.raises(HostlistError, match="bad range"):
            expand(bad)
    assert expand("r[1-2]-n[01-02]x") == ["r1-n01x", "r1-n02x", "r2-n01x", "r2-n02x"]


def test_a_node_rule_naming_too_many_hosts_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("tiers: {default: 3}\nnodes:\n  - match: 'gpu[0-99999][0-99999]'\n"
                   "    pool: x\n")
    err = _refused(capsys, [*SNAP, "--config", str(cfg)], tmp_path)
    assert ("nodes.0.match: hostlist 'gpu[0-99999][0-99999]' names more than 100,000 nodes; "
            "a rule's hostlist may name at most 100,000 nodes") in err, err
    assert "Value error" not in err
    # a glob, or a bracket that is no hostlist, is still a glob
    assert config_from_dict({"nodes": [{"match": "gpu*"}, {"match": "gpu[ab]"}]})


# ------------------------------------------------------------ signals

def test_a_job_defaults_signal_is_checked_with_the_config(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # SIGFOO was accepted, then each job got a note and no signal at all
    cfg = tmp_path / "c.yaml"
    cfg.write_text("tiers: {default: 3}\njob_defaults: {checkpoint: {signal: SIGFOO}}\n")
    err = _refused(capsys, [*SNAP, "--config", str(cfg)], tmp_path)
    assert ("job_defaults.checkpoint.signal: signal 'SIGFOO' is not a catchable signal (a "
            "name such as TERM or SIGUSR1, or its number such as 15; null: the jobs trap no "
            "signal)") in err, err
    for bad, said in (("KILL", "signal 'KILL' is not a catchable signal"),
                      (99, "unknown signal number 99"), ([1], "valid string")):
        with pytest.raises(ConfigError, match="job_defaults_by_qos.low.checkpoint.signal: "
                                              f".*{said}"):
            config_from_dict({"job_defaults_by_qos": {"low": {"checkpoint": {"signal": bad}}}})
    # read as a comment's signal is: a name with or without SIG, a number, none
    for given, signal_name in (("TERM", "SIGTERM"), ("sigusr1", "SIGUSR1"), (15, "SIGTERM"),
                               ("none", None), (None, None)):
        cfg_ok = config_from_dict({"job_defaults": {"checkpoint": {"signal": given}}})
        assert cfg_ok.job_defaults.checkpoint.signal == signal_name


def test_scancel_gets_a_signal_it_has_no_name_for_by_its_number() -> None:
    # Slurm's sig_name2num knows 15 names; '--signal=WINCH' would fail at the eviction
    cfg = config_from_dict({})
    assert sapply.signal_cmd(cfg, "12", "SIGUSR2") == ["scancel", "--signal=USR2", "--batch",
                                                       "12"]
    assert sapply.signal_cmd(cfg, "12", "SIGWINCH") == [
        "scancel", f"--signal={int(signal.SIGWINCH)}", "--batch", "12"]


# ------------------------------------------------------------ tiers

def test_a_policy_tier_key_is_compared_with_the_unmanaged_tier_as_a_number(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # '09' (and ' 9', 9.0) is tier 9 to the policy, but passed a string comparison
    for key in ("09", " 9", 9.0):
        with pytest.raises(ConfigError, match=f"tier 9 is also used by policy.tiers.{key};"):
            config_from_dict({"tiers": {"default": 3}, "policy": {"tiers": {key: {}}}})
    (tmp_path / "policy.yaml").write_text("tiers: {'09': {preemptible: true}}\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("tiers: {partitions: {tier1: 1}}\npolicy_file: policy.yaml\n")
    err = _refused(capsys, [*SNAP, "--config", str(cfg)], tmp_path)
    assert f"tier 9 is also used by policy_file {tmp_path / 'policy.yaml'}: tiers.09;" in err


def test_a_tier_the_policy_does_not_have_is_refused_before_anything_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    # --default-tier 100000000000000000000 ran, and every tick failed (rc 1): a job's
    # tier must be in the policy, so no job it maps could ever be planned
    cfg = tmp_path / "c.yaml"
    cfg.write_text("tiers: {partitions: {tier1: 1}}\n" + NO_SLURM)
    big = "100000000000000000000"
    err = _refused(capsys, ["run", "--config", str(cfg), "--ticks", "1", "--dry-run",
                            "--default-tier", big], tmp_path)
    assert (f"--default-tier: tier {big} is not a tier of the policy (its tiers: 1, 2, 3), so "
            f"every job it maps would be refused; use one of those, or add policy.tiers.{big} "
            "to the config") in err, err
    assert "/nonexistent/squeue" not in caplog.text  # (no tick ran)
    err = _refused(capsys, [*SNAP, "--config", str(cfg), "--default-tier", "7"], tmp_path)
    assert "--default-tier: tier 7 is not a tier of the policy" in err
    # a mapping or the config's default the same way, each by its field
    cfg.write_text("tiers: {partitions: {tier1: 1, tier2: 5}, default: 6}\n")
    err = _refused(capsys, [*SNAP, "--config", str(cfg)], tmp_path)
    assert "tiers.partitions.tier2: tier 5 is not a tier of the policy" in err
    assert "tiers.default: tier 6 is not a tier of the policy" in err
    # ... which a policy tier makes right
    cfg.write_text("tiers: {partitions: {tier1: 1, tier2: 5}, default: 6}\n"
                   "policy: {tiers: {'5': {}, '6': {}}}\n")
    assert main([*SNAP, "--config", str(cfg)]) == 0


# ------------------------------------------------------------ files the config names

def test_a_deep_or_broken_policy_file_names_the_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("tiers: {default: 3}\npolicy_file: p.yaml\n")
    policy = tmp_path / "p.yaml"
    for text, said in (
            # a RecursionError (exit 3) in the YAML reader
            (f"generator: {_deep()}\n", "the document is nested more than 64 levels deep"),
            # a TypeError that named squeue --json
            ("policy: [1]\n", "its policy must be a mapping, not list")):
        policy.write_text(text)
        err = _refused(capsys, [*SNAP, "--config", str(cfg)], tmp_path)
        assert f"policy_file {policy}: {said}" in err, err
    policy.write_bytes(b"\x00\x01\x02binary")
    err = _refused(capsys, [*SNAP, "--config", str(cfg)], tmp_path)
    assert f"policy_file {policy}: this is a binary file" in err and "squeue" not in err


def test_a_deep_state_file_is_refused_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state.json"
    cfg = tmp_path / "c.yaml"
    cfg.write_text("tiers: {default: 3}\nstate_file: state.json\n")
    for text, said in ((json.dumps({"x": 1}).replace("1", _deep()), "nested too deep"),
                       ('{"pinned": {"1": ' + "7" * 5000 + "}}",
                        "a number has more than 4,300 digits")):
        state.write_text(text)
        err = _refused(capsys, [*SNAP, "--config", str(cfg)], tmp_path)
        assert f"{state}: not a valid adapter state file: it is not valid JSON ({said})" in err
        assert state.read_text() == text  # (untouched)


def test_a_deep_sidecar_is_a_note_and_counts_as_none(tmp_path: Path) -> None:
    # the sidecar is the job's own file: as a broken one, it is a note (the job is
    # priced as without a sidecar), and one job's file does not stop the snapshot
    side = tmp_path / "side"
    side.mkdir()
    (side / "20.json").write_text(_deep())
    (side / "25.json").write_text('{"size_gb": ' + "1" * 5000 + "}")
    (side / "26.json").write_bytes(b" " * (1 << 20) + b"{}")
    cfg = config_from_dict({"tiers": {"default": 3}, "sidecar_dir": str(side)})
    squeue = json.loads((FIX / "22.05/squeue.json").read_text())
    nodes = json.loads((FIX / "22.05/sinfo.json").read_text())
    res = build_snapshot(squeue, nodes, cfg, now=NOW)
    notes = " ".join(res.notes)
    assert f"job 20: sidecar {side / '20.json'}: unreadable (nested too deep)" in notes
    assert (f"job 25: sidecar {side / '25.json'}: unreadable (a number has more than 4,300 "
            "digits)") in notes
    assert (f"job 26: sidecar {side / '26.json'}: unreadable (larger than 1,048,576 "
            "bytes)") in notes


# ------------------------------------------------------------ slurm run --plan-dir

@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="no /proc")
def test_a_plan_dir_that_cannot_be_created_is_refused_before_the_first_tick(
        tmp_path: Path, caplog: pytest.LogCaptureFixture,
        capsys: pytest.CaptureFixture[str]) -> None:
    # /proc/x passed the writable-parent check (as root) and every tick failed with a
    # traceback; now the folder is made at start-up (the option's by check_output, the
    # config's by the loop), and the loop does not start
    cfg = tmp_path / "c.yaml"
    cfg.write_text("tiers: {default: 3}\n" + NO_SLURM)
    assert main(["run", "--config", str(cfg), "--ticks", "1", "--plan-dir", "/proc/x"]) == 2
    assert "--plan-dir: cannot create folder /proc/x:" in capsys.readouterr().err
    assert "/nonexistent/squeue" not in caplog.text and "Traceback" not in caplog.text
    caplog.clear()
    cfg.write_text("tiers: {default: 3}\nplan_dir: /proc/x\n" + NO_SLURM)
    assert main(["run", "--config", str(cfg), "--ticks", "1"]) == 2
    assert "plan_dir: cannot create the folder /proc/x:" in caplog.text
