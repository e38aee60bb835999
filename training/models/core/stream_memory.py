"""The memory a recurrent member (Transformer-XL, XLNet) carries ACROSS training steps, one entry per batch slot.

With the stream loader (training/streams.py) row r of every batch continues row r of the batch before, as the
papers' data iterators do (B parallel text streams). The model keeps, for each slot this process owns, the last
`mem_len` hidden states per layer that the slot's previous segment left (detached, like any Transformer-XL
memory), plus which of those states are real (`valid`). A slot whose row starts a new document (or whose stream
starts) reads an all-invalid memory: the states are masked out of the attention, so the row is computed exactly
as without memory while every step keeps the same shapes.

The memory is a plain attribute of the model, not a parameter or buffer: it is no weight of the checkpointed model,
and DistributedDataParallel neither broadcasts nor averages it (each rank keeps the memory of its own slots). The
trainer saves it with the training state (`state()` / `load_state()`, all slots of all ranks gathered in slot
order, so a checkpoint resumes under any number of processes).

    memory = StreamMemory(num_layers=2, mem_len=64, hidden_size=128)
    mems, valid = memory.read(slots, continues, device, dtype)   # per layer [b, M, H], [b, M] bool
    memory.write(slots, new_mems, new_valid)
"""

from __future__ import annotations

from typing import Any

import torch


class StreamMemory:
    def __init__(self, num_layers: int, mem_len: int, hidden_size: int):
        self.num_layers = num_layers
        self.mem_len = mem_len
        self.hidden_size = hidden_size
        self.layers: list[torch.Tensor] = []  # per layer [S, M, H], S = slots seen so far (float32, on the device)
        self.valid = torch.zeros(0, mem_len, dtype=torch.bool)  # [S, M]

    @property
    def slots(self) -> int:
        return self.valid.shape[0]

    def _grow(self, slots: int, device: torch.device) -> None:
        if not self.layers:
            self.layers = [torch.zeros(0, self.mem_len, self.hidden_size, device=device) for _ in range(self.num_layers)]
        self.valid = self.valid.to(device)
        if slots <= self.slots:
            return
        extra = slots - self.slots
        self.layers = [torch.cat([m.to(device), m.new_zeros(extra, self.mem_len, self.hidden_size)]) for m in self.layers]
        self.valid = torch.cat([self.valid, self.valid.new_zeros(extra, self.mem_len)])

    def read(self, slots: torch.Tensor, continues: torch.Tensor, device: torch.device, dtype: torch.dtype
             ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Memory of `slots` [b] (this process's slot numbers): per layer [b, M, H] in `dtype` and valid [b, M];
        rows with continues == 0 get an all-invalid memory (their states are never attended to)."""
        slots = slots.to(device)
        self._grow(int(slots.max()) + 1, device)
        keep = continues.to(device=device, dtype=torch.bool)
        valid = self.valid.index_select(0, slots) & keep[:, None]
        # zero the states of a reset row too: masked out anyway, and then no stale value (inf/NaN) can leak
        mems = [m.index_select(0, slots).masked_fill(~valid[:, :, None], 0.0).to(dtype) for m in self.layers]
        return mems, valid

    def write(self, slots: torch.Tensor, mems: list[torch.Tensor], valid: torch.Tensor) -> None:
        """Store the memory the rows of `slots` leave for their next segment (detached)."""
        slots = slots.to(valid.device)
        self._grow(int(slots.max()) + 1, valid.device)
        for layer, new in zip(self.layers, mems):
            layer.index_copy_(0, slots, new.detach().to(layer.dtype))
        self.valid.index_copy_(0, slots, valid)

    def state(self) -> dict[str, Any]:
        """All slots on the CPU: {"layers": [L x [S, M, H]], "valid": [S, M]}."""
        return {"layers": [m.detach().cpu().clone() for m in self.layers], "valid": self.valid.cpu().clone()}

    def load_state(self, state: dict[str, Any], device: torch.device | None = None) -> None:
        layers, valid = state["layers"], state["valid"]
        if layers and (len(layers) != self.num_layers or tuple(layers[0].shape[1:]) != (self.mem_len, self.hidden_size)):
            raise ValueError(f"stream memory of {len(layers)} layers x {tuple(layers[0].shape[1:])} does not fit a model "
                             f"of {self.num_layers} layers x ({self.mem_len}, {self.hidden_size})")
        self.layers = [m.to(device) if device is not None else m.clone() for m in layers]
        self.valid = valid.to(device) if device is not None else valid.clone()
        if not self.layers:
            self.valid = torch.zeros(0, self.mem_len, dtype=torch.bool)


def memory_of(model: torch.nn.Module) -> StreamMemory:
    """The model's carried memory, created on first use (`stream_memory` attribute)."""
    memory = getattr(model, "stream_memory", None)
    if memory is None:
        cfg = model.config
        memory = StreamMemory(cfg.num_layers, cfg.mem_len, cfg.hidden_size)
        model.stream_memory = memory
    return memory
