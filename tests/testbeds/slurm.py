"""A throw-away, real Slurm cluster on this machine: one slurmctld and four slurmd.

Debian's Slurm 22.05 is built with multiple-slurmd support, so every node
(``gpu1`` .. ``gpu4``) is its own ``slurmd -N NAME`` on its own loopback port,
each with eight fake GPUs (character devices made with ``mknod``).  Recipe and
traps: ``docs/TESTBEDS.md`` ("Slurm") of the shared docs.

Usage::

    with SlurmTestbed() as tb:
        subprocess.run(["sinfo"], env=tb.env)
        tb.kill_slurmd("gpu3")      # node goes DOWN after ~SlurmdTimeout
        tb.restart_slurmd("gpu3")   # ReturnToService=2 brings it back

Every daemon is started with ``SLURM_TESTBED_DIR=<its temp dir>`` in its
environment; slurmstepd (forked by slurmd) inherits it.  Teardown, and the
clean-up of leftovers from an earlier run that died, find processes by that
marker, so only processes this test bed started are ever killed.

Stdlib only; needs root (slurmd launches jobs, mknod makes device nodes).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

MARKER = "SLURM_TESTBED_DIR"
DIR_PREFIX = "slurm-testbed-"
BINARIES = ("slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scontrol", "scancel")
INSTALL_HINT = (
    "Slurm is not installed on this machine (missing: {missing}). "
    "Run scripts/install-slurm.sh (as root) to install slurmctld, slurmd and the clients."
)

# Node features: racks of two nodes, RDMA on every node.  The portal discovers
# racks and RDMA from these.
DEFAULT_FEATURES = {
    "gpu1": ("rack1", "rdma"),
    "gpu2": ("rack1", "rdma"),
    "gpu3": ("rack2", "rdma"),
    "gpu4": ("rack2", "rdma"),
}


class SlurmTestbedError(RuntimeError):
    pass


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None]


def _free_ports(count: int) -> list[int]:
    """Ports the kernel hands out as free right now (held open together so they differ)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _environ_of(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


def _process_table() -> dict[int, tuple[int, list[bytes]]]:
    """pid -> (parent pid, environment entries) for every visible process."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            stat_fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            ppid = int(stat_fields[1])
        except (OSError, IndexError, ValueError):
            continue
        table[pid] = (ppid, _environ_of(pid).split(b"\0"))
    return table


def marked_pids(marker_value: str | None = None) -> list[int]:
    """Pids carrying the test-bed marker in their environment, plus all their descendants.

    With ``marker_value`` only that test bed's processes, else any test bed's.
    """
    if marker_value:
        wanted = f"{MARKER}={marker_value}".encode()

        def match(item: bytes) -> bool:
            return item == wanted

    else:
        prefix = f"{MARKER}={tempfile.gettempdir()}/{DIR_PREFIX}".encode()

        def match(item: bytes) -> bool:
            return item.startswith(prefix)

    table = _process_table()
    me = os.getpid()
    found = {pid for pid, (_, env) in table.items() if pid != me and any(map(match, env))}
    grew = True
    while grew:  # add descendants (job scripts under slurmstepd carry the user's env)
        new = {pid for pid, (ppid, _) in table.items() if ppid in found and pid not in found}
        new.discard(me)
        found |= new
        grew = bool(new)
    return sorted(found)


def _kill_and_wait(
    pids: Iterable[int],
    timeout: float = 5.0,
    signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGKILL),
) -> None:
    pids = list(pids)
    for sig in signals:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pids = [p for p in pids if _alive(p)]
            if not pids:
                return
            time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def wait_until(pred, timeout: float, what: str, interval: float = 0.2):
    """Poll ``pred`` until it returns something truthy; return that, or raise on timeout."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while True:
        try:
            value = pred()
            if value:
                return value
        except (subprocess.TimeoutExpired, OSError) as exc:
            last_exc = exc
        if time.monotonic() > deadline:
            extra = f" (last error: {last_exc})" if last_exc else ""
            raise SlurmTestbedError(f"timed out after {timeout:.0f}s waiting for {what}{extra}")
        time.sleep(interval)


def cleanup_stale_testbeds() -> None:
    """Kill daemons (and job steps) left by an earlier test bed whose process died.

    A test bed is stale when the pid written in its ``owner.pid`` is gone.
    """
    tmp = Path(tempfile.gettempdir())
    for d in tmp.glob(f"{DIR_PREFIX}*"):
        owner = d / "owner.pid"
        try:
            owner_pid = int(owner.read_text().strip())
        except (OSError, ValueError):
            owner_pid = None
        if owner_pid is not None and _alive(owner_pid):
            # A live session owns it: another one, or this one (a second test bed of this
            # session, e.g. a module importing the session fixture, must not kill the first).
            continue
        _kill_and_wait(marked_pids(str(d)), signals=(signal.SIGKILL,))
        shutil.rmtree(d, ignore_errors=True)


class SlurmTestbed:
    """A real slurmctld plus one slurmd per node, all on loopback, in a temp dir."""

    def __init__(
        self,
        nodes: Iterable[str] = ("gpu1", "gpu2", "gpu3", "gpu4"),
        gpus_per_node: int = 8,
        features: dict[str, Iterable[str]] | None = None,
        partition: str = "gpu",
        slurmd_timeout: int = 6,
        cred_expire: int = 5,
        keep_dir: bool = False,
    ) -> None:
        self.nodes = list(nodes)
        self.gpus_per_node = gpus_per_node
        self.features = {
            n: tuple((features or DEFAULT_FEATURES).get(n, ("rack1", "rdma"))) for n in self.nodes
        }
        self.partition = partition
        self.slurmd_timeout = slurmd_timeout
        self.cred_expire = cred_expire
        self.keep_dir = keep_dir
        self.dir: Path | None = None
        self.ctld_port = 0
        self.node_ports: dict[str, int] = {}
        self._ctld: subprocess.Popen | None = None
        self._slurmd: dict[str, subprocess.Popen] = {}
        self._devnull = None
        self._logs: list = []

    # -- public API --------------------------------------------------------------------
    @property
    def conf(self) -> Path:
        assert self.dir is not None, "test bed not started"
        return self.dir / "etc" / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """Environment for Slurm client calls (SLURM_CONF points at this cluster)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf)
        return env

    def start(self, timeout: float = 30.0) -> SlurmTestbed:
        missing = missing_binaries()
        if missing:
            raise SlurmTestbedError(INSTALL_HINT.format(missing=", ".join(missing)))
        if os.geteuid() != 0:
            raise SlurmTestbedError("the Slurm test bed needs root (slurmd, mknod)")
        cleanup_stale_testbeds()
        self.dir = Path(tempfile.mkdtemp(prefix=DIR_PREFIX))
        (self.dir / "owner.pid").write_text(str(os.getpid()))
        try:
            self._write_config()
            self._devnull = open(os.devnull, "wb")  # noqa: SIM115 - lives as long as the daemons
            self._ctld = self._spawn(["slurmctld", "-D", "-i", "-f", str(self.conf)], "slurmctld")
            self._wait(self._controller_up, timeout, "slurmctld to answer")
            for node in self.nodes:
                self._start_slurmd(node)
            self.wait_nodes_idle(self.nodes, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.dir is None:
            return
        try:
            if self._ctld is not None and self._ctld.poll() is None:
                self._drain_queue()
                with contextlib.suppress(subprocess.SubprocessError, OSError):
                    self.scontrol("shutdown", timeout=10)
                for proc in [self._ctld, *self._slurmd.values()]:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=5)
        finally:
            procs = [self._ctld, *self._slurmd.values()]
            _kill_and_wait(p.pid for p in procs if p is not None and p.poll() is None)
            for p in procs:
                if p is not None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        p.wait(timeout=1)
            # slurmstepd and job processes of killed slurmd, anything else we started
            _kill_and_wait(marked_pids(str(self.dir)))
            for fh in [self._devnull, *self._logs]:
                if fh is not None:
                    fh.close()
            self._devnull, self._logs = None, []
            if not self.keep_dir:
                shutil.rmtree(self.dir, ignore_errors=True)
            self._ctld = None
            self._slurmd = {}
            self.dir = None

    def __enter__(self) -> SlurmTestbed:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def kill_slurmd(self, node: str, sig: int = signal.SIGKILL) -> None:
        """Kill one node's slurmd (as a crash would); its running job steps stay alive."""
        proc = self._slurmd.pop(node)
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        proc.wait(timeout=10)

    def restart_slurmd(self, node: str, timeout: float = 30.0, wait_idle: bool = False) -> None:
        """Start the node's slurmd again (killing a running one first)."""
        if node in self._slurmd:
            self.kill_slurmd(node, signal.SIGTERM)
        self._start_slurmd(node)
        self._wait(lambda: node in self._responding_nodes(), timeout, f"slurmd {node} to register")
        if wait_idle:
            self.wait_nodes_idle([node], timeout)

    def reset(self, timeout: float = 30.0) -> None:
        """Back to a clean cluster between tests: no jobs, every slurmd up, nodes idle.

        Cancels every job, resumes drained/down nodes and restarts killed slurmd.
        """
        assert self.dir is not None, "test bed not started"
        for node in self.nodes:  # first, so jobs on a dead node can finish cancelling
            if self.slurmd_pid(node) is None:
                self._slurmd.pop(node, None)
                self.restart_slurmd(node, timeout)
        self._drain_queue(timeout)
        for node, state in self.node_states().items():
            if state != "idle" and any(w in state for w in ("drain", "down", "fail")):
                self.run("scontrol", "update", f"nodename={node}", "state=resume")
        self.wait_nodes_idle(self.nodes, timeout)

    def slurmd_pid(self, node: str) -> int | None:
        proc = self._slurmd.get(node)
        return proc.pid if proc is not None and proc.poll() is None else None

    def run(self, *args: str, timeout: float = 15) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(args), env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )

    def scontrol(self, *args: str, timeout: float = 15) -> str:
        cp = self.run("scontrol", *args, timeout=timeout)
        if cp.returncode != 0:
            raise SlurmTestbedError(f"scontrol {' '.join(args)}: {cp.stderr.strip()}")
        return cp.stdout

    def node_states(self) -> dict[str, str]:
        """Node name -> sinfo long state (e.g. ``idle``, ``mixed``, ``down*``, ``drained``)."""
        cp = self.run("sinfo", "-h", "-N", "-o", "%N %T")
        states = {}
        for line in cp.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2:
                states[parts[0]] = parts[1]
        return states

    def wait_nodes_idle(self, nodes: Iterable[str], timeout: float = 30.0) -> None:
        want = set(nodes)
        self._wait(
            lambda: all(self.node_states().get(n) == "idle" for n in want),
            timeout,
            f"nodes {sorted(want)} to be idle",
        )

    def log(self, name: str = "slurmctld") -> str:
        """Tail of a daemon log (``slurmctld`` or a node name) for failure messages."""
        assert self.dir is not None
        path = self.dir / "log" / f"{name}.log"
        try:
            return path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    # -- internals ---------------------------------------------------------------------
    def _spawn(self, argv: list[str], logname: str) -> subprocess.Popen:
        assert self.dir is not None
        env = self.env
        env[MARKER] = str(self.dir)
        log = open(self.dir / "log" / f"{logname}.stderr", "ab")  # noqa: SIM115 - closed in stop
        self._logs.append(log)
        return subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._devnull,
            stderr=log,
            start_new_session=True,
        )

    def _start_slurmd(self, node: str) -> None:
        proc = self._spawn(["slurmd", "-D", "-f", str(self.conf), "-N", node], node)
        self._slurmd[node] = proc

    def _controller_up(self) -> bool:
        if self._ctld is not None and self._ctld.poll() is not None:
            raise SlurmTestbedError(f"slurmctld exited:\n{self.log()}")
        return self.run("scontrol", "ping", timeout=5).returncode == 0

    def _responding_nodes(self) -> set[str]:
        return {n for n, s in self.node_states().items() if not s.endswith("*")}

    @staticmethod
    def _wait(pred, timeout: float, what: str, interval: float = 0.2):
        return wait_until(pred, timeout, what, interval)

    def _drain_queue(self, timeout: float = 20.0) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self.run("scancel", "--full", "--signal=KILL", "--state=RUNNING", timeout=10)
            self.run("scancel", "--state=PENDING", timeout=10)
            self.run("scancel", "--user", getpass.getuser(), timeout=10)

        def empty() -> bool:  # squeue without -t lists only active (incl. COMPLETING) jobs
            cp = self.run("squeue", "-h", "-o", "%i %T", timeout=5)
            return cp.returncode == 0 and not cp.stdout.strip()

        with contextlib.suppress(SlurmTestbedError):
            self._wait(empty, timeout, "the queue to drain")

    def _write_config(self) -> None:
        d = self.dir
        assert d is not None
        for sub in ("etc", "state", "spool", "log", "run", "dev"):
            (d / sub).mkdir()
        d.chmod(0o755)
        for i in range(self.gpus_per_node):
            dev = d / "dev" / f"nvidia{i}"
            os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(195, i))
        ports = _free_ports(1 + len(self.nodes))
        self.ctld_port, node_ports = ports[0], ports[1:]
        self.node_ports = dict(zip(self.nodes, node_ports, strict=True))
        user = getpass.getuser()
        last_gpu = self.gpus_per_node - 1
        gpu_files = f"{d}/dev/nvidia[0-{last_gpu}]" if last_gpu > 0 else f"{d}/dev/nvidia0"
        lines = [
            "# throw-away test bed written by tests/testbeds/slurm.py",
            "ClusterName=testbed",
            "SlurmctldHost=localhost",
            f"SlurmctldPort={self.ctld_port}",
            f"SlurmUser={user}",
            "AuthType=auth/none",
            # cred_expire also sets how long a requeued job waits before it may start
            # again (reason BeginTime): default 120 s, far too long for tests.
            f"AuthInfo=cred_expire={self.cred_expire}",
            "CredType=cred/none",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "GresTypes=gpu",
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=bf_interval=1",
            f"SlurmdTimeout={self.slurmd_timeout}",
            f"MessageTimeout={max(2, min(10, self.slurmd_timeout // 2))}",
            "MinJobAge=600",
            "KillWait=5",
            "MailProg=/bin/true",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "SwitchType=switch/none",
            "MpiDefault=none",
            f"StateSaveLocation={d}/state",
            f"SlurmdSpoolDir={d}/spool/%n",
            f"SlurmctldLogFile={d}/log/slurmctld.log",
            f"SlurmdLogFile={d}/log/%n.log",
            f"SlurmctldPidFile={d}/run/slurmctld.pid",
            f"SlurmdPidFile={d}/run/slurmd-%n.pid",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
        ]
        for node in self.nodes:
            feats = ",".join(self.features[node])
            lines.append(
                f"NodeName={node} NodeHostname=localhost NodeAddr=127.0.0.1 "
                f"Port={self.node_ports[node]} CPUs=16 RealMemory=64000 "
                f"Gres=gpu:{self.gpus_per_node} Features={feats} State=UNKNOWN"
            )
        lines.append(
            f"PartitionName={self.partition} Nodes={','.join(self.nodes)} Default=YES "
            "MaxTime=INFINITE State=UP OverSubscribe=NO"
        )
        (d / "etc" / "slurm.conf").write_text("\n".join(lines) + "\n")
        (d / "etc" / "gres.conf").write_text(
            "AutoDetect=off\n"
            + "".join(f"NodeName={n} Name=gpu File={gpu_files}\n" for n in self.nodes)
        )
        for node in self.nodes:
            (d / "spool" / node).mkdir()
