"""The ingest parser on unusual but valid files, and a fuzz test of the parser (no crashes)."""

import codecs
import csv
import io
from pathlib import Path

import openpyxl
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpportal import ingest


def read(tmp_path, content: bytes, suffix=".csv", header=None):
    """Ingest bytes; return (result, table) or raise IngestError."""
    path = tmp_path / f"in{suffix}"
    path.write_bytes(content)
    out = tmp_path / "out.parquet"
    if suffix == ".xlsx":
        csv_path = tmp_path / "sheet.csv"
        ingest.xlsx_to_csv(path, csv_path)
        path, suffix = csv_path, ".csv"
    result = ingest.ingest_text(path, ingest.scan_file(path), out, suffix=suffix, header=header)
    return result, pq.read_table(out)


def test_utf8_with_bom(tmp_path):
    result, table = read(tmp_path, codecs.BOM_UTF8 + "név,age\nÁron,3\n".encode())
    assert result.columns == ["név", "age"] and table.column("név").to_pylist() == ["Áron"]
    assert result.details["encoding"] == "UTF-8"


def test_latin1_and_windows_1252(tmp_path):
    result, table = read(tmp_path, "city,price\nMünchen,5\nSão Paulo,€7\n".encode("cp1252"))
    assert table.column("city").to_pylist() == ["München", "São Paulo"]
    assert table.column("price").to_pylist() == ["5", "€7"]
    assert result.details["encoding"] == "Latin-1 / Windows-1252"


def test_invalid_utf8_that_is_latin1_is_read_as_latin1(tmp_path):
    _result, table = read(tmp_path, b"a,b\n1,\xc3\x28\n")
    assert table.column("b").to_pylist() == ["Ã("]


def test_mixed_line_endings(tmp_path):
    result, table = read(tmp_path, b"a,b\r\n1,2\n3,4\r\n5,6\n")
    assert result.row_count == 3 and table.column("b").to_pylist() == [2, 4, 6]


def test_quoted_newlines_delimiters_and_quotes(tmp_path):
    content = b'name,note\n"Smith, J","line one\nline two"\nLee,"say ""hi"""\n'
    result, table = read(tmp_path, content)
    assert result.row_count == 2
    assert table.column("name").to_pylist() == ["Smith, J", "Lee"]
    assert table.column("note").to_pylist() == ["line one\nline two", 'say "hi"']


@pytest.mark.parametrize(
    "delimiter, name", [("\t", "tab"), (";", "semicolon"), ("|", "vertical bar"), (",", "comma")]
)
def test_delimiter_detection(tmp_path, delimiter, name):
    content = (
        delimiter.join(["a", "b", "c"])
        + "\n"
        + delimiter.join(["1", "x,y" if delimiter != "," else "x", "3"])
    )
    result, table = read(tmp_path, (content + "\n").encode())
    assert result.details["delimiter"] == name and result.columns == ["a", "b", "c"]


def test_tsv_extension_means_tabs(tmp_path):
    result, table = read(tmp_path, b"a,b\tc\n1,2\t3\n", suffix=".tsv")
    assert result.columns == ["a,b", "c"] and result.details["format"] == "TSV"


def test_header_detection_and_override(tmp_path):
    result, _ = read(tmp_path, b"1,2\n3,4\n")
    assert result.columns == ["column_1", "column_2"] and result.row_count == 2
    result, _ = read(tmp_path, b"x,y\n3,4\n")
    assert result.columns == ["x", "y"] and result.row_count == 1
    result, _ = read(tmp_path, b"x,y\n3,4\n", header=False)
    assert result.columns == ["column_1", "column_2"] and result.row_count == 2


def test_types_leading_zeros_and_late_text_values(tmp_path):
    rows = ["zip,n,x"] + [f"0{i:04d},{i},{i}.5" for i in range(2000)] + ["01000,oops,7"]
    result, table = read(tmp_path, ("\n".join(rows) + "\n").encode())
    assert table.schema.field("zip").type == "string"  # codes keep their leading zeros
    assert table.column("zip").to_pylist()[0] == "00000"
    assert table.schema.field("n").type == "string"  # a text value late in the file widens it
    assert table.schema.field("x").type == "double"
    assert result.row_count == 2001


def test_missing_numeric_values_are_null_and_counted(tmp_path):
    result, table = read(tmp_path, b"a,b\n1,x\n,y\n3,\n")
    assert table.column("a").to_pylist() == [1, None, 3]
    assert table.column("b").to_pylist() == ["x", "y", ""]
    proposals = {p["name"]: p for p in result.proposals}
    assert proposals["a"]["missing"] == 1 and proposals["b"]["missing"] == 1


def test_formula_like_text_in_csv_is_kept_as_text(tmp_path):
    _result, table = read(tmp_path, b"a,b\n=1+1,@SUM(A1)\n-3,+x\n")
    assert table.column("a").to_pylist() == ["=1+1", "-3"]
    assert table.column("b").to_pylist() == ["@SUM(A1)", "+x"]


def test_blank_lines_and_single_column(tmp_path):
    result, table = read(tmp_path, b"only\n\nA\n\nB\n")
    assert result.columns == ["only"] and table.column("only").to_pylist() == ["A", "B"]


def test_proposals(tmp_path):
    rows = ["age,sex,id,empty"] + [f"{20 + i % 50},{'FM'[i % 2]},id{i}," for i in range(200)]
    result, _ = read(tmp_path, ("\n".join(rows) + "\n").encode())
    proposals = {p["name"]: p for p in result.proposals}
    assert proposals["age"] == {"name": "age", "missing": 0, "type": "numeric", "bins": 10}
    assert proposals["sex"] == {
        "name": "sex",
        "missing": 0,
        "type": "categorical",
        "unknown": "other",
    }
    assert proposals["id"]["type"] == "ignored"  # 200 distinct values: not a category
    assert proposals["empty"]["type"] == "ignored"


