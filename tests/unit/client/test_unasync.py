"""The sync client modules are generated from their asyncio sources, and both forms have the same names.

``scripts/unasync --check`` is what ``scripts/test`` runs: it must pass on the tree as committed and
fail, naming the file, when a generated module is edited by hand. The public names of each class
must be the same in ``sodalite.client`` and ``sodalite.client.aio`` (where one form lacked a name
the other had, the name was added, never removed).
"""

from __future__ import annotations

import asyncio
import inspect
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusMessage

import sodalite.client as sync_client
import sodalite.client.aio as aio_client
from sodalite.client import paired as sync_paired
from sodalite.client.aio import paired as aio_paired

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "unasync"


def _run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(root / "scripts" / "unasync"), *args], capture_output=True, text=True,
                          cwd=root, check=False, timeout=120)


def test_the_generated_modules_match_their_sources() -> None:
    done = _run(ROOT, "--check")
    assert done.returncode == 0, done.stderr


def test_check_fails_on_a_hand_edited_module_and_a_run_restores_it(tmp_path: Path) -> None:
    copy = tmp_path / "tree"
    (copy / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, copy / "scripts" / "unasync")
    shutil.copytree(ROOT / "src" / "sodalite" / "client", copy / "src" / "sodalite" / "client")
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    target = copy / "src" / "sodalite" / "client" / "outbox.py"
    wanted = target.read_text(encoding="utf-8")
    target.write_text(wanted.replace("def forward(self) -> int:", "def forward(self) -> int:  # edited"),
                      encoding="utf-8")
    done = _run(copy, "--check")
    assert done.returncode == 1
    assert "src/sodalite/client/outbox.py differs from its asyncio source" in done.stderr
    assert _run(copy).returncode == 0
    assert target.read_text(encoding="utf-8") == wanted


def test_each_generated_module_says_so_in_its_first_line() -> None:
    for name in ("__init__", "outbox", "paired", "replication"):
        first = (ROOT / "src" / "sodalite" / "client" / f"{name}.py").read_text(encoding="utf-8").splitlines()[0]
        assert first == (f"# Generated from src/sodalite/client/aio/{name}.py by scripts/unasync; "
                         "edit the async source.")


def _public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_") or name == "__len__"}


@pytest.mark.parametrize("name", sorted(set(sync_client.__all__)))
def test_both_forms_have_the_same_public_names(name: str) -> None:
    assert name in aio_client.__all__
    sync_obj, aio_obj = getattr(sync_client, name), getattr(aio_client, name)
    if inspect.isclass(sync_obj):
        assert _public(sync_obj) == _public(aio_obj)


@pytest.mark.parametrize("module_pair", [(sync_paired, aio_paired)])
def test_both_paired_modules_export_the_same_names(module_pair: tuple[object, object]) -> None:
    sync_module, aio_module = module_pair
    assert sorted(sync_module.__all__) == sorted(aio_module.__all__)  # type: ignore[attr-defined]
    for name in ("Syphon", "PairedSender", "NamespaceSide", "PairedNamespaceClient"):
        sync_names = _public(getattr(sync_module, name))
        aio_names = _public(getattr(aio_module, name))
        assert sync_names == aio_names, name
    assert "on_progress" in inspect.signature(aio_paired.Syphon).parameters
    assert "on_progress" in inspect.signature(sync_paired.Syphon).parameters


def test_the_sync_outbox_counts_pending_messages_both_ways(tmp_path: Path) -> None:
    with sync_client.Outbox.open(tmp_path / "out.db") as outbox:
        outbox.get_queue_sender("q").send_messages([ServiceBusMessage(b"1"), ServiceBusMessage(b"2")])
        assert len(outbox) == 2
        assert outbox.pending_count() == 2


def test_the_asyncio_outbox_counts_pending_messages_both_ways(tmp_path: Path) -> None:
    async def scenario() -> tuple[int, int, int]:
        async with aio_client.Outbox(tmp_path / "out.db") as outbox:
            await outbox.get_queue_sender("q").send_messages([ServiceBusMessage(b"1"), ServiceBusMessage(b"2")])
            counted = len(outbox), await outbox.pending_count()
        unopened = aio_client.Outbox(tmp_path / "out.db")
        try:
            return (*counted, len(unopened))  # len opens the file itself
        finally:
            await unopened.close()

    assert asyncio.run(scenario()) == (2, 2, 2)


def test_the_sync_concurrency_runs_two_calls_side_by_side() -> None:
    from sodalite.client.concurrency import SideBySide

    barrier = threading.Barrier(2, timeout=5)
    pair = SideBySide()
    try:
        def fails() -> None:
            barrier.wait()
            raise ValueError("second")

        one, two = pair.run(barrier.wait, fails)  # each waits for the other: they run at once
        assert one is None
        assert isinstance(two, ValueError)
    finally:
        pair.close()
