"""KTO training of a LoRA stacked on the (merged, frozen) default model: `edit-server align kto`.

Reference = the model as loaded (default adapter merged); policy = reference + a new LoRA active from
the prompt's last token on (`engine.loading.stacked`). Per step: one BD3-LM ELBO batch (shared masks)
through the reference (LoRA off, no grad) and the policy (LoRA on) → r; the same for mismatched pairs
(prompt i, completion i+1) → z0 (detached, clamped at 0); KTO loss with λ_D, λ_U from the class
balance. Resumable (``OUT.ckpt/``: LoRA + optimizer + step; each step's noise is seeded by the step),
tqdm progress, the same code on CPU and GPU. Output: ``OUT.safetensors`` + ``OUT.json``.
"""

from __future__ import annotations

import json
import logging
import math
import random
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from engine.loading.base import sha256_file
from engine.loading.stacked import LoRAState, attach, base_adapter_sha, save_stacked, stacked_tensors
from engine.reward import T_MIN
from engine.tiers import EMBEDDED
from engine.train.guards import StepGuard, attention_for_training
from engine.train.kto.elbo import logp, make_elbo_batch
from engine.train.kto.loss import class_weights, kl_reference, kto_loss
from engine.train.kto.records import read_set, to_example
from engine.train.lora import DEFAULT_TARGETS
from engine.train.train_state import Progress

log = logging.getLogger(__name__)

Pair = tuple[list[int], list[int]]


@dataclass
class KtoConfig:
    model: str = EMBEDDED  # engine spec of the reference: "smollm2-bd3" (the embedded model), "tiny-random", an HF dir, ...
    data: str = ""  # `edit-server align data` directory
    out: str = ""  # adapter path without suffix
    steps: int = 60
    batch_size: int = 4
    lr: float = 5e-4
    warmup: int = 5
    beta: float = 0.1
    ratio: float = 1.0  # λ_D n_D / (λ_U n_U), in [1, 4/3]
    rank: int = 8
    alpha: float = 16.0
    targets: list[str] = field(default_factory=lambda: list(DEFAULT_TARGETS))
    # > 0: LoRA on the last N decoder layers only (a much shorter backward pass, and at serving time the
    # layers below run once for both rows of the reward's pair: an edit's reward costs less of a CPU
    # generation, docs/QUALITY.md); 0 = every layer
    top_layers: int = 8
    z0_pairs: int = 0  # mismatched pairs per step for z0 (0 = the batch size)
    samples: int = 1  # Monte-Carlo mask samples per ELBO estimate
    t_min: float = T_MIN
    pad_to_block: bool = False  # score completion + eom only (False) or padded to whole blocks
    max_prompt: int = 256  # prompt tokens (trimmed far from the cursor)
    max_canvas: int = 64
    eval_examples: int = 32  # fixed-noise monitor of loss and reward margin
    eval_every: int = 20
    save_every: int = 20
    seed: int = 0
    threads: int = 0
    device: str = "auto"
    dtype: str = "auto"
    label: str = ""
    max_minutes: float = 0.0  # > 0: checkpoint and stop when spent (resume later with the same config)
    stop_at: int = 0  # > 0: checkpoint and stop after this step (an interruption, for tests)
    # the adapter written is the one of the monitored step with the lowest loss on held-out examples (the
    # data's held-out split), not the last: a run that overfits (its train monitor falling while the held-out
    # loss rises) ends with a reward inverted on the aligned model's own outputs (docs/QUALITY.md); False: the last step's
    keep_best: bool = True

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> KtoConfig:
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown KTO config fields: {', '.join(sorted(unknown))}")
        return cls(**d)


