"""Tests of planner/trap.py with real subprocesses and real signals.

Children are synchronised by the lines they print and by "release" files the
test creates (a child announces ``paused <event>`` and waits for the file), so
a signal is known to arrive mid-step or mid-write without relying on timing.
No test asserts a duration; timeouts only bound a failure.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from planner import trap as trap_mod
from planner.trap import (
    CheckpointTrap,
    atomic_write,
    load_latest,
    read_sidecar,
    remove_stale_temps,
    sidecar_path,
)

REPO = Path(__file__).resolve().parents[1]
TRAP_FILE = REPO / "planner" / "trap.py"
EXAMPLE = REPO / "examples" / "train_loop.py"
TIMEOUT = 30.0  # seconds; only reached when something is broken

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "SIGUSR1") or not hasattr(signal, "pthread_sigmask"),
    reason="POSIX signals required",
)

# A training child that loads trap.py by file path (as vendored code would),
# announces every step and every written chunk, and can pause at named events.
CHILD = r"""
import hashlib, importlib.util, json, os, sys, time

cfg = json.loads(sys.argv[1])
spec = importlib.util.spec_from_file_location("vendored_trap", cfg["trap"])
trap_mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(trap_mod)


def emit(line):
    print(line, flush=True)


def pause(event):
    if event in cfg["pause_at"]:
        emit("paused " + event)
        release = os.path.join(cfg["dir"], "release-" + event.replace(" ", "_"))
        while not os.path.exists(release):
            time.sleep(0.005)


def content(step):
    payload = hashlib.sha256(b"%d" % step).digest() * (cfg["chunks"] * cfg["chunk_size"] // 32)
    sha = hashlib.sha256(payload).hexdigest().encode()
    return b"STEP %d LEN %d SHA %s\n" % (step, len(payload), sha), payload


def parse(blob):
    header, payload = blob.split(b"\n", 1)
    _, step, _, length, _, sha = header.split()
    assert len(payload) == int(length) and hashlib.sha256(payload).hexdigest().encode() == sha
    return int(step)


blob = trap_mod.load_latest(cfg["path"])
step = 0 if blob is None else parse(blob)
writes = 0
emit("start %d" % step)


def writer(f):
    global writes
    writes += 1
    header, payload = content(step)
    f.write(header)
    n = cfg["chunk_size"]
    for i in range(cfg["chunks"]):
        f.write(payload[i * n:(i + 1) * n])
        f.flush()
        emit("write %d chunk %d" % (writes, i))
        pause("write %d chunk %d" % (writes, i))
        time.sleep(cfg["chunk_delay"])


def saved(meta):
    emit("saved %d %s" % (step, meta["reason"]))


trap = trap_mod.CheckpointTrap(cfg["path"], writer, on_checkpoint=saved, **cfg["trap_kwargs"])
with trap:
    try:
        while step < cfg["steps"]:
            emit("step %d begin" % (step + 1))
            pause("step %d begin" % (step + 1))
            time.sleep(cfg["step_delay"])
            step += 1
            emit("step %d end" % step)
            trap.step_done(save=step % cfg["every"] == 0)
    except SystemExit as exc:
        emit("exit code=%s signals=%d received=%s" % (exc.code, trap.signal_count, trap.received))
        raise
emit("finished %d" % step)
"""


def parse_checkpoint(blob: bytes) -> int:
    """Step of a complete child checkpoint; AssertionError if it is torn."""
    header, payload = blob.split(b"\n", 1)
    magic, step, _, length, _, sha = header.split()
    assert magic == b"STEP"
    assert len(payload) == int(length), "truncated checkpoint at the final path"
    assert hashlib.sha256(payload).hexdigest().encode() == sha, "corrupt checkpoint"
    assert payload[:32] == hashlib.sha256(b"%d" % int(step)).digest()
    return int(step)


def temp_files(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f".{path.name}.tmp-*"))


class Child:
    """A subprocess whose merged stdout/stderr lines are collected by a thread."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            env=env,
            cwd=REPO,
        )
        self.lines: list[str] = []
        self._eof = False
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def wait_for(self, match: str | Callable[[str], bool]) -> str:
        """Block until a line equals ``match`` (or satisfies it); return the line."""
        pred = match if callable(match) else (lambda line: line == match)
        deadline = time.monotonic() + TIMEOUT
        with self._cond:
            while True:
                for line in self.lines:
                    if pred(line):
                        return line
                if self._eof:
                    raise AssertionError(f"child ended without {match!r}:\n{self.output()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    self.proc.kill()
                    raise AssertionError(f"timed out waiting for {match!r}:\n{self.output()}")
                self._cond.wait(left)

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def finish(self) -> int:
        """Wait for the exit and for all output; return the exit status."""
        try:
            rc = self.proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"child did not exit:\n{self.output()}") from None
        self._reader.join(TIMEOUT)
        return rc

    def output(self) -> str:
        return "\n".join(self.lines)


