"""Precomputed masked-LM targets: one masking core, with the choice of *what is masked together* as a policy.

Core (as google-research/bert create_masked_lm_predictions): a policy turns the instance into candidate units
(lists of positions; special tokens are never candidates); the units are shuffled; whole units are taken while
they fit into num_to_predict = min(max_predictions_per_seq, max(1, round(len(input_ids) * masked_lm_prob)));
every chosen position is replaced by [MASK] with probability mask_token_prob, by a random non-special token
with probability random_token_prob, else kept. Positions are returned sorted, with the id placed at each.

Policies: `token` (each WordPiece token is its own unit: BERT's original 80/10/10). Whole-word, span and n-gram
masking are further policies: a function from (input_ids, is_special) to units.

Seeding: variant v of instance (doc_id, index) uses random.Random(seed_of(seed, doc_id, index, v)), so masks do
not depend on bundle order, worker count or which other instances exist.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Sequence

from .config import MaskingConfig
from .hashing import seed_of

Units = list[list[int]]
Policy = Callable[[Sequence[int], Sequence[bool]], Units]


def token_units(input_ids: Sequence[int], is_special: Sequence[bool]) -> Units:
    """Each non-special token is its own unit."""
    return [[i] for i in range(len(input_ids)) if not is_special[i]]


POLICIES: dict[str, Policy] = {"token": token_units}


@dataclass(frozen=True)
class Masker:
    """Masks instances for one tokenizer and config. `special_ids`: ids never masked and never drawn as random
    replacements ([PAD], [UNK], [CLS], [SEP], [MASK])."""

    cfg: MaskingConfig
    seed: int
    vocab_size: int
    mask_id: int
    special_ids: frozenset[int]

    def num_to_predict(self, length: int) -> int:
        return min(self.cfg.max_predictions_per_seq, max(1, int(round(length * self.cfg.masked_lm_prob))))

    def _random_token(self, rng: random.Random) -> int:
        while True:
            token = rng.randrange(self.vocab_size)
            if token not in self.special_ids:
                return token

    def mask(self, input_ids: Sequence[int], rng: random.Random) -> tuple[list[int], list[int]]:
        """(positions ascending, replacement ids) for one variant."""
        is_special = [t in self.special_ids for t in input_ids]
        units = POLICIES[self.cfg.policy](input_ids, is_special)
        rng.shuffle(units)
        budget = self.num_to_predict(len(input_ids))
        chosen: list[int] = []
        for unit in units:
            if len(chosen) >= budget:
                break
            if len(chosen) + len(unit) > budget:
                continue
            chosen.extend(unit)
        replacements: dict[int, int] = {}
        for position in chosen:
            draw = rng.random()
            if draw < self.cfg.mask_token_prob:
                replacements[position] = self.mask_id
            elif draw < self.cfg.mask_token_prob + self.cfg.random_token_prob:
                replacements[position] = self._random_token(rng)
            else:
                replacements[position] = input_ids[position]
        positions = sorted(replacements)
        return positions, [replacements[p] for p in positions]

    def variants(self, input_ids: Sequence[int], doc_id: int, index: int) -> tuple[list[list[int]], list[list[int]]]:
        """K variants for instance `index` of document `doc_id`: (mask_positions, mask_tokens)."""
        positions, tokens = [], []
        for variant in range(self.cfg.variants):
            p, t = self.mask(input_ids, random.Random(seed_of(self.seed, doc_id, index, variant)))
            positions.append(p)
            tokens.append(t)
        return positions, tokens