def load_reference(cfg: KtoConfig) -> tuple[nn.Module, Any, dict[str, Any]]:
    """The frozen reference model (its adapter merged), its tokenizer and provenance."""
    from engine.train.trainer import load_frozen

    model, ck = load_frozen(cfg.model, cfg.device, cfg.dtype)
    info = {"label": ck.meta.get("label", ck.name), "name": ck.name, "sha256": base_adapter_sha(ck.meta),
            "spec": cfg.model, "fim_layout": ck.meta.get("fim_layout"), "edit_layout": ck.meta.get("edit_layout")}
    return model, ck.tokenizer, info


class Kto:
    """Reference + stacked LoRA and the KTO step / monitor on token pairs."""

    def __init__(self, model: nn.Module, tok: Any, cfg: KtoConfig, state: LoRAState) -> None:
        self.model, self.tok, self.cfg, self.state = model, tok, cfg, state
        self.dev = next(model.parameters()).device
        self.last_r: torch.Tensor | None = None  # r of the last step_loss (the monitor's margin)
        self.bs = model.args.block_size  # type: ignore[union-attr]
        self.shifted = model.args.shifted_logits  # type: ignore[union-attr]

    def rewards(self, pairs: list[Pair], gen: torch.Generator, grad: bool) -> torch.Tensor:
        """r (B,) of the pairs: reference and policy over the same ELBO batch (same masks)."""
        sp = self.tok.special
        eb = make_elbo_batch(pairs, self.bs, sp.mask, sp.pad, gen, samples=self.cfg.samples,
                             t_min=self.cfg.t_min, shifted=self.shifted).to(self.dev)
        with torch.no_grad(), self.state.use(False):
            ref = logp(self.model, eb).float()
        with torch.set_grad_enabled(grad), self.state.use(True, eb.rows):
            pol = logp(self.model, eb).float()
        return pol - ref

    def step_loss(self, pairs: list[Pair], labels: list[bool], gen: torch.Generator, lam: tuple[float, float],
                  grad: bool = True) -> tuple[torch.Tensor, dict[str, float]]:
        if len(pairs) < 2:
            raise ValueError("KTO needs batches of at least 2 examples (z0 comes from mismatched pairs)")
        r = self.rewards(pairs, gen, grad)
        k = min(len(pairs), self.cfg.z0_pairs or len(pairs))
        mismatched = [(pairs[i][0], pairs[(i + 1) % len(pairs)][1]) for i in range(k)]
        with torch.no_grad():
            z0 = kl_reference(self.rewards(mismatched, gen, False))
        d = torch.tensor(labels, device=r.device)
        loss, m = kto_loss(r, z0, d, self.cfg.beta, *lam)
        self.last_r = r.detach()
        return loss, m

    @torch.no_grad()
    def monitor(self, pairs: list[Pair], labels: list[bool], lam: tuple[float, float]) -> dict[str, float]:
        """Loss, z0 and mean r per class with fixed noise (comparable across steps)."""
        gen = torch.Generator().manual_seed(4321)
        B = max(2, self.cfg.batch_size)
        tot: dict[str, float] = {}
        n = 0
        rd: list[float] = []
        ru: list[float] = []
        for i in range(0, len(pairs), B):
            chunk, lab = pairs[i:i + B], labels[i:i + B]
            if len(chunk) < 2:
                continue
            loss, m = self.step_loss(chunk, lab, gen, lam, grad=False)
            assert self.last_r is not None
            r = self.last_r.tolist()
            rd += [x for x, y in zip(r, lab, strict=True) if y]
            ru += [x for x, y in zip(r, lab, strict=True) if not y]
            for k in ("loss", "z0"):
                tot[k] = tot.get(k, 0.0) + m[k] * len(chunk)
            n += len(chunk)
        out = {k: v / max(1, n) for k, v in tot.items()}
        out["r_desirable"] = sum(rd) / len(rd) if rd else float("nan")
        out["r_undesirable"] = sum(ru) / len(ru) if ru else float("nan")
        out["margin"] = out["r_desirable"] - out["r_undesirable"]
        return out


def _lr(step: int, cfg: KtoConfig) -> float:
    if step < cfg.warmup:
        return (step + 1) / cfg.warmup
    p = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, p)))