@pytest.fixture
def spawn() -> Iterator[Callable[..., Child]]:
    children: list[Child] = []

    def start(argv: list[str], env: dict[str, str] | None = None) -> Child:
        child = Child(argv, env)
        children.append(child)
        return child

    yield start
    for child in children:
        if child.proc.poll() is None:
            child.proc.kill()
            child.proc.wait()


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != trap_mod.SIDECAR_ENV}
    env.update(extra)
    return env


def run_child(
    spawn: Callable[..., Child], tmp_path: Path, env: dict[str, str] | None = None, **overrides: Any
) -> Child:
    cfg: dict[str, Any] = {
        "trap": str(TRAP_FILE),
        "dir": str(tmp_path),
        "path": str(tmp_path / "ckpt.bin"),
        "steps": 1000,
        "every": 1000,
        "step_delay": 0.0,
        "chunks": 4,
        "chunk_size": 4096,
        "chunk_delay": 0.0,
        "pause_at": [],
        "trap_kwargs": {},
    }
    cfg.update(overrides)
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    return spawn([str(script), json.dumps(cfg)], env if env is not None else child_env())


def release(tmp_path: Path, event: str) -> None:
    (tmp_path / ("release-" + event.replace(" ", "_"))).touch()


# -- 1. SIGTERM mid-step ------------------------------------------------------


def test_sigterm_mid_step_finishes_step_checkpoints_and_exits_0(spawn, tmp_path):
    ckpt = tmp_path / "ckpt.bin"
    child = run_child(
        spawn,
        tmp_path,
        pause_at=["step 3 begin"],
        chunks=8,
        chunk_size=125_000,
        trap_kwargs={"barrier_s": 7, "cleanup_s": 3, "restore_s": 120},
    )
    child.wait_for("paused step 3 begin")
    child.signal(signal.SIGTERM)
    release(tmp_path, "step 3 begin")

    assert child.finish() == 0, child.output()
    lines = child.lines
    assert "step 3 end" in lines and "step 4 begin" not in lines
    assert lines.index("step 3 end") < lines.index("saved 3 signal")
    assert "exit code=0 signals=1 received=SIGTERM" in lines
    blob = load_latest(ckpt)
    assert blob is not None and parse_checkpoint(blob) == 3

    meta = read_sidecar(str(ckpt) + ".meta.json")
    assert meta["size_gb"] == pytest.approx(ckpt.stat().st_size / 1e9)
    assert meta["size_gb"] == pytest.approx(0.001, rel=1e-3)  # 1 MB payload + header
    assert meta["last_at"].endswith("Z")
    datetime.fromisoformat(meta["last_at"])
    assert (meta["signal"], meta["barrier_s"], meta["cleanup_s"], meta["restore_s"]) == (
        "SIGTERM",
        7,
        3,
        120,
    )
    assert meta["reason"] == "signal" and meta["received"] == "SIGTERM"
    assert meta["path"] == str(ckpt)
    assert temp_files(ckpt) == []


# -- 2. SIGKILL at many moments ---------------------------------------------

# (line to wait for, whether the child is paused there) for consecutive runs on
# one checkpoint path; paused kills land mid-write for certain, the others at
# whatever point the child has reached by then. "saved" and "step end" stand for
# the first such line, whatever the step.
KILL_POINTS = [
    ("start", False),
    ("write 1 chunk 0", True),
    ("write 1 chunk 5", False),
    ("saved", False),
    ("write 2 chunk 15", True),
    ("write 1 chunk 15", False),
    ("step end", False),
    ("write 3 chunk 7", True),
    ("write 2 chunk 15", False),
    ("write 2 chunk 0", True),
]
_ANY_LINE = {
    "start": lambda line: line.startswith("start "),
    "saved": lambda line: line.startswith("saved "),
    "step end": lambda line: line.startswith("step ") and line.endswith(" end"),
}


