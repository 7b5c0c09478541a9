"""The third-party layer, built with pip for the Lambda platform: no Docker involved.

pip downloads manylinux wheels for the runtime's Python and architecture, so the build
runs on any host. `python -m infra.layer` (`make layer`) builds into the build directory (layers/build/ in a
checkout) for inspection; the construct builds it through CDK's local bundling (jobsched.cdk.layer_asset).

Bytecode: a layer is mounted read-only at /opt, so Python cannot write the .pyc files it
would otherwise cache, and without shipped bytecode every cold start compiles everything it
imports (pydantic, Powertools, botocore) again. Bytecode is specific to the interpreter's
minor version (3.11's .pyc are ignored by 3.13), so the layer is compiled by an interpreter
of the runtime's version, found on this machine (see `runtime_python`); with none, the layer
is built without bytecode and the build says so. The .pyc use unchecked hashes: the layer
never changes, so Python never needs to stat the sources to validate them."""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .names import LAYER_BUILD_DIR, LAYER_REQUIREMENTS, PIP_PLATFORM, PYTHON_VERSION


class LayerBuildError(RuntimeError):
    pass


PYTHON_ENV = "JOBSCHED_LAYER_PYTHON"  # an interpreter of the runtime's version, if not found


def _version_of(python: str) -> str | None:
    try:
        result = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def runtime_python(python_version: str = PYTHON_VERSION) -> str | None:
    """An interpreter of `python_version` to compile the layer with: $JOBSCHED_LAYER_PYTHON,
    this one, `python3.13` on PATH, or a pyenv installation; None if there is none."""
    candidates = [
        os.environ.get(PYTHON_ENV),
        sys.executable,
        shutil.which(f"python{python_version}"),
        *sorted(
            glob.glob(os.path.expanduser(f"~/.pyenv/versions/{python_version}.*/bin/python{python_version}"))
        ),
    ]
    for candidate in candidates:
        if candidate and _version_of(candidate) == python_version:
            return candidate
    if os.environ.get(PYTHON_ENV):
        raise LayerBuildError(f"{PYTHON_ENV}={os.environ[PYTHON_ENV]} is not Python {python_version}")
    return None


def compile_bytecode(target: Path, python: str) -> None:
    result = subprocess.run(
        [python, "-m", "compileall", "-q", "-j", "2", "--invalidation-mode", "unchecked-hash", str(target)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise LayerBuildError(f"compileall failed:\n{(result.stdout + result.stderr)[-4000:]}")


def _pip(*args: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pip", *args, "--quiet", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        # Never fall back to Docker: say what pip said instead.
        raise LayerBuildError(f"pip could not build the layer:\n{result.stderr[-4000:]}")


def content_hash(requirements: Path, python_version: str, platform: str) -> str:
    return hashlib.sha256(requirements.read_bytes() + f"\n{python_version}\n{platform}".encode()).hexdigest()


def build_layer(
    out_dir: Path,
    requirements: Path = LAYER_REQUIREMENTS,
    python_version: str = PYTHON_VERSION,
    platform: str = PIP_PLATFORM,
    wheel_cache: Path = LAYER_BUILD_DIR / "wheels",
) -> Path:
    """Install the requirements into `out_dir/python` (the layout Lambda adds to sys.path)."""
    target = out_dir / "python"
    wheels = wheel_cache / content_hash(requirements, python_version, platform)[:16]
    platform_args = (
        "--platform",
        platform,
        "--only-binary=:all:",
        "--python-version",
        python_version,
        "--implementation",
        "cp",
    )
    # The wheels are downloaded once per requirements/runtime/platform; later builds run offline.
    if not (wheels / ".complete").exists():
        _pip("download", "--dest", str(wheels), *platform_args, "-r", str(requirements))
        (wheels / ".complete").touch()
    _pip(
        "install",
        "--no-index",
        "--find-links",
        str(wheels),
        "--no-compile",  # the host's bytecode would not match the runtime's Python
        "--target",
        str(target),
        *platform_args,
        "-r",
        str(requirements),
    )
    for junk in [target / "bin", *target.rglob("__pycache__")]:
        shutil.rmtree(junk, ignore_errors=True)
    python = runtime_python(python_version)
    if python is None:
        print(
            f"layer: no Python {python_version} interpreter here (set {PYTHON_ENV}); "
            "built without bytecode, so cold starts compile the dependencies",
            file=sys.stderr,
        )
    else:
        compile_bytecode(target, python)
    return target


def main() -> None:
    shutil.rmtree(LAYER_BUILD_DIR / "python", ignore_errors=True)
    target = build_layer(LAYER_BUILD_DIR)
    size = sum(f.stat().st_size for f in target.rglob("*") if f.is_file())
    compiled = "with" if any(target.rglob("*.pyc")) else "without"
    print(
        f"layer for Python {PYTHON_VERSION} on {PIP_PLATFORM}, {compiled} bytecode: "
        f"{target} ({size / 1e6:.1f} MB)"
    )


if __name__ == "__main__":
    main()
