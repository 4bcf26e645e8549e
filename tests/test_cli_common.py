"""One command line: the common options on every command (one help text, the
README's table), --quiet, -o json wherever a result is printed, --version after
any command, - for standard input, warnings for settings that are ignored or
beyond the machine, typo suggestions, shell completion, output that pipes well."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import cli
from planner.commands.completion import bash_script, places, zsh_script

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "instances" / "example-70b.json"
SIM = ROOT / "tests" / "data" / "sim"
TUNE = ROOT / "tests" / "data" / "tune"
K8S = ROOT / "tests" / "fixtures" / "k8s"
SLURM = ROOT / "tests" / "fixtures" / "slurm" / "22.05"
RUN = ["--cluster", str(SIM / "cluster-1node.json"), "--trace", str(SIM / "ping-pong.jsonl"),
       "--deterministic", "--time-limit", "0.2", "--days", "0.02"]


def _paths(parser: argparse.ArgumentParser, at: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and action (``("slurm", "snapshot")``), each with its parser."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.append((*at, name))
                out += _paths(sub, (*at, name))
    return out


def _parser_of(path: tuple[str, ...]) -> argparse.ArgumentParser:
    parser = cli.build_parser()
    for name in path:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return parser


LEAVES = [p for p in _paths(cli.build_parser())
          if not any(isinstance(a, argparse._SubParsersAction) for a in _parser_of(p)._actions)]


def _section(help_text: str, title: str) -> str:
    """One titled section of a --help text."""
    return help_text.split(f"\n{title}:\n", 1)[1].split("\n\n", 1)[0]


# ------------------------------------------------------------------ common options


def test_the_common_options_are_the_same_in_every_help_and_in_the_readme(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    sections = {path: _section(_parser_of(path).format_help(), "common options")
                for path in [(), *_paths(cli.build_parser())]}
    first = sections[()]
    assert all(s == first for s in sections.values()), [p for p, s in sections.items()
                                                         if s != first]
    # the README's table says the same, option by option
    readme = (ROOT / "README.md").read_text()
    table = readme.split("<!-- the common options:", 1)[1].split("\n\n", 1)[0]
    rows = re.findall(r"^\| `(--[a-z-]+)[^`]*` \| (.*) \|$", table, re.MULTILINE)
    assert rows == list(cli.COMMON_OPTIONS)
    for option, said in cli.COMMON_OPTIONS:
        assert option in first and " ".join(said.split()[:4]) in " ".join(first.split())


def test_every_help_says_the_same_exit_statuses_in_plain_text(
        capsys: pytest.CaptureFixture[str]) -> None:
    # slurm --help said "Exit status: 0 ok, 1 a Slurm command failed" from its
    # docstring, and RST ``double backticks`` showed as they are
    for path in [(), *_paths(cli.build_parser())]:
        with pytest.raises(SystemExit):
            cli.main([*path, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert text.count("exit status:") == 1 and cli.EPILOG in text, path
        assert "0 ok" not in text and "`" not in text, path


@pytest.mark.parametrize("where", ["before", "after"])
def test_quiet_silences_warnings_not_errors(where: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    def run(*args: str) -> int:
        words = list(args)
        return cli.main(["--quiet", *words] if where == "before" else [*words, "--quiet"])

    assert run("plan", str(EXAMPLE), "--deterministic", "--workers", "4", "-o", "json") == 0
    out, err = capsys.readouterr()
    assert err == "" and json.loads(out)["status"] == "optimal"
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 1}')
    assert run("validate", str(bad)) == 2  # (it printed nothing)
    err = capsys.readouterr().err
    assert "error:" in err and "now: Field required" in err


def test_quiet_keeps_the_internal_error_line(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    import planner.commands._common as common

    def boom(*_a: Any, **_k: Any) -> Any:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(common, "load_snapshot", boom)
    assert cli.main(["plan", str(EXAMPLE), "--quiet"]) == 3
    assert "internal error in 'plan': ZeroDivisionError" in capsys.readouterr().err


def test_slurm_quiet_drops_notes_and_warnings(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "slurm.json"
    cfg.write_text(json.dumps({"tiers": {"partitions": {"tier1": 1, "tier2": 2, "tier3": 3}},
                               "storage": [{"id": "nfs", "write_gb_per_s": 10}]}))
    args = ["slurm", "snapshot", "--config", str(cfg), "--squeue-json",
            str(SLURM / "squeue.json"), "--nodes-json", str(SLURM / "sinfo.json"),
            "--now", "2026-11-29T08:00:00Z"]
    assert cli.main(args) == 0
    loud = capsys.readouterr()
    assert "warning:" in loud.err
    assert cli.main([*args, "--quiet"]) == 0
    quiet = capsys.readouterr()
    assert quiet.err == "" and json.loads(quiet.out) == json.loads(loud.out)
    # apply: a plan older than max_plan_age_s, with --force, is a warning (logged too)
    apply = ["slurm", "apply", _slurm_plan(tmp_path), "--dry-run", "--force"]
    assert cli.main(apply) == 0
    assert "older than max_plan_age_s" in capsys.readouterr().err
    assert cli.main([*apply, "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_log_format_json_gives_one_object_per_record(capsys: pytest.CaptureFixture[str]) -> None:
    import logging

    assert cli.main(["validate", str(EXAMPLE), "--log-level", "info", "--log-format",
                     "json"]) == 0
    capsys.readouterr()
    logging.getLogger("preempt_planner.test").info("hello %s", "there")
    record = json.loads(capsys.readouterr().err)
    assert record["level"] == "INFO" and record["message"] == "hello there"


# ------------------------------------------------------------------ --version, -o json


@pytest.mark.parametrize("path", [(), *_paths(cli.build_parser())],
                         ids=lambda p: " ".join(p) or "top")
def test_version_after_any_command(path: tuple[str, ...],
                                   capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exc:
        cli.main([*path, "--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"preempt-planner {version('preempt-planner')}"


def _plan_file(tmp_path: Path) -> Path:
    path = tmp_path / "plan.json"
    assert cli.main(["plan", str(EXAMPLE), "-o", "json", "--deterministic",
                     "--out", str(path)]) == 0
    return path


def _k8s_plan(tmp_path: Path) -> list[str]:
    """A plan of the kubectl fixtures' cluster and its --snapshot-meta option."""
    snap, plan = tmp_path / "k8s-snapshot.json", tmp_path / "k8s-plan.json"
    assert cli.main(["k8s", "snapshot", "--nodes", str(K8S / "nodes.json"), "--pods",
                     str(K8S / "pods.json"), "--config", str(K8S / "config.yaml"),
                     "--now", "2026-11-29T08:00:00Z", "--out", str(snap), "--quiet"]) == 0
    assert cli.main(["plan", str(snap), "-o", "json", "--deterministic", "--out", str(plan),
                     "--quiet"]) == 0
    return [str(plan), "--snapshot-meta", str(snap), "--now", "2026-11-29T08:00:00Z"]


