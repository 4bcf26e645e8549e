"""A real two-node Ray cluster on this machine, for the ``--ray`` tests.

Each node is one ``ray start`` (the head with ``--head``, the other with
``--address``) on a loopback address of its own (127.0.0.2, 127.0.0.3), with one CPU,
its own free ports and its own temporary folder: all its traffic stays on loopback.
``ray start`` is started in a new session, so the node's daemons (GCS, raylet,
agents) are in that node's process group, and its workers are their descendants:
:meth:`stop` ends those processes and nothing else (never ``ray stop``, which would
stop every Ray on the machine).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Self

RAY = Path(sys.executable).parent / "ray"
HOST = "127.0.0.1"
# the nodes' addresses: loopback, but not 127.0.0.1, which Ray replaces by this
# machine's network address (so that other hosts could reach it)
NODE_IPS = ("127.0.0.2", "127.0.0.3")


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 just now."""
    socks, ports = [], []
    while len(ports) < n:
        s = socket.socket()
        s.bind((HOST, 0))
        socks.append(s)
        port = s.getsockname()[1]
        if port not in ports:
            ports.append(port)
    for s in socks:
        s.close()
    return ports


def _worker_range(n: int = 200) -> tuple[int, int]:
    """A run of ``n`` ports that are free (for one node's workers and drivers: Ray
    gives each a port of the range and takes a while to reuse one)."""
    for _ in range(50):
        base = free_ports(1)[0]
        if base + n > 65000:
            continue
        ok = True
        for p in range(base, base + n):
            with socket.socket() as s:
                try:
                    s.bind((HOST, p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base, base + n - 1
    raise RuntimeError(f"no run of {n} free ports for Ray workers")


class LocalRayCluster:
    """``with LocalRayCluster() as c: ... c.address ...``; :meth:`stop` always cleans up."""

    def __init__(self) -> None:
        self.groups: list[int] = []
        self.folders: list[str] = []
        self.ranges: list[tuple[int, int]] = []  # the nodes' worker port ranges
        self.address = ""
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0",
                    "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
        self.log = ""

    def _start(self, head: bool) -> None:
        folder = tempfile.mkdtemp(prefix="ppray", dir="/tmp")  # (short: socket paths)
        self.folders.append(folder)
        lo, hi = _worker_range()
        self.ranges.append((lo, hi))
        # the node's own ports outside every node's worker range (chosen apart, they
        # could meet: 'worker_ports is trying to use a port number ... used by other
        # components')
        ports: list[int] = []
        while len(ports) < 8:
            ports += [p for p in free_ports(8) if p not in ports
                      and not any(a <= p <= b for a, b in self.ranges)]
        (gcs, nm, om, agent, agent_grpc, env_agent, metrics, dash) = ports[:8]
        ip = NODE_IPS[len(self.folders) - 1]
        cmd = [str(RAY), "start", "--num-cpus", "1", "--node-ip-address", ip,
               "--node-manager-port", str(nm), "--object-manager-port", str(om),
               "--min-worker-port", str(lo), "--max-worker-port", str(hi),
               "--dashboard-agent-listen-port", str(agent),
               "--dashboard-agent-grpc-port", str(agent_grpc),
               "--runtime-env-agent-port", str(env_agent), "--metrics-export-port", str(metrics),
               "--object-store-memory", str(80 * 2**20), "--disable-usage-stats",
               "--log-style", "record", "--log-color", "false"]
        if head:
            cmd += ["--head", "--port", str(gcs), "--include-dashboard", "false",
                    "--dashboard-port", str(dash), "--temp-dir", folder]
            self.address = f"{ip}:{gcs}"
        else:
            cmd += ["--address", self.address, "--temp-dir", folder]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=self.env, start_new_session=True)
        self.groups.append(proc.pid)
        out, _ = proc.communicate(timeout=120)
        self.log += out
        if proc.returncode != 0:
            raise RuntimeError(f"ray start failed ({proc.returncode}):\n{out[-3000:]}")

    def start(self) -> LocalRayCluster:
        try:
            self._start(head=True)
            self._start(head=False)
            self._wait_nodes(2)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_nodes(self, n: int, timeout: float = 60.0) -> None:
        code = (f"import ray; ray.init(address={self.address!r}, logging_level='ERROR'); "
                "print(sum(1 for x in ray.nodes() if x['Alive']))")
        deadline = time.monotonic() + timeout
        while True:
            r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               env=self.env, timeout=120, check=False)
            alive = r.stdout.strip().splitlines()[-1:] if r.returncode == 0 else []
            if alive and alive[0].isdigit() and int(alive[0]) >= n:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"Ray cluster has {alive or '?'} of {n} nodes:\n{r.stderr}")
            time.sleep(1.0)

    def pids(self) -> list[int]:
        """Every live process of the cluster: those of the nodes' process groups and
        their descendants (Ray's worker processes run in process groups of their own)."""
        parent, group = {}, {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            pid = int(entry.name)
            parent[pid], group[pid] = int(fields[1]), int(fields[2])
        ours = {pid for pid, g in group.items() if g in self.groups}
        grew = True
        while grew:
            kids = {pid for pid, pp in parent.items() if pp in ours and pid not in ours}
            ours |= kids
            grew = bool(kids)
        return sorted(ours)

    def task_workers(self, title: str) -> list[int]:
        """The worker processes running a task whose process title starts with ``title``."""
        out = []
        for pid in self.pids():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if cmd.startswith(title):
                out.append(pid)
        return out

    def stop(self) -> None:
        """End every process of the cluster (SIGTERM, then SIGKILL) and remove its folders."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            workers = self.pids()  # (before their raylet goes: then they are orphans)
            for g in self.groups:
                try:
                    os.killpg(g, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            for pid in workers:
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            deadline = time.monotonic() + 10.0
            while self._alive() and time.monotonic() < deadline:
                time.sleep(0.2)
            if not self._alive():
                break
        for f in self.folders:
            shutil.rmtree(f, ignore_errors=True)

    def _alive(self) -> bool:
        """Processes of the cluster that are not zombies."""
        for pid in self.pids():
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z":
                return True
        return False

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
