"""The third-party layer, built with pip for the Lambda platform: no Docker involved.

pip downloads manylinux wheels for the runtime's Python and architecture, so the build
runs on any host. `python -m infra.layer` builds into layers/build/ for inspection; the
stack builds it through CDK's local bundling (infra.layer_asset)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from .names import LAYER_BUILD_DIR, LAYER_REQUIREMENTS, PIP_PLATFORM, PYTHON_VERSION


class LayerBuildError(RuntimeError):
    pass


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
    return target


def main() -> None:
    shutil.rmtree(LAYER_BUILD_DIR / "python", ignore_errors=True)
    target = build_layer(LAYER_BUILD_DIR)
    size = sum(f.stat().st_size for f in target.rglob("*") if f.is_file())
    print(f"layer for Python {PYTHON_VERSION} on {PIP_PLATFORM}: {target} ({size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