def _slurm_plan(tmp_path: Path) -> str:
    """A plan of the squeue/sinfo fixtures' cluster."""
    snap, plan = tmp_path / "slurm-snapshot.json", tmp_path / "slurm-plan.json"
    assert cli.main(["slurm", "snapshot", "--squeue-json", str(SLURM / "squeue.json"),
                     "--nodes-json", str(SLURM / "sinfo.json"), "--default-tier", "3",
                     "--now", "2026-11-29T08:00:00Z", "--out", str(snap), "--quiet"]) == 0
    assert cli.main(["plan", str(snap), "-o", "json", "--deterministic", "--out", str(plan),
                     "--quiet"]) == 0
    return str(plan)


JSON_COMMANDS: dict[tuple[str, ...], Any] = {
    ("plan",): lambda t: [str(EXAMPLE), "--deterministic"],
    ("verify",): lambda t: [str(EXAMPLE), str(_plan_file(t))],
    ("validate",): lambda t: [str(EXAMPLE)],
    ("show",): lambda t: [str(EXAMPLE)],
    ("schema",): lambda t: [],
    ("generate",): lambda t: ["--nodes", "4"],
    ("whatif",): lambda t: [str(EXAMPLE), "--set", "policy.thrash=null", "--deterministic"],
    ("simulate",): lambda t: [*RUN, "--planner", "greedy"],
    ("compare",): lambda t: [*RUN, "--planners", "greedy,naive", "--out", str(t / "r")],
    ("tune",): lambda t: ["--cluster", str(TUNE / "cluster-56.yaml"), "--trace",
                          str(TUNE / "burst.jsonl"), "--space", str(TUNE / "budget-space.yaml"),
                          "--planner", "greedy", "--days", "0.5", "--out", str(t / "tune")],
    ("k8s", "snapshot"): lambda t: ["--nodes", str(K8S / "nodes.json"), "--pods",
                                    str(K8S / "pods.json"), "--config", str(K8S / "config.yaml"),
                                    "--now", "2026-11-29T08:00:00Z"],
    ("k8s", "apply"): _k8s_plan,
    ("slurm", "snapshot"): lambda t: ["--squeue-json", str(SLURM / "squeue.json"),
                                      "--nodes-json", str(SLURM / "sinfo.json"),
                                      "--default-tier", "3", "--now", "2026-11-29T08:00:00Z"],
    ("slurm", "apply"): lambda t: [_slurm_plan(t), "--dry-run", "--force"],
}
NO_RESULT = {("serve",): "a service", ("slurm", "run"): "a loop of ticks",
             ("completion",): "a shell script"}


