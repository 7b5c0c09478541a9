"""cfn-lint is clean on the synthesized template (W3005: CDK's redundant DependsOn)."""

from __future__ import annotations


def test_template_is_cfn_lint_clean(cfn_lint):
    output, _ = cfn_lint.communicate(timeout=300)
    assert cfn_lint.returncode == 0, output
