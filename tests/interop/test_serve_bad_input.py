"""`sodalite serve` with options that cannot work: one line on stderr naming the option or the file, no
traceback, a non-zero exit; run as a user runs it (the installed `sodalite` command, a subprocess)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SODALITE = Path(sys.executable).parent / "sodalite"
FREE = ["--host", "127.0.0.1", "--port", "0", "--amqps-port", "0", "--admin-port", "0", "--http-port", "0"]


def _serve(*args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SODALITE), "serve", *FREE, "--data-dir", str(data_dir), *args],
                          capture_output=True, text=True, timeout=60)


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_port_out_of_range_is_named(tmp_path: Path) -> None:
    line = _one_line(_serve("--port", "99999", data_dir=tmp_path / "data"))
    assert "--port 99999" in line and "65535" in line


def test_a_missing_certificate_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "cert.pem"
    line = _one_line(_serve("--tls-cert", str(missing), "--tls-key", str(tmp_path / "key.pem"),
                            data_dir=tmp_path / "data"))
    assert f"--tls-cert {missing}" in line and "no such file" in line


def test_a_certificate_that_is_not_pem_is_named(tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    line = _one_line(_serve("--tls-cert", str(junk), "--tls-key", str(junk), data_dir=tmp_path / "data"))
    assert "--tls-cert" in line and str(junk) in line


def test_a_data_directory_that_is_a_file_is_named(tmp_path: Path) -> None:
    file = tmp_path / "hostname"
    file.write_text("a file\n")
    line = _one_line(_serve(data_dir=file))
    assert f"--data-dir {file}" in line and "not a directory" in line


@pytest.fixture
def taken_port() -> Iterator[int]:
    holder = socket.create_server(("127.0.0.1", 0))
    try:
        yield int(holder.getsockname()[1])
    finally:
        holder.close()


@pytest.mark.parametrize("option", ["--port", "--amqps-port", "--admin-port", "--http-port"])
def test_a_port_in_use_names_the_option_that_chose_it(option: str, taken_port: int, tmp_path: Path) -> None:
    line = _one_line(_serve(option, str(taken_port), data_dir=tmp_path / "data"))
    assert line.startswith(f"sodalite serve: {option} {taken_port}: "), line
    assert "address already in use" in line.lower()


def test_an_address_this_machine_cannot_listen_on_names_the_host(tmp_path: Path) -> None:
    result = subprocess.run([str(SODALITE), "serve", "--host", "no-such-host.invalid", "--port", "0",
                             "--amqps-port", "0", "--admin-port", "0", "--http-port", "0",
                             "--data-dir", str(tmp_path / "data")], capture_output=True, text=True, timeout=60)
    line = _one_line(result)
    assert line.startswith("sodalite serve: --host no-such-host.invalid: "), line