def test_proposals_hold_no_bound_bin_or_category_from_the_data(tmp_path):
    result, _ = read(tmp_path, b"flag,score,group\n0,1.5,a\n1,2,b\n1,3,a\n5,5,a\n")
    for proposal in result.proposals:
        assert not {"lower", "upper", "categories", "from_data"} & set(proposal), proposal
        assert proposal.get("bins") in (None, 10), proposal  # the default, not the data's range


def test_xlsx_values_dates_and_numbers(tmp_path):
    import datetime

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.append(["when", "count", "ratio", "label"])
    sheet.append([datetime.date(2024, 1, 2), 3, 0.5, "x"])
    sheet.append([datetime.date(2024, 2, 3), 4.0, 1.25, None])
    out = io.BytesIO()
    book.save(out)
    result, table = read(tmp_path, out.getvalue(), suffix=".xlsx")
    assert result.columns == ["when", "count", "ratio", "label"]
    assert table.column("count").to_pylist() == [3, 4]
    assert table.column("ratio").to_pylist() == [0.5, 1.25]
    assert table.column("when").to_pylist()[0].startswith("2024-01-02")
    assert table.column("label").to_pylist() == ["x", ""]


def test_parquet_copy_has_owner_only_mode(tmp_path):
    read(tmp_path, b"a\n1\n")
    assert (tmp_path / "out.parquet").stat().st_mode & 0o777 == 0o600


def test_refused_file_leaves_no_parquet(tmp_path):
    with pytest.raises(ingest.IngestError, match="Line 3 has 3 values"):
        read(tmp_path, b"a,b\n1,2\n3,4,5\n")
    assert not (tmp_path / "out.parquet").exists()


# ---------------------------------------------------------------- fuzzing

ALPHABET = st.sampled_from(list('ab,;\t|"\n\r 0123456789.-eé€\x00\xff=+'))
FUZZ_SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.function_scoped_fixture]}


def fuzz_once(tmp_path: Path, content: bytes):
    """Any bytes: a clean refusal or a table whose Parquet copy agrees with the result."""
    try:
        result, table = read(tmp_path, content)
    except ingest.IngestError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert table.num_rows == result.row_count > 0
    assert table.column_names == result.columns


def roundtrip_once(tmp_path: Path, rows: list[list[str]]):
    """A well-formed CSV of text values is read back exactly."""
    out = io.StringIO()
    csv.writer(out).writerows([[f"c{i}" for i in range(len(rows[0]))]] + rows)
    result, table = read(tmp_path, out.getvalue().encode(), header=True)
    assert result.row_count == len(rows)
    assert [list(r.values()) for r in table.to_pylist()] == rows


TEXT_ROWS = st.integers(1, 4).flatmap(
    lambda width: st.lists(
        st.lists(
            st.text(alphabet=st.sampled_from(list('ab ,;"\né€\t')), min_size=1, max_size=8).map(
                lambda s: "t" + s
            ),
            min_size=width,
            max_size=width,
        ),
        min_size=1,
        max_size=20,
    )
)


@settings(max_examples=60, **FUZZ_SETTINGS)
@given(
    content=st.lists(ALPHABET, max_size=200).map(
        lambda cs: "".join(cs).encode("utf-8", "surrogatepass")
    )
    | st.binary(max_size=200)
)
def test_fuzz_parser_never_crashes(tmp_path, content):
    fuzz_once(tmp_path, content)


@settings(max_examples=40, **FUZZ_SETTINGS)
@given(rows=TEXT_ROWS)
def test_fuzz_well_formed_tables_round_trip(tmp_path, rows):
    roundtrip_once(tmp_path, rows)


@pytest.mark.slow
@settings(max_examples=30_000, **FUZZ_SETTINGS)  # about 4 minutes on 2 cores
@given(
    content=st.lists(ALPHABET, max_size=2000).map(lambda cs: "".join(cs).encode())
    | st.binary(max_size=2000)
)
def test_fuzz_parser_never_crashes_long(tmp_path, content):
    fuzz_once(tmp_path, content)


@pytest.mark.slow
@settings(max_examples=3000, **FUZZ_SETTINGS)
@given(rows=TEXT_ROWS)
def test_fuzz_well_formed_tables_round_trip_long(tmp_path, rows):
    roundtrip_once(tmp_path, rows)


def test_all_distinct_text_is_proposed_as_ignored(tmp_path):
    result, _ = read(tmp_path, b"name,group\nAnn,a\nBo,b\nCy,a\n")
    name, group = result.proposals
    assert name["type"] == "ignored"
    assert group["type"] == "categorical" and "categories" not in group


@pytest.mark.parametrize(
    "chunks, valid",
    [
        ([b"ab", b"cd"], True),
        ([b"a\xc3", b"\xa9b"], True),  # a character split across two chunks
        ([b"a\xc3", b"b"], False),  # an ASCII chunk cannot finish a started character
        ([b"a", b"\xc3"], False),  # the file ends inside a character
        ([b"\xff"], False),
    ],
)
def test_byte_scan_checks_utf8_across_chunks(chunks, valid):
    scan = ingest.ByteScan()
    for chunk in chunks:
        scan.update(chunk)
    scan.finish()
    assert scan.utf8_valid is valid and scan.size == sum(map(len, chunks))


def test_byte_scan_finds_the_line_of_a_nul_in_a_later_chunk(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"a,b\n" + b"1,2\n" * 100_000 + b"3,\x00\n")
    with pytest.raises(ingest.IngestError, match="Line 100002 contains a NUL byte"):
        read(tmp_path, path.read_bytes())
