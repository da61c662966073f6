"""examples/rl_loop.py, run as the README shows it: a few REINFORCE steps with optax on a tiny
random model, the engine generating in process and taking each step's weights by
`update_weights`. The example asserts its three properties itself (the engine's logprobs
equal its own forward of the new weights, nothing compiled after the first update, the
reward rising); each fails when its feature is broken (no prefix-cache reset, an update
that does not apply, a relayout compiled anew: checked once each by hand)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rl_loop.py"


def test_the_rl_loop_s_reward_rises_on_weights_updated_in_place():
    spec = importlib.util.spec_from_file_location("rl_loop", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    rewards = example.run(steps=5)
    assert len(rewards) == 5 and rewards[-1] > rewards[0]
