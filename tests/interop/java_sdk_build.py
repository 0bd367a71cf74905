"""Build tests/java (the Java SDK's scenarios) with Maven when its build is missing or older than its
sources: `scripts/test` runs this before the suite, and tests/interop/test_java_sdk.py before its
tests (so the module also runs alone). The first build downloads the SDK from Maven Central."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

JAVA_DIR = Path(__file__).resolve().parents[1] / "java"
JAR = JAVA_DIR / "target" / "sodalite-java-interop-1.jar"
CLASSPATH = JAVA_DIR / "target" / "classpath.txt"
STAMP = JAVA_DIR / "target" / ".sodalite-sources"


def sources_digest() -> str:
    """What the build is made from: the POM and every Java source."""
    digest = hashlib.sha256()
    for path in [JAVA_DIR / "pom.xml", *sorted((JAVA_DIR / "src").rglob("*.java"))]:
        digest.update(path.relative_to(JAVA_DIR).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def ensure_built() -> None:
    want = sources_digest()
    if JAR.is_file() and CLASSPATH.is_file() and STAMP.is_file() and STAMP.read_text().strip() == want:
        return
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("mvn is not installed: the Java SDK tests need Maven and a JDK 17")
    subprocess.run([mvn, "-q", "-B", "package", "dependency:build-classpath", f"-Dmdep.outputFile={CLASSPATH}",
                    "-DskipTests", "-Dstyle.color=never"], cwd=JAVA_DIR, check=True, timeout=900)
    STAMP.write_text(want)


def classpath() -> str:
    return f"{JAR}:{CLASSPATH.read_text().strip()}"


if __name__ == "__main__":
    ensure_built()
    sys.exit(0)
