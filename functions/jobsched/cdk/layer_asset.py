"""The layer and the function code as CDK assets, built locally: the layer by jobsched.cdk.layer
through CDK's local bundling (never in a Docker container), the code by `build_code`. Each is
compiled to bytecode for the runtime's Python when an interpreter of that version is here
(Lambda mounts both read-only, so Python cannot cache what it compiles).

Each asset's hash covers what decides its content: the layer's requirements, runtime and
platform, the code's files, whether bytecode was compiled, and the building code itself
(jobsched/cdk/layer.py and this module), so a build that differs in any of them is a new asset."""

from __future__ import annotations

import hashlib
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_

from . import layer as layer_build
from .layer import build_layer, compile_bytecode, content_hash
from .names import (
    DEPLOY_ONLY,
    FUNCTIONS_DIR,
    LAYER_BUILD_DIR,
    LAYER_REQUIREMENTS,
    PIP_PLATFORM,
    PYTHON_VERSION,
    RUNTIME_PACKAGE,
    package_root,
)

CODE_BUILD_DIR = LAYER_BUILD_DIR / "code"
# The code that builds the assets: a change to it may change what they hold.
BUNDLING_SOURCES = (Path(layer_build.__file__), Path(__file__))


def _builder_digest(python_version: str) -> str:
    """Whether bytecode will be compiled, and the bundling code's own bytes."""
    digest = hashlib.sha256(f"compiled={layer_build.runtime_python(python_version) is not None}\n".encode())
    for source in BUNDLING_SOURCES:
        digest.update(source.read_bytes())
    return digest.hexdigest()


def layer_asset_hash(requirements: Path, python_version: str, platform: str) -> str:
    """The layer asset's key: its requirements, runtime and platform (the wheels' cache key),
    whether it is compiled, and the bundling code."""
    return hashlib.sha256(
        (content_hash(requirements, python_version, platform) + _builder_digest(python_version)).encode()
    ).hexdigest()


def code_files(packages: Sequence[str], root: Path = FUNCTIONS_DIR) -> list[Path]:
    """The files of `packages` (packages or modules of `root`), without bytecode, sorted; of
    the runtime package, without what only deploys it (names.DEPLOY_ONLY: this construct)."""
    found: list[Path] = []
    left_out = {root / RUNTIME_PACKAGE / name for name in DEPLOY_ONLY}
    for name in packages:
        module = root / f"{name}.py"
        if module.is_file():
            found.append(module)
        found += [
            p
            for p in (root / name).rglob("*")
            if p.is_file()
            and "__pycache__" not in p.parts
            and p.suffix != ".pyc"
            and not any(p.is_relative_to(skipped) for skipped in left_out)
        ]
    return sorted(found)


def asset_files(packages: Sequence[str], handler_code: str | Path | None = None) -> list[tuple[Path, Path]]:
    """(source file, its path in the asset) for every file of `packages`, each package read
    from where names.package_root finds it (the app's `handler_code` directory or functions/)."""
    found: list[tuple[Path, Path]] = []
    for name in packages:
        root = package_root(name, handler_code)
        if root is None:
            raise ValueError(f"handlerModules: no package or module {name!r} to ship")
        found += [(path, path.relative_to(root)) for path in code_files((name,), root)]
    return sorted(found, key=lambda pair: pair[1])


def code_asset_hash(
    packages: Sequence[str], python_version: str = PYTHON_VERSION, handler_code: str | Path | None = None
) -> str:
    """The code asset's key: every file it ships (path and bytes), whether it is compiled,
    and the bundling code."""
    digest = hashlib.sha256(_builder_digest(python_version).encode())
    for path, shipped in asset_files(packages, handler_code):
        digest.update(shipped.as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


@jsii.implements(ILocalBundling)
class PipLayerBundling:
    def __init__(self, requirements: Path, python_version: str, platform: str) -> None:
        self.requirements = requirements
        self.python_version = python_version
        self.platform = platform

    def try_bundle(self, output_dir: str, options: Any) -> bool:
        build_layer(Path(output_dir), self.requirements, self.python_version, self.platform)
        return True  # False would make CDK try `docker run`, which is not available


def build_code(
    packages: Sequence[str], python_version: str = PYTHON_VERSION, handler_code: str | Path | None = None
) -> Path:
    """The code asset's directory: `packages` (of functions/, or of the app's `handler_code`
    directory) copied and, with an interpreter of the runtime's version here, compiled
    (unchecked-hash .pyc). Built once per asset hash under the build directory's code/ (a
    synth that skips bundling ships the same code)."""
    digest = code_asset_hash(packages, python_version, handler_code)
    built = CODE_BUILD_DIR / digest[:16]
    if built.is_dir():
        return built
    CODE_BUILD_DIR.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=CODE_BUILD_DIR, prefix=".building-"))
    try:
        for path, shipped in asset_files(packages, handler_code):
            target = staging / shipped
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
        python = layer_build.runtime_python(python_version)
        if python is None:
            print(
                f"function code: no Python {python_version} interpreter here "
                f"(set {layer_build.PYTHON_ENV}); shipped without bytecode, so cold starts compile it",
                file=sys.stderr,
            )
        else:
            compile_bytecode(staging, python)
        try:
            staging.rename(built)
        except OSError:  # built meanwhile by another synth: the same content
            if not built.is_dir():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return built


def _docker_image(python_version: str) -> DockerImage:
    # Required by the API; used only if local bundling were to decline, which it never does.
    return DockerImage.from_registry(f"public.ecr.aws/sam/build-python{python_version}")


def layer_code(
    requirements: Path = LAYER_REQUIREMENTS,
    python_version: str = PYTHON_VERSION,
    platform: str = PIP_PLATFORM,
) -> lambda_.Code:
    return lambda_.Code.from_asset(
        str(requirements.parent),
        exclude=["*", "!" + requirements.name],
        asset_hash_type=AssetHashType.CUSTOM,
        asset_hash=layer_asset_hash(requirements, python_version, platform),
        bundling=BundlingOptions(
            image=_docker_image(python_version),
            # jsii calls try_bundle(output_dir, options) with the options struct as one
            # argument; the ILocalBundling protocol spells that struct as keywords.
            local=cast(ILocalBundling, PipLayerBundling(requirements, python_version, platform)),
        ),
    )


def function_code(
    packages: Sequence[str], python_version: str = PYTHON_VERSION, handler_code: str | Path | None = None
) -> lambda_.Code:
    """The functions' code asset: `packages` of functions/ (or of the app's `handler_code`
    directory), compiled for the runtime."""
    return lambda_.Code.from_asset(
        str(build_code(packages, python_version, handler_code)),
        asset_hash_type=AssetHashType.CUSTOM,
        asset_hash=code_asset_hash(packages, python_version, handler_code),
    )
