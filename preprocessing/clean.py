"""Wikitext -> plain-text paragraphs, with mwparserfromhell.

Removed: templates ({{...}}), <ref> and other non-prose tags (tables, galleries, math, code), files/images,
categories, comments, magic words, headings, boilerplate sections (References, External links, ... — see
CorpusConfig.drop_sections) and, unless kept, list items. Kept: the visible text of internal and external links,
bold/italic and other inline markup's content, and paragraph structure (blank-line separated blocks).

    python -m preprocessing.clean < page.wikitext
"""

from __future__ import annotations

import html
import re
import sys
from typing import Iterable

import mwparserfromhell
from mwparserfromhell.nodes import (
    Argument, Comment, ExternalLink, Heading, HTMLEntity, Tag, Template, Text, Wikilink,
)

# Tags whose content is not running prose.
_DROP_TAGS = {
    "ref", "references", "table", "gallery", "timeline", "imagemap", "math", "chem", "ce", "score", "graph",
    "syntaxhighlight", "source", "pre", "code", "hiero", "mapframe", "maplink", "templatedata", "noinclude",
    "includeonly", "onlyinclude", "nowiki", "inputbox", "categorytree", "div-col", "poem",
}
_LIST_TAGS = {"li", "dt", "dd"}
_LINE_TAGS = {"br", "hr"}
# Link namespaces that are not running text (images, categories, interwiki media).
_NON_TEXT_LINKS = {"file", "image", "category", "media", "wikipedia", "wp", "wikt", "wiktionary", "s", "commons",
                   "template", "help", "portal", "user", "talk", "special", "mediawiki", "module", "draft"}
_LIST_MARK = "\x00"
_MAGIC_WORD = re.compile(r"__[A-Z]+__")
_EMPTY_BRACKETS = re.compile(r"\(\s*[,;:]?\s*\)|\[\s*\]")
_SPACES = re.compile(r"[ \t\u00a0]+")
_SPACE_BEFORE_PUNCT = re.compile(r" +([,.;:!?)\]])")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
# mwparserfromhell leaves markup it cannot parse (an unbalanced quote inside a <ref>, a broken table) as plain
# text; these catch what is left of it.
_LEFTOVER_REF = re.compile(r"<ref[^>]*/>|<ref[^>]*>.*?</ref\s*>", re.DOTALL | re.IGNORECASE)
_LEFTOVER_TAG = re.compile(r"</?[a-zA-Z][a-zA-Z0-9]*(?:\s[^<>]*)?/?>")
_LEFTOVER_QUOTES = re.compile(r"'{2,}")
_BROKEN_MARKUP = re.compile(r"\{\||\|\}|\|-|\{\{|\}\}|\[\[|\]\]")


def _link_text(link: Wikilink) -> str:
    title = str(link.title).strip()
    if ":" in title and not title.startswith(":"):
        prefix = title.split(":", 1)[0].strip().lower()
        if prefix in _NON_TEXT_LINKS or (len(prefix) in (2, 3) and prefix.isalpha() and prefix.islower()):
            # files, categories and interlanguage links ([[de:...]]) carry no running text
            return ""
    if link.text is not None:
        return _render(link.text.nodes)
    return title.lstrip(":").split("#", 1)[0] if not title.startswith("#") else title[1:]


def _render(nodes: Iterable) -> str:
    out: list[str] = []
    for node in nodes:
        if isinstance(node, Text):
            out.append(node.value)
        elif isinstance(node, Wikilink):
            out.append(_link_text(node))
        elif isinstance(node, ExternalLink):
            out.append(_render(node.title.nodes) if node.title is not None else "")
        elif isinstance(node, HTMLEntity):
            try:
                out.append(node.normalize())
            except ValueError:
                pass
        elif isinstance(node, Tag):
            tag = str(node.tag).strip().lower()
            if tag in _DROP_TAGS:
                continue
            if tag in _LIST_TAGS:
                out.append("\n" + _LIST_MARK if node.wiki_markup else "\n")
            elif tag in _LINE_TAGS:
                out.append("\n")
            if node.contents is not None and tag not in _LINE_TAGS:
                out.append(_render(node.contents.nodes))
            if tag in ("p", "div", "blockquote") and not node.wiki_markup:
                out.append("\n\n")
        elif isinstance(node, (Template, Comment, Argument, Heading)):
            continue
        # anything else (unknown node types) carries no visible text
    return "".join(out)


def _section_nodes(code, drop_sections: set[str]) -> list:
    """The top-level nodes outside boilerplate sections; headings become paragraph breaks."""
    kept: list = []
    skipping_level: int | None = None
    for node in code.nodes:
        if isinstance(node, Heading):
            title = _render(node.title.nodes).strip().lower()
            if skipping_level is not None and node.level > skipping_level:
                continue
            skipping_level = node.level if title in drop_sections else None
            kept.append(Text("\n\n"))
            continue
        if skipping_level is None:
            kept.append(node)
    return kept


def _tidy(paragraph: str) -> str:
    text = _MAGIC_WORD.sub("", paragraph)
    text = _LEFTOVER_QUOTES.sub("", _LEFTOVER_TAG.sub("", _LEFTOVER_REF.sub("", text)))
    text = html.unescape(text)
    text = _EMPTY_BRACKETS.sub("", text)
    text = _SPACES.sub(" ", text.replace("\n", " "))
    text = _SPACE_BEFORE_PUNCT.sub(r"\1", text)
    return text.strip()


def wikitext_to_paragraphs(
    wikitext: str,
    drop_sections: Iterable[str] = (),
    keep_lists: bool = False,
    min_paragraph_chars: int = 0,
) -> list[str]:
    """Clean `wikitext` into plain-text paragraphs (in document order, each one line of text)."""
    code = mwparserfromhell.parse(wikitext)
    text = _render(_section_nodes(code, {s.strip().lower() for s in drop_sections}))
    paragraphs: list[str] = []
    for block in _PARAGRAPH_BREAK.split(text):
        lines = []
        for line in block.split("\n"):
            if line.startswith(_LIST_MARK):
                if not keep_lists:
                    # a list item ends the running paragraph
                    if lines:
                        paragraphs.append(_tidy(" ".join(lines)))
                        lines = []
                    continue
                line = line[1:]
            lines.append(line)
        if lines:
            paragraphs.append(_tidy(" ".join(lines)))
    # a paragraph that still holds table/template/link syntax is debris of markup the parser could not read
    return [p for p in paragraphs if p and len(p) >= min_paragraph_chars and not _BROKEN_MARKUP.search(p)]


if __name__ == "__main__":
    for p in wikitext_to_paragraphs(sys.stdin.read()):
        print(p, end="\n\n")
