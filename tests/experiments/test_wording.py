"""pagedsim.wording at the edge values where generated prose used to read badly."""

from __future__ import annotations

import pytest

from pagedsim.wording import compared, count, no_or_count


@pytest.mark.parametrize(("n", "want"), [(0, "0 requests"), (1, "1 request"),
                                         (2, "2 requests"), (2000, "2,000 requests")])
def test_count_agrees_with_its_number(n, want):
    assert count(n, "request") == want


def test_count_irregular_plural_and_format():
    assert count(1, "copy", "copies") == "1 copy"
    assert count(3, "copy", "copies") == "3 copies"
    assert count(1.5, "block", digits=".1f") == "1.5 blocks"


def test_no_or_count_says_no_at_zero():
    assert no_or_count(0, "request") + " waited" == "no request waited"
    assert no_or_count(1, "request") == "1 request"
    assert no_or_count(4, "request") == "4 requests"


@pytest.mark.parametrize(("ratio", "want"), [
    (4.0, "4.0x less than the real model's"),
    (1.0, "as much as the real model's"),
    (1.04, "as much as the real model's"),  # rounds to 1.0x
    (0.5, "2.0x more than the real model's"),
])
def test_compared_reads_at_one(ratio, want):
    assert compared(ratio, "the real model's") == want


def test_compared_other_words_and_digits():
    assert compared(1, "paged's", fewer="fewer") == "as many as paged's"
    assert compared(32, "the MHA cache", digits=".0f") == "32x less than the MHA cache"
    assert compared(0.25, "before", fewer="smaller", digits="g") == "4x larger than before"


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf")])
def test_compared_refuses_a_meaningless_ratio(bad):
    with pytest.raises(ValueError, match="ratio"):
        compared(bad, "x")


def test_an_experiment_of_one_request_is_labelled_in_the_singular():
    from pagedsim.experiments import Experiment

    one = Experiment(workload="sharegpt", num_requests=1, rate_per_s=2.0).label()
    assert "1 request at" in one and "1 requests" not in one
    assert "2,000 requests at" in Experiment(workload="sharegpt", num_requests=2000,
                                             rate_per_s=2.0).label()

