"""tests/data/adult_sample.csv is exactly the documented sample of the demo table: the header
and every 24th data row of demo/adult.csv.gz, the first 2,000 of them (tests/data/README.md)."""

import gzip

from tests.helpers import DEMO_ADULT, SMALL_ADULT


def test_the_adult_sample_is_every_24th_row_of_the_demo_table():
    with gzip.open(DEMO_ADULT, "rb") as handle:
        lines = handle.read().splitlines(keepends=True)
    expected = b"".join([lines[0], *lines[1:][::24][:2000]])
    assert SMALL_ADULT.read_bytes() == expected
