"""Relative attention primitives: the strided/gathered read-out of the distance table against a brute-force
lookup, the two read-outs against each other, stop-gradient memory, and queries that see nothing."""

import torch

from training.models.core.relative_attention import (
    RelativeMultiHeadAttention, gather_geometry, shift_geometry, update_memory, with_memory,
)


def _brute_force(by_distance: torch.Tensor, distances: torch.Tensor, mlen: int, klen: int) -> torch.Tensor:
    """[B, N, Q, R] -> [B, N, Q, K] by looking up distance (mlen + i) - j in the table, one cell at a time."""
    b, n, q, _ = by_distance.shape
    out = torch.full((b, n, q, klen), float("nan"))
    column = {int(d): r for r, d in enumerate(distances.tolist())}
    for i in range(q):
        for j in range(klen):
            d = mlen + i - j
            if d in column:
                out[:, :, i, j] = by_distance[:, :, i, column[d]]
    return out


def test_strided_readout_matches_distance_lookup():
    torch.manual_seed(0)
    for mlen, qlen, causal in ((0, 5, False), (3, 5, False), (0, 6, True), (4, 3, True), (7, 2, True)):
        klen = mlen + qlen
        allowed = torch.ones(1, qlen, klen, dtype=torch.bool)
        if causal:
            allowed = (torch.arange(klen)[None, :] <= torch.arange(qlen)[:, None] + mlen)[None]
        geometry = shift_geometry(allowed, causal=causal)
        distances = geometry.distances()
        assert distances[0] == klen and len(distances) == (klen + 1 if causal else klen + qlen)
        by_distance = torch.randn(2, 3, qlen, len(distances))
        got = geometry.relative_scores(by_distance)
        want = _brute_force(by_distance, distances, mlen, klen)
        visible = allowed[:, None].expand_as(got)
        assert not want[visible].isnan().any()  # the table covers every visible pair
        assert torch.equal(got[visible], want[visible]), (mlen, qlen, causal)


def test_gathered_readout_equals_strided_one_at_every_position():
    torch.manual_seed(0)
    mlen, qlen = 3, 6
    klen = mlen + qlen
    allowed = torch.ones(2, qlen, klen, dtype=torch.bool)
    shift = shift_geometry(allowed, causal=False)
    positions = torch.tensor([[5, 0, 2], [1, 1, 4]])
    gather = gather_geometry(allowed[:, :3], positions + mlen, qlen)
    assert gather.num_distances == shift.num_distances and torch.equal(gather.distances(), shift.distances())
    by_distance = torch.randn(2, 4, qlen, shift.num_distances)
    full = shift.relative_scores(by_distance)
    picked_rows = by_distance.gather(2, positions[:, None, :, None].expand(-1, 4, -1, by_distance.shape[-1]))
    got = gather.relative_scores(picked_rows)
    want = full.gather(2, positions[:, None, :, None].expand(-1, 4, -1, klen))
    assert torch.equal(got, want)


def test_memory_is_stop_gradient():
    memory = torch.randn(2, 4, 8, requires_grad=True)
    hidden = torch.randn(2, 3, 8, requires_grad=True)
    joined = with_memory(memory, hidden)
    assert joined.shape == (2, 7, 8)
    joined.sum().backward()
    assert memory.grad is None and hidden.grad is not None
    new = update_memory(memory, hidden, mem_len=5)
    assert new.shape == (2, 5, 8) and not new.requires_grad
    assert torch.equal(new, torch.cat([memory, hidden], 1)[:, -5:].detach())
    assert update_memory(memory, hidden, mem_len=0) is None


def test_query_that_sees_nothing_gets_zero_context_not_nan():
    torch.manual_seed(0)
    attention = RelativeMultiHeadAttention(16, 2, 0.0, segments=True)
    for p in attention.parameters():
        torch.nn.init.normal_(p, std=0.5)
    allowed = torch.ones(1, 4, 4, dtype=torch.bool)
    allowed[0, 2] = False  # query 2 may see no key at all
    geometry = shift_geometry(allowed, causal=False, segment_differs=torch.zeros(1, 4, 4, dtype=torch.bool))
    hidden = torch.randn(1, 4, 16)
    keys = attention.project_keys(hidden, torch.randn(geometry.num_distances, 16))
    context = attention.attend(hidden, keys, geometry)
    assert not context.isnan().any()
    assert torch.equal(context[0, 2], torch.zeros(16)) and context[0, 1].abs().sum() > 0
