"""Config sections of the preprocessing stage: `corpus` (CorpusConfig: what to read and how to clean it) and
`preprocess` (PreprocessConfig: Beam runner, hold-out split, tokenizer, instances, masking, shards, seed).

Defaults are the paper-scale values of BERT (Devlin et al. 2019; google-research/bert create_pretraining_data):
WordPiece vocab 30,522 (lowercased), max_seq_len 128, short_seq_prob 0.1, masked_lm_prob 0.15,
max_predictions_per_seq 20, dupe_factor 10. configs/local.yaml overrides them down to a tiny config.

    python -c "from preprocessing.config import PreprocessConfig; print(PreprocessConfig().model_dump_json(indent=1))"
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from bertfactory.config import StrictModel

from .dedup_config import DedupConfig
from .filters import FiltersConfig
from .langcodes import normalise_lang_code
from .langid import LangIdConfig
from .sources.parallel import ParallelOptions
from .sources.text import TextOptions
from .sources.warc import WarcOptions

# Sections whose text is boilerplate rather than prose; everything from such a heading to the next heading of
# the same or a higher level is dropped.
DEFAULT_DROP_SECTIONS = [
    "See also", "References", "External links", "Further reading", "Notes", "Bibliography", "Sources",
    "Citations", "Footnotes", "Notes and references",
]


class CorpusConfig(StrictModel):
    """What to read and how to clean it."""

    inputs: list[str] = Field(
        default_factory=lambda: ["sample:enwiki"],
        min_length=1,
        description="input files, directories (every file under them), globs, or fsspec URLs (text/jsonl); "
        "`sample:<name>[/<file>]` names a fetched sample",
    )
    format: Literal["wikipedia", "warc", "text", "jsonl", "parallel"] = Field(
        "wikipedia", description="input format (docs/sources.md): wikipedia = MediaWiki XML export (plain or bz2); "
        "warc = WARC/WARC.gz crawls (CC-News); text = blank-line separated documents; jsonl = one JSON object with "
        "`text` per line; parallel = aligned pairs (TSV, gettext .po, UDHR HTML) for tlm-pairs")
    lang: str | None = Field(
        "auto", description="language of documents whose source does not give one: auto = detect (corpus.langid), "
        "a code = assume it, null = leave unknown ('und')")
    parent: str | None = Field(
        None, description="incremental mode: the shards directory of an existing corpus version; inputs it has "
        "already read are skipped, new documents are deduplicated against it and written as version N+1")
    namespaces: list[int] = Field(default_factory=lambda: [0], min_length=1, description="page namespaces to keep (0 = articles)")
    drop_sections: list[str] = Field(
        default_factory=lambda: list(DEFAULT_DROP_SECTIONS),
        description="section headings (case-insensitive) whose whole section is dropped as boilerplate",
    )
    keep_lists: bool = Field(False, description="keep bulleted/numbered list items as text (most are not prose)")
    min_paragraph_chars: int = Field(20, ge=0, description="drop paragraphs shorter than this after cleaning")
    min_doc_chars: int = Field(200, ge=0, description="drop documents with fewer characters of clean text (reason too_short)")
    min_doc_sentences: int = Field(2, ge=1, description="drop documents with fewer sentences (reason too_short)")
    multistream_chunk_streams: int = Field(
        50, ge=0, description="wikipedia: a multistream dump with its index beside it is read in chunks of this many "
        "bz2 streams (100 pages each) spread over the workers; 0 = read every file whole")
    max_bad_inputs: Annotated[int, Field(ge=0)] | Annotated[float, Field(gt=0, lt=1)] = Field(
        0.01, description="input files that may break part way (truncated or corrupt compression, broken XML or "
        "WARC framing) before the job fails: a whole number = that many files, a number in (0, 1) = that fraction "
        "of the input files (default 1 %: none below 100 files). A broken file is quarantined whole (reason and "
        "byte offset in quarantine.jsonl, counts.bad_inputs); the records read before the break are kept "
        "(preprocessing.bad_inputs)")
    warc: WarcOptions = Field(default_factory=WarcOptions, description="warc: main-text extraction and limits")
    text: TextOptions = Field(default_factory=TextOptions, description="text / jsonl: fields, encoding and limits")
    parallel: ParallelOptions = Field(default_factory=ParallelOptions,
                                      description="parallel: file layout, languages, UDHR pivot")
    langid: LangIdConfig = Field(default_factory=LangIdConfig,
                                 description="language identification of documents whose source gives no language")
    filters: FiltersConfig = Field(default_factory=FiltersConfig,
                                   description="normalisation, boilerplate and quality filters (docs/cleaning.md)")
    dedup: DedupConfig = Field(default_factory=DedupConfig,
                               description="exact and MinHash-LSH near-duplicate removal (docs/cleaning.md)")
    documents: Literal["clean", "raw"] = Field(
        "clean", description="clean = the documents stage's normalisation, boilerplate and quality filters, "
        "language detection, minimum sizes and exact + near dedup; raw = the text as read, none of those (a "
        "source's language or a code in corpus.lang is kept, `auto` detects nothing): documents are only split into "
        "sentences, empty ones dropped and a repeated identity quarantined (duplicate_key). For comparisons on equal "
        "work with tools that tokenise text as it is (benchmarks/corpus_throughput.py)")

    @model_validator(mode="after")
    def _lang_is_a_code(self) -> "CorpusConfig":
        # a word (`english`) used to be stored as the corpus' language and matched no filter or langid code
        if self.lang not in (None, "auto") and normalise_lang_code(self.lang) is None:
            raise ValueError(f"lang {self.lang!r} is not a language code: give an ISO 639 code or tag (en, eng, "
                             "en-US), auto to detect each document's, or null to leave it unknown")
        return self

    @model_validator(mode="after")
    def _raw_keeps_no_dedup_index(self) -> "CorpusConfig":
        if self.documents == "raw" and self.parent is not None:
            raise ValueError("documents raw deduplicates nothing and keeps no dedup index, so it cannot continue a "
                             "corpus version (parent); use documents clean")
        return self


class SdkEnvironmentConfig(StrictModel):
    """Where a portable runner starts the Python SDK workers (Beam's --environment_type/--environment_config)."""

    type: Literal["EXTERNAL", "PROCESS", "DOCKER", "LOOPBACK"] = Field(
        "DOCKER", description="EXTERNAL = ask running worker pools (apache_beam.runners.worker.worker_pool_main) "
        "at `config` for workers; PROCESS = run the command in `config`; DOCKER = run the SDK container image "
        "`config` (default: Beam's image for this SDK version); LOOPBACK = workers in the submitting process")
    config: str | None = Field(
        None, description="EXTERNAL: host:port of the worker pool; PROCESS: JSON like {\"command\": \"/path/boot\"}; "
        "DOCKER: container image; null = Beam's default")
    setup_file: str | None = Field(
        None, description="setup.py staged to the workers and installed there (--setup_file); worker pools "
        "(EXTERNAL) do not install it: their Python must already import the project")

    @model_validator(mode="after")
    def _external_needs_address(self) -> "SdkEnvironmentConfig":
        if self.type == "EXTERNAL" and not self.config:
            raise ValueError("environment type EXTERNAL needs `config`: the worker pool's host:port")
        return self


class PortableRunnerConfig(StrictModel):
    """Beam's PortableRunner against a running job service (Beam's Python local job service, a Flink/Spark job
    server started by hand, ...)."""

    job_endpoint: str = Field("localhost:8099", description="host:port of the job service (--job_endpoint)")
    environment: SdkEnvironmentConfig = Field(
        default_factory=lambda: SdkEnvironmentConfig(type="EXTERNAL", config="localhost:50000"),
        description="where the job service starts the SDK workers")


class DataflowRunnerConfig(StrictModel):
    """Google Cloud Dataflow (needs `pip install apache-beam[gcp]` and credentials where the job is submitted)."""

    project: str = Field("", description="GCP project id (required for the dataflow preset)")
    region: str = Field("", description="Dataflow region, e.g. europe-west1 (required for the dataflow preset)")
    temp_location: str = Field("", description="gs:// path for temporary files (required for the dataflow preset)")
    staging_location: str | None = Field(None, description="gs:// path for staged code; null = under temp_location")
    setup_file: str | None = Field(
        "./pyproject.toml", description="the project's pyproject.toml (or a setup.py): Beam builds the project "
        "and installs it on the workers; null = the sdk_container_image already has it")
    machine_type: str | None = Field(None, description="worker machine type, e.g. n2-standard-8; null = Dataflow's")
    max_num_workers: int | None = Field(None, ge=1, description="autoscaling ceiling; null = Dataflow's")
    sdk_container_image: str | None = Field(
        None, description="custom SDK container with the project preinstalled (instead of setup_file)")


class FlinkRunnerConfig(StrictModel):
    """Apache Flink through Beam's FlinkRunner (it starts Beam's Flink job server, a Java jar, on the driver)."""

    flink_master: str = Field("[auto]", description="host:port of the Flink REST endpoint; [local] = embedded Flink")
    parallelism: int | None = Field(None, ge=1, description="default parallelism of the Flink job; null = Flink's")
    environment: SdkEnvironmentConfig = Field(
        default_factory=SdkEnvironmentConfig, description="where Flink's task managers start the SDK workers")


class SparkRunnerConfig(StrictModel):
    """Apache Spark through Beam's SparkRunner (it starts Beam's Spark job server, a Java jar, on the driver)."""

    spark_master_url: str = Field("local[4]", description="Spark master URL, e.g. spark://host:7077")
    environment: SdkEnvironmentConfig = Field(
        default_factory=SdkEnvironmentConfig, description="where Spark's executors start the SDK workers")


class RunnerConfig(StrictModel):
    """Which Beam runner executes the pipeline. Chosen explicitly: never Beam's default DirectRunner path, which
    may try to download a Prism binary. Only the section of the chosen preset is used (docs/runners.md)."""

    preset: Literal["local", "in_process", "portable", "dataflow", "flink", "spark"] = Field(
        "local",
        description="local = FnApiRunner with worker subprocesses (multi_processing); "
        "in_process = FnApiRunner in the calling process (one worker; for debugging); "
        "portable = PortableRunner against `portable.job_endpoint`; dataflow / flink / spark = those services",
    )
    num_workers: int = Field(
        2, ge=1, description="worker processes of the local preset (direct_num_workers); for portable, the SDK "
        "workers Beam's Python local job service asks for (other job services ignore it)")
    in_process_below_mib: float = Field(
        2.0, ge=0, description="the local preset runs a preprocessing job whose input files total less than this "
        "many MiB (as stored; bz2/gz/xz files count 5x) in the calling process, as the in_process preset does: starting its worker "
        "subprocesses costs ~2-3 CPU-s each per job, more than such a job's own work (benchmarks/fixed_cost.py); "
        "the outputs are byte-identical either way. 0 = always start the workers")
    in_process_tokenizer_bound: bool = Field(
        True, description="with num_workers up to 2, the local preset runs a job of raw documents packed by tokens "
        "(corpus.documents raw, preprocess.instances.packing tokens) in the calling process whatever its size: ~4/5 "
        "of its work at 10x sotu is the tokenizer's, whose Rust threads use every core from one process, so 2 worker "
        "subprocesses cost more (start-up, data plane) than they save (measured at 1x and 10x sotu: "
        "docs/runners.md). Ignored when in_process_below_mib is 0; false = the size rule alone")
    exchange: Literal["auto", "disk", "bucket"] = Field(
        "auto", description="how the job's workers hand each other its intermediate files (spills, pre-shards, "
        "masked parts, shards): disk = a staging folder under the run directory that every worker sees (one "
        "machine, or a shared file system); bucket = a folder of the run location's bucket (the run directory "
        "must be an s3:// or gs:// URL, and the inputs URLs too): each worker writes in its own scratch ($TMPDIR) "
        "and uploads, reads by downloading, and needs no disk another can see (preprocessing/exchange.py); auto = "
        "bucket for the portable, dataflow, flink and spark presets when the run directory is a URL, else disk")
    portable: PortableRunnerConfig = Field(default_factory=PortableRunnerConfig, description="portable preset")
    dataflow: DataflowRunnerConfig = Field(default_factory=DataflowRunnerConfig, description="dataflow preset")
    flink: FlinkRunnerConfig = Field(default_factory=FlinkRunnerConfig, description="flink preset")
    spark: SparkRunnerConfig = Field(default_factory=SparkRunnerConfig, description="spark preset")
    extra_options: list[str] = Field(
        default_factory=list, description="additional Beam pipeline flags, e.g. ['--direct_runner_bundle_repeat=0']"
    )

    @model_validator(mode="after")
    def _dataflow_required(self) -> "RunnerConfig":
        if self.preset == "dataflow":
            missing = [name for name in ("project", "region", "temp_location") if not getattr(self.dataflow, name)]
            if missing:
                raise ValueError(f"the dataflow preset needs runner.dataflow.{', '.join(missing)}")
            if not self.dataflow.temp_location.startswith("gs://"):
                raise ValueError("runner.dataflow.temp_location must be a gs:// path")
        return self


class TokenizerConfig(StrictModel):
    """The tokenizer, trained on the training documents (never the held-out ones); docs/tokenizers.md."""

    path: str | None = Field(None, description="use this existing tokenizer instead of training one: a tokenizers "
                              "JSON file (e.g. a HF model's tokenizer.json) or a BERT WordPiece vocab.txt "
                              "(preprocessing/tokenizer.py: adopting)")
    kind: Literal["wordpiece", "bpe", "unigram"] = Field(
        "wordpiece", description="wordpiece = BERT (BertNormalizer, ## continuations, [CLS] A [SEP] B [SEP]); bpe = "
        "byte-level BPE (RoBERTa: <s> A </s></s> B </s>); unigram = SentencePiece Unigram (ALBERT/XLM-R: NFKC, ▁)")
    vocab_size: int = Field(30522, ge=16, description="vocabulary size including special tokens and the alphabet")
    lowercase: bool = Field(True, description="lowercase the text (BERT uncased); RoBERTa and XLM-R are cased: "
                            "set false for them and for multilingual corpora")
    strip_accents: bool | None = Field(None, description="remove combining marks after NFD (null = as lowercase, "
                                       "like BERT); also removes Indic/Thai/Burmese vowel signs")
    min_frequency: int = Field(2, ge=0, description="a merge must occur at least this often to enter the vocabulary "
                               "(wordpiece, bpe)")
    limit_alphabet: int | None = Field(1000, ge=1, description="wordpiece: keep only the most frequent characters "
                                       "(null = all; use null or several thousand for Chinese/Japanese). bpe has "
                                       "the 256 bytes, unigram keeps every character of the sample")
    sample_alpha: float = Field(0.5, ge=0.0, le=1.0, description="language balance of the tokenizer's training "
                                "sample: q_i ~ p_i^alpha of the characters per language (XLM 0.5; 1 = natural)")
    sample_max_chars: int | None = Field(100_000_000, ge=1, description="characters in the tokenizer's training "
                                         "sample; languages balanced by sample_alpha, none repeated (null or more "
                                         "than the training documents have = all of them, alpha has no effect)")
    max_unk_rate: float = Field(0.05, ge=0.0, le=1.0, description="a given tokenizer (path) is refused when more "
                                "than this share of the tokens of a sample of the corpus is its unknown token, "
                                "measured before the job runs (preprocessing.tokenizer_check; a tokenizer of the "
                                "corpus's language is far below 1 %, one of another script far above)")
    allow_high_unk: bool = Field(False, description="use a given tokenizer even above max_unk_rate (a warning "
                                 "instead of the refusal; CLI --allow-high-unk)")


class InstancesConfig(StrictModel):
    """Training instances: sentence pairs as google-research/bert create_pretraining_data builds them
    (preprocessing.instances), or packed text, causal segments and translation pairs (preprocessing.segments)."""

    format: Literal["nsp-pairs", "sop-pairs", "full-sentences", "doc-sentences", "single-segment", "clm",
                    "tlm-pairs"] = Field(
        "nsp-pairs", description="nsp-pairs = BERT next-sentence pairs (B follows A or comes from another document); "
        "sop-pairs = ALBERT sentence-order pairs (A and B consecutive, swapped with probability 0.5; nsp_label 1 = "
        "swapped); full-sentences / doc-sentences = RoBERTa's packed sentences (across / within documents); "
        "single-segment = SpanBERT's one contiguous segment; clm = causal segments of max_seq_len tokens with their "
        "index in the document (XLM CLM, XLNet, Transformer-XL); tlm-pairs = XLM translation pairs from a parallel "
        "corpus. Recorded as the manifest's instance_format.name (docs/shards.md)")
    max_seq_len: int = Field(128, ge=8, le=65535, description="tokens per instance including [CLS] and two [SEP]")
    short_seq_prob: float = Field(0.1, ge=0.0, le=1.0, description="probability of a shorter target length (2..max_seq_len-3)")
    nsp_random_prob: float = Field(0.5, ge=0.0, le=1.0, description="probability that segment B comes from another document")
    dupe_factor: int = Field(10, ge=1, description="passes over the corpus, each with different pairings")
    docs_per_bucket: int = Field(
        10000, ge=2, description="documents per random-document bucket; NotNext B segments come from the same bucket"
    )
    max_bucket_chars: int = Field(
        16_000_000, ge=1000, description="characters of text per bucket at most (more buckets when the documents "
        "are long): one worker holds a bucket's token ids while it builds its instances, so this bounds its memory "
        "(~10 bytes per character) whatever the corpus size")
    packing: Literal["sentences", "tokens"] = Field(
        "sentences", description="format full-sentences only: sentences = a row ends at a sentence end (RoBERTa "
        "FULL-SENTENCES; a sentence is cut only when longer than a row); tokens = every row filled to exactly "
        "max_seq_len (the bucket's last row shorter), cut wherever it is full, as HF run_mlm's group_texts does, with "
        "[CLS]/[SEP] around each row and a [SEP] between documents: no sentence boundary is needed, so documents are "
        "tokenised a paragraph at a time and packed as arrays (preprocessing.segments.token_rows)")

    @model_validator(mode="after")
    def _token_packing_needs_full_sentences(self) -> "InstancesConfig":
        if self.packing == "tokens" and self.format != "full-sentences":
            raise ValueError(f"instances.packing tokens packs full-sentences rows; format {self.format!r} has its "
                             "own cutting (use packing sentences, or format full-sentences)")
        return self


class MaskingConfig(StrictModel):
    """Precomputed masked-LM targets: K variants per instance."""

    policy: Literal["token", "whole-word", "ngram", "span", "entity"] = Field(
        "token", description="what is masked as a unit: token = single tokens (BERT); whole-word = every piece of a "
        "word together (BERT's whole-word masking; words from the tokenizer's continuation/word-start markers, any "
        "kind); ngram = n-grams of whole words, n <= 3 with p(n) proportional to 1/n (ALBERT); span = spans of "
        "whole words, length ~ Geometric(0.2) truncated to 1..10 words (SpanBERT); entity = named-entity spans "
        "(capitalised-word heuristic, needs a cased tokenizer), then noun phrases, then single words, all whole "
        "words (ERNIE-style; preprocessing/entities.py, docs/masking.md)")
    variants: int = Field(4, ge=1, description="mask variants (K) stored per instance; epoch e uses variant e % K")
    dynamic: bool = Field(
        False, description="store no masks: the training loader masks every row when it reads it, with the same "
        "masking core and policy, deterministically in (seed, epoch, row) - RoBERTa's dynamic masking (a new "
        "masking every epoch, shards K times smaller); `variants` is then unused")
    masked_lm_prob: float = Field(0.15, gt=0.0, lt=1.0, description="fraction of tokens to predict")
    max_predictions_per_seq: int = Field(20, ge=1, description="at most this many predictions per instance")
    mask_token_prob: float = Field(0.8, ge=0.0, le=1.0, description="of the chosen tokens, replaced by [MASK]")
    random_token_prob: float = Field(0.1, ge=0.0, le=1.0, description="of the chosen tokens, replaced by a random token")
    replacement_per: Literal["token", "unit"] | None = Field(
        None, description="whether the [MASK]/random/keep choice is drawn for every chosen token or once per chosen "
        "unit (all tokens of a span alike, SpanBERT); null = the policy's own (unit for span, token otherwise)")

    @model_validator(mode="after")
    def _probabilities(self) -> "MaskingConfig":
        if self.mask_token_prob + self.random_token_prob > 1.0 + 1e-9:
            raise ValueError("mask_token_prob + random_token_prob must be <= 1 (the rest keeps the token)")
        return self


class ShardsConfig(StrictModel):
    """How instances are laid out on disk."""

    train_shards: int = Field(256, ge=1, le=99999, description="number of train shard files")
    heldout_shards: int = Field(4, ge=1, le=99999, description="number of held-out shard files")
    batch_rows: int = Field(4096, ge=1, description="rows per Arrow record batch inside a shard")
    world_size: int = Field(
        1, ge=1, description="data-parallel ranks the shards are laid out for: both shard counts must be multiples "
        "of it, so every rank reads the same number of shards (rows are dealt round-robin: every shard holds the "
        "same number of rows +-1)")

    @model_validator(mode="after")
    def _multiple_of_world_size(self) -> "ShardsConfig":
        for name in ("train_shards", "heldout_shards"):
            n = getattr(self, name)
            if n % self.world_size:
                fix = (n // self.world_size + 1) * self.world_size
                raise ValueError(f"shards.{name}={n} is not a multiple of shards.world_size={self.world_size}; "
                                 f"use {fix} (or another multiple)")
        return self


class LanguageSamplingConfig(StrictModel):
    """XLM/mBERT exponential smoothing of the language mix (Lample & Conneau 2019, section 3.1; Devlin et al.'s
    multilingual BERT): language i, holding a share p_i of the training text, is given the share
    q_i = p_i^alpha / sum_j p_j^alpha in the shards by repeating (or leaving out) whole training documents."""

    enabled: bool = Field(False, description="resample the training documents by language (held-out ones never)")
    alpha: float = Field(0.7, ge=0.0, le=1.0, description="smoothing exponent: 1 = keep the natural mix, 0 = every "
                         "language equally; XLM uses 0.7 for its CLM/MLM streams (0.5 for its BPE sample)")
    languages: list[str] | None = Field(
        None, description="languages taking part (others keep their documents as they are); null = every "
        "language with at least min_docs training documents")
    min_docs: int = Field(10, ge=1, description="with languages null: a language needs this many training documents "
                          "to take part (a handful of misdetected documents must not be repeated hundreds of times)")


class PreprocessConfig(StrictModel):
    """Beam runner, hold-out split, tokenizer, instances, masking, shards and the seed of every random choice."""

    seed: int = Field(12345, ge=0, description="seed of instance building and masking")
    heldout_fraction: float = Field(0.02, ge=0.0, lt=1.0, description="fraction of documents held out (by a hash of the title)")
    runner: RunnerConfig = Field(default_factory=RunnerConfig, description="Beam runner")
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig, description="WordPiece tokenizer")
    instances: InstancesConfig = Field(default_factory=InstancesConfig, description="sentence-pair instances")
    masking: MaskingConfig = Field(default_factory=MaskingConfig, description="precomputed masks")
    language_sampling: LanguageSamplingConfig = Field(
        default_factory=LanguageSamplingConfig, description="exponential smoothing of the language mix")
    shards: ShardsConfig = Field(default_factory=ShardsConfig, description="shard layout")
