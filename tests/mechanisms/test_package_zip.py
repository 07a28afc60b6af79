"""The package as one zip (mechanisms.package.write_zip, the portal's download).

Issue 44 item 6: deflating a million-row synthetic CSV at zlib's default level took 1.7 CPU s,
more than the rest of the package, and release.xlsx (a zip already) was deflated a second
time for nothing. Pinned here by the compressed sizes zlib gives at each level, on made-up
files: the workbook stored as it is, a large member at FAST_LEVEL, a small one at the default;
every member reads back the same, by zipfile and by the system's unzip where there is one.
The twin compresses every member as the portal did before, and the sizes catch it.
"""

import io
import shutil
import subprocess
import zipfile
import zlib

import pytest

from mechanisms import package
from mechanisms.package import FAST_LEVEL, LARGE_MEMBER, write_zip


def deflated_size(content: bytes, level: int) -> int:
    """The size of `content` as a zip member deflated at `level` (raw deflate, no header)."""
    squeezer = zlib.compressobj(level, zlib.DEFLATED, -15)
    return len(squeezer.compress(content) + squeezer.flush())


def made_up_package() -> dict[str, bytes]:
    """A synthetic CSV over LARGE_MEMBER, a workbook (a zip of its own) and small files."""
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


@pytest.mark.parametrize("broken", [False, True])
def test_the_zip_stores_the_workbook_and_deflates_large_members_faster(monkeypatch, broken):
    if broken:  # the portal's zip before: every member deflated at zlib's default level
        monkeypatch.setattr(
            package, "member_compression", lambda name, size: (zipfile.ZIP_DEFLATED, None)
        )
    files = made_up_package()
    assert len(files["synthetic.csv"]) >= LARGE_MEMBER > len(files["README.txt"])
    out = io.BytesIO()
    write_zip(files, out, "release-7")
    archive = zipfile.ZipFile(io.BytesIO(out.getvalue()))
    members = {info.filename: info for info in archive.infolist()}
    assert sorted(members) == [f"release-7/{name}" for name in sorted(files)]
    assert archive.testzip() is None  # every member's CRC checked
    assert all(archive.read(f"release-7/{name}") == files[name] for name in files)
    readme, book, csv = (members[f"release-7/{n}"] for n in sorted(files))
    assert readme.compress_type == zipfile.ZIP_DEFLATED
    assert readme.compress_size == deflated_size(files["README.txt"], 6)
    fast = deflated_size(files["synthetic.csv"], FAST_LEVEL)
    assert fast != deflated_size(files["synthetic.csv"], 6)  # the sizes tell the levels apart
    assert (csv.compress_size == fast) != broken
    assert (book.compress_type == zipfile.ZIP_STORED) != broken


@pytest.mark.skipif(shutil.which("unzip") is None, reason="no unzip on this system")
def test_the_systems_unzip_reads_every_member(tmp_path):
    files = made_up_package()
    where = tmp_path / "package.zip"
    with open(where, "wb") as out:
        write_zip(files, out, "release-7")
    subprocess.run(["unzip", "-tqq", str(where)], check=True)
    subprocess.run(["unzip", "-qq", str(where), "-d", str(tmp_path / "out")], check=True)
    for name, content in files.items():
        assert (tmp_path / "out" / "release-7" / name).read_bytes() == content
