"""The portal reads released CSVs as the package does (`packaging.read_csv`, by pyarrow).

A worker reads a synthetic CSV three times after its release (the custodian's report, its
verdict, the public charts): pandas took 0.70 CPU s a read at a million rows of 8 columns,
pyarrow 0.18 (issue 44 item 6). The frames must be what pandas' `read_csv(dtype=str,
keep_default_na=False)` made of the same bytes, on files with what a reader can trip on;
the twin reads with pandas again, and the count of pandas' reads catches it.
"""

import io

import pandas as pd
import pytest

from dpportal.releases import packaging

CONTENTS = {
    "synthetic": b"age,sex\n23.5,Female\n,Male\n89,Male\n",
    "hostile cells": (
        'c,n\r\n"=1+2",007\r\n"say ""hi"", then",-3.5\r\n"two\nlines",\r\n'
        '"a <b> & c",1e5\r\n"\u00e9t\u00e9 \u2013 ok",""\r\n'
    ).encode(),
    "one column, empty values": b'x\r\n""\r\n1\r\n\r\n2\r\n',
    "repeated names": b"a,a\n1,2\n",
    "header only": b"a,b\n",
}


def pandas_frame(content: bytes) -> pd.DataFrame:
    """The reader before: pandas, every cell text, nothing missing."""
    return pd.read_csv(io.BytesIO(content), dtype=str, keep_default_na=False)


@pytest.mark.parametrize("name", CONTENTS)
def test_released_csvs_read_as_pandas_read_them(name):
    content = CONTENTS[name]
    pd.testing.assert_frame_equal(packaging.read_csv(content), pandas_frame(content))


@pytest.mark.parametrize("broken", [False, True])
def test_a_released_csv_is_read_by_pyarrow_not_pandas(monkeypatch, broken):
    reads = []
    original = pd.read_csv
    monkeypatch.setattr(pd, "read_csv", lambda *a, **k: reads.append(1) or original(*a, **k))
    if broken:
        monkeypatch.setattr(packaging, "text_cells", pandas_frame)
    frame = packaging.read_csv(CONTENTS["synthetic"])
    assert frame["sex"].tolist() == ["Female", "Male", "Male"]
    assert frame["age"].tolist() == ["23.5", "", "89"]
    assert (reads == []) != broken
