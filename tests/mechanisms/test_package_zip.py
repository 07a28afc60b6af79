"""The package as one zip (mechanisms.package.write_zip, the portal's download).

Issue 44 item 6: deflating a million-row synthetic CSV at zlib's default level took 1.7 CPU s,
more than the rest of the package, and release.xlsx (a zip already) was deflated a second
time for nothing. Now the workbook is stored as it is and every other member is deflated by
ISA-L's igzip at DEFLATE_LEVEL (0.15 CPU s on that CSV). Pinned here by the compressed sizes
igzip gives, on made-up files; every member reads back the same, by zipfile and by the
system's unzip where there is one, in the classic format and with zip64 records. The twins
deflate with zlib, as the portal did before, or deflate the workbook again, and the sizes and
methods catch them.
"""

import io
import shutil
import subprocess
import zipfile
import zlib

import pytest
from isal import isal_zlib

from mechanisms import package
from mechanisms.package import DEFLATE_LEVEL, write_zip


def igzip_size(content: bytes) -> int:
    """The size of `content` as a zip member deflated by igzip (raw deflate, no header)."""
    squeezer = isal_zlib.compressobj(DEFLATE_LEVEL, isal_zlib.DEFLATED, -15)
    return len(squeezer.compress(content) + squeezer.flush())


def made_up_package() -> dict[str, bytes]:
    """A synthetic CSV of more than 1 MiB, a workbook (a zip of its own) and a small file."""
    rows = "".join(
        f"{(k * 7919) % 10_000 / 100:g},{('north', 'south', 'east')[k % 3]},{k % 97}\r\n"
        for k in range(120_000)
    )
    book = io.BytesIO()
    with zipfile.ZipFile(book, "w", zipfile.ZIP_DEFLATED) as inner:
        inner.writestr("xl/worksheets/sheet1.xml", "<row><c><v>1</v></c></row>" * 5_000)
    return {
        "README.txt": b"What each file holds.\r\n" * 40,
        "release.xlsx": book.getvalue(),
        "synthetic.csv": ("x,region,n\r\n" + rows).encode(),
    }


def extra_ids(info: zipfile.ZipInfo) -> set[int]:
    """The header IDs of a member's extra fields (1: zip64's extended information)."""
    ids, at = set(), 0
    while at + 4 <= len(info.extra):
        ids.add(int.from_bytes(info.extra[at : at + 2], "little"))
        at += 4 + int.from_bytes(info.extra[at + 2 : at + 4], "little")
    return ids


def zipped(files: dict[str, bytes]) -> zipfile.ZipFile:
    """`files` through write_zip, opened again; every member's CRC checked."""
    out = io.BytesIO()
    write_zip(files, out, "release-7")
    archive = zipfile.ZipFile(io.BytesIO(out.getvalue()))
    assert archive.testzip() is None
    return archive


@pytest.mark.parametrize("broken", [None, "zlib", "workbook deflated"])
def test_the_zip_stores_the_workbook_and_deflates_the_rest_by_igzip(monkeypatch, broken):
    if broken == "zlib":  # the portal's zip before: zlib's default level
        monkeypatch.setattr(package, "deflater", lambda: zlib.compressobj(6, zlib.DEFLATED, -15))
    if broken == "workbook deflated":
        monkeypatch.setattr(package, "STORED_SUFFIXES", ())
    files = made_up_package()
    assert len(files["synthetic.csv"]) > 1 << 20  # more than one of stream_zip's 1 MiB chunks
    archive = zipped(files)
    members = {info.filename: info for info in archive.infolist()}
    assert sorted(members) == [f"release-7/{name}" for name in sorted(files)]
    assert all(archive.read(f"release-7/{name}") == files[name] for name in files)
    readme, book, csv = (members[f"release-7/{n}"] for n in sorted(files))
    assert readme.compress_type == csv.compress_type == zipfile.ZIP_DEFLATED
    igzip = igzip_size(files["synthetic.csv"])
    assert igzip != len(zlib.compress(files["synthetic.csv"], 6)) - 6  # the sizes tell them apart
    by_igzip = [readme.compress_size, csv.compress_size] == [
        igzip_size(files["README.txt"]),
        igzip,
    ]
    assert by_igzip == (broken != "zlib")
    assert (book.compress_type == zipfile.ZIP_STORED) == (broken != "workbook deflated")
    assert all(1 not in extra_ids(info) for info in members.values())  # the classic format


def test_a_package_of_2_gib_or_more_gets_zip64_records(monkeypatch):
    """Measured on small files with the threshold lowered: the classic format's 4 GiB limit
    would otherwise be reached by a large enough synthetic CSV."""
    monkeypatch.setattr(package, "ZIP32_BYTES", 1000)
    files = made_up_package()
    archive = zipped(files)
    assert all(archive.read(f"release-7/{name}") == files[name] for name in files)
    assert all(1 in extra_ids(info) for info in archive.infolist())


@pytest.mark.skipif(shutil.which("unzip") is None, reason="no unzip on this system")
@pytest.mark.parametrize("zip64", [False, True])
def test_the_systems_unzip_reads_every_member(tmp_path, monkeypatch, zip64):
    if zip64:
        monkeypatch.setattr(package, "ZIP32_BYTES", 1000)
    files = made_up_package()
    where = tmp_path / "package.zip"
    with open(where, "wb") as out:
        write_zip(files, out, "release-7")
    subprocess.run(["unzip", "-tqq", str(where)], check=True)
    subprocess.run(["unzip", "-qq", str(where), "-d", str(tmp_path / "out")], check=True)
    for name, content in files.items():
        assert (tmp_path / "out" / "release-7" / name).read_bytes() == content
