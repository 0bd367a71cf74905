"""Benchmark: `sodalite backup` of a big store while the broker serves sends, and `sodalite restore`.

Builds a data directory with the store port directly (``--messages`` messages in queue ``big``),
starts the broker with scripts/serve on it, as users do, and keeps sending to queue ``live`` through
the JSON API in a loop (each send's latency recorded) while ``POST /api/v1/backup`` copies the
store. Prints the backup's duration and size, the longest a send waited meanwhile (the stores'
point in time holds commits; the copy does not), the broker's own log line, and how long
``sodalite restore`` of the copy takes.

Not part of the test run:

    .venv/bin/python benchmarks/backup_under_load.py [--messages 1000000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from console_control_plane import Api, populate, start_broker


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sodalite-backup-bench-") as tmp:
        base = Path(tmp)
        queues = [{"Name": "big", "Properties": {}}, {"Name": "live", "Properties": {}},
                  {"Name": "redrive", "Properties": {}}]
        config = base / "Config.json"
        config.write_text(json.dumps({"UserConfig": {"Namespaces": [{"Name": "bench", "Queues": queues}]}}))
        populate(base / "data", args.messages, 0)
        size = (base / "data" / "messages.db").stat().st_size
        print(f"built: {args.messages:,} messages in 'big', {size / 1024 / 1024:.0f} MiB", flush=True)
        proc, port = start_broker(base / "data", config)
        log: list[str] = []
        threading.Thread(target=lambda: log.extend(proc.stdout or ()), daemon=True).start()
        try:
            api = Api(port)
            latencies: list[tuple[float, float]] = []  # (when, seconds)
            stop = threading.Event()

            def send() -> None:
                while not stop.is_set():
                    _, took = api.call("POST", "/entities/live/$send", {"body": "x" * 1024})
                    latencies.append((time.perf_counter(), took))

            sender = threading.Thread(target=send, daemon=True)
            sender.start()
            time.sleep(3)
            began = time.perf_counter()
            answer, took = api.call("POST", "/backup", {"destination": str(base / "backup")})
            ended = time.perf_counter()
            time.sleep(2)
            stop.set()
            sender.join(30)
            during = [s for at, s in latencies if began <= at <= ended + 1]
            before = [s for at, s in latencies if at < began]
            print(f"backup: {took:.2f} s, {answer['sizeInBytes'] / 1024 / 1024:.0f} MiB; sends meanwhile: "
                  f"{len(during)}, median {statistics.median(during) * 1000:.1f} ms, max {max(during) * 1000:.1f} ms "
                  f"(before it: median {statistics.median(before) * 1000:.1f} ms, max {max(before) * 1000:.1f} ms)",
                  flush=True)
        finally:
            proc.terminate()
            proc.wait(30)
        print(*(line.strip() for line in log if "backup of" in line), sep="\n")
        began = time.perf_counter()
        subprocess.run([sys.executable, "-m", "sodalite.cli.main", "restore", str(base / "backup"), "--data-dir",
                        str(base / "restored")], check=True, capture_output=True)
        print(f"restore: {time.perf_counter() - began:.2f} s", flush=True)


if __name__ == "__main__":
    main()
