"""BERT sentence-pair instances, as google-research/bert `create_pretraining_data.py` builds them.

For each document (a list of tokenised sentences): pick a target length (max_seq_len - 3, or with probability
short_seq_prob a random length in 2..max), gather sentences into a chunk until it reaches the target, split the
chunk at a random point into A and B; with probability nsp_random_prob (always when the chunk has one sentence)
B is instead taken from a random *other* document (nsp_label 1; drawn uniformly among the others, where google
retries up to 10 times and can end on the same document) and the chunk's unused sentences are put back to
start the next chunk; otherwise B is the rest of the chunk (nsp_label 0). The pair is truncated to fit
(truncate_seq_pair: remove a token from the longer segment, from the front or the back at random).

Random documents inside Beam: google's script draws them from all documents in memory. Here documents are
grouped into buckets by a hash of their doc_id (hashing.bucket_of, about `docs_per_bucket` documents each, per
split), and one bucket is processed at a time: documents sorted by doc_id, one `random.Random` seeded from
(seed, split, bucket) drives every choice, exactly in google's loop order (dupe passes, then documents). So
the random B segment comes from another document of the same bucket (a bucket of one document yields only IsNext
pairs), and the result depends only on the inputs,
the config and the seed, not on bundle order or the number of workers.

Sentence order (ALBERT's SOP, `sentence_order=True`, instance format `sop-pairs`): the same chunks, but B is always
the rest of the chunk (the text that follows A in the document) and with probability 0.5 the two segments are
swapped; `nsp_label` then holds the sentence-order label (0 = in order, 1 = swapped). A chunk of a single sentence
yields no instance (there is no consecutive pair to order; ALBERT's script would fall back to a random-document B,
mixing a topic signal into label 1).
"""

from __future__ import annotations

import random
from itertools import chain
from typing import Iterator, NamedTuple, Sequence

Document = Sequence[Sequence[int]]  # sentences of token ids (no special tokens)


class PairInstance(NamedTuple):
    """An unmasked instance: [CLS] A [SEP] B [SEP] as token ids."""

    doc_id: int
    index: int  # n-th instance of this document (over all dupe passes)
    input_ids: list[int]
    len_a: int  # tokens of [CLS] A [SEP]
    nsp_label: int  # nsp-pairs: 0 = B is the actual continuation, 1 = B from a random document; sop-pairs: 1 = swapped


def truncate_seq_pair(tokens_a: list[int], tokens_b: list[int], max_num_tokens: int, rng: random.Random) -> None:
    """Truncate in place to a total of at most `max_num_tokens`, as BERT does: one token at a time from the longer
    side (from b on a tie), from the front or the back by a fair coin.

    Which side loses each token does not depend on the coins: the longer side first until the two are level (or
    the excess is used up), then b and a in turn. So each side's removals are known up front, and its coins are
    the bits of one `rng.getrandbits(removals)`: the same distribution as google's flip per token (the number
    taken from the front is Binomial(removals, 1/2)) with two draws instead of one per token, and each list is
    cut once."""
    len_a, len_b = len(tokens_a), len(tokens_b)
    excess = len_a + len_b - max_num_tokens
    if excess <= 0:
        return
    lead = min(excess, abs(len_a - len_b))
    from_a, from_b = (excess - lead) // 2, (excess - lead + 1) // 2  # level from here: b, a, b, a, ...
    if len_a > len_b:
        from_a += lead
    else:
        from_b += lead
    a_front = rng.getrandbits(from_a).bit_count()
    b_front = rng.getrandbits(from_b).bit_count()
    a_hi, b_hi = len_a - (from_a - a_front), len_b - (from_b - b_front)
    del tokens_a[a_hi:], tokens_a[:a_front], tokens_b[b_hi:], tokens_b[:b_front]


def _randint(rng: random.Random, lo: int, hi: int) -> int:
    """A uniform integer in [lo, hi] from one `rng.random()`: random.randint's rejection loop costs several Python
    calls per draw; the bias of scaling a 53-bit double is below 2^-40 for the ranges drawn here."""
    return lo + int(rng.random() * (hi - lo + 1))


