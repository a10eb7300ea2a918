"""A decode's sequence as the host keeps it: the prompt, then the response, a mask id where a position is
still masked.

The loop reads it (what is masked, the response, where the text ends) without waiting for the device,
whose copy (Passes.tokens) each step writes; both are written alike, here as each step's unmasked
tokens come back, on the device by the step itself.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class Canvas:
    def __init__(self, prompt: list[int], gen_len: int, mask_id: int, eos_ids: Iterable[int]) -> None:
        self.prompt_len = len(prompt)
        self.sequence = prompt + [mask_id] * gen_len
        self.mask_id, self.eos = mask_id, set(eos_ids)
        self.decode_order: list[int] = []  # every unmasked position so far, in the order unmasked

    def masked(self, start: int, end: int) -> tuple[int, ...]:
        """The positions in [start, end) still masked, in order."""
        return tuple(pos for pos in range(start, end) if self.sequence[pos] == self.mask_id)

    def write(self, positions: list[int], tokens: list[int]) -> None:
        """A step's unmasked tokens, at their positions."""
        for pos, token in zip(positions, tokens):
            self.sequence[pos] = token
        self.decode_order.extend(positions)

    def finish_at_eos(self, tokens: torch.Tensor) -> bool:
        """True once an end-of-text token is decoded with nothing masked before it; fills the rest with it
        (here, and in `tokens`, the device's copy)."""
        if not self.eos:
            return False
        sequence, mask_id = self.sequence, self.mask_id
        for i in range(self.prompt_len, len(sequence)):
            if sequence[i] == mask_id:
                return False
            if sequence[i] in self.eos:
                sequence[i + 1 :] = [sequence[i] if t == mask_id else t for t in sequence[i + 1 :]]
                tail = tokens[i + 1 :]
                tail.masked_fill_(tail == mask_id, sequence[i])
                return True
        return False

    @property
    def response(self) -> list[int]:
        """The response as it stands: a copy, a mask id where still masked."""
        return self.sequence[self.prompt_len :]

    def generated(self, response: list[int]) -> int:
        """The tokens of `response` (this canvas's) before its first end-of-text, or its unmasked ones."""
        for i, t in enumerate(response):
            if t in self.eos:
                return i
        return sum(t != self.mask_id for t in response)
