"""docs/resilience-examples.md's examples run as a user runs them: its config, two brokers started with
scripts/serve, each example's code as it is on the page (ports and the certificate path pointed at
these brokers), first with both brokers up, then with the primary killed."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import ROOT, BrokerProcess
from replication_ports import with_stable_ports

pytestmark = [pytest.mark.interop, pytest.mark.timeout(300)]

PAGE = ROOT / "docs" / "resilience-examples.md"
SECTIONS = {"active": "## Active replication", "passive": "## Passive replication",
            "paired": "## Paired namespaces"}


def _block(section: str, language: str) -> str:
    text = PAGE.read_text(encoding="utf-8")
    match = re.search(re.escape(section) + r"\n.*?```" + language + r"\n(.*?)```", text, re.S)
    assert match, f"{PAGE.name} has no {language} block under {section!r}"
    return match.group(1)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    base = tmp_path_factory.mktemp("examples")
    config = base / "outage-config.json"
    config.write_text(json.dumps(json.loads(_block("## Two brokers on one machine", "json"))), encoding="utf-8")
    primary = with_stable_ports(BrokerProcess(base / "primary-data", config)).start()
    secondary = with_stable_ports(BrokerProcess(base / "secondary-data", config)).start()
    yield primary, secondary
    primary.stop()
    secondary.stop()


def _run(mode: str, pair: tuple[BrokerProcess, BrokerProcess]) -> str:
    primary, secondary = pair
    code = _block(SECTIONS[mode], "python")
    assert "localhost:5672" in code and "localhost:5682" in code
    code = (code.replace("localhost:5672", f"localhost:{primary.port}")
            .replace("localhost:5682", f"localhost:{secondary.port}")
            .replace("secondary-data/admin-cert.pem", secondary.admin_certificate))
    python = ROOT / ".venv" / "bin" / "python"
    result = subprocess.run([str(python if python.exists() else Path(sys.executable)), "-c", code],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout


@pytest.mark.parametrize("mode", ["active", "passive", "paired"])
def test_each_example_runs_against_two_brokers(mode: str, pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    out = _run(mode, pair)
    assert "order 19 sent" in out


def test_the_examples_keep_going_with_the_primary_down(pair: tuple[BrokerProcess, BrokerProcess]) -> None:
    primary = pair[0]
    primary.kill()
    try:
        active = _run("active", pair)
        single = re.search(r"one-copy sends: (\d+)", active)
        assert single is not None and int(single.group(1)) >= 19, active  # all but the send that met the failure
        passive = _run("passive", pair)
        assert "order 19 sent to namespace 1" in passive
        paired = _run("paired", pair)
        assert "order 19 sent to a backlog queue" in paired
    finally:
        primary.start()
    # The paired example's syphon moves the backlog into the restarted primary: run it once more.
    assert "order 19 sent to the primary" in _run("paired", pair)
