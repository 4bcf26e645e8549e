"""A throw-away Slurm cluster on localhost for the end-to-end tests.

Four virtual nodes (``slurmd -N gpuN``) with eight fake GPUs each, a private
munged with its own key and socket, a private slurmctld; every file lives in
one temporary directory and every daemon runs on non-default ports, so the
cluster never meets a real Slurm on the same machine. Daemons are stopped by
their pid files (never by name).

Facts this relies on are in the project notes (Slurm 22.05 on Debian 12): plain
files as ``File=`` GPUs with ``AutoDetect=off``, ``SlurmdParameters=
config_overrides``, ``slurmd -N`` with per-node ``Port=``.

Usable from pytest (``LocalSlurm``) or by hand::

    python tests/slurm_cluster.py start /tmp/slurm-play   # prints SLURM_CONF=...
    python tests/slurm_cluster.py stop /tmp/slurm-play
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

DAEMONS = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd")
CLIENTS = ("sbatch", "squeue", "sinfo", "scontrol", "scancel")
PACKAGES = ("slurm-wlm", "munge")


class SlurmSetupError(RuntimeError):
    """The local cluster could not be installed or started."""


def missing_binaries() -> list[str]:
    """Slurm/munge executables that are not installed."""
    missing = [d for d in DAEMONS if not os.access(d, os.X_OK)]
    missing += [c for c in CLIENTS if shutil.which(c) is None]
    return missing


def install_packages(timeout_s: float = 900) -> None:
    """Install Slurm and munge from the Debian packages (root only)."""
    if os.geteuid() != 0:
        raise SlurmSetupError("installing slurm-wlm/munge needs root")
    if shutil.which("apt-get") is None:
        raise SlurmSetupError("apt-get not found; install slurm-wlm and munge by hand")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"],
                ["apt-get", "install", "-y", "-qq", *PACKAGES]):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s,
                              check=False)
        if proc.returncode != 0:
            raise SlurmSetupError(f"{' '.join(cmd)} failed: {proc.stderr[-2000:]}")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port_block(count: int) -> int:
    """First port of `count` consecutive free TCP ports (random, non-default)."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(21000, 39000)
        if all(_port_free(base + i) for i in range(count)):
            return base
    raise SlurmSetupError("no block of free TCP ports found")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); look at its state.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _ancestors(pid: int) -> set[int]:
    """`pid` and its ancestors (never to be killed)."""
    out = set()
    while pid > 1 and pid not in out:
        out.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return out