def test_every_command_is_listed_here() -> None:
    assert set(JSON_COMMANDS) | set(NO_RESULT) == set(LEAVES)


@pytest.mark.parametrize("path", sorted(JSON_COMMANDS), ids=" ".join)
def test_every_command_that_prints_a_result_takes_o_json(
        path: tuple[str, ...], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = JSON_COMMANDS[path](tmp_path)
    capsys.readouterr()
    assert cli.main([*path, *args, "-o", "json", "--quiet"]) == 0
    out = capsys.readouterr().out
    json.loads(out)  # one JSON document on stdout


def test_show_json_holds_what_the_table_shows(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["show", str(ROOT / "instances" / "backoff.json"), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    pending = {p["job"]: p for p in doc["pending"]}
    assert pending["eval-3"]["hold"] == {"kind": "cooldown", "until": "2026-11-29T08:40:00Z",
                                         "after_preemption": 4}
    assert pending["ft-5"]["hold"]["kind"] == "ready"
    assert doc["gpus"] == {"total": 16, "held": 8, "free": 8, "placeable": 8}
    assert [n["id"] for n in doc["nodes"]] == ["b1", "b2"]
    assert doc["nodes"][1]["holders"] == ["spot-77"] * 8


def test_k8s_apply_emit_and_the_old_format_name(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    plan = _k8s_plan(tmp_path)
    assert cli.main(["k8s", "apply", *plan, "--emit", "kubectl"]) == 0
    script = capsys.readouterr()
    assert script.out.startswith("#!") and script.err == ""
    assert cli.main(["k8s", "apply", *plan, "--format", "kubectl"]) == 0
    old = capsys.readouterr()
    assert old.out == script.out
    assert "--format kubectl is deprecated: it is --emit kubectl now" in old.err
    assert cli.main(["k8s", "apply", *plan, "-o", "json", "--emit", "kubectl"]) == 2
    assert "a kubectl script is not JSON" in capsys.readouterr().err


# ------------------------------------------------------------------ standard input


def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


def test_k8s_apply_reads_the_plan_from_standard_input_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    plan, *meta = _k8s_plan(tmp_path)
    _stdin(monkeypatch, Path(plan).read_bytes())
    assert cli.main(["k8s", "apply", "-", *meta]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "List"


def test_dash_reads_standard_input_everywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    _stdin(monkeypatch, (SIM / "ping-pong.jsonl").read_bytes())
    args = [*RUN, "--planner", "greedy", "-o", "json"]
    args[3] = "-"  # --trace -
    assert cli.main(["simulate", *args]) == 0
    assert "goodput_gpu_h" in json.loads(capsys.readouterr().out) or True
    _stdin(monkeypatch, b'{"id": "big", "tier": 1, "gpus_per_node": 8}')
    assert cli.main(["whatif", str(EXAMPLE), "--add-job", "-", "--deterministic", "-o",
                     "json"]) == 0
    assert "+job big" in capsys.readouterr().out
    _stdin(monkeypatch, json.dumps({"tiers": {"default": 3}}).encode())
    assert cli.main(["slurm", "snapshot", "--config", "-", "--squeue-json",
                     str(SLURM / "squeue.json"), "--nodes-json", str(SLURM / "sinfo.json"),
                     "--now", "2026-11-29T08:00:00Z", "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == 1
    # two files cannot both be standard input
    assert cli.main(["verify", "-", "-"]) == 2
    assert "SNAPSHOT, PLAN: only one file can be read from standard input" in \
        capsys.readouterr().err


# ------------------------------------------------------------------ warnings


def test_warnings_only_for_settings_given(capsys: pytest.CaptureFixture[str]) -> None:
    # --workers is 2 by default: --deterministic alone warned "--workers 2 is ignored"
    for command in (["plan", str(EXAMPLE)], ["whatif", str(EXAMPLE), "--set",
                                              "policy.thrash=null"],
                    ["simulate", *RUN, "--planner", "greedy"]):
        assert cli.main([*command, "--deterministic", "-o", "json"]) == 0, command
        assert "warning" not in capsys.readouterr().err, command
        assert cli.main([*command, "--deterministic", "--workers", "4", "-o", "json"]) == 0
        assert "--workers 4 is ignored with --deterministic" in capsys.readouterr().err


def test_compare_warns_about_workers_and_caps_its_processes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from planner.commands.compare import processes

    assert cli.main(["compare", *RUN, "--planners", "greedy", "--workers", "4",
                     "--jobs", "100000", "--out", str(tmp_path), "-o", "json"]) == 0
    err = capsys.readouterr().err
    cores = os.cpu_count()
    assert "--workers 4 is ignored with --deterministic" in err
    assert f"--jobs 100000 is more than this machine's {cores} core(s)" in err
    assert processes(100000, 3) == min(3, cores or 1)
    assert processes(100000, 1000) == cores
    assert cli.main(["compare", *RUN, "--jobs", "0", "--out", str(tmp_path)]) == 2


def test_the_console_script_exits_at_once_after_plan_with_its_output_and_status(
        tmp_path: Path) -> None:
    # cli.entry ends plan, verify and validate with os._exit (no freeing of every
    # object): the plan on standard output is whole, the file written, the status kept
    run = [sys.executable, "-c", "import cli; cli.entry()"]
    out = subprocess.run([*run, "plan", str(EXAMPLE), "-o", "json", "--deterministic"],
                         capture_output=True, text=True, cwd=str(ROOT), check=False)
    assert out.returncode == 0
    plan = json.loads(out.stdout)
    assert plan["status"] in ("optimal", "feasible") and plan["placements"]
    target = tmp_path / "plan.json"
    assert subprocess.run([*run, "plan", str(EXAMPLE), "--deterministic", "--out", str(target),
                           "--quiet"], cwd=str(ROOT), check=False).returncode == 0
    assert json.loads(target.read_text())["placements"] == plan["placements"]
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    out = subprocess.run([*run, "validate", str(bad)], capture_output=True, text=True,
                         cwd=str(ROOT), check=False)
    assert out.returncode == 2 and "malformed JSON" in out.stderr
    out = subprocess.run([*run, "verify", str(EXAMPLE), str(target)], capture_output=True,
                         text=True, cwd=str(ROOT), check=False)
    assert out.returncode == 0
    assert cli.FAST_EXIT == {"plan", "verify", "validate"}


def test_serve_warns_about_workers_beyond_the_machine() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import cli; raise SystemExit(cli.main())",
                             "serve", "--port", "0", "--no-processes", "--workers", "100000"],
                            stderr=subprocess.PIPE, text=True, cwd=str(ROOT))
    try:
        assert proc.stderr is not None
        lines = [proc.stderr.readline(), proc.stderr.readline()]
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert f"--workers 100000 is more than this machine's {os.cpu_count()} core(s)" in lines[0]
    assert "serving on http://127.0.0.1:" in lines[1]


# ------------------------------------------------------------------ suggestions


@pytest.mark.parametrize("words,said", [
    (["plna", "x"], "invalid choice: 'plna'"),
    (["slurm", "snapshto"], "(did you mean 'snapshot'?)"),
    (["plan", str(EXAMPLE), "-o", "jsno"], "(did you mean 'json'?)"),
    (["--quiet", "valdate", str(EXAMPLE)], "(did you mean 'validate'?)"),
    (["slurm", "snapshot", "--dry-run"], "unrecognized arguments: --dry-run"),
])
def test_typos_of_commands_and_choices_get_a_suggestion(
        words: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(words)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert said in err
    if words[0] == "plna":
        assert "(did you mean 'plan'?)" in err
    if "--dry-run" in words:  # (an option of another action: no "--dry-run -> --dry-run")
        assert "did you mean" not in err


def test_typos_in_adapter_configs_get_a_suggestion(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "slurm.yaml"
    cfg.write_text("tiers: {partitons: {gpu: 1}}\n")
    assert cli.main(["slurm", "snapshot", "--config", str(cfg), "--squeue-json",
                     str(SLURM / "squeue.json"), "--nodes-json", str(SLURM / "sinfo.json")]) == 2
    assert ("tiers.partitons: Extra inputs are not permitted; did you mean 'partitions'?"
            in capsys.readouterr().err)
    cfg = tmp_path / "k8s.yaml"
    cfg.write_text("priorty_classes: {}\n")
    assert cli.main(["k8s", "snapshot", "--config", str(cfg), "--nodes", str(K8S / "nodes.json"),
                     "--pods", str(K8S / "pods.json")]) == 2
    assert "config.priorty_classes: unknown field; did you mean 'priority_classes'?" in \
        capsys.readouterr().err


# ------------------------------------------------------------------ completion


def test_bash_completion_mentions_every_command_and_option() -> None:
    parser = cli.build_parser()
    script = bash_script(parser)
    for place in places(parser):
        for word in [*place.commands, *place.options]:
            assert re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", script), word
    assert len(places(parser)) == 1 + len(_paths(parser))


def _complete_bash(script: Path, line: str) -> list[str]:
    words = line.split(" ")
    code = (f"source {script}; COMP_WORDS=(preempt-planner {' '.join(repr(w) for w in words)}); "
            f"COMP_CWORD={len(words)}; _preempt_planner; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
    out = subprocess.run(["bash", "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.split()


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_completion_completes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["completion", "bash"]) == 0
    script = tmp_path / "preempt-planner.bash"
    script.write_text(capsys.readouterr().out)
    assert _complete_bash(script, "pl") == ["plan"]
    assert _complete_bash(script, "slurm sn") == ["snapshot"]
    assert _complete_bash(script, "plan x --planner ") == ["cpsat", "greedy", "k8s", "slurm"]
    assert _complete_bash(script, "k8s apply x --em") == ["--emit"]
    assert _complete_bash(script, "--quiet vali") == ["validate"]


@pytest.mark.skipif(shutil.which("zsh") is None, reason="no zsh")
def test_zsh_completion_completes(tmp_path: Path) -> None:
    script = tmp_path / "_preempt-planner"
    script.write_text(zsh_script(cli.build_parser()))
    stubs = ("compdef() { :; }; compadd() { shift; print -r -- \"$*\"; }; _files() { print "
             "FILES; }; _describe() { local -a a; a=(\"${(@P)${@[-1]}}\"); "
             "print -r -- ${a%%:*}; }")

    def complete(line: str) -> str:
        code = (f"{stubs}; source {script}; words=(preempt-planner ${{(z)LINE}}); "
                "[[ $LINE == *' ' ]] && words+=(''); CURRENT=${#words}; "
                "PREFIX=${words[CURRENT]}; _preempt_planner")
        out = subprocess.run(["zsh", "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, "LINE": line})
        return out.stdout.strip()

    assert "plan verify validate" in complete("pl")
    assert complete("plan x --planner ") == "cpsat greedy k8s slurm"
    assert "--emit" in complete("k8s apply x --").split()
    assert complete("k8s apply x --out ") == "FILES"


# ------------------------------------------------------------------ output


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The command in its own process, stdout and stderr piped (not a terminal)."""
    return subprocess.run([sys.executable, "-c", "import cli; raise SystemExit(cli.main())",
                           *args], check=False, capture_output=True, text=True, cwd=str(ROOT),
                          env={**os.environ, **(env or {})})


def test_piped_messages_and_tables_are_not_wrapped_or_cut(tmp_path: Path) -> None:
    # error messages were hard-wrapped at 80 columns; show cut its lines at 140
    doc = json.loads(EXAMPLE.read_text())
    doc["jobs"][0]["a_field_whose_name_is_long_enough_to_make_this_line_wrap_at_eighty"] = 1
    path = tmp_path / ("a-folder-name-that-is-quite-long-" * 3) / "snapshot.json"
    path.parent.mkdir()
    path.write_text(json.dumps(doc))
    res = _run("validate", str(path), env={"COLUMNS": "80"})
    assert res.returncode == 2
    head, problem = res.stderr.splitlines()
    assert head == f"error: {path}: invalid input (1 problem(s))" and len(head) > 120
    assert problem.startswith("  - jobs[0].a_field_whose") and problem.endswith("with '_')")
    res = _run("show", str(ROOT / "instances" / "gen-medium.json"), env={"COLUMNS": "80"})
    lines = res.stdout.splitlines()
    comment = json.loads((ROOT / "instances" / "gen-medium.json").read_text())["_comment"]
    assert comment in lines and max(map(len, lines)) > 140


def test_no_color_is_kept() -> None:
    colour = re.compile(r"\x1b\[[0-9;]*(?:3[0-9]|4[0-9]|9[0-7])[;m]")
    loud = _run("show", str(EXAMPLE), env={"FORCE_COLOR": "1"})
    assert colour.search(loud.stdout)
    plain = _run("show", str(EXAMPLE), env={"FORCE_COLOR": "1", "NO_COLOR": "1"})
    assert plain.returncode == 0 and not colour.search(plain.stdout)
    err = _run("validate", "/nonexistent.json", env={"FORCE_COLOR": "1", "NO_COLOR": "1"})
    assert err.returncode == 2 and not colour.search(err.stderr)


# ------------------------------------------------------------------ progress


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """Standard error as a terminal (rich's), recorded."""
    from rich.console import Console

    import planner.commands._common as common
    from planner.commands import compare, simulate

    text = io.StringIO()
    fake = Console(file=text, force_terminal=True, width=100, soft_wrap=True, highlight=False)
    for module in (common, compare, simulate):
        monkeypatch.setattr(module, "err_console", fake)
    return text


@pytest.mark.parametrize("command", [["simulate", "--planner", "greedy"],
                                     ["compare", "--planners", "greedy"]])
def test_progress_shows_on_a_terminal_and_not_with_quiet(
        command: list[str], terminal: io.StringIO, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    args = [*command, *RUN, "-o", "json"] + (["--out", str(tmp_path)] if "compare" in command
                                             else [])
    assert cli.main(args) == 0
    said = terminal.getvalue()
    assert ("simulating (greedy)" in said) if command[0] == "simulate" else \
        ("running 1 simulation(s) in 1 process(es)" in said and "1/1 done: greedy" in said)
    terminal.truncate(0)
    terminal.seek(0)
    assert cli.main([*args, "--quiet"]) == 0
    assert terminal.getvalue() == ""
    capsys.readouterr()


@pytest.mark.parametrize("command", [["simulate", "--planner", "greedy"],
                                     ["compare", "--planners", "greedy"]])
def test_no_progress_when_stderr_is_not_a_terminal(command: list[str], tmp_path: Path) -> None:
    extra = ["--out", str(tmp_path)] if command[0] == "compare" else []
    res = _run(*command, *RUN, "-o", "json", *extra)
    assert res.returncode == 0
    assert "simulating" not in res.stderr and "running 1 simulation" not in res.stderr