def instances_from_document(
    documents: Sequence[Document],
    document_index: int,
    max_seq_len: int,
    short_seq_prob: float,
    nsp_random_prob: float,
    cls_id: int,
    sep_id: int,
    rng: random.Random,
    sentence_order: bool = False,
) -> list[tuple[list[int], int, int]]:
    """google's create_instances_from_document without masking: [(input_ids, len_a, nsp_label), ...].
    `sentence_order`: ALBERT's SOP pairs instead of NSP pairs (see the module docstring)."""
    document = documents[document_index]
    n_sentences = len(document)
    max_num_tokens = max_seq_len - 3
    target_seq_length = max_num_tokens
    if rng.random() < short_seq_prob:
        target_seq_length = _randint(rng, 2, max_num_tokens)
    can_draw_other = len(documents) > 1
    out: list[tuple[list[int], int, int]] = []
    start = 0  # the current chunk: sentences start..i
    current_length = 0
    i = 0
    while i < n_sentences:
        current_length += len(document[i])
        if i == n_sentences - 1 or current_length >= target_seq_length:
            chunk_size = i + 1 - start
            a_end = _randint(rng, 1, chunk_size - 1) if chunk_size >= 2 else 1
            tokens_a = list(chain.from_iterable(document[start:start + a_end]))
            tokens_b: list[int] = []
            if sentence_order:
                is_random_next = 0  # here: 1 = swapped
                if chunk_size >= 2:
                    tokens_b = list(chain.from_iterable(document[start + a_end:i + 1]))
                    if rng.random() < 0.5:
                        tokens_a, tokens_b = tokens_b, tokens_a
                        is_random_next = 1
            elif can_draw_other and (chunk_size == 1 or rng.random() < nsp_random_prob):
                is_random_next = 1
                target_b_length = target_seq_length - len(tokens_a)
                # uniform over the *other* documents (google retries 10 times and may end on the same one,
                # which would be a wrong NotNext label in a small bucket)
                random_document_index = _randint(rng, 0, len(documents) - 2)
                if random_document_index >= document_index:
                    random_document_index += 1
                random_document = documents[random_document_index]
                for j in range(_randint(rng, 0, len(random_document) - 1), len(random_document)):
                    tokens_b.extend(random_document[j])
                    if len(tokens_b) >= target_b_length:
                        break
                # the segments of the chunk not used for A are put back
                i -= chunk_size - a_end
            elif chunk_size >= 2:
                is_random_next = 0
                tokens_b = list(chain.from_iterable(document[start + a_end:i + 1]))
            else:
                # one sentence left and no other document to pair it with: no valid instance
                is_random_next = 0
            truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
            if tokens_a and tokens_b:
                out.append(([cls_id, *tokens_a, sep_id, *tokens_b, sep_id], len(tokens_a) + 2, is_random_next))
            start = i + 1
            current_length = 0
        i += 1
    return out


def iter_bucket_instances(
    docs: Sequence[tuple[int, Document]],
    rng: random.Random,
    *,
    max_seq_len: int,
    short_seq_prob: float,
    nsp_random_prob: float,
    dupe_factor: int,
    cls_id: int,
    sep_id: int,
    sentence_order: bool = False,
) -> Iterator[PairInstance]:
    """All instances of one bucket, one at a time (the pipeline never holds a bucket's instances at once):
    `docs` = [(doc_id, sentences)], in any order (sorted here by doc_id). `sentence_order`: SOP pairs (instance
    format sop-pairs) instead of NSP pairs."""
    ordered = sorted(docs, key=lambda d: d[0])
    documents = [sentences for _, sentences in ordered]
    counters = [0] * len(ordered)
    for _ in range(dupe_factor):
        for index, (doc, _sentences) in enumerate(ordered):
            for ids, len_a, label in instances_from_document(
                documents, index, max_seq_len, short_seq_prob, nsp_random_prob, cls_id, sep_id, rng, sentence_order
            ):
                yield PairInstance(doc, counters[index], ids, len_a, label)
                counters[index] += 1


def build_bucket_instances(docs: Sequence[tuple[int, Document]], rng: random.Random, **kwargs) -> list[PairInstance]:
    """iter_bucket_instances as a list (same arguments)."""
    return list(iter_bucket_instances(docs, rng, **kwargs))
