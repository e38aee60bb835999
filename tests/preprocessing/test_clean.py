"""preprocessing.clean: wikitext -> plain paragraphs."""

from preprocessing.clean import wikitext_to_paragraphs
from preprocessing.config import DEFAULT_DROP_SECTIONS

WIKITEXT = """{{Infobox person|name=Ada|born=1815}}
'''Ada Lovelace''' was an [[England|English]] [[mathematician]].<ref>{{cite book|title=Ada}}</ref> She wrote the
first [[Computer program|program]] for the [[Analytical Engine]] (see {{lang|fr|moteur}}).

[[File:Ada_Lovelace.jpg|thumb|right|Portrait of Ada]]
{| class="wikitable"
|-
| table cell || other cell
|}
Her father was [[Lord Byron]]. She visited [http://example.org the archive] often.<!-- hidden comment -->

* a list item
* another list item

== Legacy ==
Ada Day is celebrated every October &amp; widely.

== References ==
{{reflist}}
Some reference prose that is boilerplate.

=== Sub of references ===
Still boilerplate.

[[Category:Mathematicians]]
[[de:Ada Lovelace]]
"""


def test_markup_is_removed_and_link_text_kept():
    paragraphs = wikitext_to_paragraphs(WIKITEXT, DEFAULT_DROP_SECTIONS)
    text = "\n".join(paragraphs)
    assert paragraphs[0].startswith("Ada Lovelace was an English mathematician. She wrote the first program for the Analytical Engine")
    for gone in ("Infobox", "cite", "Portrait", "thumb", "table cell", "hidden", "Category", "Mathematicians",
                 "list item", "boilerplate", "de:", "{{", "[[", "]]", "''", "<ref", "http", "Legacy", "moteur", "()"):
        assert gone not in text, gone
    assert "Her father was Lord Byron. She visited the archive often." in paragraphs
    assert "Ada Day is celebrated every October & widely." in paragraphs


def test_paragraph_structure_and_options():
    paragraphs = wikitext_to_paragraphs(WIKITEXT, DEFAULT_DROP_SECTIONS)
    assert len(paragraphs) == 3
    with_lists = wikitext_to_paragraphs(WIKITEXT, DEFAULT_DROP_SECTIONS, keep_lists=True)
    assert any("a list item" in p for p in with_lists)
    no_drop = "\n".join(wikitext_to_paragraphs(WIKITEXT, []))
    assert "Some reference prose that is boilerplate." in no_drop and "Still boilerplate." in no_drop
    assert wikitext_to_paragraphs(WIKITEXT, DEFAULT_DROP_SECTIONS, min_paragraph_chars=70) == [paragraphs[0]]
    assert wikitext_to_paragraphs("{{only|a=template}}\n[[Category:X]]") == []


def test_markup_the_parser_leaves_as_text_is_removed():
    # an unbalanced quote inside <ref> makes mwparserfromhell keep the ref as text; a table missing its end too
    # (the first paragraph is the shape of a real one in the enwiki sample's "Anarchism")
    wikitext = ('It is an [[ethics|ethical]] outrage.<ref>[[Simon Critchley#Infinitely Demanding|Infinitely Demanding]]'
                "'' by [[Simon Critchley]]. 2007. p. 125</ref> Next sentence&nbsp;here.\n\n"
                '{| class="wikitable"\n|-\n| broken table [[Link]] without an end\n\nLast words of the article here.')
    paragraphs = wikitext_to_paragraphs(wikitext)
    assert paragraphs == ["It is an ethical outrage. Next sentence here.", "Last words of the article here."]


def test_leftover_tags_refs_and_quotes_are_tidied():
    from preprocessing.clean import _tidy

    # what mwparserfromhell leaves as text in the enwiki sample's "Anarchism" after an unbalanced quote
    text = 'so palpable locally and globally."<ref>Infinitely Demanding\'\' by Simon Critchley. 2007. p. 125</ref> ' \
           "It is <span class=x>an</span> '''ethical''' outrage&nbsp;today."
    assert _tidy(text) == 'so palpable locally and globally." It is an ethical outrage today.'
