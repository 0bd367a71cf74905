"""``sodalite serve --core``: v2 is the only path; ``--core v1`` is refused with a clear error (issue 14)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sodalite.cli.main import main
from sodalite.cli.stores import build_broker
from sodalite.errors import ConfigurationError
from sodalite.model.config import NamespaceConfig


def test_serve_with_core_v1_exits_with_an_error_naming_the_removed_path(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["serve", "--core", "v1", "--data-dir", str(tmp_path), "--host", "127.0.0.1", "--port", "0"])
    assert code == 2
    error = capsys.readouterr().err
    assert "--core v1" in error and "version-1 path" in error and "removed" in error
    assert not (tmp_path / "messages.db").exists()  # refused before any store was opened


def test_build_broker_takes_v2_and_refuses_anything_else(tmp_path: Path) -> None:
    broker = build_broker(NamespaceConfig("ns"), tmp_path / "a", core="v2")
    assert [w.name for w in broker.workers] == ["default"]
    with pytest.raises(ConfigurationError, match="version-1 path"):
        build_broker(NamespaceConfig("ns"), tmp_path / "b", core="v1")