def load_pairs(cfg: KtoConfig, tok: Any, block_size: int, split: str = "train",
               order: tuple[str | None, str | None] = (None, None)) -> tuple[list[Pair], list[bool]]:
    """The split's examples, their prompts in ``order`` (the reference adapter's FIM / edit layouts)."""
    pairs, labels = [], []
    for rec in read_set(Path(cfg.data), split):
        ex = to_example(tok, rec, block_size, cfg.max_prompt, cfg.max_canvas, cfg.pad_to_block, order)
        if ex is not None:
            pairs.append(ex)
            labels.append(rec.label)
    return pairs, labels


def heldout_monitor(cfg: KtoConfig, tok: Any, block_size: int, order: tuple[str | None, str | None]
                    ) -> tuple[list[Pair], list[bool]] | None:
    """A fixed sample (``eval_examples``) of the data's held-out split, both labels present: what the
    monitor reports beside the training sample and `BestStep` chooses by; None when there is none."""
    try:
        pairs, labels = load_pairs(cfg, tok, block_size, split="heldout", order=order)
    except FileNotFoundError:
        return None
    idx = random.Random(cfg.seed + 11).sample(range(len(pairs)), min(cfg.eval_examples, len(pairs)))
    sample = ([pairs[i] for i in idx], [labels[i] for i in idx])
    return sample if len(idx) >= 2 and 0 < sum(sample[1]) < len(idx) else None


class BestStep:
    """The LoRA weights (and z0) of the monitored step with the lowest held-out loss, kept in memory."""

    def __init__(self) -> None:
        self.step: int | None = None
        self.monitor: dict[str, float] = {}
        self.weights: list[torch.Tensor] = []
        self.z0: float | None = None

    def offer(self, step: int, monitor: dict[str, float], params: list[nn.Parameter], z0: float | None) -> None:
        loss = monitor.get("loss", float("nan"))
        if loss == loss and (self.step is None or loss < self.monitor["loss"]):
            self.step, self.monitor, self.z0 = step, dict(monitor), z0
            self.weights = [p.detach().clone() for p in params]

    def restore(self, params: list[nn.Parameter]) -> float | None:
        with torch.no_grad():
            for p, w in zip(params, self.weights, strict=True):
                p.copy_(w)
        return self.z0


