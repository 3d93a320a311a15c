"""Machine output carries plain text: ``--json`` strings and the HTML pages hold no backtick and no Rich markup.

Messages are written for the terminal, where a backticked command prints bold. The same messages reach ``--json``
(build, status, targets, plan) and the fleet pages (``status --html``, ``plan --html``); there they must read as
plain text, a backticked command in HTML a ``<code>`` element. The store is the suite's (tests/fleet_store.py): its
H100 target's toolchain (TensorRT) is not installed here, so its targets are skipped with a reason.
"""

from __future__ import annotations

import json
import os
from html.parser import HTMLParser
from pathlib import Path

import pytest

from . import forkcli
from .fleet_store import built_store, encoder_export


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    work = tmp_path_factory.mktemp("machine-output")
    store = (work / "store").as_uri()
    return work, store, built_store(work, store)


def _cli(*args: str, cwd: Path) -> str:
    done = forkcli.trtfarm(args, cwd=cwd, env={**os.environ, "COLUMNS": "80"}, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def strings(doc) -> list[str]:
    """Every string of a JSON document, its keys included."""
    if isinstance(doc, str):
        return [doc]
    if isinstance(doc, dict):
        return [s for k, v in doc.items() for s in (k, *strings(v))]
    if isinstance(doc, list):
        return [s for v in doc for s in strings(v)]
    return []


class _Texts(HTMLParser):
    """Every text node and attribute value of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        self.found += [v for _, v in attrs if v]

    def handle_data(self, data) -> None:
        self.found.append(data)


def page_strings(path: Path) -> list[str]:
    parser = _Texts()
    parser.feed(path.read_text())
    return parser.found


def marked_up(texts: list[str]) -> list[str]:
    return [t for t in texts if "`" in t or "[/" in t]


def test_json_and_pages_carry_no_backticks_or_markup(built, tmp_path):
    work, store, fleet = built
    view = ["--store", store, "--targets-file", str(fleet)]
    export = encoder_export(tmp_path / "encoder-3", 3)
    outputs = {
        "build": _cli("build", str(export / "model.onnx"), *view, "--json", cwd=tmp_path),
        "status": _cli("status", *view, "--json", "--html", str(tmp_path / "status.html"), cwd=tmp_path),
        "targets": _cli("targets", "--targets-file", str(fleet), "--json", cwd=tmp_path),
        "plan": _cli("whatif", "--fleet", str(fleet), *view, "--json", "--html", str(tmp_path / "plan"), cwd=tmp_path),
    }
    docs = {name: json.loads(text) for name, text in outputs.items()}
    skipped = [r for r in docs["build"] if r["status"] == "skipped"]
    assert [r["target"] for r in skipped] == ["h100-trt11.4"] and "tensorrt" in skipped[0]["reason"], skipped
    assert any("tensorrt" in s and "not installed" in s for s in strings(docs["status"])), docs["status"]
    assert any("not installed" in s for s in strings(docs["targets"])), docs["targets"]
    for name, doc in docs.items():
        assert marked_up(strings(doc)) == [], name
    pages = [tmp_path / "status.html", *sorted((tmp_path / "plan").glob("*.html"))]
    assert len(pages) == 2
    for page in pages:
        texts = page_strings(page)
        assert any("not installed" in t for t in texts) or page.name == "whatif.html", page
        assert marked_up(texts) == [], page


def test_a_backticked_command_is_code_in_html_and_the_rest_escaped():
    from trtfarm.errors import html_text

    assert html_text("install it: `pip install 'a<b'` & retry") == \
        "install it: <code>pip install &#x27;a&lt;b&#x27;</code> &amp; retry"
    assert html_text("[bold]one[/] `tick") == "one tick"
