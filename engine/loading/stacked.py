"""A LoRA *stacked on top* of an already-merged model (the KTO-aligned policy), switchable at run time.

The reference model is the default model with its adapter merged (frozen); the aligned policy is that
model plus one more LoRA (``engine.train.kto`` trains it). Both live in one set of weights: a
:class:`StackedLoRA` wraps each target linear and adds ``(alpha / r) · x Aᵀ Bᵀ`` only while its shared
:class:`LoRAState` is on, optionally only for some rows. The policy is the reference on the prompt and
the LoRA from the prompt's **last token** on (that token's hidden state predicts the first canvas
token) — so the prompt KV is shared by the policy and the reference, generation reuses the usual
prefix cache, and the implicit reward needs no second prefill (`engine.reward`).

:class:`AlignedEngine` is the serving side: an `Engine` whose prefill runs with the LoRA off and then
recomputes the last prompt token with it on. Adapter files: ``NAME.safetensors`` (``{param}.lora_A``
r × in, ``{param}.lora_B`` out × r, as `engine.train.lora`) + ``NAME.json`` with ``format:
edit-server-kto/1``, ``lora {rank, alpha, targets}``, ``special_tokens``, ``stacks_on`` (the base
adapter's label and sha256), ``z0`` and the ELBO settings the reward uses. Nothing is pickled.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import Tensor, nn

from engine.caches.prefix import Slot
from engine.decoding.steps import DecodeJob
from engine.engine import Engine
from engine.loading.adapter import AdapterError, load_adapter
from engine.loading.base import sha256_file
from engine.textdiff import common_prefix

FORMAT = "edit-server-kto/1"


class LoRAState:
    """Shared switch of every `StackedLoRA` of one model: on / off, and an optional row mask."""

    def __init__(self) -> None:
        self.active = True
        self.rows: Tensor | None = None  # (B, T, 1) multiplier of the LoRA delta, None = all rows

    @contextmanager
    def use(self, active: bool, rows: Tensor | None = None) -> Iterator[None]:
        old = (self.active, self.rows)
        self.active, self.rows = active, rows
        try:
            yield
        finally:
            self.active, self.rows = old


class StackedLoRA(nn.Module):
    """y = base(x) + [state on] · rows · (alpha / r) · x Aᵀ Bᵀ; the base stays frozen."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, state: LoRAState) -> None:
        super().__init__()
        self.base = base
        self.rank, self.alpha, self.scale = rank, alpha, alpha / rank
        self.state = state
        dev = base.weight.device
        self.lora_A = nn.Parameter(torch.zeros(rank, base.in_features, device=dev))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank, device=dev))
        for p in base.parameters():
            p.requires_grad_(False)

    @property
    def weight(self) -> Tensor:
        return self.base.weight

    @property
    def bias(self) -> Tensor | None:
        return self.base.bias

    def forward(self, x: Tensor) -> Tensor:
        y = self.base(x)
        st = self.state
        if not st.active:
            return y
        d = (x @ self.lora_A.to(x.dtype).t()) @ self.lora_B.to(x.dtype).t() * self.scale
        if st.rows is not None:
            d = d * st.rows.to(d.dtype)
        return y + d


def _layer_of(name: str) -> int | None:
    m = re.search(r"(?:^|\.)layers\.(\d+)\.", name)
    return int(m.group(1)) if m else None


