"""The command line's progress lines, and that commands which do not serve start without the broker."""

from __future__ import annotations

import io
import subprocess
import sys
import time

from sodalite.cli.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_on_a_terminal_one_line_is_rewritten_with_count_rate_and_time_left() -> None:
    stream, clock = io.StringIO(), Clock()
    shown = Progress("moved", stream=stream, clock=clock, terminal=True)
    clock.now += 2
    shown.update(200, total=1000)
    clock.now += 2
    shown.update(400, total=1000)
    shown.finish("moved 1000 of 1000")
    text = stream.getvalue()
    assert "\n" not in text.rstrip("\n").replace("moved 1000 of 1000", "")  # rewritten in place
    assert "\rmoved 200 of 1000 messages, 100 msg/s, about 8 s left (2 s)" in text
    assert "\rmoved 400 of 1000 messages, 100 msg/s, about 6 s left (4 s)" in text
    assert text.endswith("\rmoved 1000 of 1000\n")


def test_elsewhere_plain_lines_at_most_every_interval_and_a_short_run_prints_its_summary_only() -> None:
    stream, clock = io.StringIO(), Clock()
    shown = Progress("exported", stream=stream, clock=clock, terminal=False, every=5)
    clock.now += 1
    shown.update(10)
    assert stream.getvalue() == ""
    clock.now += 5
    shown.update(60, remaining=60)
    clock.now += 1
    shown.update(70, remaining=50)  # within the interval: not shown
    shown.finish("exported 120 messages in 8 s")
    assert stream.getvalue().splitlines() == ["exported 60 messages, 10 msg/s, about 6 s left",
                                              "exported 120 messages in 8 s"]


def test_help_starts_without_loading_the_broker() -> None:
    probe = ("import sys, time\nfrom sodalite.cli.entry import main\n"
             "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
             "print(); print(time.process_time()); print(sorted(m for m in sys.modules if m.startswith(("
             "'sodalite', 'aiohttp', 'pyspark', 'azure', 'cryptography'))))")
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    elapsed = time.perf_counter() - started
    *_, cpu, loaded = result.stdout.strip().splitlines()
    for heavy in ("sodalite.server.broker", "sodalite.admin", "sodalite.amqp.", "sodalite.store", "aiohttp",
                  "pyspark", "azure", "cryptography"):
        assert heavy not in loaded, loaded
    assert "usage: sodalite" in result.stdout
    # CPU time, which other processes on a busy machine do not inflate: about 0.1 s (0.8 s when the
    # command line imported the whole broker). Wall time only as a loose guard.
    assert float(cpu) < 0.4, f"sodalite --help used {float(cpu):.2f} s of CPU"
    assert elapsed < 10, f"sodalite --help took {elapsed:.2f} s"


def test_a_client_command_does_not_load_the_broker() -> None:
    probe = ("import sys\nfrom sodalite.cli.entry import main\n"
             "code = main(['queue', 'list', '--admin-port', '1', '--http', '--timeout', '1'])\n"
             "print(code, sorted(m for m in sys.modules if m.startswith(('sodalite.server.broker', 'sodalite.store', "
             "'aiohttp', 'sodalite.admin.control'))))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip().endswith("1 []"), result.stdout + result.stderr
