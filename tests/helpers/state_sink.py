"""A sink for the recurrences' per-token states (the protocol analysis.runtime.cpu_ops hands states over by)."""
import torch


class Sink:
    """Asks for the tokens in `positions` and records what the recurrence hands over."""

    def __init__(self, positions):
        self.positions, self.offsets, self.parts = torch.tensor(positions), [], []

    def wanted(self, start, stop):
        return self.positions[(self.positions >= start) & (self.positions < stop)] - start

    def take(self, start, offsets, states):
        assert states.shape[2] == len(offsets)  # only the requested states are formed
        self.offsets += (start + offsets).tolist()
        self.parts.append(states)