def attach(model: nn.Module, rank: int, alpha: float, targets: tuple[str, ...] | list[str],
           tensors: dict[str, Tensor] | None = None, layers: list[int] | None = None) -> LoRAState:
    """Wrap every target linear of ``model`` (of the decoder ``layers`` given, default all) in place.
    With ``tensors`` (an adapter's) load A and B; else A gets a Kaiming init and B zeros (the policy
    starts equal to the reference). LoRA on the top layers only keeps the backward pass short."""
    import math

    sites = [(f"{name}.{cn}.weight" if name else f"{cn}.weight", mod, cn, child)
             for name, mod in model.named_modules() for cn, child in mod.named_children()
             if cn in targets and isinstance(child, nn.Linear)
             and (layers is None or _layer_of(f"{name}.{cn}") in layers)]
    if not sites:
        raise AdapterError(f"no linear layers named {tuple(targets)} found")
    if tensors is not None:  # validate everything before touching the model
        for pname, _, _, lin in sites:
            a, b = tensors.get(pname + ".lora_A"), tensors.get(pname + ".lora_B")
            if a is None or b is None or tuple(a.shape) != (rank, lin.in_features) \
                    or tuple(b.shape) != (lin.out_features, rank):
                raise AdapterError(f"stacked adapter: {pname} missing or of the wrong shape")
        unknown = {k.rsplit(".lora_", 1)[0] for k in tensors} - {s[0] for s in sites}
        if unknown:
            raise AdapterError(f"stacked adapter: tensors for unknown weights {sorted(unknown)[:3]}")
    state = LoRAState()
    with torch.no_grad():
        for pname, mod, cn, lin in sites:
            lora = StackedLoRA(lin, rank, alpha, state)
            if tensors is None:
                nn.init.kaiming_uniform_(lora.lora_A, a=math.sqrt(5))
            else:
                lora.lora_A.copy_(tensors[pname + ".lora_A"])
                lora.lora_B.copy_(tensors[pname + ".lora_B"])
            setattr(mod, cn, lora)
    model.lora_state = state  # type: ignore[assignment]
    return state


def state_of(model: nn.Module) -> LoRAState:
    st = getattr(model, "lora_state", None)
    if not isinstance(st, LoRAState):
        raise AdapterError("model has no stacked LoRA attached")
    return st


def stacked_tensors(model: nn.Module) -> dict[str, Tensor]:
    out: dict[str, Tensor] = {}
    for name, mod in model.named_modules():
        if isinstance(mod, StackedLoRA):
            out[f"{name}.weight.lora_A"] = mod.lora_A.detach().float().cpu().contiguous()
            out[f"{name}.weight.lora_B"] = mod.lora_B.detach().float().cpu().contiguous()
    return out


