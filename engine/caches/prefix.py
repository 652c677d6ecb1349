"""KV buffers and the exact prefix cache reused across requests.

`KVCache` holds per-layer key/value buffers ``(B, nkv, capacity, hs)``; a forward writes its new
keys/values at an offset and attends to the first ``max(length, offset + T)`` positions, so a
canvas block can be run over a cached context again and again without copying (the block's slot
is scratch until the engine *commits* it by advancing ``length``).

`PrefixCache` keeps, per ``cache_key`` (one slot per document, LRU, byte budget), the token
sequence of the last request's prompt and its KV. A new request reuses the longest common token
prefix and recomputes only the tail — llama.cpp's prompt cache, exact for causal / block-causal
models because a prompt token's KV depends only on the tokens before it.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from engine import options
from engine.textdiff import common_prefix

log = logging.getLogger(__name__)

GRANULE = 256  # capacity grows in multiples of this many positions


def _round_up(n: int, g: int = GRANULE) -> int:
    return max(g, -(-n // g) * g)


class KVCache:
    def __init__(self, n_layers: int, batch: int, n_kv: int, hs: int, capacity: int,
                 dtype: torch.dtype, device: torch.device | str) -> None:
        cap = _round_up(capacity)
        shape = (batch, n_kv, cap, hs)
        self.k: list[Tensor] = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.v: list[Tensor] = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.length = 0  # positions holding committed (valid) keys/values

    @classmethod
    def for_model(cls, args: object, batch: int, capacity: int, dtype: torch.dtype,
                  device: torch.device | str) -> KVCache:
        a = args  # ModelArgs (kept untyped: no import cycle with engine.config users)
        return cls(a.n_layers, batch, a.n_kv_heads, a.head_dim, capacity, dtype, device)  # type: ignore[attr-defined]

    @classmethod
    def _from(cls, k: list[Tensor], v: list[Tensor], length: int) -> KVCache:
        obj = cls.__new__(cls)
        obj.k, obj.v, obj.length = k, v, length
        return obj

    @property
    def capacity(self) -> int:
        return self.k[0].shape[2]

    @property
    def batch(self) -> int:
        return self.k[0].shape[0]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.k, *self.v))

    def ensure(self, n: int) -> None:
        """Grow every layer's buffers to hold at least ``n`` positions (keeps contents)."""
        if n <= self.capacity:
            return
        cap = _round_up(n)
        for buf in (self.k, self.v):
            for i, t in enumerate(buf):
                new = t.new_zeros((t.shape[0], t.shape[1], cap, t.shape[3]))
                new[:, :, : t.shape[2]] = t
                buf[i] = new

    def write(self, layer: int, k: Tensor, v: Tensor, offset: int | Sequence[int]) -> tuple[Tensor, Tensor]:
        """Store k, v (B, nkv, T, hs) at ``offset`` (one int, or one per row) and return views
        of the keys/values to attend to: (B, nkv, max(length, offset + T), hs)."""
        T = k.shape[2]
        kb, vb = self.k[layer], self.v[layer]
        end = (offset if isinstance(offset, int) else max(offset)) + T
        s = max(self.length, end)
        if s > kb.shape[2]:
            raise ValueError(f"KV cache too small: need {s} positions, capacity {kb.shape[2]}")
        if isinstance(offset, int):
            kb[:, :, offset:end] = k
            vb[:, :, offset:end] = v
        else:
            for b, off in enumerate(offset):
                kb[b, :, off: off + T] = k[b]
                vb[b, :, off: off + T] = v[b]
        return kb[:, :, :s], vb[:, :, :s]

    def row(self, b: int) -> KVCache:
        """A batch-1 view of row ``b`` sharing storage (writes land in this cache)."""
        return KVCache._from([t[b: b + 1] for t in self.k], [t[b: b + 1] for t in self.v], self.length)

    @classmethod
    def stack(cls, parts: Sequence[tuple[KVCache, int]], capacity: int) -> KVCache:
        """A batch cache whose row i holds the first n_i positions of batch-1 cache i."""
        first = parts[0][0]
        n_layers = len(first.k)
        _, nkv, _, hs = first.k[0].shape
        out = cls(n_layers, len(parts), nkv, hs, capacity, first.k[0].dtype, first.k[0].device)
        for i, (kv, n) in enumerate(parts):
            for layer in range(n_layers):
                out.k[layer][i, :, :n] = kv.k[layer][0, :, :n]
                out.v[layer][i, :, :n] = kv.v[layer][0, :, :n]
        return out


