"""T25 (and T5's scan): bandit finds no high-severity issue in dpportal/ or mechanisms/, and no
medium one in mechanisms/. Configuration: [tool.bandit] in pyproject.toml."""

import json
import subprocess
import sys
from collections import Counter

from tests.conftest import REPO_ROOT


def bandit(*targets) -> list[dict]:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bandit",
            "-c",
            str(REPO_ROOT / "pyproject.toml"),
            "-r",
            *targets,
            "-f",
            "json",
            "-q",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode in (0, 1), result.stderr  # 1 means "found issues"
    report = json.loads(result.stdout)
    assert report["errors"] == [], report["errors"]
    return report["results"]


def describe(findings) -> str:
    return "\n".join(
        f"{f['filename']}:{f['line_number']} {f['test_id']} "
        f"{f['issue_severity']}: {f['issue_text']}"
        for f in findings
    )


def test_bandit_finds_nothing_serious():
    findings = bandit("dpportal", "mechanisms")
    severities = Counter(f["issue_severity"] for f in findings)
    print(
        f"\nT25 bandit -r dpportal mechanisms: {severities['HIGH']} high, "
        f"{severities['MEDIUM']} medium, {severities['LOW']} low findings"
    )
    high = [f for f in findings if f["issue_severity"] == "HIGH"]
    medium_in_mechanisms = [
        f
        for f in findings
        if f["issue_severity"] == "MEDIUM" and f["filename"].startswith("mechanisms")
    ]
    assert high == [], describe(high)
    assert medium_in_mechanisms == [], describe(medium_in_mechanisms)


def test_bandit_reports_a_planted_high_finding(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        "import subprocess\n\ndef run(command):\n    return subprocess.call(command, shell=True)\n"
    )
    findings = bandit(str(planted))
    assert [f["issue_severity"] for f in findings if f["test_id"] == "B602"] == ["HIGH"]
