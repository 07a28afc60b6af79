"""The command line reads .csv.gz, .tsv.gz and a one-table .zip as a stream, within
--max-input-mb of unpacked bytes; bombs and other compressors exit 2 with one line."""

import bz2
import gzip
import io
import json
import zipfile

import pandas as pd
import pytest

from mechanisms.__main__ import main

SCHEMA = {"columns": [{"name": "age", "type": "numeric", "lower": 0, "upper": 100, "bins": 4}]}
TABLE = pd.DataFrame({"age": [25, 38, 52, 61, 90, 7]})


def zipped(name: str, content: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(name, content)
    return out.getvalue()


def run(tmp_path, name, content, *extra):
    data, schema = tmp_path / name, tmp_path / "schema.json"
    data.write_bytes(content)
    schema.write_text(json.dumps(SCHEMA))
    out = tmp_path / "out"
    argv = ["perturbed-histogram", "--input", str(data), "--schema", str(schema)]
    return main([*argv, "--epsilon", "1", "--seed", "3", "--out", str(out), *extra]), out


CSV = TABLE.to_csv(index=False).encode()
TSV = TABLE.to_csv(index=False, sep="\t").encode()


@pytest.mark.parametrize(
    "name, content",
    [
        ("t.csv.gz", gzip.compress(CSV)),
        ("t.tsv.gz", gzip.compress(TSV)),
        ("t.zip", zipped("t.csv", CSV)),
        ("t.zip", zipped("t.tsv", TSV)),
        ("t.csv", CSV),
    ],
)
def test_a_compressed_input_releases_like_the_plain_one(tmp_path, name, content):
    status, out = run(tmp_path, name, content)
    assert status == 0
    counts = pd.read_csv(out / "noisy_counts.csv")
    assert len(counts) == 5  # the four declared bins and "(missing)", from the one age column


@pytest.mark.parametrize(
    "name, content, extra, words",
    [
        ("b.csv.gz", gzip.compress(b"age\n" + b"1\n" * (4 << 20), 9), (), "zip bomb"),
        ("b.zip", zipped("b.csv", b"age\n" + b"1\n" * (4 << 20)), (), "zip bomb"),
        ("t.csv.gz", gzip.compress(CSV * 10_000), ("--max-input-mb", "0"), "limit of 0 MB"),
        ("two.zip", zipped("t.csv", zipped("t.csv", CSV)), (), "archives inside archives"),
        ("t.csv.bz2", bz2.compress(CSV), (), "compressed with bzip2"),
        ("t.zip", zipped("t.xlsx", b"PK\x03\x04"), (), "command line reads CSV or TSV"),
    ],
)
def test_a_hostile_input_exits_2_with_one_line(tmp_path, capsys, name, content, extra, words):
    status, out = run(tmp_path, name, content, *extra)
    err = capsys.readouterr().err
    assert status == 2 and words in err and err.count("\n") == 1, err
    assert not out.exists()
