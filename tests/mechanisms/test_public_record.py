"""A dataset's public record checked offline (mechanisms.record_verify; issue 46 item 3).

A record is made here by hand (two public releases with two files each, one other charged
release), signed with a key made for the test, and written as the portal writes it
(mechanisms.public_record.record_files). Each tampering the issue names (an edited manifest, a
removed release, a changed total, a forged signature) and a wrong key, a tampered public file
and a record whose signer's totals do not add up are each caught and named by their code.
"""

import hashlib
import json
import subprocess
import sys
import zipfile

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mechanisms.__main__ import main
from mechanisms.errors import MechanismError
from mechanisms.public_record import (
    FORMAT,
    public_key_hex,
    public_key_pem,
    readme_text,
    record_bytes,
    record_files,
    sign,
)
from mechanisms.record_verify import verify
from tests.conftest import REPO_ROOT

PACKAGES = {
    11: {"manifest.json": b'{"mechanism": "perturbed_histogram"}\n', "counts.csv": b"a,1\n"},
    12: {"manifest.json": b'{"mechanism": "mwem"}\n', "synthetic.csv": b"age\n30\n"},
}


def guarantee(epsilon, delta=0.0):
    return {"unit": "one row", "neighbouring": "replace-one", "epsilon": epsilon, "delta": delta}


def release(release_id, epsilon, delta="0"):
    files = {n: hashlib.sha256(c).hexdigest() for n, c in PACKAGES[release_id].items()}
    return {
        "id": release_id,
        "mechanism": "mwem",
        "epsilon": epsilon,
        "delta": delta,
        "guarantee": guarantee(float(epsilon), float(delta)),
        "released_on": "2026-03-10",
        "files": files,
    }


def record_document(key):
    """ε: 0.5 + 0.25 + 0.5 (the other line) = 1.25 of 2; δ: 0 + 1e-6 + 0 = 1e-6 of 1e-5."""
    return {
        "format": FORMAT,
        "dataset": {"id": 3, "name": "Survey"},
        "made_on": "2026-03-12",
        "budget": {
            "neighbouring": "replace-one",
            "epsilon_total": "2",
            "delta_total": "0.00001",
            "epsilon_spent": "1.25",
            "delta_spent": "0.000001",
            "releases_charged": 3,
        },
        "public_releases": [release(11, "0.5"), release(12, "0.25", "0.000001")],
        "other_charged_releases": {"releases": 1, "epsilon": "0.5", "delta": "0"},
        "audit_chain_head": "ab" * 32,
        "signing_key": public_key_hex(key.public_key()),
    }


def write(folder, document, key, packages=PACKAGES):
    """The record folder of `document` signed by `key`, as the portal writes it."""
    content = record_bytes(document)
    files = record_files(content, sign(content, key), readme_text("00", "/key"), packages)
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder


@pytest.fixture
def portal_key():
    return Ed25519PrivateKey.generate()


@pytest.fixture
def record(tmp_path, portal_key):
    return write(tmp_path / "record", record_document(portal_key), portal_key)


def edit_record(folder, change):
    """Change record.json in place (the signature is left as it was)."""
    path = folder / "record.json"
    document = json.loads(path.read_bytes())
    change(document)
    path.write_bytes(record_bytes(document))


def test_a_whole_record_verifies_against_the_portals_key(record, portal_key):
    outcome = verify(str(record), portal_key.public_key())
    assert outcome.problems == []
    assert "4 public files match their SHA-256" in outcome.notes
    assert "epsilon spent 1.25 of 2" in outcome.summary and "--key" in outcome.summary


def test_a_zipped_record_in_its_top_folder_verifies(record, portal_key, tmp_path):
    path = tmp_path / "record.zip"
    with zipfile.ZipFile(path, "w") as archive:
        for file in sorted(record.rglob("*")):
            if file.is_file():
                archive.write(file, f"dataset-3-record/{file.relative_to(record).as_posix()}")
    assert verify(str(path), portal_key.public_key()).problems == []


def test_a_record_without_its_files_verifies_and_says_they_were_not_checked(record, portal_key):
    for file in sorted((record / "releases").rglob("*"), reverse=True):
        file.unlink() if file.is_file() else file.rmdir()
    (record / "releases").rmdir()
    outcome = verify(str(record), portal_key.public_key())
    assert outcome.problems == []
    assert any("public files were not checked" in note for note in outcome.notes)


def test_an_edited_manifest_is_named(record, portal_key):
    manifest = record / "releases" / "12" / "manifest.json"
    manifest.write_bytes(manifest.read_bytes().replace(b"mwem", b"mwem, epsilon 0.01"))
    outcome = verify(str(record), portal_key.public_key())
    assert outcome.codes == {"file-hash-mismatch"}
    assert "releases/12/manifest.json" in outcome.problems[0].message


def test_an_edited_record_json_breaks_the_signature(record, portal_key):
    edit_record(record, lambda d: d["public_releases"][1]["guarantee"].update(unit="a household"))
    outcome = verify(str(record), portal_key.public_key())
    assert outcome.codes == {"signature-invalid"}
    assert "record.json was changed after it was signed" in outcome.problems[0].message


def test_a_removed_release_is_named(record, portal_key):
    def drop(document):
        del document["public_releases"][1]
        document["budget"]["epsilon_spent"] = "1"  # the dropper even fixes the sums
        document["budget"]["delta_spent"] = "0"

    edit_record(record, drop)
    for file in (record / "releases" / "12").iterdir():
        file.unlink()
    (record / "releases" / "12").rmdir()
    outcome = verify(str(record), portal_key.public_key())
    assert outcome.codes == {"release-missing", "signature-invalid"}
    missing = next(p for p in outcome.problems if p.code == "release-missing")
    assert "charged for 3 releases but 2 are listed" in missing.message


