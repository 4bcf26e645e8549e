"""Bad input to ``simulate`` and ``generate`` (found by the fuzzing pass): CSV trace
rows, trace files that are not text, the cluster generator's spec, ``generate``'s
counts and tiers, and the outputs of a run that fails. Each is bad input (exit 2)
naming the file, the row or field and the rule, and leaves no output behind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import cli
from models import InputError
from planner.sim.cluster import generate_cluster, load_cluster
from planner.sim.traces import load_jsonl, load_openb, load_philly, load_trace

DATA = Path(__file__).parent / "data" / "sim"
CLUSTER = str(DATA / "cluster-1node.json")
PING_PONG = str(DATA / "ping-pong.jsonl")

PHILLY_HEAD = "timestamp,duration,num_gpus,gpu_time,cluster\n"
PHILLY_ROW = {"timestamp": "2017-10-04 09:01:55", "duration": "73", "num_gpus": "1",
              "gpu_time": "73", "cluster": "a"}
OPENB_HEAD = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
              "creation_time,deletion_time,scheduled_time\n")
OPENB_ROW = {"name": "p0", "cpu_milli": "1", "memory_mib": "1", "num_gpu": "1",
             "gpu_milli": "1000", "gpu_spec": "", "qos": "LS", "pod_phase": "Running",
             "creation_time": "0", "deletion_time": "100", "scheduled_time": "0"}


def _csv(tmp_path: Path, head: str, *rows: dict[str, str], name: str = "t.csv") -> Path:
    path = tmp_path / name
    path.write_text(head + "".join(",".join(r.values()) + "\n" for r in rows))
    return path


def _simulate(trace: str, *extra: str) -> list[str]:
    return ["simulate", "--cluster", CLUSTER, "--trace", trace, "--planner", "greedy",
            "--days", "0.05", "--no-progress", *extra]


@pytest.mark.parametrize(("column", "value", "said"), [
    ("duration", "inf", 'duration: must be a number of seconds from 0 to 10^9, got "inf"'),
    ("duration", "nan", 'duration: must be a number of seconds from 0 to 10^9, got "nan"'),
    ("duration", "1e300", 'duration: must be a number of seconds from 0 to 10^9, got "1e300"'),
    ("duration", "-5", 'duration: must be a number of seconds from 0 to 10^9, got "-5"'),
    ("num_gpus", "inf", 'num_gpus: must be a whole number from 0 to 100,000, got "inf"'),
    ("num_gpus", "1.5", 'num_gpus: must be a whole number from 0 to 100,000, got "1.5"'),
    ("num_gpus", "1000000000",
     'num_gpus: must be a whole number from 0 to 100,000, got "1000000000"'),
    ("timestamp", "0001-01-01 00:00:00", "timestamp: must be a time (ISO-8601"),
    ("timestamp", "9999-12-31 23:00:00", "from 1970 to 9000, got \"9999-12-31 23:00:00\""),
    ("timestamp", "yesterday", 'got "yesterday"'),
    ("cluster", "", 'cluster: must be a team name (not empty), got ""'),
])
def test_a_philly_value_of_the_wrong_type_or_range_names_its_row_and_column(
        tmp_path: Path, column: str, value: str, said: str) -> None:
    # (each was an internal error: an overflow, a NaN, a job the contract refused)
    path = _csv(tmp_path, PHILLY_HEAD, PHILLY_ROW, {**PHILLY_ROW, column: value})
    with pytest.raises(InputError) as exc:
        load_philly(path)
    assert exc.value.source == str(path)
    (message,) = exc.value.errors
    assert message.startswith(f"row 3: {column}: must be ") and said in message


@pytest.mark.parametrize(("column", "value", "said"), [
    ("scheduled_time", "nan", ("scheduled_time: must be empty or a time (seconds from 0, or "
                              'ISO-8601) before 9000, got "nan"')),
    ("deletion_time", "inf", ('deletion_time: must be empty or a time (seconds from 0, or '
                             'ISO-8601) before 9000, got "inf"')),
    ("creation_time", "-1e15", ('creation_time: must be a number of seconds from 0 to 10^9, '
                               'got "-1e15"')),
    ("name", "", 'name: must be a pod name (not empty), got ""'),
    ("num_gpu", "100000000", ('num_gpu: must be empty or a whole number from 0 to 100,000, '
                             'got "100000000"')),
    ("num_gpu", "-1", 'num_gpu: must be empty or a whole number from 0 to 100,000, got "-1"'),
    ("scheduled_time", "200", ("deletion_time: must be from 0 to 10^9 s after scheduled_time "
                              '(200), got "100"')),
])
def test_an_openb_value_of_the_wrong_type_or_range_names_its_row_and_column(
        tmp_path: Path, column: str, value: str, said: str) -> None:
    path = _csv(tmp_path, OPENB_HEAD, {**OPENB_ROW, "name": "ok"}, {**OPENB_ROW, column: value})
    with pytest.raises(InputError) as exc:
        load_openb(path)
    assert exc.value.errors == [f"row 3: {said}"]


def test_csv_rows_of_the_wrong_length_and_duplicate_pods_are_bad_input(tmp_path: Path) -> None:
    short = tmp_path / "short.csv"
    short.write_text(PHILLY_HEAD + "2017-10-04 09:01:55,73\n")
    with pytest.raises(InputError) as exc:
        load_philly(short)
    assert exc.value.errors == ["row 2: 2 value(s) for the 5 columns of the header"]
    short.write_text(OPENB_HEAD + "p0,1,1,1\n")
    with pytest.raises(InputError) as exc:
        load_openb(short)
    assert exc.value.errors == ["row 2: 4 value(s) for the 11 columns of the header"]
    twice = _csv(tmp_path, OPENB_HEAD, OPENB_ROW, {**OPENB_ROW, "creation_time": "5"})
    with pytest.raises(InputError) as exc:
        load_openb(twice)
    assert exc.value.errors == [
        "row 3: name: pod 'p0' is already on row 2 (a pod name is its job's id)"]


def test_rows_of_jobs_that_never_ran_are_still_skipped_and_philly_is_sorted(
        tmp_path: Path) -> None:
    # Philly: 0 GPUs or 0 s; openb: no GPU, never scheduled, never deleted, 0 s
    philly = _csv(tmp_path, PHILLY_HEAD, {**PHILLY_ROW, "timestamp": "2017-10-05 00:00:00"},
                  {**PHILLY_ROW, "num_gpus": "0"}, {**PHILLY_ROW, "duration": "0.0"},
                  {**PHILLY_ROW, "num_gpus": "8.0"}, name="p.csv")
    jobs = load_philly(philly)
    assert [(j.id, j.gpus) for j in jobs] == [("philly-00003", 8), ("philly-00000", 1)]
    openb = _csv(tmp_path, OPENB_HEAD, OPENB_ROW, {**OPENB_ROW, "name": "a", "num_gpu": ""},
                 {**OPENB_ROW, "name": "b", "scheduled_time": ""},
                 {**OPENB_ROW, "name": "c", "deletion_time": ""},
                 {**OPENB_ROW, "name": "d", "deletion_time": "0"}, name="o.csv")
    assert [j.id for j in load_openb(openb)] == ["p0"]


def test_a_jsonl_submit_that_is_null_is_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "a", "submit": null, "duration_s": 300, "gpus_per_node": 8}\n')
    with pytest.raises(InputError) as exc:
        load_jsonl(path)
    assert exc.value.errors == [("line 1: submit: must be epoch seconds or an ISO-8601 time, "
                                "got null")]


@pytest.mark.parametrize(("name", "content", "said"), [
    ("latin1.csv", (PHILLY_HEAD + "2017-10-04 09:01:55,73,1,73,caf\xe9\n").encode("latin-1"),
     "not UTF-8 text (byte 0xe9 at offset 76; Latin-1 or another 8-bit encoding?)"),
    ("latin1.jsonl", '{"id": "caf\xe9"}\n'.encode("latin-1"), "not UTF-8 text (byte 0xe9"),
    ("binary.bin", bytes(range(256)) * 4, ("trace: this is a binary file; give a Philly or "
                                          "openb CSV, or a JSONL file (UTF-8 text)")),
    ("folder", None, "trace: this is a folder; give a trace file"),
])
def test_a_trace_that_is_not_utf8_text_is_bad_input(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, content: bytes | None,
        said: str) -> None:
    path = tmp_path / name
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    assert cli.main(_simulate(str(path))) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{path}: invalid input" in err and said in err


def test_simulate_names_the_file_row_and_column(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = _csv(tmp_path, PHILLY_HEAD, {**PHILLY_ROW, "duration": "inf"})
    assert cli.main(_simulate(str(path))) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (f"error: {path}: invalid input (1 problem(s)) - row 2: duration: must be a number "
            'of seconds from 0 to 10^9, got "inf"') in err


@pytest.mark.parametrize(("spec", "said"), [
    ({"nodes": "abc"}, 'generator.nodes: must be a whole number from 1 to 100,000, got "abc"'),
    ({"nodes": None}, "generator.nodes: must be a whole number from 1 to 100,000, got null"),
    ({"nodes": float("inf")}, ("generator.nodes: must be a whole number from 1 to 100,000, "
                              "got Infinity")),
    ({"nodes": -5}, "generator.nodes: must be a whole number from 1 to 100,000, got -5"),
    ({"nodes": True}, "generator.nodes: must be a whole number from 1 to 100,000, got true"),
    ({"nodes": 2.5}, "generator.nodes: must be a whole number from 1 to 100,000, got 2.5"),
    ({"nodes": 1, "storage_targets": 100_000_000},
     "generator.storage_targets: must be a whole number from 0 to 100,000, got 100000000"),
    ({"nodes": 1, "gpus_per_node": 0},
     "generator.gpus_per_node: must be a whole number from 1 to 1,024, got 0"),
    ({"nodes": 1, "nodes_per_block": -1},
     ("generator.nodes_per_block: must be null or a whole number from 0 to 100,000 (0 or null: "
     "no blocks), got -1")),
    ({"nodes": 1, "write_gb_per_s": "x"},
     'generator.write_gb_per_s: must be a number of GB/s from 0.001 to 1,000,000, got "x"'),
    ({"nodes": 1, "local_write_gb_per_s": 0},
     ("generator.local_write_gb_per_s: must be null or a number of GB/s from 0.001 to "
     "1,000,000, got 0")),
    ({"nodes": 1, "gpu_type": [1]}, "generator.gpu_type: must be a string or null, got [1]"),
    ({"nodes": 1, "nvlink": "ring"}, ('generator.nvlink: must be "nvswitch", "none", a list of '
                                     'islands like [[0,1],[2,3]] or {"edges": [...]}, got "ring"')),
    ({"nodes": 40, "nvlink": [[0, 9]]},  # (the contract's check, said once for every node)
     "generator.nvlink[0]: GPU 9 out of range (node has 8 GPUs)"),
])
def test_a_generator_field_of_the_wrong_type_or_range_is_bad_input(spec: dict[str, Any],
                                                                   said: str) -> None:
    # (strings, null, infinity were internal errors; -5 nodes and true were accepted;
    # 10^8 storage targets ran for ever)
    with pytest.raises(InputError) as exc:
        generate_cluster(spec)
    assert exc.value.errors == [said]


@pytest.mark.parametrize(("text", "said"), [
    ("generator: [1, 2]\n", "generator: must be an object of the generator's fields (nodes, "),
    ("generator: hello\n", "generator: must be an object of the generator's fields"),
    ("generator:\n  nodes: 2001-12-14\n",
     'generator.nodes: must be a whole number from 1 to 100,000, got "2001-12-14"'),
    ("generator:\n  nodes: !!binary aGVsbG8=\n",
     "generator.nodes: must be a whole number from 1 to 100,000, got"),
])
def test_a_generator_spec_file_of_the_wrong_shape_is_bad_input(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, said: str) -> None:
    path = tmp_path / "g.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as exc:
        load_cluster(path)
    assert exc.value.source == str(path) and exc.value.errors[0].startswith(said)
    assert cli.main(["simulate", "--cluster", str(path), "--trace", PING_PONG, "--planner",
                     "greedy", "--no-progress"]) == 2
    assert said in capsys.readouterr().err


def test_an_empty_generator_is_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "g.yaml"
    path.write_text("generator:\n")
    assert len(load_cluster(path).nodes) == 128


@pytest.mark.parametrize(("args", "said"), [
    (["--pending", "1000000"], ("--pending: at most 200,000 pending jobs (four times the default "
                               "of the largest cluster), got 1,000,000")),
    (["--tier-mix", "0=1"], "mix entry '0=1': '0' is not a tier number (1 to 1,000,000)"),
    (["--tier-mix", "1=1,01=1"], "mix entry '01=1': 1 is given twice"),
])
def test_generate_refuses_too_many_pending_jobs_and_tier_0(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], said: str) -> None:
    # (a million pending jobs ran for minutes; tier 0 was accepted)
    out = tmp_path / "snap.json"
    try:
        status = cli.main(["generate", "--nodes", "2", "--out", str(out), *args])
    except SystemExit as exc:  # (argparse refuses an option's value itself)
        status = exc.code
    assert status == 2
    assert said in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("days", ["nan", "inf", "-1", "1e300"])
def test_simulate_days_out_of_range_is_bad_input(days: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([*_simulate(PING_PONG)[:-3], "--days", days, "--no-progress"]) == 2
    assert "--days: " in capsys.readouterr().err


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc")
def test_an_output_in_a_folder_without_files_is_refused_before_the_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # (as root /proc passes the permission check; the metrics file was written after the
    # run and then --result-out failed)
    metrics = tmp_path / "m.txt"
    assert cli.main(_simulate(PING_PONG, "--result-out", "/proc/rx.json", "--metrics-out",
                              str(metrics))) == 2
    assert "--result-out: cannot write in folder /proc" in capsys.readouterr().err
    assert not metrics.exists()


def test_an_output_that_fails_after_the_run_takes_back_the_ones_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from planner.commands import simulate

    real = simulate.write_file

    def write_file(text: str, path: Any, option: str = "--out") -> None:
        if option == "--out":
            raise InputError([f"{option}: cannot write {path}: No space left on device"])
        real(text, path, option)

    monkeypatch.setattr(simulate, "write_file", write_file)
    monkeypatch.setattr("planner.commands._common.write_file", write_file)
    metrics, record, kept = tmp_path / "m.txt", tmp_path / "r.json", tmp_path / "kept.json"
    kept.write_text("{}")  # (an output there before the run is not removed)
    assert cli.main(_simulate(PING_PONG, "--metrics-out", str(metrics), "--result-out",
                              str(record), "--out", str(tmp_path / "o.txt"))) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert not metrics.exists() and not record.exists()
    assert cli.main(_simulate(PING_PONG, "--result-out", str(kept), "--out",
                              str(tmp_path / "o.txt"))) == 2
    assert kept.exists()


@pytest.mark.parametrize("there", [False, True])
def test_a_run_that_fails_leaves_no_dumped_ticks(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        there: bool) -> None:
    import planner.sim.metrics

    def fail(res: Any) -> Any:
        raise InputError(["metrics: made to fail"])

    monkeypatch.setattr(planner.sim.metrics, "compute_metrics", fail)
    dump = tmp_path / "new" / "ticks"
    if there:  # a folder that was there stays, with what it held
        dump.mkdir(parents=True)
        (dump / "notes.txt").write_text("mine")
    assert cli.main(_simulate(PING_PONG, "--dump-ticks", str(dump))) == 2
    assert "made to fail" in capsys.readouterr().err
    if there:
        assert [p.name for p in dump.iterdir()] == ["notes.txt"]
    else:
        assert not (tmp_path / "new").exists()


def test_a_dump_folder_with_another_runs_index_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ticks.jsonl").write_text('{"tick": 1}\n')
    assert cli.main(_simulate(PING_PONG, "--dump-ticks", str(tmp_path))) == 2
    assert "already holds ticks" in capsys.readouterr().err
    assert (tmp_path / "ticks.jsonl").read_text() == '{"tick": 1}\n'


def test_the_bundled_traces_still_load() -> None:
    assert len(load_trace(DATA / "philly-slice.csv")) == 34
    assert len(load_trace(DATA / "openb-slice.csv")) == 38
    assert json.loads(json.dumps([j.to_json() for j in load_trace(PING_PONG)]))


@pytest.mark.parametrize(("tick", "said"), [
    ("1e-320", "--tick: at least 1 s between ticks, got 9.99989e-321"),
    ("0.5", "--tick: at least 1 s between ticks, got 0.5"),
    ("0", "--tick: must be a positive number, got 0"),
])
def test_a_tick_below_a_second_is_bad_input(tick: str, said: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    # (--tick 1e-320 made the number of ticks infinite: an OverflowError, exit 3, in
    # simulate, compare and tune alike, which share the check)
    assert cli.main([*_simulate(PING_PONG)[:-3], "--tick", tick, "--no-progress"]) == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize(("start", "said"), [
    ("nan", "--start: 'nan' is neither epoch seconds nor an ISO-8601 time"),
    ("inf", "--start: 'inf' is neither epoch seconds nor an ISO-8601 time"),
    ("1e300", "--start: '1e300' is not a time from 1970 to 9000"),
    ("-5", "--start: '-5' is not a time from 1970 to 9000"),
])
def test_a_start_that_is_no_time_of_the_contract_is_bad_input(
        start: str, said: str, capsys: pytest.CaptureFixture[str]) -> None:
    # (they ran, and said "trace: no job in the simulated period")
    assert cli.main([*_simulate(PING_PONG)[:-3], "--start", start, "--no-progress"]) == 2
    assert said in capsys.readouterr().err


def test_a_jsonl_number_of_400_digits_is_bad_input(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # (math.isfinite overflowed on it: an internal error)
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"id": "a", "submit": 1' + "0" * 400 + ', "duration_s": 10, '
                     '"gpus_per_node": 1}\n')
    assert cli.main([*_simulate(PING_PONG)[:-3], "--trace", str(trace), "--no-progress"]) == 2
    assert "line 1: submit: " in capsys.readouterr().err


def test_a_failed_run_removes_its_dump_reached_through_dot_dot(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # ('x/../y': x was made to reach y, and only x was removed after a failed run)
    dump = tmp_path / "x" / ".." / "y"
    assert cli.main(_simulate(PING_PONG, "--dump-ticks", str(dump), "--out", "/dev/full")) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_trace_found_among_the_shared_traces_is_not_an_output(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # (a bare --trace name is looked up in the shared traces folder; --result-out naming
    # that file replaced the trace)
    from planner.sim import traces

    shared = tmp_path / "shared"
    shared.mkdir()
    trace = shared / "mine.jsonl"
    trace.write_text(Path(PING_PONG).read_text())
    monkeypatch.setattr(traces, "shared_traces_dir", lambda: shared)
    monkeypatch.chdir(tmp_path)
    args = _simulate(PING_PONG)[:-3]
    args[args.index("--trace") + 1] = "mine.jsonl"
    assert cli.main([*args, "--no-progress", "--result-out", str(trace)]) == 2
    assert f"--result-out: {trace} is the input file --trace" in capsys.readouterr().err
    assert trace.read_text() == Path(PING_PONG).read_text()
