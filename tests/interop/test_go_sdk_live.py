"""The official Go SDK's own live tests (``azservicebus`` v1.11.0) pass against the broker.

``go_live`` fetches the module from the Go module proxy, patches its test helpers to use the SAS
connection string, compiles the test binaries, and runs them in a network namespace of their own
against brokers listening there on the Service Bus ports (5671 and 443; a Standard and a Premium
namespace). Every live test runs except the few that cannot apply to a local broker
(``go_live.NOT_APPLICABLE_TESTS``, the Azure AD and expired-SAS subtests); each package's outcome is
one test here, naming every Go test that failed outside the conformance gaps still listed in
``go_live.KNOWN_GAPS``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator

import go_live
import pytest

GO = shutil.which("go")
UNSHARE = shutil.which("unshare")

pytestmark = [
    pytest.mark.interop,
    pytest.mark.skipif(GO is None, reason="go is not installed: the Go SDK's live tests need Go 1.25 or later"),
    pytest.mark.skipif(UNSHARE is None or os.geteuid() != 0,
                       reason="the Go SDK's live tests run in a network namespace of their own (root, unshare)"),
]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, str], str]]:
    work = tmp_path_factory.mktemp("go-live")
    go_live.prepare(work)
    results = work / "results.json"
    proc = subprocess.run([str(UNSHARE), "-n", sys.executable, go_live.__file__, "run", str(work), str(results)],
                          capture_output=True, text=True, timeout=1800)
    log = (work / "go-live.log").read_text(encoding="utf-8") if (work / "go-live.log").exists() else ""
    assert results.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    yield json.loads(results.read_text(encoding="utf-8")), log + proc.stderr[-3000:]


def failures_in(log: str, tests: list[str]) -> str:
    """The log lines around each failed test, for the assertion message."""
    lines = log.splitlines()
    shown: list[str] = []
    for test in tests:
        name = test.split(":", 1)[1]
        for i, line in enumerate(lines):
            if f"--- FAIL: {name} " in line:
                shown.extend(lines[max(0, i - 25):i + 1])
                break
    return "\n".join(shown)[-8000:]


@pytest.mark.parametrize("package", sorted(go_live.PACKAGES))
def test_go_sdk_live_tests_pass(outcomes: tuple[dict[str, str], str], package: str) -> None:
    results, log = outcomes
    mine = {name: outcome for name, outcome in results.items() if name.startswith(f"{package}:")}
    failed = sorted(name for name, outcome in mine.items() if outcome == "FAIL")
    passed = [name for name, outcome in mine.items() if outcome == "PASS"]
    assert passed, f"no Go test of {package} passed:\n{log[-4000:]}"
    known = {f"{package}:{name}" for name in go_live.KNOWN_GAPS[package]}
    fixed = sorted(known - set(failed))
    if fixed:
        print(f"known gaps that passed, to take off go_live.KNOWN_GAPS: {fixed}")
    unexpected = sorted(set(failed) - known)
    assert not unexpected, f"{len(unexpected)} Go live tests failed: {unexpected}\n{failures_in(log, unexpected)}"