def test_a_release_dropped_with_its_files_left_behind_is_named(record, portal_key):
    edit_record(record, lambda d: d["public_releases"].pop())
    outcome = verify(str(record), portal_key.public_key())
    assert {"release-missing", "total-mismatch", "release-unlisted"} <= outcome.codes


def test_a_changed_total_is_named(record, portal_key):
    edit_record(record, lambda d: d["budget"].update(epsilon_spent="0.75"))
    outcome = verify(str(record), portal_key.public_key())
    assert outcome.codes == {"total-mismatch", "signature-invalid"}
    mismatch = next(p for p in outcome.problems if p.code == "total-mismatch")
    assert mismatch.message == "epsilon spent is 0.75, but the releases listed add up to 1.25"


def test_totals_that_do_not_add_up_are_named_even_when_properly_signed(tmp_path, portal_key):
    """The portal's own signature does not vouch for its arithmetic: δ spent off by 1e-15."""
    document = record_document(portal_key)
    document["budget"]["delta_spent"] = "0.000001000000001"
    folder = write(tmp_path / "record", document, portal_key)
    outcome = verify(str(folder), portal_key.public_key())
    assert outcome.codes == {"total-mismatch"}
    assert outcome.problems[0].message.startswith("delta spent is 0.000001000000001")


def test_spending_above_the_total_is_named(tmp_path, portal_key):
    document = record_document(portal_key)
    document["budget"]["epsilon_total"] = "1"
    outcome = verify(str(write(tmp_path / "r", document, portal_key)), portal_key.public_key())
    assert outcome.codes == {"over-budget"}


def test_a_guarantee_above_its_charge_is_named(tmp_path, portal_key):
    document = record_document(portal_key)
    document["public_releases"][0]["guarantee"]["epsilon"] = 0.5000001
    outcome = verify(str(write(tmp_path / "r", document, portal_key)), portal_key.public_key())
    assert outcome.codes == {"guarantee-above-charge"}


def test_a_forged_signature_is_named(record, portal_key):
    forged = Ed25519PrivateKey.generate().sign((record / "record.json").read_bytes())
    (record / "record.sig").write_text(forged.hex() + "\n")
    outcome = verify(str(record), portal_key.public_key())
    assert outcome.codes == {"signature-invalid"}


def test_a_record_signed_with_another_key_is_named(tmp_path, portal_key):
    """A forger makes a consistent record with their own key: it names that key, which is not
    the portal's; without --key it verifies, and the summary says the key must be compared."""
    other = Ed25519PrivateKey.generate()
    folder = write(tmp_path / "record", record_document(other), other)
    outcome = verify(str(folder), portal_key.public_key())
    assert outcome.codes == {"key-mismatch", "signature-invalid"}
    alone = verify(str(folder))
    assert alone.problems == [] and "compare it with the key on the portal" in alone.summary


def test_a_tampered_public_file_is_named(record, portal_key):
    (record / "releases" / "11" / "counts.csv").write_bytes(b"a,2\n")
    (record / "releases" / "11" / "extra.csv").write_bytes(b"b,1\n")
    (record / "releases" / "12" / "synthetic.csv").unlink()
    outcome = verify(str(record), portal_key.public_key())
    assert [str(p) for p in outcome.problems] == [
        "[file-hash-mismatch] releases/11/counts.csv differs from its SHA-256 in the record",
        "[file-missing] releases/12/synthetic.csv is listed in the record but missing",
        "[file-unlisted] releases/11/extra.csv is not listed in the record",
    ]


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda r: (r / "record.sig").unlink(), "record.sig is missing"),
        (lambda r: (r / "record.json").write_text("{"), "record.json: not JSON"),
        (lambda r: (r / "record.json").write_text("[]"), "not a record of format"),
    ],
)
def test_a_record_that_cannot_be_read_is_named(record, portal_key, damage, expected):
    damage(record)
    outcome = verify(str(record), portal_key.public_key())
    assert outcome.codes == {"record-unreadable"}
    assert expected in outcome.problems[0].message


def test_the_command_line_verifies_and_exits_1_naming_a_tampering(record, portal_key, tmp_path):
    key_file = tmp_path / "portal-key.pem"
    key_file.write_text(public_key_pem(portal_key.public_key()))
    command = [sys.executable, "-m", "mechanisms", "verify", str(record), "--key", str(key_file)]
    good = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT)
    assert (good.returncode, good.stderr) == (0, "")
    assert good.stdout.startswith("VERIFIED: dataset 'Survey' (id 3)")
    edit_record(record, lambda d: d["budget"].update(epsilon_spent="1"))
    bad = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT)
    assert bad.returncode == 1
    assert bad.stdout.splitlines()[1:] == [
        f"  [signature-invalid] record.sig is not the signature of record.json by the key "
        f"{public_key_hex(portal_key.public_key())}: record.json was changed after it was "
        "signed, or the signature is forged",
        "  [total-mismatch] epsilon spent is 1, but the releases listed add up to 1.25",
    ]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["verify", "no-such-record"], "does not exist"),
        (["verify", "{record}", "--key", "abc"], "is not an Ed25519 public key"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(record, capsys, argv, expected):
    status = main([a.format(record=record) for a in argv])
    err = capsys.readouterr().err
    assert status == 2 and expected in err and len(err.splitlines()) == 1


def test_a_file_that_is_not_a_zip_is_refused(tmp_path):
    path = tmp_path / "record.zip"
    path.write_bytes(b"not a zip")
    with pytest.raises(MechanismError, match="neither a folder nor a zip"):
        verify(str(path))
