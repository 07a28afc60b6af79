"""dpportal.core.files.PrivateWriter: the one way the portal writes a private file."""

import stat

import pytest

from dpportal.core import files


def test_a_private_file_appears_whole_with_mode_0600_and_no_temp_left(tmp_path):
    target = tmp_path / "new" / "report.json"
    files.write_private(target, b"{}")
    assert target.read_bytes() == b"{}"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert stat.S_IMODE(target.parent.stat().st_mode) == 0o700
    assert list(target.parent.iterdir()) == [target]


def test_readers_see_the_old_file_until_the_new_one_is_complete(tmp_path):
    target = tmp_path / "package.zip"
    files.write_private(target, b"old")
    with files.PrivateWriter(target) as out:
        out.write(b"new, half written")
        assert target.read_bytes() == b"old"  # the new bytes go to a temporary name
        (temp,) = [p for p in tmp_path.iterdir() if p != target]
        assert stat.S_IMODE(temp.stat().st_mode) == 0o600  # private from its creation
    assert target.read_bytes() == b"new, half written"


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path):
    target = tmp_path / "table.parquet"
    files.write_private(target, b"old")
    with pytest.raises(RuntimeError), files.PrivateWriter(target) as out:
        out.write(b"partial")
        raise RuntimeError("the writer died")
    assert target.read_bytes() == b"old"
    assert list(tmp_path.iterdir()) == [target]


def test_text_mode_passes_its_options_through(tmp_path):
    target = tmp_path / "sheet.csv"
    with files.PrivateWriter(target, "w", encoding="utf-8", newline="") as out:
        out.write("a,é\r\n")
    assert target.read_bytes() == "a,é\r\n".encode()
