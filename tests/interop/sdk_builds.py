"""Build the other SDKs' scenarios (tests/java and tests/jms with Maven, tests/go with `go build`) when their
build is missing or older than their sources: `scripts/test` runs `python tests/interop/sdk_builds.py java
jms go` before the suite, and test_java_sdk.py / test_jms.py / test_go_sdk.py call :func:`ensure_built`
before their tests (so each module also runs alone). A first build downloads the SDK or client library
(Maven Central, the Go module proxy)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Build:
    name: str
    directory: Path
    tool: str  # the program the build needs on PATH
    sources: tuple[str, ...]  # glob patterns under ``directory``: what the build is made from
    outputs: tuple[str, ...]  # files under ``directory`` the build leaves
    command: tuple[str, ...]  # run in ``directory``; "{dir}" is replaced by it

    @property
    def stamp(self) -> Path:
        return self.directory / "target" / ".sodalite-sources"

    def path(self, output: str) -> Path:
        return self.directory / output

    def digest(self) -> str:
        digest = hashlib.sha256()
        for pattern in self.sources:
            for path in sorted(self.directory.glob(pattern)):
                digest.update(path.relative_to(self.directory).as_posix().encode() + b"\0" + path.read_bytes())
        return digest.hexdigest()


JAVA = Build("java", TESTS / "java", "mvn", ("pom.xml", "src/**/*.java"),
             ("target/sodalite-java-interop-1.jar", "target/classpath.txt"),
             ("package", "dependency:build-classpath", "-Dmdep.outputFile={dir}/target/classpath.txt", "-DskipTests",
              "-q", "-B", "-Dstyle.color=never"))
JMS = Build("jms", TESTS / "jms", "mvn", ("pom.xml", "src/**/*.java"),
            ("target/sodalite-jms-interop-1.jar", "target/classpath.txt"), JAVA.command)
GO = Build("go", TESTS / "go", "go", ("go.mod", "go.sum", "*.go"), ("target/sodalite-go-interop",),
           ("build", "-o", "{dir}/target/sodalite-go-interop", "."))
BUILDS = {build.name: build for build in (JAVA, JMS, GO)}


def ensure_built(build: Build) -> None:
    want = build.digest()
    stamp = build.stamp
    if all(build.path(o).is_file() for o in build.outputs) and stamp.is_file() and stamp.read_text().strip() == want:
        return
    tool = shutil.which(build.tool)
    if tool is None:
        raise RuntimeError(f"{build.tool} is not installed: the {build.name} SDK tests need it")
    stamp.parent.mkdir(exist_ok=True)
    command = [tool, *(part.replace("{dir}", str(build.directory)) for part in build.command)]
    subprocess.run(command, cwd=build.directory, check=True, timeout=900)
    stamp.write_text(want)


def java_classpath(build: Build = JAVA) -> str:
    return f"{build.path(build.outputs[0])}:{build.path(build.outputs[1]).read_text().strip()}"


if __name__ == "__main__":
    for name in sys.argv[1:]:
        ensure_built(BUILDS[name])