def train_kto(cfg: KtoConfig, *, resume: bool = False, progress: bool = True,
              reference: tuple[nn.Module, Any, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Train; returns a summary (history, monitor first/last, z0, adapter path)."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    model, tok, base = reference or load_reference(cfg)
    attention_for_training(next(model.parameters()).device)
    bs = model.args.block_size  # type: ignore[union-attr]
    order = (base.get("fim_layout"), base.get("edit_layout"))
    pairs, labels = load_pairs(cfg, tok, bs, order=order)
    held = heldout_monitor(cfg, tok, bs, order)
    n_d, n_u = sum(labels), len(labels) - sum(labels)
    if len(pairs) < 2:
        raise ValueError(f"{cfg.data}: {len(pairs)} usable training records (need >= 2)")
    lam = class_weights(n_d, n_u, cfg.ratio)
    log.info("KTO data: %d desirable, %d undesirable; lambda_D %.3f lambda_U %.3f", n_d, n_u, *lam)
    n_layers = model.args.n_layers  # type: ignore[union-attr]
    layers = list(range(n_layers - cfg.top_layers, n_layers)) if 0 < cfg.top_layers < n_layers else None
    state = attach(model, cfg.rank, cfg.alpha, tuple(cfg.targets), layers=layers)
    model.to(next(model.parameters()).device)
    params = [p for n, p in model.named_parameters() if ".lora_" in n]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
    kto = Kto(model, tok, cfg, state)
    out = Path(cfg.out)
    ckpt = out.with_name(out.name + ".ckpt")
    start, z0_ema, history = (_resume(ckpt, model, opt) if resume else (0, None, []))
    mon_idx = random.Random(cfg.seed + 7).sample(range(len(pairs)), min(cfg.eval_examples, len(pairs)))
    mon = ([pairs[i] for i in mon_idx], [labels[i] for i in mon_idx])
    first = kto.monitor(*mon, lam)
    vals = [{"step": start, **first, **({"heldout": kto.monitor(*held, lam)} if held else {})}]
    best = BestStep()
    from tqdm import tqdm

    bar = tqdm(total=cfg.steps, initial=start, file=sys.stderr, disable=not progress, desc="kto", unit="step")
    t0 = time.perf_counter()
    B, N = cfg.batch_size, len(pairs)
    live = Progress(out.with_name(out.name + ".progress.json"), cfg.steps, start, start if start else None)
    guard = StepGuard(opt, params)
    stop_file = out.with_name(out.name + ".STOP")  # `gpu_recipe align-stop`: checkpoint and end after this step
    for step in range(start, cfg.steps):
        for g in opt.param_groups:
            g["lr"] = cfg.lr * _lr(step, cfg)
        epoch, pos = divmod(step * B, N)
        order = list(range(N))
        random.Random(cfg.seed * 1_000_003 + epoch).shuffle(order)
        idx = [order[(pos + k) % N] for k in range(min(B, N))]
        gen = torch.Generator().manual_seed(cfg.seed * 7_919 + step)
        loss, m = kto.step_loss([pairs[i] for i in idx], [labels[i] for i in idx], gen, lam)
        loss.backward()
        m["grad_norm"] = guard.step(step + 1)
        z0_ema = m["z0"] if z0_ema is None else 0.9 * z0_ema + 0.1 * m["z0"]
        history.append({"step": step + 1, **m})
        bar.update(1)
        bar.set_postfix(loss=f"{m['loss']:.4f}", z0=f"{m['z0']:.3f}")
        if (step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps:
            vals.append({"step": step + 1, **kto.monitor(*mon, lam)})
            if held:
                vals[-1]["heldout"] = kto.monitor(*held, lam)
                best.offer(step + 1, vals[-1]["heldout"], params, z0_ema)
            bar.write(f"step {step + 1} monitor {json.dumps(vals[-1])}", file=sys.stderr)
        stop = cfg.stop_at == step + 1 or (cfg.max_minutes > 0 and time.perf_counter() - t0 > cfg.max_minutes * 60)
        stop = stop or stop_file.is_file() or guard.diverged
        saved = (step + 1) % cfg.save_every == 0 or step + 1 == cfg.steps or stop
        if saved:
            _save_ckpt(ckpt, model, opt, step + 1, z0_ema, history)
            live.ckpt_step = step + 1
        live.update(history, time.perf_counter() - t0, {"z0": history[-1]["z0"] if history else None,
                                                        "monitor": vals[-1] if vals else None}, force=saved)
        if stop:
            log.warning("KTO stopped at step %d of %d (resume with --resume)", step + 1, cfg.steps)
            break
    bar.close()
    if len(vals) == 1:
        vals.append({"step": cfg.steps, **kto.monitor(*mon, lam)})
    last = history[-1]["step"] if history else start
    chosen = {"step": last, "by": "the last step"}
    if cfg.keep_best and best.step is not None and best.step != last:
        z0_ema = best.restore(params)
        chosen = {"step": best.step, "by": "the lowest held-out monitor loss", "heldout": best.monitor}
        log.info("KTO: the adapter of step %d (held-out monitor loss %.4f), not the last step's %d",
                 best.step, best.monitor["loss"], last)
    z0 = max(0.0, float(z0_ema if z0_ema is not None else vals[-1]["z0"]))
    meta = {"lora": {"rank": cfg.rank, "alpha": cfg.alpha, "targets": list(cfg.targets), "layers": layers},
            "special_tokens": tok.special.as_dict(), "stacks_on": base, "z0": z0, "beta": cfg.beta,
            "elbo": {"t_min": cfg.t_min, "samples": cfg.samples, "pad_to_block": cfg.pad_to_block}, "rows": "from the prompt's last token",
            "label": cfg.label or f"KTO adapter ({cfg.steps} steps, {n_d}+/{n_u}- examples)",
            "trained_on": str(next(model.parameters()).device), "training": asdict(cfg),
            "data": {"desirable": n_d, "undesirable": n_u, "lambda_d": lam[0], "lambda_u": lam[1]},
            "monitor": {"first": vals[0], "last": vals[-1], "chosen": chosen}}
    path = save_stacked(out, model, meta)
    summary = {"steps": last, "chosen": chosen, "seconds": time.perf_counter() - t0, "monitor": vals, "z0": z0,
               "lambda": lam, "desirable": n_d, "undesirable": n_u, "adapter": str(path), "history": history}
    return summary


def _save_ckpt(d: Path, model: nn.Module, opt: torch.optim.Optimizer, step: int, z0: float | None,
               history: list[dict[str, Any]]) -> None:
    """``d/lora-NNNNNN.safetensors``, ``d/optim-NNNNNN.safetensors``, then ``d/state.json`` (renamed into place
    last) naming them with their sha256; the previous step's files go only after that. A kill at any moment
    leaves the previous checkpoint whole, and a reader (the recipe's ``align-collect``) that finds the files the
    state names, with those hashes, has one consistent checkpoint."""
    d.mkdir(parents=True, exist_ok=True)
    sd = opt.state_dict()
    flat = {f"{i}.{k}": v.detach().cpu().contiguous() for i, st in sd["state"].items()
            for k, v in st.items() if torch.is_tensor(v)}
    files = {}
    for part, tensors in (("lora", stacked_tensors(model)), ("optim", flat)):
        name = f"{part}-{step:06d}.safetensors"
        tmp = d / f"{name}.tmp"
        save_file(tensors, str(tmp))
        files[part] = {"name": name, "sha256": sha256_file(tmp)}
        tmp.replace(d / name)
    tmp = d / "state.json.tmp"
    tmp.write_text(json.dumps({"step": step, "z0_ema": z0, "history": history, "param_groups": sd["param_groups"],
                               "files": files}))
    tmp.replace(d / "state.json")
    keep = {f["name"] for f in files.values()}
    for old in d.glob("*.safetensors"):
        if old.name not in keep:
            old.unlink(missing_ok=True)


def ckpt_files(d: Path) -> dict[str, Path]:
    """The tensor files of the checkpoint in ``d`` (``lora``, ``optim``), as its state.json names them."""
    state = json.loads((d / "state.json").read_text())
    named = state.get("files") or {p: {"name": f"{p}.safetensors"} for p in ("lora", "optim")}  # before sha256
    return {p: d / f["name"] for p, f in named.items()}


def _resume(d: Path, model: nn.Module, opt: torch.optim.Optimizer) -> tuple[int, float | None, list]:
    if not (d / "state.json").is_file():
        log.warning("%s: no checkpoint, starting from step 0", d)
        return 0, None, []
    state = json.loads((d / "state.json").read_text())
    params = dict(model.named_parameters())
    files = ckpt_files(d)
    with torch.no_grad():
        for key, t in load_file(str(files["lora"])).items():
            params[key.replace(".weight.lora_", ".lora_")].copy_(t)
    st: dict[int, dict[str, Any]] = {}
    for key, v in load_file(str(files["optim"])).items():
        i, k = key.split(".", 1)
        st.setdefault(int(i), {})[k] = v
    opt.load_state_dict({"state": st, "param_groups": state["param_groups"]})
    log.info("resumed KTO from %s at step %d", d, state["step"])
    return int(state["step"]), state.get("z0_ema"), list(state.get("history") or [])
