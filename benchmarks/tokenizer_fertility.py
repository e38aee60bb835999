"""Multilingual sentence splitting and tokenizer fertility on the newspaper4k gold texts (quality, not speed).

Prints (1) per language: paragraphs, sentences per paragraph, mean and max sentence characters of
`split_sentences`; (2) per tokenizer kind (wordpiece, bpe, unigram; cased, every character kept, vocab 4000,
trained on all the texts balanced with the tokenizer sample at alpha 0.5) the fertility table, the longest CJK
token and the tokens per CJK character; (3) what isolating CJK ideographs would cost unigram/bpe (by
construction >= 1 token per ideograph) against what they do without it. In-sample figures: the texts the
tokenizers are measured on are those they were trained on (the sample is small: 64 k characters).

    python benchmarks/tokenizer_fertility.py            # needs: bertfactory samples fetch newspaper4k
"""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from preprocessing.config import TokenizerConfig  # noqa: E402
from preprocessing.fertility import fertility, format_table  # noqa: E402
from preprocessing.sentences import split_sentences  # noqa: E402
from preprocessing.tokenizer import train_tokenizer  # noqa: E402
from preprocessing.tokenizer_sample import training_sample  # noqa: E402
from tests.preprocessing.news_texts import news_paragraphs, news_texts_by_lang  # noqa: E402

CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff]")


def sentence_table() -> str:
    rows = ["| lang | paragraphs | sentences/paragraph | mean sentence chars | max sentence chars | max paragraph chars |",
            "|---|---:|---:|---:|---:|---:|"]
    for lang in ("ar", "my", "zh", "ja", "th", "es", "lv", "en"):
        paragraphs = news_paragraphs(lang)
        sentences = [s for p in paragraphs for s in split_sentences(p, lang)]
        rows.append(f"| {lang} | {len(paragraphs)} | {len(sentences) / len(paragraphs):.2f} | "
                    f"{statistics.mean(map(len, sentences)):.1f} | {max(map(len, sentences))} | "
                    f"{max(map(len, paragraphs))} |")
    return "\n".join(rows)


def cjk_figures(tok, texts_by_lang) -> str:
    vocab = tok.get_vocab()
    decoded = {t: tok.decode([i]) for t, i in vocab.items()}
    longest = max((len(CJK.findall(s)), s) for s in decoded.values())
    cjk_text = "".join(t for lang in ("zh", "ja") for t in texts_by_lang[lang])
    runs = CJK.findall(cjk_text)
    tokens = sum(len(tok.encode(r, add_special_tokens=False).ids) for r in re.findall(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff]+", cjk_text))
    return f"longest CJK token: {longest[0]} chars ({longest[1]!r}); tokens per CJK char (zh+ja runs): {tokens / len(runs):.3f}"


def main() -> None:
    print("## sentences\n" + sentence_table() + "\n")
    texts_by_lang = news_texts_by_lang()
    sample = training_sample(texts_by_lang, max_chars=None, alpha=0.5, seed=0)
    print(f"training sample: {sum(map(len, sample))} chars, {len(sample)} texts\n")
    for kind in ("wordpiece", "bpe", "unigram"):
        cfg = TokenizerConfig(kind=kind, vocab_size=4000, lowercase=False, limit_alphabet=None, min_frequency=2)
        tok = train_tokenizer(lambda: iter(sample), cfg)
        print(f"## {kind} (vocab {tok.get_vocab_size()})\n" + format_table(fertility(tok, texts_by_lang)))
        print(cjk_figures(tok, texts_by_lang) + "\n")


if __name__ == "__main__":
    main()