def save_stacked(path: Path, model: nn.Module, meta: dict[str, Any]) -> Path:
    """Write ``path``.safetensors + ``path``.json (atomically); returns the .safetensors path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    st, js = path.with_name(path.name + ".safetensors"), path.with_name(path.name + ".json")
    tmp = st.with_name(st.name + ".tmp")
    save_file(stacked_tensors(model), str(tmp))
    tmp.replace(st)
    tmpj = js.with_name(js.name + ".tmp")
    tmpj.write_text(json.dumps({"format": FORMAT, **meta}, indent=1, sort_keys=True))
    tmpj.replace(js)
    return st


def load_stacked(path: Path) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """Tensors + meta of a stacked (KTO) adapter; errors name the file and the field."""
    path = Path(path)
    if path.suffix in (".safetensors", ".json"):
        path = path.with_suffix("")
    tensors, meta = load_adapter(path.with_name(path.name + ".x"))  # load_adapter swaps the suffix
    if meta.get("format") != FORMAT:
        raise AdapterError(f"{path}.json: format {meta.get('format')!r} is not {FORMAT}")
    return tensors, meta


def base_adapter_sha(base_meta: dict[str, Any]) -> str | None:
    """sha256 of the base adapter a loaded model merged (``meta["adapter"]``, from `load_default`)."""
    where = base_meta.get("adapter")
    st = Path(f"{where}.safetensors") if where else None
    return sha256_file(st) if st is not None and st.is_file() else None


def check_stacks_on(meta: dict[str, Any], base_meta: dict[str, Any], source: str) -> None:
    """A stacked adapter only fits the base adapter it was trained on."""
    want = (meta.get("stacks_on") or {}).get("sha256")
    have = base_adapter_sha(base_meta)
    if want and have and want != have:
        raise AdapterError(f"{source}: trained on base adapter {want[:12]}, the model has {have[:12]}")


class AlignedEngine(Engine):
    """An `Engine` over a model with a stacked LoRA: the prompt is encoded by the reference (LoRA
    off, shareable prefix KV), the last prompt token and the canvas by the policy (LoRA on).
    Block-causal models only (the default model is one)."""

    def __init__(self, model: nn.Module, tokenizer: Any, *, kto_meta: dict[str, Any],
                 adapter: str = "", **kw: Any) -> None:
        if model.args.attention != "block_causal":
            raise AdapterError("a stacked KTO adapter needs a block-causal model")
        kw["fast_cpu"] = False  # the int8 CPU layout fuses the linears the stacked LoRA wraps
        super().__init__(model, tokenizer, **kw)  # type: ignore[arg-type]
        self.lora = state_of(model)
        self.kto_meta = dict(kto_meta)
        self.adapter = adapter
        self.info = replace(self.info, aligned={"adapter": adapter, "label": kto_meta.get("label", "KTO adapter")})
        self.prefill_hook = ReferencePrefill(self)

    @classmethod
    def from_engine(cls, eng: Engine, adapter: Path | str) -> AlignedEngine:
        """Stack ``adapter`` on ``eng``'s model (in place: use only the returned engine afterwards)."""
        if isinstance(eng, AlignedEngine):
            raise AdapterError("engine already has a stacked adapter")
        if eng.args.attention != "block_causal":
            raise AdapterError("a stacked KTO adapter needs a block-causal model")
        if getattr(eng.model, "fast_cpu", None):
            raise AdapterError("the int8 CPU layout (engine.cpu.fastcpu) has fused layers a stacked LoRA cannot "
                               "wrap: load the engine with fast_cpu=False")
        tensors, meta = load_stacked(Path(adapter))
        check_stacks_on(meta, eng.meta, str(adapter))
        lo = meta["lora"]
        attach(eng.model, int(lo["rank"]), float(lo["alpha"]), tuple(lo["targets"]), tensors, lo.get("layers"))
        eng.model.to(device=eng.device)
        return cls(eng.model, eng.tokenizer, kto_meta=meta, adapter=str(adapter), name=eng.name,
                   meta=eng.meta, cache_bytes=eng.cache.budget, approx_cache=eng.approx_cache,
                   **({"sampler": eng.sampler} if hasattr(eng, "sampler") else {}))


class ReferencePrefill:
    """`engine.decoding.steps.PrefillHook` of the aligned engine: the reference (LoRA off) encodes the prompt, the
    policy (LoRA on) its last token."""

    def __init__(self, eng: AlignedEngine) -> None:
        self.eng = eng

    def take_slot(self, j: DecodeJob, slot: Slot) -> Slot:
        """The engine's cached slot (or one seeded from a donor), minus a last row that may hold
        policy KV: a cached prompt that is a strict prefix of this one ends in such a row."""
        n = len(slot.tokens)
        if 0 < n < len(j.prompt) and common_prefix(slot.tokens, j.prompt) == n:
            slot.tokens = slot.tokens[:-1]
        return slot

    def prefill(self, j: DecodeJob, run: Callable[[DecodeJob], None]) -> None:
        eng, n = self.eng, len(j.prompt)
        with eng.lora.use(False):
            run(j)
        assert j.kv is not None and j.slot is not None
        with torch.no_grad():
            j.kv.length = n - 1
            ids = torch.tensor([[j.prompt[-1]]], device=eng.device)
            h = eng.model(ids, offset=n - 1, cache=j.kv, logits_slice=slice(0, 0))
            j.kv.length = n
        j.forwards += 1
        j.last_hidden = j.slot.last_hidden = h[0, -1]

    def extend(self, j: DecodeJob, ids: list[int], forward: Callable[[DecodeJob, list[int]], None]) -> None:
        """Healed tokens after the prompt, encoded as a prompt's are: the prompt's last token (the policy's until
        now) and all new ones but the last by the reference, the last by the policy — the KV the reward scorer
        reads from the cached slot (`engine.reward`)."""
        last = j.prompt.pop()
        j.ctx -= 1
        with self.eng.lora.use(False):
            forward(j, [last, *ids[:-1]])
        forward(j, ids[-1:])
