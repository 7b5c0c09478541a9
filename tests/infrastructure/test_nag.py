"""cdk-nag AwsSolutions gates synthesis: no finding without a written reason."""

from __future__ import annotations

import pytest
from aws_cdk import Validations


def test_synth_has_no_unacknowledged_findings(synth):
    violations = [
        f"{v['ruleName']}: {[c['constructPath'] for c in v['violatingConstructs']]}"
        for plugin in synth.report.get("pluginReports", [])
        for v in plugin.get("violations", [])
    ]
    assert synth.error is None and violations == [], "\n".join(violations) or synth.error


def test_every_acknowledgement_gives_its_reason(synth):
    from jobsched.cdk.nag import MIN_REASON

    acknowledged: dict[str, str] = {}
    for construct in synth.stack.node.find_all():
        for entry in construct.node.metadata:
            if entry.type == Validations.ACKNOWLEDGED_RULES_METADATA_KEY:
                for rule, reason in dict(entry.data).items():
                    acknowledged[f"{construct.node.path} {rule}"] = reason
    assert len(acknowledged) > 10, "the stack acknowledges its exceptions in code"
    for where, reason in acknowledged.items():
        assert len(reason.strip()) >= MIN_REASON, where


def test_a_reason_is_required():
    from jobsched.cdk.nag import acknowledge

    with pytest.raises(ValueError, match="reason"):
        acknowledge(None, "AwsSolutions-SQS3", "ok")  # type: ignore[arg-type]


def test_an_unacknowledged_finding_fails_synth(tmp_path):
    import aws_cdk as cdk
    from aws_cdk import aws_sqs as sqs
    from jobsched.cdk import nag

    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Probe")
    sqs.Queue(stack, "Plain")  # no DLQ, no TLS policy
    nag.enable(app)
    with pytest.raises(RuntimeError, match="AwsSolutions-SQS3"):
        app.synth()


def test_synth_has_no_warnings(synth):
    import json

    metadata = json.loads((synth.outdir / f"{synth.stack.artifact_id}.metadata.json").read_text())
    noise = [
        (path, entry["data"])
        for path, entries in metadata.items()
        for entry in entries
        if entry["type"] in ("aws:cdk:warning", "aws:cdk:error")
    ]
    assert noise == []
