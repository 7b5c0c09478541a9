"""bench/prices.json: every list price names its source and says whether it was confirmed
there, and the SQS poller price carries the billing granularity the capacity model uses."""

from __future__ import annotations

import json
from pathlib import Path

from bench.capacity import PollerPrice, poller_price
from bench.cost import PRICES_FILE, load_prices

ENTRIES = json.loads(Path(PRICES_FILE).read_text())["prices"]


def test_every_price_names_its_source_and_whether_it_was_confirmed():
    for name, entry in ENTRIES.items():
        assert entry["usd"] > 0, name
        assert entry["source"].startswith("https://"), name
        assert entry["as_of"], name
        assert entry["status"] in {"confirmed", "unconfirmed"}, name
        # A confirmation quotes the page; an unconfirmed figure says why it could not be.
        assert entry.get("note"), name


def test_the_sqs_poller_price_is_per_event_poller_unit_of_one_poller():
    assert poller_price() == PollerPrice(
        usd_per_epu_hour=ENTRIES["lambda_sqs_event_poller_unit_hour"]["usd"],
        pollers_per_epu=1,
        minimum_billed_seconds=60,
        minimum_pollers=2,
    )


def test_the_cost_bench_reads_every_entry_as_dollars():
    assert load_prices() == {name: float(entry["usd"]) for name, entry in ENTRIES.items()}
