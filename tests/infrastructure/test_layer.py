"""The layer: the runtime dependencies of pyproject.toml (every install's and the `server`
extra's), pinned to what the tests run, built by pip for the Lambda platform through CDK's
local bundling (no Docker on this machine)."""

from __future__ import annotations

import tomllib
from importlib.metadata import version

import pytest
from jobsched.cdk.names import LAYER_REQUIREMENTS, PIP_PLATFORM, PYTHON_VERSION
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name

from infra import ROOT
from tests.infrastructure.synth import synthesize


def requirements() -> dict[NormalizedName, Requirement]:
    lines = [line.split("#")[0].strip() for line in LAYER_REQUIREMENTS.read_text().splitlines()]
    parsed = [Requirement(line) for line in lines if line]
    return {canonicalize_name(r.name): r for r in parsed}


def test_layer_pins_every_runtime_dependency_at_the_tested_version():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = project["dependencies"] + project["optional-dependencies"]["server"]
    declared = {canonicalize_name(r.name): r for r in map(Requirement, runtime)}
    pinned = requirements()
    assert set(pinned) == set(declared)
    for name, requirement in pinned.items():
        (spec,) = requirement.specifier
        assert spec.operator == "==", f"{name}: pin an exact version"
        assert declared[name].specifier.contains(spec.version), f"{name} {spec.version} breaks pyproject"
        assert requirement.extras == declared[name].extras, name
        assert version(name) == spec.version, (
            f"{name}: the tests run {version(name)}, the layer ships {spec.version}"
        )


@pytest.fixture(scope="module")
def bundled(tmp_path_factory):
    """The stack with its assets bundled: the layer built by pip, the code compiled."""
    return synthesize(tmp_path_factory.mktemp("bundled"), {"aws:cdk:bundling-stacks": ["**"]}, checks=False)


def test_layer_is_built_without_docker_for_the_lambda_platform(bundled):
    (layer,) = bundled.of_type("AWS::Lambda::LayerVersion").values()
    key = layer["Properties"]["Content"]["S3Key"].removesuffix(".zip")
    site = bundled.outdir / f"asset.{key}" / "python"
    tag = f"cpython-{PYTHON_VERSION.replace('.', '')}-aarch64-linux-gnu"
    assert list(site.glob(f"pydantic_core/_pydantic_core.{tag}.so")), sorted(p.name for p in site.iterdir())
    for package in ("aws_lambda_powertools", "aws_xray_sdk", "pydantic", "croniter", "boto3", "botocore"):
        assert (site / package / "__init__.py").exists(), package
    assert not (site / "bin").exists()
    assert PIP_PLATFORM.endswith("aarch64") and layer["Properties"]["CompatibleArchitectures"] == ["arm64"]
    assert_compiled_for_the_runtime(site)


MAGIC_313 = b"\xf3\r\r\n"  # importlib.util.MAGIC_NUMBER of CPython 3.13


def test_function_code_ships_bytecode_for_the_runtime(synth):
    """/var/task is read-only too: without shipped .pyc every cold start compiles the modules
    it imports (~130 ms for the whole package on a fast x86 core, 9 ms to load its .pyc).
    Built at every synth, bundling skipped or not."""
    asset = synth.asset_dir(next(iter(synth.of_type("AWS::Lambda::Function"))))
    assert (asset / "jobsched" / "handlers" / "worker.py").is_file()
    assert_compiled_for_the_runtime(asset, minimum_sources=50)


def layer_key(monkeypatch, tmp_path, *, compiled: bool) -> str:
    """The S3 key the layer asset gets in a stack of its own (bundling skipped)."""
    import aws_cdk as cdk
    from aws_cdk import aws_lambda as lambda_
    from jobsched.cdk import layer
    from jobsched.cdk.layer_asset import layer_code

    monkeypatch.setattr(layer, "runtime_python", lambda *_: "/usr/bin/python3.13" if compiled else None)
    app = cdk.App(context={"aws:cdk:bundling-stacks": []}, outdir=str(tmp_path / str(compiled)))
    stack = cdk.Stack(app, "LayerOnly")
    lambda_.LayerVersion(stack, "Layer", code=layer_code())
    template = app.synth().get_stack_by_name("LayerOnly").template
    (resource,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::LayerVersion"]
    return str(resource["Properties"]["Content"]["S3Key"])


def test_a_compiled_and_a_source_only_layer_are_different_assets(monkeypatch, tmp_path):
    assert layer_key(monkeypatch, tmp_path, compiled=True) != layer_key(monkeypatch, tmp_path, compiled=False)


def test_the_asset_hashes_cover_the_bundling_code(monkeypatch, tmp_path):
    from jobsched.cdk import layer_asset

    before = layer_asset.layer_asset_hash(LAYER_REQUIREMENTS, PYTHON_VERSION, PIP_PLATFORM)
    code_before = layer_asset.code_asset_hash(("jobsched",))
    copy = tmp_path / "layer.py"
    copy.write_text(layer_asset.BUNDLING_SOURCES[0].read_text() + "\n# a change to the build\n")
    assert layer_asset.BUNDLING_SOURCES[0].name == "layer.py"
    monkeypatch.setattr(layer_asset, "BUNDLING_SOURCES", (copy, *layer_asset.BUNDLING_SOURCES[1:]))
    assert layer_asset.layer_asset_hash(LAYER_REQUIREMENTS, PYTHON_VERSION, PIP_PLATFORM) != before
    assert layer_asset.code_asset_hash(("jobsched",)) != code_before


def assert_compiled_for_the_runtime(site, minimum_sources: int = 100):
    """/opt is read-only in Lambda: bytecode the runtime can use must ship in the layer."""
    from jobsched.cdk.layer import runtime_python

    if runtime_python(PYTHON_VERSION) is None:
        pytest.skip(f"no Python {PYTHON_VERSION} on this machine to compile the layer with")
    assert PYTHON_VERSION == "3.13", "update MAGIC_313 with the runtime"
    tag = "cpython-" + PYTHON_VERSION.replace(".", "")
    sources = list(site.rglob("*.py"))
    assert len(sources) > minimum_sources
    missing = [p for p in sources if not (p.parent / "__pycache__" / f"{p.stem}.{tag}.pyc").exists()]
    assert not missing, missing[:5]
    caches = list(site.rglob("*.pyc"))
    assert {p.name.split(".")[-2] for p in caches} == {tag}  # nothing for the host's Python
    for pyc in caches[:50]:
        header = pyc.read_bytes()[:8]
        assert header[:4] == MAGIC_313, pyc
        # Hash-based, unchecked (PEP 552): used as is, no stat of the source on import.
        assert int.from_bytes(header[4:8], "little") == 0b01, pyc
