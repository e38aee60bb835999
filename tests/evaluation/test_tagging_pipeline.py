"""The token-tagging path checked piece by piece (the WNUT-16 investigation, docs/results.md "WNUT-16"): tags sit on
each word's first sub-token and every other position carries the ignore index (also [CLS]/[SEP] and padding),
label ids are used as given (the 'O' tag need not be id 0), the loss reads only the labelled positions, decoding maps
a row's predictions back to words and then to BIO strings scored as entities — and the fine-tuning loop learns an
easy synthetic NER task with multi-word entities of two types whose words split into several sub-tokens."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from evaluation.config import FinetuneConfig
from evaluation.encode import TextEncoder
from evaluation.finetune import finetune_run, predict, prepare_task
from evaluation.heads import TaskModel
from evaluation.inputs import IGNORE_INDEX, build_features, collate
from evaluation.tasks.base import TaggingExample, TaskData
from tests.evaluation.conftest import movie_sentences, write_wordpiece_tokenizer
from tests.evaluation.test_finetune import tiny_encoder, words_of

CPU = torch.device("cpu")
# 'O' deliberately not first: nothing may assume tag id 0 is O
LABELS = ("B-LOC", "B-PER", "I-LOC", "I-PER", "O")
O = LABELS.index("O")


# made-up names; the tokenizer below learns each as a word, and the suffix 'zq' splits it into several sub-tokens
FIRST = ("zorblatt", "quenfrey", "maxwellia", "brontigan")
LAST = ("hovanski", "pettigrue", "lindqvar", "okonkwade")
PLACES = ("vexford", "kelmsbury", "draventon", "quillhaven")


def filler_sentences(count: int = 400) -> list[list[str]]:
    return [s for s in (words_of(s, 12) for s in movie_sentences(3000)) if len(s) >= 5][:count]


@pytest.fixture(scope="module")
def text_encoder(tmp_path_factory):
    """A WordPiece tokenizer of the movie-review sentences that also knows the made-up names as words."""
    names = " ".join(FIRST + LAST + PLACES)
    path = tmp_path_factory.mktemp("tagging") / "tokenizer.json"
    return TextEncoder.from_file(write_wordpiece_tokenizer(path, movie_sentences(3000) + [names] * 50, 1200))


def entity_words(text_encoder: TextEncoder, names: tuple[str, ...]) -> list[str]:
    """`names` + 'zq': several sub-tokens each, the first of which starts no ordinary (filler) word — so the answer
    is obvious from the labelled position (checked here, not assumed)."""
    starts = {ids[0] for ids, _ in text_encoder.tokenize_words([[w] for s in filler_sentences() for w in s]) if ids}
    words = [name + "zq" for name in names]
    for word, (ids, _) in zip(words, text_encoder.tokenize_words([[w] for w in words])):
        assert len(ids) >= 2 and ids[0] not in starts, (word, text_encoder.tokenizer.decode(ids))
    return words


def synthetic_ner(text_encoder: TextEncoder, n: int, seed: int = 0) -> TaskData:
    """Real movie-review sentences with one or two inserted entities: PER = first + last name (B-PER I-PER), LOC =
    a one- or two-word place (B-LOC I-LOC) of `entity_words`, among them 'new <place>' where 'new' also occurs as
    an ordinary word (B-LOC only before a place: the next word decides). About 80 % of the words are O."""
    first, last = entity_words(text_encoder, FIRST), entity_words(text_encoder, LAST)
    one, two = entity_words(text_encoder, PLACES[:2]), entity_words(text_encoder, PLACES[2:])
    places = (("new", one[0]), (one[1],), tuple(two))
    rng = np.random.default_rng(seed)
    sentences = filler_sentences()
    examples = []
    for i in range(n):
        words = list(sentences[i % len(sentences)])
        tags = [O] * len(words)
        for _ in range(1 + int(rng.random() < 0.5)):
            if rng.random() < 0.5:
                entity = [first[rng.integers(len(first))], last[rng.integers(len(last))]]
                labels = [LABELS.index("B-PER"), LABELS.index("I-PER")]
            else:
                entity = list(places[rng.integers(len(places))])
                labels = [LABELS.index("B-LOC")] + [LABELS.index("I-LOC")] * (len(entity) - 1)
            at = int(rng.integers(len(words) + 1))
            if (at > 0 and tags[at - 1] != O) or (at < len(tags) and tags[at] != O):
                continue  # keep entities apart so every gold entity is a whole span
            words[at:at] = entity
            tags[at:at] = labels
        examples.append(TaggingExample(f"s{i}", tuple(words), tuple(tags)))
    a, b = int(0.7 * n), int(0.85 * n)
    return TaskData("synthetic_ner", LABELS, tuple(examples[:a]), tuple(examples[a:b]), tuple(examples[b:]),
                    {"path": "synthetic", "sha256": "0" * 64, "lines": 0}, "70/15/15 in order", task_type="tagging")


def test_tags_on_first_sub_tokens_and_ignore_index_elsewhere(text_encoder):
    data = synthetic_ner(text_encoder, 40)
    examples = data.train[:12]
    features = build_features("tagging", examples, text_encoder, FinetuneConfig(max_seq_len=64))
    split_words = 0
    for e, ids, labels, starts in zip(examples, features.ids, features.token_labels, features.word_starts):
        assert ids[0] == text_encoder.cls_id and ids[-1] == text_encoder.sep_id
        pieces = [text_encoder.tokenize_words([[w]])[0][0] for w in e.words]
        expected_starts = np.cumsum([1] + [len(p) for p in pieces[:-1]])  # +1: [CLS]
        assert starts.tolist() == expected_starts.tolist()
        assert labels[starts].tolist() == list(e.tags)
        others = np.ones(len(labels), dtype=bool)
        others[starts] = False
        assert (labels[others] == IGNORE_INDEX).all()  # [CLS], [SEP] and every later sub-token of a word
        split_words += sum(len(p) > 1 for p in pieces)
    assert split_words > 20  # entity and filler words really are split into several sub-tokens
    batch = collate(features, list(range(len(examples))), text_encoder.pad_id)
    padding = batch["attention_mask"] == 0
    assert padding.any() and (batch["token_labels"][padding] == IGNORE_INDEX).all()

    cut = build_features("tagging", examples[:1], text_encoder, FinetuneConfig(max_seq_len=6))
    kept = int((cut.word_starts[0] >= 0).sum())
    assert cut.truncated == len(examples[0].words) - kept and len(cut.ids[0]) == 6


def test_loss_reads_only_labelled_positions(text_encoder):
    data = synthetic_ner(text_encoder, 40)
    features = build_features("tagging", data.train[:8], text_encoder, FinetuneConfig(max_seq_len=64))
    batch = collate(features, list(range(8)), text_encoder.pad_id)
    model = TaskModel(tiny_encoder(text_encoder.tokenizer.get_vocab_size()), "tagging", len(LABELS), 0.0)
    logits = torch.randn(*batch["input_ids"].shape, len(LABELS), generator=torch.Generator().manual_seed(0))
    labelled = batch["token_labels"] != IGNORE_INDEX
    manual = F.cross_entropy(logits[labelled], batch["token_labels"][labelled])
    assert model.loss({"logits": logits}, batch).item() == pytest.approx(manual.item(), rel=1e-6)
    scrambled = logits.clone()
    scrambled[~labelled] = 100.0 * torch.randn_like(scrambled[~labelled])
    assert model.loss({"logits": scrambled}, batch).item() == pytest.approx(manual.item(), rel=1e-6)
    # the head is per token: the tag logits the loss reads are the ones the model outputs
    model.eval()
    out = model(batch)["logits"]
    assert out.shape == (*batch["input_ids"].shape, len(LABELS))
    out.sum().backward()
    assert model.head.weight.grad is not None


class OracleTagger(torch.nn.Module):
    """Logits that put the gold tag on every labelled position and a wrong non-O tag everywhere else, so any
    prediction read from a non-first sub-token, [CLS], [SEP] or padding would create false entities."""

    task_type = "tagging"

    def forward(self, batch):
        labels = batch["token_labels"]
        wrong = torch.full_like(labels, LABELS.index("I-PER"))
        target = torch.where(labels == IGNORE_INDEX, wrong, labels)
        return {"logits": 10.0 * F.one_hot(target, len(LABELS)).float()}


def test_oracle_logits_decode_to_the_gold_entities(text_encoder):
    data = synthetic_ner(text_encoder, 80)
    cfg = FinetuneConfig(max_seq_len=64, eval_batch_size=7)  # several batches of different padded widths
    task = prepare_task(data, text_encoder, cfg)
    predictions, metrics, _ = predict(OracleTagger(), task, task.dev, cfg, CPU, text_encoder.pad_id)
    assert predictions == [list(e.tags) for e in task.dev.examples]
    assert metrics == {"entity_f1": 1.0, "entity_precision": 1.0, "entity_recall": 1.0}


def test_fine_tuning_learns_an_obvious_synthetic_ner_task(text_encoder):
    data = synthetic_ner(text_encoder, 400)
    cfg = FinetuneConfig(epochs=6, learning_rate=3e-3, batch_size=16, max_seq_len=48, num_seeds=1, seed=3,
                         warmup_ratio=0.1)
    task = prepare_task(data, text_encoder, cfg)
    encoder = tiny_encoder(text_encoder.tokenizer.get_vocab_size(), hidden=48)
    run = finetune_run(encoder, task, cfg, cfg.learning_rate, cfg.seed, CPU, text_encoder.pad_id, "synthetic_ner")
    assert run.dev_metrics["entity_f1"] >= 0.9, run.epochs
    assert run.test_metrics["entity_f1"] >= 0.9, run.test_metrics
    predicted = {t for sentence in run.test_predictions for t in sentence}
    assert predicted >= {LABELS.index(t) for t in ("B-PER", "I-PER", "B-LOC", "I-LOC", "O")}


@pytest.mark.parametrize("prefix_space", [False, True])
def test_split_words_of_a_byte_level_tokenizer_are_spelt_as_within_a_text(tmp_path, prefix_space):
    """roberta-base's and ModernBERT's tokenizer.json have a byte-level pre-tokenizer without a prefix space: a word
    encoded alone is spelt as at the start of a text. Was: every word of a tagging sentence so (`film` -> `f ilm`
    where the model read `Ġfilm`), an imported RoBERTa tagging text it never saw; now each word gets its space, as
    transformers does for split words (add_prefix_space=True). A tokenizer with a prefix space is unchanged."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix_space)
    tok.train_from_iterator(movie_sentences(2000), trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tok.save(str(tmp_path / "tokenizer.json"))
    encoder = TextEncoder.from_file(tmp_path / "tokenizer.json")
    words = ["the", "film", "is", "quiet"]
    ids, word_ids = encoder.tokenize_words([words])[0]
    assert ids == encoder.tokenize([" " + " ".join(words)])[0]  # each word as within a text: Ġthe Ġfilm Ġis Ġqu i et
    assert tok.id_to_token(ids[1]) == "Ġfilm" and word_ids[:3] == [0, 1, 2]
