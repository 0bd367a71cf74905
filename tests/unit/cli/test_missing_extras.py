"""A part of Sodalite used without its extra says which extra, and a pip command that installs it from
where this copy came from (Sodalite is not on PyPI)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sodalite import extras

ROOT = Path(__file__).resolve().parents[3]


def _without(tmp_path: Path, *modules: str) -> dict[str, str]:
    for name in modules:
        (tmp_path / name).mkdir(parents=True, exist_ok=True)
        (tmp_path / name / "__init__.py").write_text(
            f"raise ModuleNotFoundError(\"No module named '{name}'\", name={name!r})\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}


@pytest.mark.parametrize(("modules", "code", "extra"), [
    (("pyspark",), "from sodalite.spark import register; register(None)", "spark"),
    (("pyspark",), "from sodalite.spark import session; session()", "spark"),
    (("azure",), "import sodalite.client", "client"),
])
def test_a_missing_extra_is_named_with_a_command_that_installs_it(tmp_path: Path, modules: tuple[str, ...],
                                                                    code: str, extra: str) -> None:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=_without(tmp_path, *modules), timeout=60)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("sodalite.extras.MissingExtra: "), last
    assert f"'{extra}' extra" in last and f"pip install -e '{ROOT}[{extra}]'" in last, last


def test_from_a_clone_the_command_is_an_editable_install_of_the_checkout() -> None:
    assert extras.checkout_root() == ROOT
    assert extras.install_command("postgresql") == f"pip install -e '{ROOT}[postgresql]'"


def test_outside_a_clone_the_command_names_the_source_or_the_requirements(monkeypatch: pytest.MonkeyPatch,
                                                                           tmp_path: Path) -> None:
    monkeypatch.setattr(extras, "checkout_root", lambda: None)
    wheel = tmp_path / "sodalite-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"")
    monkeypatch.setattr(extras, "_installed_from", lambda: wheel)
    assert extras.install_command("spark") == f"pip install '{wheel}[spark]'"
    monkeypatch.setattr(extras, "_installed_from", lambda: None)
    command = extras.install_command("postgresql")
    assert command.startswith("pip install ") and "psycopg" in command and "sodalite" not in command
