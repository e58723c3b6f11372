"""The TLS and SASL benchmark's arithmetic: each listener's median beside PLAINTEXT's from
the same run, and turns that alternate the order of the listeners.

``make bench-quick`` runs the benchmark itself against a real broker."""

from __future__ import annotations

from bench.security import LISTENERS, Sample, round_order, summarize


def sample(listener: str, step: str, seconds: float) -> Sample:
    return Sample(
        listener=listener,
        step=step,
        round_number=0,
        records=1_000,
        size_bytes=1_000_000,
        seconds=seconds,
        broker_cpu_seconds=0.002,
        client_cpu_seconds=0.001,
    )


def test_each_listener_is_reported_as_its_median_over_plaintexts_median() -> None:
    samples = [
        *(sample("PLAINTEXT", "produce", seconds) for seconds in (0.01, 0.02, 0.03)),
        *(sample("SSL", "produce", seconds) for seconds in (0.04, 0.05, 0.5)),
        sample("SSL", "consume", 1.0),
    ]
    summaries = summarize(samples, "produce")
    assert [summary.listener for summary in summaries] == ["PLAINTEXT", "SSL"]
    plaintext, tls = summaries
    assert plaintext.ratio_to_baseline == 1.0
    assert tls.records_per_second.median == 20_000
    assert tls.ratio_to_baseline == 0.4, "the median, not the mean, and produce samples only"
    assert tls.megabytes_per_second.median == 20.0
    assert tls.broker_cpu_ms_per_megabyte == 2.0


def test_rounds_alternate_the_order_of_the_listeners() -> None:
    assert round_order(0) == LISTENERS
    assert round_order(1) == tuple(reversed(LISTENERS))
    assert sorted(round_order(2)) == sorted(LISTENERS)
