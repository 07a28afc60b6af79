"""T5/T7/T25 static rules over the source (the RNG-import rule for mechanisms/ lives in
tests/mechanisms/test_noise.py):
- no seed reaches the portal: no identifier or string in dpportal/ mentions a seed, no URL
  pattern or template input does, mechanisms read no seed from release parameters, and the
  portal always passes rng=None (the secure, unseeded source);
- nothing is marked safe: no mark_safe/SafeString in code, no |safe or autoescape off in templates;
- templates keep the CSP: no inline scripts, styles or event handlers;
- no raw SQL built from f-strings, % or + or .format.
Each rule's checker is shown to catch a violating snippet (its broken twin).
"""

import ast
import re

import pytest
from django.urls import get_resolver

from tests.conftest import REPO_ROOT

PORTAL_FILES = sorted((REPO_ROOT / "dpportal").rglob("*.py"))
MECHANISM_FILES = sorted((REPO_ROOT / "mechanisms").rglob("*.py"))
TEMPLATES = sorted((REPO_ROOT / "templates").rglob("*.html"))
# The CLI's --seed (tests and demos only) and the noise module itself may name seeds.
SEED_ALLOWED_IN_MECHANISMS = {
    "mechanisms/__main__.py",
    "mechanisms/noise.py",
    "mechanisms/__init__.py",
}


def relative(path):
    return str(path.relative_to(REPO_ROOT))


def docstring_nodes(tree):
    """The docstring constants of a module, its classes and functions (prose, not code)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def seed_mentions(source: str) -> list[str]:
    """Identifiers, attributes, arguments and strings (not docstrings) that mention a seed."""
    tree = ast.parse(source)
    prose = docstring_nodes(tree)
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.arg):
            names = [node.arg]
        elif isinstance(node, ast.keyword) and node.arg:
            names = [node.arg]
        elif isinstance(node, ast.alias):
            names = [node.name, node.asname or ""]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [] if id(node) in prose else [node.value]
        found += [f"line {node.lineno}: {n!r}" for n in names if "seed" in n.lower()]
    return found


def test_the_portal_code_never_names_a_seed():
    offenders = {relative(f): m for f in PORTAL_FILES if (m := seed_mentions(f.read_text()))}
    print(f"\nT7 seed rule: {len(PORTAL_FILES)} portal modules, {len(offenders)} mention a seed")
    assert offenders == {}


def test_mechanisms_read_no_seed_outside_the_cli_and_the_noise_module():
    offenders = {
        relative(f): m
        for f in MECHANISM_FILES
        if relative(f) not in SEED_ALLOWED_IN_MECHANISMS and (m := seed_mentions(f.read_text()))
    }
    assert offenders == {}


@pytest.mark.parametrize(
    "snippet",
    [
        "seed = request.POST['seed']",
        "value = request.GET.get('Seed')",
        "from mechanisms import seeded_source",
        "run(rng=seeded_source(1))",
        "class F(forms.Form):\n    random_seed = forms.IntegerField()",
        "def view(request, seed): pass",
        "params = {'seed': 3}",
    ],
)
def test_the_seed_rule_catches(snippet):
    assert seed_mentions(snippet)


def test_docstrings_may_explain_that_there_is_no_seed():
    assert seed_mentions('"""No field accepts a random seed."""\nx = 1') == []


def url_patterns(resolver=None, prefix=""):
    resolver = resolver or get_resolver()
    for entry in resolver.url_patterns:
        if hasattr(entry, "url_patterns"):
            yield from url_patterns(entry, prefix + str(entry.pattern))
        else:
            yield prefix + str(entry.pattern), entry.name or ""


def test_no_url_pattern_takes_a_seed():
    patterns = list(url_patterns())
    assert len(patterns) > 10
    assert [p for p in patterns if "seed" in (p[0] + p[1]).lower()] == []


SEED_INPUT = re.compile(r"""name\s*=\s*["'][^"']*seed""", re.IGNORECASE)


def test_no_template_has_a_seed_input():
    assert [relative(t) for t in TEMPLATES if SEED_INPUT.search(t.read_text())] == []
    assert SEED_INPUT.search('<input type="number" name="random_seed">')


def rng_arguments(source: str) -> list[str]:
    """Calls passing rng= anything but None."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            for keyword in node.keywords:
                if keyword.arg == "rng" and not (
                    isinstance(keyword.value, ast.Constant) and keyword.value.value is None
                ):
                    found.append(f"line {node.lineno}: rng={ast.unparse(keyword.value)}")
    return found


def test_the_portal_always_uses_the_secure_unseeded_source():
    offenders = {relative(f): m for f in PORTAL_FILES if (m := rng_arguments(f.read_text()))}
    assert offenders == {}
    assert rng_arguments("run_release(x, rng=seeded_source(1))")
    assert rng_arguments("run_release(x, rng=None)") == []


# ---------------------------------------------------------------- marking things safe

UNSAFE_TEMPLATE = re.compile(r"\|\s*safe(seq)?\b|\{%\s*autoescape\s+off")
UNSAFE_NAMES = {"mark_safe", "SafeString", "SafeText", "SafeData"}


def unsafe_code(source: str) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and node.id in UNSAFE_NAMES:
            lines.append(node.lineno)
        elif isinstance(node, ast.Attribute) and node.attr in UNSAFE_NAMES:
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and {a.name for a in node.names} & UNSAFE_NAMES:
            lines.append(node.lineno)
    return lines


def test_nothing_is_marked_safe():
    code = {relative(f): lines for f in PORTAL_FILES if (lines := unsafe_code(f.read_text()))}
    templates = [relative(t) for t in TEMPLATES if UNSAFE_TEMPLATE.search(t.read_text())]
    print(
        f"\nT25 escaping rule: {len(PORTAL_FILES)} modules and {len(TEMPLATES)} templates, "
        f"{len(code) + len(templates)} mark anything safe"
    )
    assert code == {} and templates == []


@pytest.mark.parametrize(
    "snippet",
    [
        "from django.utils.safestring import mark_safe",
        "html = safestring.mark_safe(name)",
        "x = SafeString(value)",
    ],
)
def test_the_escaping_rule_catches_code(snippet):
    assert unsafe_code(snippet)


@pytest.mark.parametrize(
    "snippet",
    [
        "{{ dataset.name|safe }}",
        "{{ rows | safeseq }}",
        "{% autoescape off %}x{% endautoescape %}",
    ],
)
def test_the_escaping_rule_catches_templates(snippet):
    assert UNSAFE_TEMPLATE.search(snippet)


# ---------------------------------------------------------------- templates keep the CSP

INLINE_CODE = {
    "inline script": re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.IGNORECASE),
    "style element": re.compile(r"<style\b", re.IGNORECASE),
    "style attribute": re.compile(r"<[a-z][^>]*\sstyle\s*=", re.IGNORECASE),
    "event handler": re.compile(r"<[a-z][^>]*\son[a-z]+\s*=", re.IGNORECASE),
    "javascript: URL": re.compile(r"javascript:", re.IGNORECASE),
}


TEMPLATE_COMMENTS = re.compile(
    r"\{% comment %\}.*?\{% endcomment %\}|\{#.*?#\}|<!--.*?-->", re.DOTALL
)


def inline_code(text: str) -> list[str]:
    code = TEMPLATE_COMMENTS.sub("", text)
    return [kind for kind, pattern in INLINE_CODE.items() if pattern.search(code)]


def test_templates_have_no_inline_code_the_csp_would_block():
    offenders = {relative(t): kinds for t in TEMPLATES if (kinds := inline_code(t.read_text()))}
    assert offenders == {}


@pytest.mark.parametrize(
    "snippet",
    [
        "<script>alert(1)</script>",
        "<style>p{}</style>",
        '<p style="color:red">',
        '<button onclick="go()">',
        '<a href="javascript:go()">',
    ],
)
def test_the_csp_rule_catches(snippet):
    assert inline_code(snippet)


def test_the_csp_rule_allows_script_files_and_ignores_comments():
    assert inline_code('<script src="/static/js/page.js"></script>') == []
    assert inline_code("{% comment %}plotly adds <style> elements{% endcomment %}") == []
    assert inline_code("{# no <script> here #}<!-- nor <style> -->") == []


# ---------------------------------------------------------------- raw SQL

SQL_CALLS = {"execute", "executemany", "raw", "extra", "RawSQL"}


def built_sql(source: str) -> list[int]:
    """Raw SQL calls whose query text is built by f-string, %, + or .format."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        name = (
            node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        )
        query = node.args[0]
        built = isinstance(query, ast.JoinedStr | ast.BinOp) or (
            isinstance(query, ast.Call)
            and isinstance(query.func, ast.Attribute)
            and query.func.attr == "format"
            and not _psycopg_composed(query.func.value)
        )
        if name in SQL_CALLS and built:
            lines.append(node.lineno)
    return lines


