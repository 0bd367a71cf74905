"""Build tests/go (the Go SDK's scenarios) with `go build` when the binary is missing or older than its
sources: `scripts/test` runs this before the suite, and tests/interop/test_go_sdk.py before its tests
(so the module also runs alone). The first build downloads the SDK through the Go module proxy."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

GO_DIR = Path(__file__).resolve().parents[1] / "go"
BINARY = GO_DIR / "target" / "sodalite-go-interop"
STAMP = GO_DIR / "target" / ".sodalite-sources"


def sources_digest() -> str:
    """What the build is made from: go.mod, go.sum and every Go source."""
    digest = hashlib.sha256()
    for path in [GO_DIR / "go.mod", GO_DIR / "go.sum", *sorted(GO_DIR.glob("*.go"))]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def ensure_built() -> Path:
    want = sources_digest()
    if BINARY.is_file() and STAMP.is_file() and STAMP.read_text().strip() == want:
        return BINARY
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("go is not installed: the Go SDK tests need Go 1.25 or later")
    BINARY.parent.mkdir(exist_ok=True)
    subprocess.run([go, "build", "-o", str(BINARY), "."], cwd=GO_DIR, check=True, timeout=900)
    STAMP.write_text(want)
    return BINARY


if __name__ == "__main__":
    ensure_built()
    sys.exit(0)
