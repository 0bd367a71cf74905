"""``sodalite serve --core``: v2 is the only path, accepted silently and hidden from --help; ``--core v1`` is
refused with a clear error (issue 14)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sodalite.cli.entry import parser
from sodalite.cli.main import _broker, main
from sodalite.errors import ConfigurationError
from sodalite.model.config import NamespaceConfig


def test_serve_with_core_v1_exits_with_an_error_naming_the_removed_path(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["serve", "--core", "v1", "--data-dir", str(tmp_path), "--host", "127.0.0.1", "--port", "0"])
    assert code == 2
    error = capsys.readouterr().err
    assert "--core v1" in error and "version-1 path" in error and "removed" in error
    assert not (tmp_path / "messages.db").exists()  # refused before any store was opened


def test_core_v2_is_accepted_and_the_option_is_not_in_help(tmp_path: Path) -> None:
    args = parser().parse_args(["serve", "--core", "v2", "--data-dir", str(tmp_path)])
    broker = _broker(args, NamespaceConfig("ns"), "n")
    assert [w.name for w in broker.workers] == ["default"]
    with pytest.raises(ConfigurationError, match="version-1 path"):
        _broker(parser().parse_args(["serve", "--core", "v1", "--data-dir", str(tmp_path)]), NamespaceConfig("ns"), "n")
    serve_help = parser()._subparsers._group_actions[0].choices["serve"].format_help()  # type: ignore[union-attr]
    assert "--core" not in serve_help and "--store" in serve_help
