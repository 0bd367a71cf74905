"""Which event loop ``sodalite serve`` runs on (cli/event_loop.py)."""

from __future__ import annotations

import asyncio

import pytest

from sodalite.cli import event_loop


def test_uvloop_is_used_when_installed_unless_asyncio_is_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    uvloop = pytest.importorskip("uvloop")
    monkeypatch.delenv(event_loop.ENV, raising=False)
    assert event_loop.loop_factory() == ("uvloop", uvloop.new_event_loop)
    monkeypatch.setenv(event_loop.ENV, "asyncio")
    assert event_loop.loop_factory() == ("asyncio", None)


def test_an_unknown_loop_name_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(event_loop.ENV, "trio")
    with pytest.raises(ValueError, match="expected 'uvloop' or 'asyncio'"):
        event_loop.loop_factory()


@pytest.mark.parametrize("name", ["asyncio", "uvloop"])
def test_run_runs_the_coroutine_on_the_named_loop(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    if name == "uvloop":
        pytest.importorskip("uvloop")
    monkeypatch.setenv(event_loop.ENV, name)
    chosen, factory = event_loop.loop_factory()

    async def which() -> str:
        return type(asyncio.get_running_loop()).__module__

    module = event_loop.run(which(), factory)
    assert chosen == name
    assert module.startswith("uvloop") if name == "uvloop" else module.startswith("asyncio")
