"""Shared pieces of the benchmarks: brokers started and stopped by the script, /proc readings, percentiles.

Every broker a benchmark starts lives in a temporary directory on free loopback ports and is stopped
by the script that started it, also on Ctrl-C or when the run-time bound fires:

- Sodalite through ``scripts/serve`` (the way users start it), one config file, ``--sync FULL|NORMAL``;
- the null peer (``benchmarks/null_peer.py``) as its own process, so its CPU is measured like a broker's;
- RabbitMQ as a private node of Debian's ``rabbitmq-server`` (its own node name, data directory,
  AMQP, distribution and epmd ports), so the machine's default service is neither needed nor touched.

Broker CPU is user + system time of the broker process and all its descendants, all threads, read
from ``/proc/<pid>/stat``; RSS is the sum of ``VmRSS`` over the same processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
RABBIT_SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
RABBIT_CTL = Path("/usr/lib/rabbitmq/bin/rabbitmqctl")

_CLK = os.sysconf("SC_CLK_TCK")


# ---- /proc -----------------------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def process_tree(pid: int) -> list[int]:
    """``pid`` and every live descendant."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(entry))  # field 4 of stat(5): ppid
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(children.get(p, ()))
    return tree


def cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` and its descendants (all threads)."""
    total = 0.0
    for p in process_tree(pid):
        fields = _stat_fields(p)
        if fields is not None:
            total += (int(fields[11]) + int(fields[12])) / _CLK  # fields 14 and 15 of stat(5)
    return total


def rss_bytes(pid: int) -> int:
    total = 0
    for p in process_tree(pid):
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
    return total


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---- figures ----------------------------------------------------------------------------------


def pick(ordered: Sequence[float], p: float) -> float:
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def percentiles(samples: Sequence[float], points: Sequence[float] = (0.5, 0.9, 0.99)) -> str:
    """``p50 1.23 ms, ...`` for samples in seconds."""
    if not samples:
        return "n/a"
    ordered = sorted(samples)
    parts = [f"p{100 * p:g} {pick(ordered, p) * 1000:.2f}" for p in points]
    return ", ".join(parts) + f", max {ordered[-1] * 1000:.2f} ms"


def mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB"


def span(values: Sequence[float], fmt: str = "{:,.0f}") -> str:
    """A range ``lo-hi`` (or one value) for figures of several rounds."""
    if not values:
        return "n/a"
    lo, hi = min(values), max(values)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}\u2013{fmt.format(hi)}"


@dataclass
class Meter:
    """Wall time and broker CPU over one phase."""

    pid: int
    cpu0: float = 0.0
    t0: float = 0.0
    elapsed: float = 0.0
    cpu: float = 0.0

    def start(self) -> None:
        self.cpu0, self.t0 = cpu_seconds(self.pid), time.perf_counter()

    def stop(self, at: float | None = None) -> None:
        self.cpu = cpu_seconds(self.pid) - self.cpu0
        self.elapsed = (at if at is not None else time.perf_counter()) - self.t0


# ---- run-time bound and cleanup --------------------------------------------------------------


class Cleanup:
    """Stops what was started, in reverse order, once: at exit, on Ctrl-C, SIGTERM or the deadline."""

    def __init__(self) -> None:
        self._actions: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def push(self, action: Callable[[], None]) -> None:
        self._actions.append(action)

    def run(self) -> None:
        with self._lock:
            while self._actions:
                action = self._actions.pop()
                try:
                    action()
                except Exception as exc:  # cleanup goes on whatever one step says
                    print(f"cleanup: {exc}", file=sys.stderr)


@contextlib.contextmanager
def bounded_run(max_seconds: float) -> Iterator[Cleanup]:
    """A cleanup stack; SIGTERM and the run-time bound turn into KeyboardInterrupt in the main thread."""
    cleanup = Cleanup()

    def on_signal(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    def on_deadline(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"run-time bound of {max_seconds:.0f} s reached")

    old_term = signal.signal(signal.SIGTERM, on_signal)
    old_alarm = signal.signal(signal.SIGALRM, on_deadline)
    signal.alarm(max(1, int(max_seconds)))
    try:
        yield cleanup
    except KeyboardInterrupt as exc:
        print(f"\nstopped: {exc or 'Ctrl-C'}; cleaning up", file=sys.stderr)
        raise SystemExit(130) from None
    finally:
        signal.alarm(0)
        cleanup.run()
        signal.signal(signal.SIGTERM, old_term)
        signal.signal(signal.SIGALRM, old_alarm)


def temp_dir(cleanup: Cleanup, prefix: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    cleanup.push(lambda: shutil.rmtree(path, ignore_errors=True))
    return path


def stop_process(proc: subprocess.Popen[str], timeout: float = 15.0) -> None:
    """SIGTERM the process group we started, then SIGKILL whatever is left of it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)


def _drain(stream: object) -> None:
    """Keep reading a child's pipe so it never blocks on a full one."""
    threading.Thread(target=lambda: [None for _ in stream], daemon=True).start()  # type: ignore[attr-defined]


# ---- brokers ----------------------------------------------------------------------------------


@dataclass
class Broker:
    """A running broker: the process whose tree is measured, and how clients reach it."""

    name: str
    proc: subprocess.Popen[str]
    data_dir: Path
    connection_string: str = ""
    amqp_port: int = 0
    pid: int = 0
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def measured_pid(self) -> int:
        return self.pid or self.proc.pid


def _await_connection_string(proc: subprocess.Popen[str], timeout: float, what: str) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        match = re.search(r"Connection string: (\S+)", line)
        if match:
            _drain(proc.stdout)
            return match.group(1)
        if time.monotonic() > deadline:
            break
    raise RuntimeError(f"{what} did not start (exit code {proc.poll()})")


def sodalite_config(path: Path, queues: Sequence[str], lock_duration: str = "PT5M") -> None:
    namespace = {"Name": "bench", "Queues": [
        {"Name": q, "Properties": {"LockDuration": lock_duration, "MaxSizeInMegabytes": 1024 * 80}}
        for q in queues]}
    path.write_text(json.dumps({"UserConfig": {"Namespaces": [namespace]}}))


def start_sodalite(cleanup: Cleanup, data_dir: Path, sync_mode: str, queues: Sequence[str],
                   name: str | None = None, extra_args: Sequence[str] = (), root: Path = ROOT) -> Broker:
    """``scripts/serve`` on a free port; a data directory that already holds a store is reopened.
    ``root``: the checkout whose ``scripts/serve`` runs (another one for an A/B against an earlier commit)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    config = data_dir / "Config.json"
    if not config.exists():
        sodalite_config(config, queues)
    proc = subprocess.Popen(
        [str(root / "scripts" / "serve"), "--host", "127.0.0.1", "--port", "0", "--data-dir", str(data_dir / "data"),
         "--config", str(config), "--sync", sync_mode, "--admin-port", "-1", "--http-port", "-1",
         "--amqps-port", "-1", *extra_args],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
        # the checkout's own sources, whatever the shared venv's editable install points at
        env={**os.environ, "PYTHONPATH": str(root / "src")})
    broker = Broker(name or f"Sodalite {sync_mode}", proc, data_dir)
    cleanup.push(lambda: stop_process(proc))
    broker.connection_string = _await_connection_string(proc, 120, "the Sodalite broker")
    return broker


def kill9(broker: Broker) -> None:
    """``kill -9`` the measured broker process (the benchmark's own child), and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(broker.measured_pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(broker.proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        broker.proc.wait(10)


def start_null_peer(cleanup: Cleanup) -> Broker:
    proc = subprocess.Popen([sys.executable, str(BENCH / "null_peer.py"), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    broker = Broker("null peer", proc, Path("/nonexistent"))
    cleanup.push(lambda: stop_process(proc))
    broker.connection_string = _await_connection_string(proc, 30, "the null peer")
    return broker


def ensure_rabbitmq() -> None:
    """Install Debian's rabbitmq-server if it is missing (the benchmark says so)."""
    if RABBIT_SERVER.exists():
        return
    print("rabbitmq-server is not installed: running apt-get update && apt-get install -y rabbitmq-server",
          flush=True)
    subprocess.run(["apt-get", "update"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["apt-get", "install", "-y", "rabbitmq-server"], check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    # Debian starts its own service after the install; this benchmark runs a private node instead.


def start_rabbitmq(cleanup: Cleanup, base: Path, node: str | None = None, ports: dict[str, int] | None = None
                   ) -> Broker:
    """A private RabbitMQ node in ``base`` (reused as is when it already holds one: a restart)."""
    ensure_rabbitmq()
    base.mkdir(parents=True, exist_ok=True)
    if ports is None:
        ports = {"amqp": free_port(), "dist": free_port(), "epmd": free_port()}
    node = node or f"sodalite-bench-{os.getpid()}-{ports['amqp']}@localhost"
    (base / "enabled_plugins").write_text("[].\n")
    (base / "rabbitmq.conf").write_text("loopback_users = none\nvm_memory_high_watermark.relative = 0.6\n")
    env = {
        **os.environ, "HOME": str(base), "RABBITMQ_NODENAME": node, "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
        "RABBITMQ_NODE_PORT": str(ports["amqp"]), "RABBITMQ_DIST_PORT": str(ports["dist"]),
        "ERL_EPMD_PORT": str(ports["epmd"]), "ERL_EPMD_ADDRESS": "127.0.0.1",
        "RABBITMQ_MNESIA_BASE": str(base / "mnesia"), "RABBITMQ_LOG_BASE": str(base / "log"),
        "RABBITMQ_PID_FILE": str(base / "rabbit.pid"), "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq.conf"),
        "RABBITMQ_ADVANCED_CONFIG_FILE": str(base / "advanced.config"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
        "RABBITMQ_CONF_ENV_FILE": str(base / "rabbitmq-env.conf"), "RABBITMQ_PLUGINS_EXPAND_DIR": str(base / "plugins"),
    }
    env.pop("RABBITMQ_ALLOW_INPUT", None)
    proc = subprocess.Popen([str(RABBIT_SERVER)], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    broker = Broker("RabbitMQ quorum", proc, base, amqp_port=ports["amqp"],
                    extra={"node": node, **{k: str(v) for k, v in ports.items()}})

    def stop() -> None:
        stop_process(proc, timeout=30)
        # the epmd this node started on its private port
        subprocess.run(["epmd", "-kill"], env={**os.environ, "ERL_EPMD_PORT": str(ports["epmd"])},
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)

    cleanup.push(stop)
    wait_for_rabbitmq(broker, 120)
    return broker


def wait_for_rabbitmq(broker: Broker, timeout: float) -> None:
    import pika

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if broker.proc.poll() is not None:
            raise RuntimeError(f"rabbitmq-server exited with {broker.proc.returncode}; see {broker.data_dir}/log")
        try:
            pika.BlockingConnection(rabbit_params(broker)).close()
            break
        except Exception:
            time.sleep(0.3)
    else:
        raise RuntimeError("RabbitMQ did not start in time")
    beams = [p for p in process_tree(broker.proc.pid) if _comm(p).startswith("beam")]
    broker.pid = beams[0] if beams else 0


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def rabbit_params(broker: Broker) -> object:
    import pika

    return pika.ConnectionParameters("127.0.0.1", broker.amqp_port, heartbeat=0, blocked_connection_timeout=300)


def declare_quorum(broker: Broker, *queues: str) -> None:
    import pika

    conn = pika.BlockingConnection(rabbit_params(broker))
    ch = conn.channel()
    for q in queues:
        ch.queue_declare(q, durable=True, arguments={"x-queue-type": "quorum"})
    conn.close()


def rabbit_cpu_pid(broker: Broker) -> int:
    """RabbitMQ's CPU: beam.smp and its children (erl_child_setup, inet_gethost)."""
    return broker.pid or broker.proc.pid


def version_line() -> str:
    rabbit = "not installed"
    with contextlib.suppress(Exception):
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "rabbitmq-server"], capture_output=True,
                             text=True, check=False).stdout.strip()
        rabbit = out or rabbit
    return (f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}, RabbitMQ {rabbit} (Debian), "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
