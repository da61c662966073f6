"""LoRA adapter slots on the host: which adapter each device slot holds, who uses it, and
which to evict (host bookkeeping only; engine/device/lora.py holds the weights).

The device has `max_loras` slots. A sequence takes a slot for its adapter when the
scheduler admits it and gives it back when it stops running (finished, aborted or
preempted), so a slot is never rewritten under a running sequence. An adapter already in
a slot is shared; otherwise it takes a free slot, or the least recently used slot that no
running sequence holds. When every slot is held the sequence waits, as it would for pages.
A slot written here is queued (`take_writes`) for the engine to copy to the device before
its next dispatch.

Adapters are compared by identity: one loaded again under its name is another adapter,
and sequences admitted under the old one keep it. Its KV is another function of the
tokens, so a sequence's prefix-cache hashes start from a salt of its adapter's digest
(`adapter_salt`): adapters never share a page with each other or with the base.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.host.sequence import Sequence
    from engine.loader.lora import LoraAdapter

NO_SLOT = -1  # a sequence of the base model alone


def adapter_salt(salt: bytes, adapter: LoraAdapter | None) -> bytes:
    """The page-hash root of a sequence under `adapter`, from its root without one."""
    if adapter is None:
        return salt
    return hashlib.blake2b(b"lora" + salt + adapter.digest, digest_size=16).digest()


class AdapterSlots:
    """The device's LoRA slots as a least-recently-used cache of adapters."""

    def __init__(self, num_slots: int) -> None:
        self.adapters: list[LoraAdapter | None] = [None] * num_slots
        self.holders = [0] * num_slots  # running sequences using each slot
        self._recency: OrderedDict[int, None] = OrderedDict((slot, None) for slot in range(num_slots))  # LRU first
        self._writes: list[tuple[int, LoraAdapter]] = []
        self.num_loads = 0  # adapters written into a slot (a miss of this cache)
        self.num_evictions = 0  # of those, writes over another adapter

    def acquire(self, seq: Sequence) -> bool:
        """Give `seq` a slot holding its adapter (none needed for the base); False when every
        slot is held by running sequences of other adapters."""
        if seq.adapter is None:
            seq.adapter_slot = NO_SLOT
            return True
        slot = self._slot_of(seq.adapter)
        if slot is None:
            slot = self._evictable_slot()
            if slot is None:
                return False
            self._load(slot, seq.adapter)
        self._hold(seq, slot)
        return True

    def can_acquire(self, seq: Sequence) -> bool:
        """Whether `acquire` would give `seq` a slot now (it changes nothing)."""
        return seq.adapter is None or self._slot_of(seq.adapter) is not None or self._evictable_slot() is not None

    def slots_by_recency(self) -> list[int]:
        """The slots, least recently used first."""
        return list(self._recency)

    def share(self, parent: Sequence, child: Sequence) -> None:
        """`child` (a forked beam) runs with its running parent's slot."""
        if parent.adapter_slot != NO_SLOT:
            self._hold(child, parent.adapter_slot)

    def release(self, seq: Sequence) -> None:
        """`seq` stops running: its slot may be rewritten once no other sequence holds it."""
        if seq.adapter_slot != NO_SLOT:
            self.holders[seq.adapter_slot] -= 1
            seq.adapter_slot = NO_SLOT

    def take_writes(self) -> list[tuple[int, LoraAdapter]]:
        """The slots written since the last call, for the device, in order."""
        writes, self._writes = self._writes, []
        return writes

    @property
    def resident(self) -> list[str]:
        """The names of the adapters in the slots, least recently used first."""
        return [self.adapters[slot].name for slot in self._recency if self.adapters[slot] is not None]

    def _slot_of(self, adapter: LoraAdapter) -> int | None:
        return next((slot for slot, held in enumerate(self.adapters) if held is adapter), None)

    def _evictable_slot(self) -> int | None:
        """A free slot, else the least recently used one no running sequence holds."""
        empty = next((slot for slot in self._recency if self.adapters[slot] is None), None)
        if empty is not None:
            return empty
        return next((slot for slot in self._recency if self.holders[slot] == 0), None)

    def _load(self, slot: int, adapter: LoraAdapter) -> None:
        self.num_evictions += self.adapters[slot] is not None
        self.num_loads += 1
        self.adapters[slot] = adapter
        self._writes.append((slot, adapter))

    def _hold(self, seq: Sequence, slot: int) -> None:
        self.holders[slot] += 1
        self._recency.move_to_end(slot)
        seq.adapter_slot = slot
