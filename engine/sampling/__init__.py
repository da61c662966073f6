"""The fused sampling step: SamplingParams declarations, their device rows, and `sample`."""
