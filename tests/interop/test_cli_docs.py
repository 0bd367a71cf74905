"""docs/cli.md's first session runs top to bottom, as it is, on a new broker started in the same
directory (the commands find it through ./sodalite-data/endpoints.json, no flags, no environment)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from broker_process import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]


def first_session() -> str:
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    section = text.split("## A first session", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert block is not None
    return block.group(1)


def test_the_first_session_runs_top_to_bottom_on_a_new_broker(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "sodalite-data", None).start()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SODALITE_")}
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        script = "set -euo pipefail\nset -x\n" + first_session()
        result = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=600)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        out = result.stdout
        # What a reader is told each step does, it did.
        assert "created queue orders" in out and "updated queue orders" in out
        assert "(2 messages)" in out  # the peek of orders: the JSON body and "hello"
        audit = [json.loads(line) for line in out.splitlines() if line.startswith("{") and '"an order' in line]
        assert [m["body"] for m in audit] == ["an order from the eu"]
        lines = out.splitlines()
        table = lines[max(i for i, line in enumerate(lines) if line.startswith("ENTITY ")):]  # messages counts
        counts = [line.split() for line in table if line.startswith(("orders ", "shop/subscriptions/audit "))]
        assert counts[0][:6] == ["orders", "queue", "2", "0", "0", "0"], counts
        assert counts[1][:3] == ["shop/subscriptions/audit", "subscription", "1"], counts
        exported = json.loads((tmp_path / "Config.json").read_text())
        names = [q["Name"] for q in exported["UserConfig"]["Namespaces"][0]["Queues"]]
        assert "orders" in names
    finally:
        broker.stop()