class LocalSlurm:
    """One private Slurm cluster rooted at `root` (created if needed)."""

    def __init__(self, root: Path, nodes: int = 4, gpus_per_node: int = 8,
                 partitions: dict[str, int] | None = None, gpu_type: str | None = None) -> None:
        self.root = Path(root).resolve()
        self.node_names = [f"gpu{i}" for i in range(1, nodes + 1)]
        self.gpus_per_node = gpus_per_node
        self.gpu_type = gpu_type  # e.g. "a100": Gres=gpu:a100:8
        # partition name -> PriorityTier (higher is scheduled first by Slurm)
        self.partitions = partitions or {"tier1": 30, "tier2": 20, "tier3": 10}
        self.conf = self.root / "etc" / "slurm.conf"
        self.munge_socket = self.root / "munge" / "munge.socket"
        self.started: list[Path] = []  # pid files of daemons we started

    # ----------------------------------------------------------------- files
    @property
    def env(self) -> dict[str, str]:
        """Environment for Slurm client commands talking to this cluster."""
        env = dict(os.environ, SLURM_CONF=str(self.conf))
        for var in ("SLURM_JOB_ID", "SLURM_JOBID", "SQUEUE_FORMAT", "SINFO_FORMAT"):
            env.pop(var, None)
        return env

    def pid_file(self, name: str) -> Path:
        return self.root / "run" / f"{name}.pid"

    def write_config(self) -> None:
        for sub in ("etc", "run", "log", "state", "spool", "munge", "gpus", "jobs"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root / "munge", 0o700)
        key = self.root / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
            os.chmod(key, 0o400)
        for i in range(self.gpus_per_node):
            (self.root / "gpus" / f"fakegpu{i}").touch()
        for name in self.node_names:
            (self.root / "spool" / name).mkdir(exist_ok=True)
        gres_name = f"gpu:{self.gpu_type}" if self.gpu_type else "gpu"

        base = _free_port_block(2 + len(self.node_names))
        ctld_port, slurmd_port = base, base + 1
        host = socket.gethostname().split(".")[0]
        r = self.root
        names = f"gpu[1-{len(self.node_names)}]"
        lines = [
            "ClusterName=ppe2e",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={slurmd_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={r}/state",
            f"SlurmdSpoolDir={r}/spool/%n",
            f"SlurmctldPidFile={self.pid_file('slurmctld')}",
            f"SlurmdPidFile={r}/run/slurmd-%n.pid",
            f"SlurmctldLogFile={r}/log/slurmctld.log",
            f"SlurmdLogFile={r}/log/slurmd-%n.log",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "SlurmdParameters=config_overrides",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "GresTypes=gpu",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=bf_interval=2,sched_min_interval=200000",
            # Slurm's own preemption stays off: the planner decides.
            "PreemptType=preempt/none",
            "PreemptMode=OFF",
            "JobRequeue=1",
            "ReturnToService=2",
            "MinJobAge=600",
            "KillWait=5",
            "InactiveLimit=0",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=60",
            "MpiDefault=none",
            "MailProg=/bin/true",
        ]
        for i, name in enumerate(self.node_names):
            lines.append(
                f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 "
                f"Port={slurmd_port + 1 + i} CPUs=16 RealMemory=64000 "
                f"Gres={gres_name}:{self.gpus_per_node} State=UNKNOWN")
        for j, (part, prio) in enumerate(self.partitions.items()):
            default = "YES" if j == len(self.partitions) - 1 else "NO"
            lines.append(f"PartitionName={part} Nodes={names} Default={default} "
                         f"MaxTime=INFINITE State=UP PriorityTier={prio} PreemptMode=OFF")
        self.conf.write_text("\n".join(lines) + "\n")
        gres = ["AutoDetect=off",
                f"NodeName={names} Name=gpu"
                + (f" Type={self.gpu_type}" if self.gpu_type else "")
                + f" File={r}/gpus/fakegpu[0-{self.gpus_per_node - 1}]"]
        (self.conf.parent / "gres.conf").write_text("\n".join(gres) + "\n")

    # ------------------------------------------------------------- daemons
    def _spawn(self, cmd: list[str], pid_file: Path, what: str) -> None:
        log = self.root / "log" / f"{what}.out"
        with open(log, "ab") as out:
            proc = subprocess.run(cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, timeout=60, check=False)
        self.started.append(pid_file)
        if proc.returncode != 0:
            raise SlurmSetupError(f"{what} failed to start (rc {proc.returncode}); "
                                  f"see {log}: {self._tail(log)}")
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if pid_file.exists() and pid_file.read_text().strip():
                return
            time.sleep(0.1)
        raise SlurmSetupError(f"{what} wrote no pid file {pid_file}; {self._tail(log)}")

    @staticmethod
    def _tail(path: Path, n: int = 1500) -> str:
        try:
            return path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def start(self, timeout_s: float = 60) -> None:
        """Start munged, slurmctld and one slurmd per node; wait until all idle."""
        self.write_config()
        self._spawn(["/usr/sbin/munged", "--force",
                     f"--socket={self.munge_socket}",
                     f"--key-file={self.root / 'munge' / 'munge.key'}",
                     f"--pid-file={self.pid_file('munged')}",
                     f"--log-file={self.root / 'log' / 'munged.log'}",
                     f"--seed-file={self.root / 'munge' / 'munged.seed'}"],
                    self.pid_file("munged"), "munged")
        cred = subprocess.run(["munge", "-S", str(self.munge_socket), "-n"],
                              capture_output=True, timeout=10, check=False)
        check = subprocess.run(["unmunge", "-S", str(self.munge_socket)], input=cred.stdout,
                               capture_output=True, timeout=10, check=False)
        if cred.returncode != 0 or check.returncode != 0:
            raise SlurmSetupError(f"munge self-test failed: {cred.stderr!r} {check.stderr!r}")
        self._spawn(["/usr/sbin/slurmctld", "-c", "-f", str(self.conf)],
                    self.pid_file("slurmctld"), "slurmctld")
        for name in self.node_names:
            self._spawn(["/usr/sbin/slurmd", "-N", name, "-f", str(self.conf)],
                        self.root / "run" / f"slurmd-{name}.pid", f"slurmd-{name}")
        self.wait_idle(timeout_s)

    def run(self, *args: str, check: bool = True, timeout: float = 30) -> str:
        """Run a Slurm client command against this cluster; return stdout."""
        proc = subprocess.run(list(args), env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=False)
        if check and proc.returncode != 0:
            raise SlurmSetupError(f"{' '.join(args)} failed (rc {proc.returncode}): "
                                  f"{proc.stderr.strip()}")
        return proc.stdout

    def wait_idle(self, timeout_s: float = 60) -> None:
        """Wait until every node answers and is idle (or mixed/allocated)."""
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            try:
                last = self.run("sinfo", "-N", "-h", "-o", "%N %t", check=True, timeout=10)
            except (SlurmSetupError, subprocess.TimeoutExpired) as exc:
                last = str(exc)
            states = dict(line.split() for line in last.splitlines() if line.strip())
            if (sorted(states) == sorted(self.node_names)
                    and all(s in ("idle", "mix", "alloc") for s in states.values())):
                return
            time.sleep(0.5)
        raise SlurmSetupError(f"nodes not idle after {timeout_s:.0f} s: {last!r}; "
                              f"{self._tail(self.root / 'log' / 'slurmctld.log')}")

    def cancel_all(self) -> None:
        """Cancel every job of the cluster (slurmd waits for job steps when stopping)."""
        try:
            self.run("scancel", "--full", "--user=root", check=False, timeout=15)
            self.run("scancel", "--user=root", check=False, timeout=15)
        except (subprocess.TimeoutExpired, OSError):
            pass

    def _pid_files(self) -> list[Path]:
        files = [self.root / "run" / f"slurmd-{n}.pid" for n in self.node_names]
        files += [self.pid_file("slurmctld"), self.pid_file("munged")]
        return files

    def stop(self, timeout_s: float = 20) -> list[int]:
        """Stop every daemon of this cluster by pid file; return pids still alive.

        Jobs are cancelled first, then slurmd, slurmctld and munged get SIGTERM,
        then SIGKILL after `timeout_s`. Job scripts left behind by a killed slurmd
        (slurmstepd children) are found through /proc by their cwd/env and killed.
        """
        if self.conf.exists() and self.pid_file("slurmctld").exists():
            self.cancel_all()
            self._wait_no_jobs(10)
        alive: list[int] = []
        for pid_file in self._pid_files():
            try:
                pid = int(pid_file.read_text().strip())
            except (OSError, ValueError):
                continue
            if not _pid_alive(pid) or not self._is_ours(pid):
                continue
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            while _pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
                time.sleep(0.2)
            if _pid_alive(pid):
                alive.append(pid)
        self._kill_strays()
        return alive

    def _is_ours(self, pid: int) -> bool:
        """True if `pid` is a daemon started with this cluster's files."""
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            return False
        return str(self.root).encode() in cmdline

    def _wait_no_jobs(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                out = self.run("squeue", "-h", "-t", "RUNNING,COMPLETING,CONFIGURING",
                               "-o", "%i", check=True, timeout=10)
            except (SlurmSetupError, subprocess.TimeoutExpired, OSError):
                return
            if not out.strip():
                return
            time.sleep(0.5)

    def _kill_strays(self) -> None:
        """Kill leftover slurmstepd and job processes of this cluster.

        Only processes whose environment names our SLURM_CONF *and* that are a
        slurmstepd or carry SLURM_JOB_ID (job scripts and their children); never
        this process or its ancestors.
        """
        marker = f"SLURM_CONF={self.conf}".encode()
        spared = _ancestors(os.getpid())
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) in spared:
                continue
            try:
                environ = (proc / "environ").read_bytes().split(b"\0")
                cmdline = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if marker not in environ:
                continue
            is_job = any(v.startswith(b"SLURM_JOB_ID=") for v in environ)
            if is_job or b"slurmstepd" in cmdline:
                try:
                    os.kill(int(proc.name), signal.SIGKILL)
                except OSError:
                    pass

    def daemons_alive(self) -> list[int]:
        """Pids from our pid files that still run (for the no-leftovers check)."""
        out = []
        for pid_file in self._pid_files():
            try:
                pid = int(pid_file.read_text().strip())
            except (OSError, ValueError):
                continue
            if _pid_alive(pid) and self._is_ours(pid):
                out.append(pid)
        return out


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in ("start", "stop", "install"):
        print("usage: slurm_cluster.py start|stop DIR | install -", file=sys.stderr)
        return 2
    if argv[1] == "install":
        if missing_binaries():
            install_packages()
        return 0
    cluster = LocalSlurm(Path(argv[2]))
    if argv[1] == "start":
        try:
            cluster.start()
        except SlurmSetupError:
            cluster.stop()
            raise
        print(f"SLURM_CONF={cluster.conf}")
    else:
        left = cluster.stop()
        if left:
            print(f"still alive: {left}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