def test_sigkill_never_leaves_a_torn_checkpoint(spawn, tmp_path):
    ckpt = tmp_path / "ckpt.bin"
    sidecar = Path(str(ckpt) + ".meta.json")
    confirmed: int | None = None  # step of the last checkpoint known complete
    for wait, paused in KILL_POINTS:
        child = run_child(
            spawn,
            tmp_path,
            every=1,
            chunks=16,
            chunk_size=65536,
            chunk_delay=0.003,
            pause_at=[wait] if paused else [],
        )
        start = int(child.wait_for(_ANY_LINE["start"]).split()[1])
        assert start == (confirmed or 0)
        child.wait_for(f"paused {wait}" if paused else _ANY_LINE.get(wait, wait))
        child.signal(signal.SIGKILL)
        assert child.finish() == -signal.SIGKILL
        if paused:
            assert temp_files(ckpt), "the kill did not land mid-write"

        saved = [int(line.split()[1]) for line in child.lines if line.startswith("saved ")]
        before = saved[-1] if saved else confirmed
        blob = load_latest(ckpt)
        if sidecar.exists():
            read_sidecar(sidecar)  # never torn either
        if blob is None:
            assert before is None, child.output()
            continue
        step = parse_checkpoint(blob)
        # every=1: the only write that may have completed unreported is the next one
        allowed = {before} if paused else {before, (before or 0) + 1}
        assert step in allowed, (wait, step, allowed, child.output())
        confirmed = step
    assert confirmed is not None and confirmed >= 3

    # a clean run cleans up the stray temporaries and completes
    child = run_child(spawn, tmp_path, every=1, chunks=2, chunk_size=65536, steps=confirmed + 1)
    assert child.finish() == 0, child.output()
    assert f"finished {confirmed + 1}" in child.lines
    assert parse_checkpoint(ckpt.read_bytes()) == confirmed + 1
    assert temp_files(ckpt) == [] and temp_files(sidecar) == []


# -- 3. a second SIGTERM during the flush ------------------------------------


def test_second_sigterm_during_flush_does_not_interrupt_it(spawn, tmp_path):
    ckpt = tmp_path / "ckpt.bin"
    side = tmp_path / "elsewhere" / "meta.json"
    side.parent.mkdir()
    child = run_child(
        spawn,
        tmp_path,
        env=child_env(PREEMPT_PLANNER_SIDECAR=str(side)),
        pause_at=["step 2 begin", "write 1 chunk 2"],
        chunks=8,
        chunk_size=65536,
    )
    child.wait_for("paused step 2 begin")
    child.signal(signal.SIGTERM)
    release(tmp_path, "step 2 begin")
    child.wait_for("paused write 1 chunk 2")
    child.signal(signal.SIGTERM)
    release(tmp_path, "write 1 chunk 2")

    assert child.finish() == 0, child.output()
    assert "write 1 chunk 7" in child.lines
    assert "saved 2 signal" in child.lines
    assert "exit code=0 signals=2 received=SIGTERM" in child.lines
    assert parse_checkpoint(ckpt.read_bytes()) == 2
    meta = read_sidecar(side)
    assert meta["size_gb"] == ckpt.stat().st_size / 1e9 and meta["reason"] == "signal"
    assert not Path(str(ckpt) + ".meta.json").exists()
    assert temp_files(ckpt) == []


def test_sigterm_during_periodic_write_exits_without_rewriting(spawn, tmp_path):
    ckpt = tmp_path / "ckpt.bin"
    child = run_child(spawn, tmp_path, every=2, pause_at=["write 1 chunk 1"])
    child.wait_for("paused write 1 chunk 1")
    child.signal(signal.SIGTERM)
    release(tmp_path, "write 1 chunk 1")

    assert child.finish() == 0, child.output()
    assert "saved 2 periodic" in child.lines
    assert not any(line.startswith("write 2 ") for line in child.lines)
    assert "step 3 begin" not in child.lines
    assert parse_checkpoint(ckpt.read_bytes()) == 2


