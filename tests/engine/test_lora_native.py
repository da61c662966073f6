"""LoRA slots under the native CPU kernels (engine/device/lora_native.py): laid out as the
kernel reads a weight, both products through it, so an adapted row's logits are the same
bits alone and among other rows (of the base, of another adapter), as the base's are; the
adapter they add is the one XLA's products of float32 slots add, to within bfloat16's
rounding; and a cleared slot adds nothing, to the bit."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from lora_files import random_adapter, write_adapter
from native_kernels import require_native_kernels

from engine.config import EngineConfig, ModelConfig
from engine.device import runner as runner_module
from engine.device.native import ops
from engine.device.runner import ModelRunner
from engine.device.step_io import RowPlan
from engine.loader.lora import load_lora
from engine.models.params import random_params

RANK = 4
# Every width a whole number of the kernel's blocks (32) and tiles of rows (4).
CONFIG = ModelConfig(vocab_size=64, hidden_size=128, intermediate_size=192, num_layers=2, num_heads=4,
                     num_kv_heads=2, head_dim=32)
LIMITS = dict(max_model_len=64, max_num_seqs=4, max_num_batched_tokens=128, page_size=4, num_pages=60,
              optimize_compiled_code=False, quantization="int8", max_loras=2, max_lora_rank=8)
PROMPTS = [[5, 17, 3, 60, 22, 9, 41, 8, 13], [7, 7, 30, 2, 51, 19, 4, 44, 6], [12, 33, 1, 63, 20, 25, 9, 9, 40]]


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    made = []
    for seed in range(2):
        directory = tmp_path_factory.mktemp(f"adapter{seed}")
        write_adapter(directory, random_adapter(CONFIG, RANK, seed=30 + seed, magnitude=1.0), RANK, 8.0)
        made.append(load_lora(f"a{seed}", directory, CONFIG))
    return made


def runner_of(adapters) -> ModelRunner:
    runner = ModelRunner(CONFIG, EngineConfig(**LIMITS, cpu_kernels="native"), random_params(CONFIG, seed=4))
    for slot, adapter in enumerate(adapters):
        runner.load_adapter(slot, adapter)
    return runner


@pytest.fixture(scope="module")
def native_runner(adapters):
    require_native_kernels()
    return runner_of(adapters)


def logits_of(runner, prompts_and_slots) -> list[np.ndarray]:
    """Each row's logits over its prompt, the rows in one step (their pages apart)."""
    rows = [RowPlan(prompt, 0, [1 + 3 * row, 2 + 3 * row, 3 + 3 * row], adapter_slot=slot)
            for row, (prompt, slot) in enumerate(prompts_and_slots)]
    return list(runner.hidden_logits(rows).reshape(len(rows), len(PROMPTS[0]), -1))


def test_the_slots_are_in_the_kernel_s_layout(native_runner):
    layers = native_runner.state["layers"]
    assert native_runner.native_slots
    # A: (modules 3 x slots 2 x rank 8) rows of the hidden width; B: q's 128 outputs of 16
    # inputs (whole steps); both packed in the kernel's blocks.
    a, b = layers["lora_a_wqkv"], layers["lora_b_wqkv_q_proj"]
    assert isinstance(a, ops.PackedWeight) and isinstance(b, ops.PackedWeight)
    assert a.shape == (2, 48, 128) and a.values.dtype == jnp.bfloat16
    assert b.shape == (2, 128, 16)


def decode_logits(runner, slot: int, company: list[tuple[list[int], int]]) -> np.ndarray:
    """The logits of one decode token of PROMPTS[0] under `slot`, its prompt cached, in a
    step with `company`'s prompts (each under its slot) before it."""
    rows, first_page = [], 10
    for prompt, row_slot in company:
        pages = list(range(first_page, first_page + len(prompt) // 4 + 1))
        rows.append(RowPlan(prompt, 0, pages, adapter_slot=row_slot))
        first_page += len(pages)
    rows.append(RowPlan([PROMPTS[1][0]], len(PROMPTS[0]), [1, 2, 3], adapter_slot=slot))
    return runner.hidden_logits(rows)[-1]


@pytest.mark.parametrize("slot", [0, 1])
def test_an_adapted_row_is_the_same_bits_alone_and_among_others(native_runner, slot):
    """A decode of one token alone, then in steps of 45 and 71 tokens beside the base and
    the other adapter: XLA's products order their sums differently at one row and past 64."""
    logits_of(native_runner, [(PROMPTS[0], slot)])  # its prompt into pages 1-3
    alone = decode_logits(native_runner, slot, [])
    long_prompts = [(PROMPTS[1] * 5)[:44], (PROMPTS[2] * 3)[:26]]
    for company in ([(long_prompts[0], -1)], [(long_prompts[0], 1 - slot), (long_prompts[1], -1)]):
        assert (decode_logits(native_runner, slot, company) == alone).all()


def test_the_kernels_add_the_adapter_xla_s_products_add(native_runner, adapters, monkeypatch):
    """The adapter's effect on the logits (adapted less the base), on the same native base:
    the slots in the kernels' layout and bfloat16, against float32 slots through XLA's
    products (what served them before)."""
    monkeypatch.setattr(runner_module, "native_slots", lambda *args: False)
    xla_runner = runner_of(adapters)
    assert not xla_runner.native_slots and native_runner.native_slots
    base, = logits_of(native_runner, [(PROMPTS[0], -1)])
    assert (logits_of(xla_runner, [(PROMPTS[0], -1)])[0] == base).all()
    for slot in (0, 1):
        effect = logits_of(xla_runner, [(PROMPTS[0], slot)])[0] - base
        native_effect = logits_of(native_runner, [(PROMPTS[0], slot)])[0] - base
        assert np.abs(effect).max() > 1.0  # the adapter moves the logits
        # bfloat16 rounds A, B and both products' inputs: about 1% of one adapted product's
        # effect, 3% of seven's; a slot, module or rank misplaced would be the effect's size.
        assert np.abs(native_effect - effect).max() < 0.05 * np.abs(effect).max()


def test_a_cleared_slot_adds_nothing(adapters):
    require_native_kernels()
    runner = runner_of(adapters)
    base, = logits_of(runner, [(PROMPTS[0], -1)])
    runner.load_adapter(1, None)
    cleared, = logits_of(runner, [(PROMPTS[0], 1)])
    assert (cleared == base).all()
