"""Fault-injection harness: the real pipeline, in one process, under a simulated clock.

Test tooling that lives beside the code so `make chaos` can run it; no handler imports it.

What runs. moto (`mock_aws`) holds the three tables, the Runs stream and the priority
queues with their DLQs. The real services do the work: JobService (the API's use cases)
creates, pauses, resumes and cancels jobs; two Sweepers materialise runs; the Runs
stream, read with the dynamodbstreams client and converted by
`local.glue.lambda_stream_record`, is filtered with `handlers.outbox.matches_filter` and
handed to the Outbox; the worker Lambda's own handler (`handlers.worker.handler`: Powertools'
batch processor with every record of a batch on its own thread) gets each batch as the SQS
event Lambda builds, and its Workers claim, execute (Python handlers, and webhooks through
the production HttpTargetClient and signer to the harness's receiver, `chaos.receiver`)
and complete under the fence; the messages it does not report failed are deleted, as
Lambda deletes them. The Reconciler repairs twice a minute, as the stack's ticks do.

Time. One ManualClock is the true time, advanced one second per loop; nothing sleeps.
Each component reads it through its own fixed offset of up to ±3 s (clock skew).
moto's SQS keeps DelaySeconds, visibility timeouts and retention in wall-clock time, so
the harness points SQS's clock at the ManualClock (`faults.sqs_on_clock`) instead of
bypassing the queue: the outbox's delay is the timing wheel, a crashed worker's message
really comes back after the queue's visibility timeout, receive counts grow and SQS
itself redrives to the DLQ. Duplicates and delays are injected on real messages.

One simulated second: API actions → a sweep (sometimes two sweepers interleaved) →
stream records to the outbox → every visible message to a worker → the reconciler
(every `reconcile_every` seconds).

Faults, drawn from the printed seed and armed per record before its batch's invocation:
worker crash before the effect (at the job check after the claim) and after it (at the
completing write); publish failures; lost stream batches; immediate and late duplicate
deliveries; a worker frozen between its effect and its completion (its record's own
invocation, on a thread of its own), thawed minutes later to complete with its old fence;
two sweepers at once; throttling (ProvisionedThroughputExceededException /
ThrottlingException) on random DynamoDB and SQS calls of every component; pauses, resumes,
cancels and redrives (half with a fixed payload) through the services. After the window
the faults stop and the loop runs until no run is open.

Production's shape. Each worker invocation gets a Lambda context whose remaining time runs
on the simulated clock, and the handler binds its worker to it; the chaos container
(`chaos.invocation.ChaosServices`, installed by `wiring.override` for the run) offers the
handler the worker chosen for that invocation; the tenant limit is on for the worker and
the lease API together; an external fleet leases `chaos.external` runs through the lease
API and works on each for a few seconds. A batch's records interleave as their threads do,
so a seed replays its plan and the faults armed per record, not every thread's order.

Evidence. The targets (the Python handlers, the HTTP receiver, the fleet, the hog) record
every call in the effect ledger with its start and end, beside the code under test; the
receiver verifies each webhook's Standard Webhooks signature, and one that does not verify
is an unexpected error. A repeat after a dead invocation is excused by that invocation's
own deadline, never by what its claim recorded. The verdict (`checker`) is one line of
figures; the must-be-0 ones (and any unexpected error) fail the run.
`chaos.mutants` and `chaos.selftest` prove that each figure can fail.
"""

from .checker import MUST_BE_ZERO, Figures, Violation
from .harness import ChaosConfig, FaultRates, Report, run_chaos

__all__ = ["MUST_BE_ZERO", "ChaosConfig", "FaultRates", "Figures", "Report", "Violation", "run_chaos"]
