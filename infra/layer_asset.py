"""The layer as a CDK asset, bundled locally by infra.layer (never in a Docker container)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_

from .layer import build_layer, content_hash
from .names import LAYER_REQUIREMENTS, LAYERS_DIR, PIP_PLATFORM, PYTHON_VERSION


@jsii.implements(ILocalBundling)
class PipLayerBundling:
    def __init__(self, requirements: Path, python_version: str, platform: str) -> None:
        self.requirements = requirements
        self.python_version = python_version
        self.platform = platform

    def try_bundle(self, output_dir: str, options: Any) -> bool:
        build_layer(Path(output_dir), self.requirements, self.python_version, self.platform)
        return True  # False would make CDK try `docker run`, which is not available


def layer_code(
    requirements: Path = LAYER_REQUIREMENTS,
    python_version: str = PYTHON_VERSION,
    platform: str = PIP_PLATFORM,
) -> lambda_.Code:
    # Hash what decides the content, so a runtime or platform change rebuilds the layer.
    digest = content_hash(requirements, python_version, platform)
    return lambda_.Code.from_asset(
        str(LAYERS_DIR),
        exclude=["*", "!" + requirements.name],
        asset_hash_type=AssetHashType.CUSTOM,
        asset_hash=digest,
        bundling=BundlingOptions(
            # Required by the API; used only if local bundling were to decline, which it never does.
            image=DockerImage.from_registry(f"public.ecr.aws/sam/build-python{python_version}"),
            local=PipLayerBundling(requirements, python_version, platform),
        ),
    )
