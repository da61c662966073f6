"""The decoder apart from its arrays (engine/models/decoder.py): the runner's jitted step takes
the arrays as a plain pytree and binds them to a copy of the decoder, and serving imports no
module system for it (Flax's nnx cost a server's start 0.3 s of imports)."""

from __future__ import annotations

import subprocess
import sys

import jax
import numpy as np
from test_layer_loop import TINY, runner_with

from engine.config import SCAN, UNROLLED
from engine.device.integer_weight import Int8Weight
from engine.models.layers import layer_key


def test_the_runner_keeps_the_decoder_without_its_arrays():
    runner = runner_with(SCAN, "int8")
    assert runner.decoder.state is None
    leaves = jax.tree_util.tree_leaves(runner.state)
    assert leaves and all(isinstance(leaf, jax.Array) for leaf in leaves)
    assert isinstance(runner.state["layers"]["wqkv"], Int8Weight)
    bound = runner.decoder.bound(runner.state)
    assert bound.state is runner.state and runner.decoder.state is None  # a copy was bound, not the decoder
    assert bound.config is runner.decoder.config  # the static part is shared, not copied


def test_layers_lie_stacked_for_a_scan_and_one_array_each_when_unrolled():
    scan, unrolled = runner_with(SCAN), runner_with(UNROLLED)
    assert set(scan.state["layers"]) == set(scan.decoder.layout.names)
    assert set(unrolled.state["layers"]) == {layer_key(name, index) for name in unrolled.decoder.layout.names
                                             for index in range(TINY.num_layers)}
    stacked = scan.decoder.layout.stacked(scan.state["layers"])["wo"]
    for index in range(TINY.num_layers):
        one = unrolled.decoder.layout.layer(unrolled.state["layers"], index)["wo"]
        np.testing.assert_array_equal(np.asarray(one), np.asarray(stacked[index]))


def test_serving_imports_no_module_system():
    imported = subprocess.run(
        [sys.executable, "-c", "import sys, api.server.cli, api.server.app, engine.engine; "
                               "print(sorted({m.split('.')[0] for m in sys.modules} & {'flax', 'optax', 'treescope'}))"],
        capture_output=True, text=True, check=True).stdout.strip()
    assert imported == "[]"
