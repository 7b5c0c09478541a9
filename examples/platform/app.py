"""A team's own CDK app with jobsched in it: one stack holding the scheduler, a role that
may call its API, and a function of the team's that one tenant's jobs may run.

    pip install 'jobsched[cdk]'        # or the built wheel: pip install 'dist/jobsched-….whl[cdk]'
    npx cdk synth                       # cdk.json runs `python app.py`

Context `alarmEmail` (cdk.json, or `-c alarmEmail=…`) subscribes an address to the alarms;
without one, synth and every deploy warn that no alarm reaches anyone."""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct
from jobsched.cdk import JobScheduler

HANDLERS = Path(__file__).resolve().parent / "handlers"  # wherever the app is synthesized from


class Platform(cdk.Stack):
    """The scheduler, its callers and the targets it may reach."""

    def __init__(
        self, scope: Construct, construct_id: str, *, alarm_email: str | None, **kwargs: object
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        # The team's own Python handlers (handlers/billing_jobs) ship beside the scheduler's code
        # and run in its worker: `statement.close` jobs need no target and no worker of ours.
        self.scheduler = JobScheduler(
            self,
            "Scheduler",
            shard_count=4,
            alarm_email=alarm_email,
            handler_code=str(HANDLERS),
            handler_modules=["billing_jobs.handlers"],
        )
        # The billing service calls the API with SigV4 as this role: its tenant is the role's
        # IAM identity, `<account>/role/<name>` (a custom authorizer's tenantId otherwise).
        billing = iam.Role(self, "BillingService", assumed_by=iam.AccountRootPrincipal())
        self.scheduler.grant_invoke_api(billing, "reader", "writer", "worker")
        self.billing_tenant = cdk.Fn.join("", [cdk.Aws.ACCOUNT_ID, "/role/", billing.role_name])
        # A function of this app the billing tenant's jobs may run as a `lambda` target (its
        # `invoice.send` jobs need none: the external worker, worker.py, leases them).
        self.nightly = lambda_.Function(
            self,
            "NightlyReport",
            runtime=lambda_.Runtime.PYTHON_3_13,
            handler="index.handler",
            code=lambda_.Code.from_inline("def handler(event, context):\n    return {'rows': 0}\n"),
        )
        self.scheduler.grant_target(self.billing_tenant, self.nightly)
        cdk.CfnOutput(self, "SchedulerUrl", value=self.scheduler.url)


def main(app: cdk.App | None = None) -> None:
    app = app or cdk.App()
    # No made-up address: one nobody reads would confirm nothing and look subscribed.
    Platform(app, "Platform", alarm_email=app.node.try_get_context("alarmEmail") or None)
    app.synth()


if __name__ == "__main__":
    main()