def _psycopg_composed(receiver: ast.expr) -> bool:
    """`sql.SQL("...").format(...)`: psycopg quotes each part (Identifier, Literal) itself."""
    return (
        isinstance(receiver, ast.Call)
        and isinstance(receiver.func, ast.Attribute)
        and receiver.func.attr == "SQL"
        and isinstance(receiver.func.value, ast.Name)
        and receiver.func.value.id == "sql"
        and bool(receiver.args)
        and isinstance(receiver.args[0], ast.Constant)
    )


def test_no_raw_sql_is_built_from_strings():
    offenders = {
        relative(f): lines
        for f in PORTAL_FILES + MECHANISM_FILES
        if (lines := built_sql(f.read_text()))
    }
    assert offenders == {}


@pytest.mark.parametrize(
    "snippet",
    [
        'cursor.execute(f"SELECT * FROM t WHERE id = {pk}")',
        'cursor.execute("SELECT * FROM t WHERE id = %s" % pk)',
        'Model.objects.raw("SELECT * FROM t WHERE name = \'" + name + "\'")',
        'RawSQL("SELECT {}".format(column), [])',
    ],
)
def test_the_sql_rule_catches(snippet):
    assert built_sql(snippet)


def test_the_sql_rule_allows_parameters():
    assert built_sql('cursor.execute("SELECT * FROM t WHERE id = %s", [pk])') == []


def test_the_sql_rule_allows_psycopg_composition_of_a_constant_template_only():
    assert built_sql('cursor.execute(sql.SQL("SELECT {}").format(sql.Identifier(c)))') == []
    assert built_sql('cursor.execute(sql.SQL(f"SELECT {c}").format())')
    assert built_sql('cursor.execute("SELECT {}".format(c))')