# -- 4. helpers and handler restoration, in process --------------------------


def test_atomic_write_bytes_callable_and_returned_bytes(tmp_path):
    path = tmp_path / "f.bin"
    assert atomic_write(path, b"one") == 3
    assert path.read_bytes() == b"one"
    assert atomic_write(str(path), lambda f: f.write(b"two!")) == 4
    assert path.read_bytes() == b"two!"
    atomic_write(path, lambda f: b"three")
    assert path.read_bytes() == b"three"
    assert temp_files(path) == []


def test_atomic_write_failure_keeps_previous_file_and_removes_temp(tmp_path):
    path = tmp_path / "f.bin"
    atomic_write(path, b"good")

    def broken(f):
        f.write(b"half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(path, broken)
    assert path.read_bytes() == b"good"
    assert temp_files(path) == []


def test_atomic_write_keeps_the_mode_of_the_file_it_replaces(tmp_path):
    path = tmp_path / "f.bin"
    atomic_write(path, b"x")
    path.chmod(0o640)
    atomic_write(path, b"y")
    assert path.stat().st_mode & 0o777 == 0o640


def test_remove_stale_temps_only_touches_this_files_temps(tmp_path):
    path = tmp_path / "ckpt"
    mine = tmp_path / ".ckpt.tmp-abcd1234.partial"
    other = tmp_path / ".ckpt.b.tmp-abcd1234.partial"
    for p in (mine, other, path):
        p.write_bytes(b"")
    assert remove_stale_temps(path) == [str(mine)]
    assert not mine.exists() and other.exists() and path.exists()


def test_load_latest_missing_is_none(tmp_path):
    assert load_latest(tmp_path / "nothing") is None


def test_read_sidecar_roundtrip_and_errors(tmp_path, monkeypatch):
    monkeypatch.delenv(trap_mod.SIDECAR_ENV, raising=False)
    ckpt = tmp_path / "c.bin"
    assert sidecar_path(ckpt) == str(ckpt) + ".meta.json"
    trap = CheckpointTrap(ckpt, lambda f: f.write(b"x" * 2500), restore_s=42.5)
    meta = trap.save()
    assert read_sidecar(str(ckpt) + ".meta.json") == meta == trap.last_meta
    assert meta["size_gb"] == 2.5e-6 and meta["restore_s"] == 42.5
    assert (meta["signal"], meta["barrier_s"], meta["cleanup_s"]) == ("SIGTERM", 0, 0)
    assert meta["reason"] == "periodic" and "received" not in meta

    monkeypatch.setenv(trap_mod.SIDECAR_ENV, str(tmp_path / "env.json"))
    assert sidecar_path(ckpt) == str(tmp_path / "env.json")
    CheckpointTrap(ckpt, lambda f: None).save()
    assert read_sidecar(tmp_path / "env.json")["size_gb"] == 0

    bad = tmp_path / "bad.json"
    for text in ("[1]", '{"last_at": "2026-01-01T00:00:00Z"}', '{"size_gb": 1}', "{"):
        bad.write_text(text)
        with pytest.raises(ValueError):
            read_sidecar(bad)
    with pytest.raises(FileNotFoundError):
        read_sidecar(tmp_path / "missing.json")


def _wait_until(cond: Callable[[], bool]) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not cond():
        assert time.monotonic() < deadline, "signal never arrived"
        time.sleep(0.001)


@pytest.fixture
def saved_handlers() -> Iterator[None]:
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1)}
    yield
    for s, h in before.items():
        signal.signal(s, h)


def test_handlers_are_installed_then_restored(tmp_path, saved_handlers):
    def mine(signum, frame):
        pass

    signal.signal(signal.SIGUSR1, mine)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    trap = CheckpointTrap(tmp_path / "c", lambda f: None)
    with trap:
        assert signal.getsignal(signal.SIGTERM) == trap._handle
        assert signal.getsignal(signal.SIGUSR1) == trap._handle
    assert signal.getsignal(signal.SIGUSR1) is mine
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN

    with (
        pytest.raises(KeyError),
        CheckpointTrap(tmp_path / "c", lambda f: None, signals=[signal.SIGUSR1]),
    ):
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        raise KeyError("boom")
    assert signal.getsignal(signal.SIGUSR1) is mine


