# ruff: noqa: RUF001  (texts in other scripts and encodings)
"""HTML's visible text (lxml's parser) and text encodings (charset-normalizer) of the loaders."""

from __future__ import annotations

from pathlib import Path

import pytest

from memlane.knowledge.loaded_document import decode_text
from memlane.knowledge.loaders import DocumentLoadError, load_html, load_text

P = Path("doc")


# -- HTML --------------------------------------------------------------------------------


def text_of(html: str) -> str:
    return load_html(html.encode(), P).text


def test_a_page_with_script_style_and_nested_blocks() -> None:
    html = """<!DOCTYPE html>
<html><head><title>Release &amp; notes</title>
<style>p { display: block } .x::after { content: "</p>style" }</style>
<script>document.write("<p>script</p>"); var s = '</div>';</script></head>
<body>
  <header><nav><ul><li><a href="/">Home</a></li><li><a href="/docs">Docs</a></li></ul></nav>
  </header>
  <main>
    <article>
      <h1>Version  2.0</h1>
      <section><p>First <em>paragraph</em>,
         over two lines.</p><div><div><p>Deeply <b>nested</b> block.</p></div></div></section>
      <noscript><p>Turn on JavaScript</p></noscript>
      <template><p>a template</p></template>
      <table><tr><th>key</th><td>value</td></tr></table>
    </article>
  </main>
  <!-- a comment -->
  <footer>Footer text</footer>
</body></html>"""
    doc = load_html(html.encode(), P)
    assert doc.metadata == {"title": "Release & notes"}
    assert doc.text.split("\n\n") == [
        "Home",
        "Docs",
        "Version 2.0",
        "First paragraph, over two lines.",
        "Deeply nested block.",
        "key",
        "value",
        "Footer text",
    ]
    for hidden in ("script", "style", "JavaScript", "template", "comment", "</"):
        assert hidden not in doc.text


def test_what_the_markup_leaves_open_is_closed() -> None:
    # A hidden element without its end tag hides only itself: the parser closes it.
    assert text_of("<p hidden>secret<p>shown") == "shown"
    assert text_of("<ul><li hidden>a<li>b<li>c</ul>after").split("\n\n") == ["b", "c", "after"]
    assert text_of("<p>one<p>two<div>three").split("\n\n") == ["one", "two", "three"]
    assert text_of("<b>bold <i>both</b> italic</i> plain") == "bold both italic plain"


def test_text_after_a_hidden_element_stays() -> None:
    assert text_of("<p>before <span hidden>no</span>after</p>") == "before after"
    assert text_of("<p>a<script>x</script>b<br>c</p>") == "ab\nc"


def test_empty_and_declared_documents() -> None:
    assert load_html(b"", P).text == ""
    assert load_html(b"   \n", P).text == ""
    declared = b'<?xml version="1.0" encoding="utf-8"?><html><body><p>x\xc3\xa9</p></body></html>'
    assert load_html(declared, P).text == "x\u00e9"
    assert load_html("<p>café</p>".encode("cp1252"), P).text == "café"


def test_deep_and_large_documents() -> None:
    deep = "<div>" * 1500 + "bottom" + "</div>" * 1500
    assert text_of(deep) == "bottom"
    big = "<p>" + "word " * 2_500_000 + "</p>"  # one text node of 12.5 MB
    assert len(text_of(big)) == len("word " * 2_500_000) - 1


# -- encodings ----------------------------------------------------------------------------

WESTERN = "Café “quoted” – naïve résumé, 5 € only; the smart quotes and the euro are cp1252.\n"
GERMAN = "Größe: 10 cm. Übung macht den Meister; ça va très bien, merci beaucoup.\n"


@pytest.mark.parametrize(
    ("text", "encoding"),
    [
        (WESTERN, "cp1252"),
        ("café “quoted”", "cp1252"),  # short: Windows-1252 wins the tie
        (GERMAN, "latin-1"),
        (GERMAN, "cp1252"),
        ("Wörter mit Umlauten, UTF-16 mit BOM ✓\n", "utf-16"),
        ("Text in UTF-16 little-endian without a byte order mark.\n", "utf-16-le"),
        ("Привет, мир! Это текст в кодировке Windows-1251, довольно длинный.\n", "cp1251"),
        (
            "Καλημέρα κόσμε, αυτό είναι ένα ελληνικό κείμενο σε κωδικοποίηση Windows-1253.\n",
            "cp1253",
        ),
        ("これは日本語のテキストです。シフトJISでエンコードされています。\n", "shift_jis"),
        ("这是一个中文文本，使用GB18030编码，用于测试字符集检测。\n", "gb18030"),
        ("plain ascii\n", "ascii"),
        ("déjà vu in UTF-8 ✓\n", "utf-8"),
    ],
)
def test_text_files_in_many_encodings_decode_right(text: str, encoding: str) -> None:
    assert load_text(text.encode(encoding), P).text == text.lstrip("\ufeff")


def test_binary_content_fails() -> None:
    import os
    import zipfile
    from io import BytesIO

    buf = BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("a.txt", "hello " * 100)
    for data in (buf.getvalue(), bytes(range(256)) * 4, b"\x00\x01\x02PK", os.urandom(0) + b"\x00"):
        with pytest.raises(DocumentLoadError, match="binary"):
            decode_text(data)