PINNED_CONTEXT = 32768  # tokens of one document's prompt the GPU prefix cache always has room for


CPU_BUDGET_MB = 384  # seven 2K-token prompts of the default model (bf16 KV, ~53 MB each): 3 documents, FIM + edit
BUDGET_ENV = options.PREFIX_CACHE_MB


def prefix_budget(args: object, kv_dtype: torch.dtype, device: torch.device) -> int:
    """Default prefix-cache budget (``$EDIT_SERVER_PREFIX_CACHE_MB`` overrides, on any device).

    On a CPU `CPU_BUDGET_MB`: the cache is most of what a CPU server holds beyond the weights (a 2K-token
    prompt of the default model is ~53 MB of KV), and the issue-14 goal is 1 GB of RSS in all; more
    documents than fit cost one cold prefill when the user returns to them (LRU). On CUDA 40 % of the
    memory free after loading, and never less than one slot at the pinned context
    (``min(max_seq_len, 32K)`` tokens), so a long file's prompt stays cached between requests even at
    7B (1.8 GB for 32K tokens)."""
    budget = options.env().prefix_cache_bytes
    if budget is not None:
        return budget
    if device.type != "cuda":
        return CPU_BUDGET_MB << 20
    a = args  # ModelArgs
    per_token = 2 * a.n_layers * a.n_kv_heads * a.head_dim * torch.empty(0, dtype=kv_dtype).element_size()  # type: ignore[attr-defined]
    one = per_token * min(a.max_seq_len, PINNED_CONTEXT)  # type: ignore[attr-defined]
    free = torch.cuda.mem_get_info(device)[0]
    return max(one, int(free * 0.4))


@dataclass
class Slot:
    """One document's cached prompt: its tokens, their KV and the last position's hidden state."""

    tokens: list[int]
    kv: KVCache
    last_hidden: Tensor | None = None
    hits: int = field(default=0)
    # token healing's starting point: the prompt before the healed tokens and the hidden state after it (the
    # next keystroke inside the same word asks from there again: `engine.decoding.blocks.prefill`)
    heal_from: tuple[list[int], Tensor] | None = None

    def seed(self, src: Slot, n: int) -> None:
        """Take ``src``'s first ``n`` positions (tokens and KV) as this slot's own, in place of what it held."""
        for dst, old in ((self.kv.k, src.kv.k), (self.kv.v, src.kv.v)):
            for t, o in zip(dst, old, strict=True):
                t[:, :, :n] = o[:, :, :n]
        self.tokens, self.last_hidden = src.tokens[:n], None


class PrefixCache:
    """LRU of `Slot`s under a byte budget. ``take`` removes a slot while a request uses it; ``best``
    finds another slot to copy a shared prefix from (a document's FIM and next-edit prompts share
    their context, then differ: the engine keeps one slot per kind and seeds a new one from the
    other)."""

    def __init__(self, budget_bytes: int = 1 << 30) -> None:
        self.budget = budget_bytes
        self._slots: OrderedDict[str, Slot] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, key: str) -> bool:
        return key in self._slots

    @property
    def nbytes(self) -> int:
        return sum(s.kv.nbytes for s in self._slots.values())

    def take(self, key: str) -> Slot | None:
        with self._lock:
            return self._slots.pop(key, None)

    def best(self, group: str, tokens: Sequence[int]) -> tuple[Slot, int] | None:
        """The slot among keys starting with ``group`` sharing the longest token prefix with
        ``tokens``, and that length (the slot stays in the cache: copy from it, don't keep it)."""
        with self._lock:
            found = [(common_prefix(s.tokens, tokens), s) for k, s in self._slots.items() if k.startswith(group)]
        if not found:
            return None
        n, slot = max(found, key=lambda t: t[0])
        return slot, n

    def put(self, key: str, slot: Slot) -> None:
        with self._lock:
            self._slots[key] = slot
            self._slots.move_to_end(key)
            total = self.nbytes
            while total > self.budget and len(self._slots) > 1:
                old_key, old = self._slots.popitem(last=False)
                total -= old.kv.nbytes
                log.debug("prefix cache: evicted %s (%d bytes)", old_key, old.kv.nbytes)
            if total > self.budget:  # a single slot over budget is not kept
                self._slots.pop(key, None)

    def clear(self, key: str | None = None) -> None:
        """Everything, or the slots of ``key`` (its per-kind slots ``key#...`` included)."""
        with self._lock:
            if key is None:
                self._slots.clear()
            else:
                for k in [k for k in self._slots if k == key or k.startswith(key + "#")]:
                    del self._slots[k]