def test_real_signal_in_process_without_exit(tmp_path, saved_handlers, monkeypatch):
    monkeypatch.delenv(trap_mod.SIDECAR_ENV, raising=False)
    ckpt = tmp_path / "c.bin"
    seen = []
    with CheckpointTrap(
        ckpt, lambda f: f.write(b"state"), exit_on_signal=False, on_checkpoint=seen.append
    ) as trap:
        assert trap.step_done() is False and not ckpt.exists()
        os.kill(os.getpid(), signal.SIGUSR1)
        _wait_until(lambda: trap.should_stop)
        assert trap.step_done() is True
        assert trap.step_done() is True  # already handled: no second write
    assert ckpt.read_bytes() == b"state"
    assert len(seen) == 1 and seen[0]["reason"] == "signal"
    assert seen[0]["received"] == "SIGUSR1" and seen[0]["signal"] == "SIGTERM"


def test_signal_exits_with_status_0(tmp_path, saved_handlers):
    ckpt = tmp_path / "c.bin"
    with (
        pytest.raises(SystemExit) as info,
        CheckpointTrap(ckpt, lambda f: f.write(b"s"), sidecar=tmp_path / "m.json") as trap,
    ):
        os.kill(os.getpid(), signal.SIGTERM)
        _wait_until(lambda: trap.should_stop)
        trap.step_done()
    assert info.value.code == 0
    assert read_sidecar(tmp_path / "m.json")["received"] == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) != trap._handle


def test_trap_imports_with_the_standard_library_only():
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('t', {str(TRAP_FILE)!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "tops = {n.split('.')[0] for n in sys.modules}\n"
        "print(sorted(tops - set(sys.stdlib_module_names) - {'__main__', 't'}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=True,
    ).stdout
    assert out.strip() == "[]"


# -- 5. the example resumes --------------------------------------------------


def _load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_loop_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_loop_resumes_from_its_checkpoint(spawn, tmp_path):
    example = _load_example()
    ckpt = tmp_path / "ckpt.bin"
    args = [
        str(EXAMPLE),
        "--checkpoint",
        str(ckpt),
        "--state-mb",
        "0.5",
        "--step-seconds",
        "0.01",
        "--every",
        "3",
        "-v",
    ]
    first = spawn([*args, "--steps", "100000"], child_env())
    first.wait_for(f"no checkpoint at {ckpt}; starting at step 0")
    first.wait_for("step 5")
    first.signal(signal.SIGTERM)
    assert first.finish() == 0, first.output()
    last = first.wait_for(lambda line: line.startswith("SIGTERM: checkpointed step "))
    stopped = int(last.split()[3].rstrip(","))
    assert stopped >= 5 and f"step {stopped + 1}" not in first.lines

    state = example.decode(ckpt.read_bytes())
    assert state["step"] == stopped
    assert state["payload"] == example.make_payload(stopped, 500_000)
    assert read_sidecar(str(ckpt) + ".meta.json")["reason"] in ("signal", "periodic")

    second = spawn([*args, "--steps", str(stopped + 2)], child_env())
    assert second.finish() == 0, second.output()
    assert second.lines[0] == f"resumed from step {stopped} ({ckpt})"
    assert f"step {stopped + 1}" in second.lines and f"step {stopped}" not in second.lines
    assert second.lines[-1] == f"done: step {stopped + 2}"
    assert example.decode(ckpt.read_bytes())["step"] == stopped + 2


def test_atomic_write_keeps_links_and_writes_into_devices(tmp_path: Path) -> None:
    # A link at the path stays a link and its target gets the content; a device (here
    # /dev/null) is written into, never replaced by a regular file (as root, replacing
    # /dev/full or /dev/null would break the machine)
    target = tmp_path / "target.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target.name)
    assert atomic_write(link, b"new") == 3
    assert link.is_symlink() and os.readlink(link) == "target.json"
    assert target.read_bytes() == b"new"
    before = os.stat("/dev/null")
    atomic_write("/dev/null", b"nothing")
    after = os.stat("/dev/null")
    assert (after.st_mode, after.st_rdev, after.st_ino) == (
        before.st_mode, before.st_rdev, before.st_ino)
