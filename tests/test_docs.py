"""The documentation holds together (issue 42 item 7): the README stays a short page for a
newcomer, every relative link in README.md and docs/*.md reaches a file of the repository (and a
heading of it, when the link names one), the README's screenshots stay small, and every setting
the portal reads is documented for operators."""

import re
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

README_MAX_LINES = 160
IMAGE_MAX_BYTES = 200_000
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
CODE_SPAN = re.compile(r"`[^`\n]*`")
COMMENT = re.compile(r"<!--.*?-->", re.S)
INLINE_LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # https:, mailto:, ...
SETTING = re.compile(r"\benv(?:_bool|_int|_float)?\(\s*\"([A-Z][A-Z0-9_]*)\"")


def documents() -> list[Path]:
    return [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]


def prose(text: str) -> str:
    """The text without code blocks, code spans and HTML comments (links there are not links)."""
    return CODE_SPAN.sub("", FENCE.sub("", COMMENT.sub("", text)))


def links(text: str) -> list[str]:
    body = prose(text)
    return INLINE_LINK.findall(body) + REFERENCE_LINK.findall(body)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", COMMENT.sub("", heading)).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor, duplicates numbered as GitHub numbers them (x, x-1, x-2)."""
    seen: dict[str, int] = {}
    result = set()
    for heading in HEADING.findall(FENCE.sub("", text)):
        base = anchor(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def broken_links(document: Path, root: Path = REPO_ROOT) -> list[str]:
    """Each relative link of `document` whose file is missing (or outside `root`), or whose
    #anchor names no heading of the Markdown file it points at."""
    text = document.read_text()
    broken = []
    for target in links(text):
        if EXTERNAL.match(target):
            continue
        path_part, _, fragment = target.partition("#")
        path = (document.parent / path_part).resolve() if path_part else document
        if not path.is_relative_to(root.resolve()) or not path.exists():
            broken.append(f"{document.name}: {target} (no such file)")
        elif fragment and path.suffix == ".md" and fragment not in anchors(path.read_text()):
            broken.append(f"{document.name}: {target} (no such heading)")
    return broken


def test_the_readme_is_a_short_page_for_a_newcomer():
    lines = (REPO_ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


def test_every_relative_link_reaches_a_file_and_heading():
    found = [link for document in documents() for link in links(document.read_text())]
    assert len(found) >= 40, found  # the check looks at the links there are
    broken = [problem for document in documents() for problem in broken_links(document)]
    assert broken == []


def test_a_planted_broken_link_is_found(tmp_path):
    """The broken twin: a missing file, a missing heading and a path out of the repository are
    each reported; a working link, an external one and links inside code are not."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n## Some heading: `x`\n")
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "# Page\n\n[gone](missing.md), [heading](other.md#nowhere), [out](../../etc/passwd),\n"
        "[fine](other.md#some-heading-x), [here](#page), [web](https://example.org/x.md),\n"
        "`[code](missing-in-code.md)`\n\n```\n[block](missing-in-block.md)\n```\n"
        "![picture](images/missing.png)\n\n[ref]: also-missing.md\n"
    )
    assert broken_links(page, root=tmp_path) == [
        "page.md: missing.md (no such file)",
        "page.md: other.md#nowhere (no such heading)",
        "page.md: ../../etc/passwd (no such file)",
        "page.md: images/missing.png (no such file)",
        "page.md: also-missing.md (no such file)",
    ]


def test_github_anchors():
    assert anchor("One machine: `./run.sh`") == "one-machine-runsh"
    assert anchor("Access control, CSRF, deploy settings and scans") == (
        "access-control-csrf-deploy-settings-and-scans"
    )
    assert anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}


def readme_images() -> list[Path]:
    text = prose((REPO_ROOT / "README.md").read_text())
    return [REPO_ROOT / target for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", text)]


def test_the_readme_shows_two_or_three_small_screenshots():
    images = readme_images()
    assert 2 <= len(images) <= 3, images
    for image in images:
        assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", image
        assert image.stat().st_size < IMAGE_MAX_BYTES, (image, image.stat().st_size)


def undocumented_settings(settings_source: str, documentation: str) -> list[str]:
    """The environment variables a settings module reads that the documentation never names."""
    return sorted(
        {name for name in SETTING.findall(settings_source) if f"`{name}`" not in documentation}
    )


def operator_documentation() -> str:
    return "".join(
        (REPO_ROOT / "docs" / name).read_text()
        for name in ("operating.md", "deployment-object-storage.md")
    )


def test_every_setting_is_documented_for_operators():
    import dpportal.settings

    source = Path(dpportal.settings.__file__).read_text()
    assert len(SETTING.findall(source)) >= 40  # the pattern finds the settings
    assert undocumented_settings(source, operator_documentation()) == []


@pytest.mark.parametrize("call", ['env("DPPORTAL_NEW")', 'env_int("DPPORTAL_NEW", 3)'])
def test_an_undocumented_setting_is_found(call):
    assert undocumented_settings(f"X = {call}\n", operator_documentation()) == ["DPPORTAL_NEW"]
