"""Guess-and-check against the audit log's event hashes, as an auditor holding the audit CSV
could try it (issue 20, item 3): rebuild an event's hashed content from what the CSV shows plus
guesses for what it hides (a failure reason, the exact time within the shown minute) and keep
the guesses whose SHA-256 equals the exported hash.

Before events carried a secret salt this recovered hidden details and exact times; with the
salt no guess matches. Passing `salt=` (which only the server knows) is the twin: it shows the
search itself is right and finds the truth when the hash can be recomputed.
"""

import csv
import hashlib
import io
import json
from datetime import datetime, timedelta

from django.core.serializers.json import DjangoJSONEncoder
from django.urls import reverse

PLACEHOLDER = "@@exact-moment@@"


def audit_csv_rows(client) -> list[dict]:
    """The audit log CSV the client may download, one dict per event, newest first."""
    response = client.get(reverse("audit_log_csv"))
    assert response.status_code == 200
    return list(csv.DictReader(io.StringIO(response.content.decode())))


def shown_details(text: str) -> dict:
    """The CSV's "k=v; k=v" details back as a dict (whole numbers as int, as recorded)."""
    details = {}
    for part in filter(None, text.split("; ")):
        key, _, value = part.partition("=")
        details[key] = int(value) if value.lstrip("-").isdigit() else value
    return details


def previous_hash(rows: list[dict], row: dict) -> str | None:
    """The hash the event chains onto: its own column if exported, else the hash of the event
    numbered just before it when that one is in the export too."""
    if row.get("previous_hash"):
        return row["previous_hash"]
    before = [r for r in rows if int(r["event"]) == int(row["event"]) - 1]
    return before[0]["hash"] if before else None


def minute_moments(row: dict, *, around: datetime | None = None, spread_us: int = 0):
    """Candidate exact times of an event: every microsecond of its shown minute, or (to keep a
    test fast) those within `spread_us` of `around`, which must lie in that minute."""
    start = datetime.fromisoformat(row["when"])
    first, last = 0, 60_000_000
    if around is not None:
        offset = round((around - start).total_seconds() * 1e6)
        assert 0 <= offset < 60_000_000, "the window must lie within the shown minute"
        first, last = max(0, offset - spread_us), min(60_000_000, offset + spread_us + 1)
    return (start + timedelta(microseconds=us) for us in range(first, last))


def guess(row, previous, *, dataset_id, hidden_candidates, moments, salt=None) -> list:
    """(hidden details, moment) pairs whose rebuilt hash equals the row's exported hash."""
    matches = []
    for hidden in hidden_candidates:
        payload = {
            "previous": previous,
            "created_at": PLACEHOLDER,
            "actor": "" if row["who"] == "system" else row["who"],
            "action": row["action"],
            "dataset": dataset_id,
            "release": int(row["release"]) if row["release"] else None,
            "details": {**shown_details(row["details"]), **hidden},
            "remote_addr": row["from"] or None,
        }
        if salt is not None:
            payload["salt"] = salt
        head, tail = json.dumps(payload, sort_keys=True, cls=DjangoJSONEncoder).split(PLACEHOLDER)
        prefix = hashlib.sha256(head.encode())
        for moment in moments() if callable(moments) else moments:
            digest = prefix.copy()
            digest.update((moment.isoformat() + tail).encode())
            if digest.hexdigest() == row["hash"]:
                matches.append((hidden, moment))
    return matches
