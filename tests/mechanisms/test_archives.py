"""Compressed tables (mechanisms.archives): gzip and one-table zips unpack as a stream; bombs,
nesting, several members, encryption and path-traversal names are refused with one message."""

import gzip
import io
import zipfile

import numpy as np
import pytest

from mechanisms.archives import (
    CHUNK_BYTES,
    MAX_RATIO,
    ArchiveError,
    open_archive,
    refuse_other_compressor,
    unpacked_chunks,
)

TABLE = b"age,city\n34,Leeds\n51,York\n"
LIMIT = 64 << 20


def zip_bytes(parts: dict, level: int = 6) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=level) as archive:
        for name, content in parts.items():
            archive.writestr(name, content)
    return out.getvalue()


def unpack(tmp_path, name, content, limit=LIMIT) -> bytes:
    path = tmp_path / "upload.bin"
    path.write_bytes(content)
    archive = open_archive(path, name)
    assert archive is not None
    return b"".join(unpacked_chunks(archive, max_bytes=limit))


@pytest.mark.parametrize(
    "name, content, inner",
    [
        ("t.csv.gz", gzip.compress(TABLE), "t.csv"),
        ("t.tsv.gz", gzip.compress(TABLE), "t.tsv"),
        ("t.gz", gzip.compress(TABLE), "t.csv"),
        ("t.csv", gzip.compress(TABLE), "t.csv"),  # gzip bytes under a plain name
        ("t.csv.gz", gzip.compress(TABLE[:10]) + gzip.compress(TABLE[10:]), "t.csv"),
        ("t.zip", zip_bytes({"folder/t.csv": TABLE}), "t.csv"),
        ("t.zip", zip_bytes({"t.csv": TABLE, "__MACOSX/._t.csv": b"x"}), "t.csv"),
    ],
)
def test_a_compressed_table_unpacks_to_its_bytes(tmp_path, name, content, inner):
    path = tmp_path / "upload.bin"
    path.write_bytes(content)
    archive = open_archive(path, name)
    assert archive.inner_name == inner
    assert b"".join(unpacked_chunks(archive, max_bytes=LIMIT)) == TABLE


def test_a_plain_file_is_not_an_archive(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(TABLE)
    assert open_archive(path, "t.csv") is None


def test_unpacking_streams_in_bounded_chunks(tmp_path):
    rows = np.random.default_rng(1).integers(0, 10**6, size=(CHUNK_BYTES // 4, 2))
    big = b"x,y\n" + "".join(f"{a},{b}\n" for a, b in rows).encode()
    path = tmp_path / "t.csv.gz"
    path.write_bytes(gzip.compress(big))
    chunks = list(unpacked_chunks(open_archive(path, "t.csv.gz"), max_bytes=LIMIT))
    assert len(chunks) >= 3 and max(map(len, chunks)) <= CHUNK_BYTES
    assert b"".join(chunks) == big


BOMB = b"a\n" + b"0\n" * (8 << 20)  # 16 MB of one repeated line: thousands of times smaller packed


@pytest.mark.parametrize(
    "name, content, limit, words",
    [
        ("b.csv.gz", gzip.compress(BOMB, 9), LIMIT, f"more than {MAX_RATIO} times larger"),
        ("b.zip", zip_bytes({"b.csv": BOMB}, 9), LIMIT, f"more than {MAX_RATIO} times larger"),
        ("t.csv.gz", gzip.compress(b"a\n" + bytes(range(256)) * 8192), 1 << 20, "limit of 1 MB"),
        (
            "t.zip",
            zip_bytes({"t.csv": b"a\n" + bytes(range(256)) * 8192}),
            1 << 20,
            "limit of 1 MB",
        ),
        ("n.csv.gz", gzip.compress(gzip.compress(TABLE)), LIMIT, "archives inside archives"),
        ("n.zip", zip_bytes({"t.csv": zip_bytes({"t.csv": TABLE})}), LIMIT, "archives inside"),
        ("n.zip", zip_bytes({"t.csv.gz": gzip.compress(TABLE)}), LIMIT, "not a table"),
        ("n.zip", zip_bytes({"inner.zip": b"PK"}), LIMIT, "not a table"),
        ("two.zip", zip_bytes({"a.csv": TABLE, "b.csv": TABLE}), LIMIT, "holds 2 files"),
        ("none.zip", zip_bytes({}), LIMIT, "holds 0 files"),
        ("up.zip", zip_bytes({"../../etc/t.csv": TABLE}), LIMIT, "path traversal"),
        ("abs.zip", zip_bytes({"/etc/t.csv": TABLE}), LIMIT, "path traversal"),
        ("win.zip", zip_bytes({"..\\t.csv": TABLE}), LIMIT, "path traversal"),
        ("cut.csv.gz", gzip.compress(TABLE * 100)[:-30], LIMIT, "damaged or cut short"),
        ("fake.csv.gz", TABLE, LIMIT, "not gzip-compressed"),
        ("fake.zip", TABLE, LIMIT, "not a zip archive"),
        ("bad.zip", b"PK\x03\x04" + b"\0" * 40, LIMIT, "damaged"),
    ],
)
def test_a_hostile_archive_is_refused_with_a_plain_message(tmp_path, name, content, limit, words):
    with pytest.raises(ArchiveError, match=words.replace("(", r"\(")):
        unpack(tmp_path, name, content, limit)


def test_an_encrypted_member_is_refused(tmp_path):
    data = bytearray(zip_bytes({"t.csv": TABLE}))
    for marker in (b"PK\x03\x04", b"PK\x01\x02"):  # local header and central directory entry
        at = data.index(marker)
        flag = at + (6 if marker == b"PK\x03\x04" else 8)
        data[flag] |= 0x1
    with pytest.raises(ArchiveError, match="encrypted"):
        unpack(tmp_path, "t.zip", bytes(data))


def test_a_zip_whose_directory_claims_too_much_is_refused_before_unpacking(tmp_path):
    content = zip_bytes({"t.csv": b"a\n" + bytes(range(256)) * 8192})
    path = tmp_path / "t.zip"
    path.write_bytes(content)
    chunks = unpacked_chunks(open_archive(path, "t.zip"), max_bytes=1000)
    with pytest.raises(ArchiveError, match="unpacks to more than"):
        next(chunks)


@pytest.mark.parametrize(
    "head, kind",
    [
        (b"BZh91AY", "bzip2"),
        (b"\xfd7zXZ\x00", "xz"),
        (b"\x28\xb5\x2f\xfd", "zstd"),
        (b"7z\xbc\xaf\x27\x1c", "7-Zip"),
    ],
)
def test_other_compressors_keep_their_refusal(head, kind):
    with pytest.raises(ArchiveError, match=f"compressed with {kind}"):
        refuse_other_compressor(head)
