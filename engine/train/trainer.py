"""LoRA trainer for the block-diffusion objective: config, loop, checkpoints, export (the examples it draws:
`stream.ExampleStream`).

``edit-server train run --config FILE.json`` (+ overrides) drives `train`. Checkpoints are one
safetensors file each under ``out/ckpt`` (`train_state`); ``--resume`` continues from the newest exactly.
The final adapter goes to ``out/adapter.{safetensors,json}`` (copy it to ``engine/weights/default.*``).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
from torch import nn

from engine.config import preset
from engine.model import Transformer
from engine.templates import DEFAULT_EDIT_LAYOUT, DEFAULT_FIM_LAYOUT, EDIT_HISTORY
from engine.tokenizer import Tokenizer
from engine.tokens import SPECIAL_TOKENS
from engine.train.corpus import Corpus
from engine.train.guards import StepGuard, attention_for_training
from engine.train.lora import DEFAULT_TARGETS, apply_lora, mark_trainable, save_adapter
from engine.train.objective import batch_to, bd3_loss, fixed_noise_pass, make_batch
from engine.train.schedule import DeadlineFit, lr_at
from engine.train.stream import ExampleStream
from engine.train.tasks import Budget, Example
from engine.train.train_state import (
    MOMENT_DTYPES,
    Progress,
    check_resumable,
    corpus_info,
    latest_checkpoint,
    restore,
    rng_from_json,
    rng_to_json,
    save_checkpoint,
)

log = logging.getLogger(__name__)


@dataclass
class TrainConfig:
    model: str = "base"  # "tiny" (random, byte-level), "base" (SmolLM2 GGUF), "qwen2.5-coder-0.5b", or a checkpoint path
    # a parted base (qwen2.5-coder-0.5b) trained with its output tied to the token embedding: its own
    # output tensor dropped (the GPU upload ships the base without it; engine.loading.tied)
    tied_output: bool = False
    corpus: str = "corpus"
    out: str = "runs/default"
    seq_len: int = 512  # prompt + canvas tokens (the BD3 sequence is prompt + 2 × canvas)
    block_size: int = 32
    max_canvas: int = 128
    max_edit_canvas: int = 0  # a rewrite's canvas cap (0: max_canvas); the served 15-line region needs ~256
    sections_share: float = 0.0  # FIM prompts with context sections from neighbouring files (engine.train.sections)
    # git-session examples drawn after any hunk, mostly no-edit (tasks.Budget); a larger share teaches the
    # model to leave regions unchanged where an edit is due (docs/QUALITY.md)
    git_noedit_share: float = 0.3
    chars_per_token: float = 3.2
    batch_size: int = 4
    grad_accum: int = 1
    steps: int = 300
    lr: float = 1e-3
    embed_lr: float = 1e-3
    warmup: int = 20
    min_lr_ratio: float = 0.1
    rank: int = 16
    alpha: float = 32.0
    targets: list[str] = field(default_factory=lambda: list(DEFAULT_TARGETS))
    val_every: int = 50
    val_examples: int = 32
    save_every: int = 100
    save_minutes: float = 0.0  # > 0: also checkpoint when this long has passed since the last one
    keep_ckpts: int = 2
    # the AdamW moments' dtype in a checkpoint (training keeps them fp32; resume casts them back): bfloat16
    # makes Qwen2.5-Coder-0.5B's rank-8 checkpoint 37.5 MB instead of 56.3 MB (committable, ≤ 50 MB)
    ckpt_moments: str = "float32"
    strict_resume: bool = True  # resuming refuses a changed trajectory (config fields, corpus)
    seed: int = 0
    device: str = "auto"
    dtype: str = "auto"  # bf16 on CUDA, fp32 on CPU
    threads: int = 0
    mix: dict[str, float] = field(default_factory=lambda: {"fim": 0.5, "edit": 0.25, "noedit": 0.1,
                                                           "continue": 0.1, "git": 0.05})
    git_repos: list[str] = field(default_factory=list)
    label: str = ""
    fim_layout: str = DEFAULT_FIM_LAYOUT  # FIM prompt order (engine.templates); the adapter's metadata names it
    edit_layout: str = DEFAULT_EDIT_LAYOUT  # next-edit prompt order (history-file | file-history), likewise
    max_minutes: float = 0.0  # > 0: stop (checkpoint + export) when the wall-clock budget is spent
    deadline: float = 0.0  # > 0: stop (checkpoint + export) before this wall-clock time (epoch s: a GPU window's)
    fit_deadline: bool = False  # `steps` := what ends the cosine by `deadline` at the measured speed (schedule.DeadlineFit)
    schedule_start: int = 0  # warm restart: warmup + cosine run from this step to `steps` (a later window's extension)
    # the loss weight of a rewrite's changed tokens (engine.train.objective): 1 = the plain loss; validation is
    # always plain, so curves stay comparable across windows
    edit_emphasis: float = 1.0

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown training config fields: {', '.join(sorted(unknown))}")
        return cls(**d)

    def __post_init__(self) -> None:
        if self.ckpt_moments not in MOMENT_DTYPES:
            raise ValueError(f"training config field ckpt_moments: {self.ckpt_moments!r} is not one of "
                             f"{', '.join(MOMENT_DTYPES)}")

    def budget(self) -> Budget:
        return Budget(self.seq_len, self.block_size, self.max_canvas, self.chars_per_token, self.max_edit_canvas,
                      self.sections_share, self.git_noedit_share)


# ---- model ---------------------------------------------------------------------------------
def load_model(cfg: TrainConfig, device: torch.device, dtype: torch.dtype) -> tuple[Transformer, Tokenizer, dict]:
    if cfg.model == "tiny":
        tok = Tokenizer.byte_level()
        args = preset("tiny", special_tokens=tok.special.as_dict(), block_size=cfg.block_size)
        model = Transformer(args).init_random(cfg.seed)
        meta: dict[str, Any] = {"base": {"preset": "tiny", "seed": cfg.seed}}
    else:
        from engine.loading import load_checkpoint
        from engine.loading.ar_base import is_ar_base

        if is_ar_base(cfg.model):  # qwen2.5-coder-0.5b: the pinned GGUF (or its tied-output copy)
            from engine.loading.tied import base_file

            ck = load_checkpoint(base_file(cfg.model.strip().lower(), tied=cfg.tied_output))
        else:
            ck = load_checkpoint(cfg.model)
        if cfg.tied_output:
            from engine.loading.tied import tie_output

            tie_output(ck)
        tok, args = ck.tokenizer, ck.args
        args.special_tokens = tok.special.as_dict()
        model = Transformer(args)
        model.load_state_dict(ck.state_dict, strict=True)
        meta = {"base": dict(ck.meta.get("base") or _base_info()), "base_name": ck.name,
                "new_special_ids": ck.meta.get("new_special_ids")}
    meta["tied_output"] = bool(args.tie_embeddings)  # serving ties the output too (engine.default)
    args.attention, args.shifted_logits, args.block_size = "block_causal", True, cfg.block_size
    init_special_rows(model, tok, base_vocab(tok), only=meta.pop("new_special_ids", None))
    return model.to(device=device, dtype=dtype), tok, meta


def load_frozen(spec: str, device: str = "auto", dtype: str = "auto") -> tuple[Transformer, Any]:
    """The model of a serving spec (its adapter merged) in the training layout, frozen, and its checkpoint
    (tokenizer, meta): KTO's reference, the edit-tokens measure."""
    from engine.specs import load_checkpoint_spec, resolve_device, resolve_dtype

    ck = load_checkpoint_spec(spec)
    dev = resolve_device(device)
    args = ck.args
    if not args.special_tokens:
        args.special_tokens = ck.tokenizer.special.as_dict()
    model = Transformer(args, init=False)
    model.load_state_dict(ck.state_dict, strict=True, assign=True)
    model = model.to(device=dev, dtype=resolve_dtype(dtype, dev))
    for p in model.parameters():
        p.requires_grad_(False)
    return model, ck


def _base_info() -> dict[str, str]:
    from engine.loading.base import base_info

    return base_info()


def base_vocab(tok: Tokenizer) -> int:
    ids = tok.special.as_dict()
    return min(v for k, v in ids.items() if k != "eos")


def init_special_rows(model: Transformer, tok: Tokenizer, first: int, only: list[int] | None = None) -> None:
    """New rows := mean embedding of the role's words (e.g. "fim prefix"): a sensible start. ``only``: the
    rows that are really new (a Qwen2 GGUF: our tokens in unused slots; its own FIM tokens are trained
    rows at ids >= ``first`` and are kept); default every special row at or after ``first``."""
    emb = model.model.embed_tokens.weight
    with torch.no_grad():
        for role, text in SPECIAL_TOKENS.items():
            i = getattr(tok.special, role)
            words = [t for t in tok.encode(" " + text.strip("<|>").replace("_", " ")) if t < first]
            if i >= first and words and (only is None or i in only):
                emb[i] = emb[torch.tensor(words)].mean(0)


def pick_device(cfg: TrainConfig) -> tuple[torch.device, torch.dtype]:
    dev = torch.device("cuda" if cfg.device == "auto" and torch.cuda.is_available() else
                       ("cpu" if cfg.device == "auto" else cfg.device))
    if cfg.dtype == "auto":
        dt = torch.bfloat16 if dev.type == "cuda" else torch.float32
    else:
        dt = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}[cfg.dtype]
    return dev, dt


# ---- loop ----------------------------------------------------------------------------------
@torch.no_grad()
def evaluate(model: nn.Module, examples: list[Example], tok: Tokenizer, cfg: TrainConfig,
             dtype: torch.dtype = torch.float32) -> dict[str, float]:
    """Validation at fixed noise (the same masks every call → comparable across steps): the loss, the masked
    tokens' CE and accuracy, and — where the examples hold rewrites — the changed tokens' alone (are edits
    learned, not only copies). Token means (a mean of the batches' figures weighs a small batch as a big one)."""
    model.eval()
    m = fixed_noise_pass(model, examples, cfg.block_size, tok.special.mask, tok.special.pad,
                         batch_size=cfg.batch_size, dtype=dtype)
    model.train()
    out = {k: float(m[k] or 0.0) for k in ("loss", "masked_ce", "masked_acc")}
    if m["changed_masked"]:
        out.update(changed_acc=float(m["changed_acc"] or 0.0), changed_ce=float(m["changed_ce"] or 0.0),
                   changed_masked=int(m["changed_masked"] or 0))
    return out


def train(cfg: TrainConfig, *, resume: bool = False, progress: bool = True) -> dict[str, Any]:
    """Run the training loop; returns a summary (losses, val, tokens/s, adapter path).

    ``resume``: continue from the newest checkpoint in ``out/ckpt`` exactly (weights, optimizer, step,
    data order, noise and LR schedule). ``out/STOP`` (see the GPU recipe's ``stop``) ends the run like
    ``max_minutes`` does: checkpoint + export. ``out/progress.json`` is the live state for pollers."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    device, dtype = pick_device(cfg)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    attention_for_training(device)
    model, tok, meta = load_model(cfg, device, dtype)
    first = base_vocab(tok)
    apply_lora(model, cfg.rank, cfg.alpha, cfg.targets)
    model.to(device=device, dtype=dtype)
    groups = mark_trainable(model, first)
    for g in groups:  # mixed precision: bf16 compute (autocast), fp32 trainable weights + AdamW state
        for p in g["params"]:
            p.data = p.data.float()
    groups[2]["lr"] = cfg.embed_lr
    opt = torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95))
    for g in opt.param_groups:
        g["base_lr"] = g["lr"]
    corpus = Corpus(Path(cfg.corpus))
    train_docs, val_docs = corpus.docs("train"), corpus.docs("val") or corpus.docs("train")[:50]
    pairs = _git_pairs(cfg)
    budget = cfg.budget()
    val = ExampleStream(val_docs, tok, budget, cfg.mix, cfg.seed + 1, pairs, cfg.fim_layout,
                        cfg.edit_layout).take(cfg.val_examples)
    stream = ExampleStream(train_docs, tok, budget, cfg.mix, cfg.seed * 1_000_003, pairs, cfg.fim_layout,
                           cfg.edit_layout)
    gen = torch.Generator().manual_seed(cfg.seed * 7)
    history: list[dict[str, Any]] = []
    vals: list[dict[str, Any]] = []
    start, tokens_before, seconds_before = 0, 0, 0.0
    ckpt = latest_checkpoint(out / "ckpt") if resume else None
    if resume and ckpt is None:
        log.warning("%s: no checkpoint, starting from step 0", out / "ckpt")
    if ckpt is not None:
        state, rngs = restore(ckpt, model, opt)
        check_resumable(cfg, state, corpus)
        for g, rate in zip(opt.param_groups, (cfg.lr, cfg.lr, cfg.embed_lr), strict=False):
            g["base_lr"] = rate  # a warm restart's new rates (an exact resume's are the checkpoint's)
        start, history, vals = int(state["step"]), state["history"], state["val"]
        tokens_before, seconds_before = int(state["tokens"]), float(state["seconds"])
        stream.rng.setstate(rng_from_json(state["stream_rng"]))
        gen.set_state(rngs["noise"])
        torch.set_rng_state(rngs["torch"])
        if "cuda" in rngs and device.type == "cuda":
            torch.cuda.set_rng_state(rngs["cuda"], device)
        log.info("resumed from %s at step %d", ckpt, start)
    if not vals or vals[-1]["step"] != start:
        vals.append({"step": start, **evaluate(model, val, tok, cfg, dtype)})
        log.info("step %d val %s", start, vals[-1])
    n_tok, t0 = 0, time.perf_counter()
    guard = StepGuard(opt, [p for g in groups for p in g["params"]])
    live = Progress(out / "progress.json", cfg.steps, start, ckpt_step=start if ckpt else None)

    def save(step: int) -> None:
        rngs = {"noise": gen.get_state(), "torch": torch.get_rng_state()}
        if device.type == "cuda":
            rngs["cuda"] = torch.cuda.get_rng_state(device)
        summary = {"steps": step, "val": vals, "tokens": tokens_before + n_tok}
        save_checkpoint(out / "ckpt", model, opt, first, {
            "step": step, "config": asdict(cfg), "stream_rng": rng_to_json(stream.rng), "history": history,
            "val": vals, "tokens": tokens_before + n_tok, "seconds": seconds_before + time.perf_counter() - t0,
            "corpus": corpus_info(corpus), "adapter_meta": export_meta(cfg, tok, meta, summary, device, corpus),
        }, rngs, keep=cfg.keep_ckpts, moments=cfg.ckpt_moments)
        live.ckpt_step = step

    bar = _bar(cfg.steps, start, progress)
    refit = DeadlineFit()
    last_save = t0
    step = start
    while step < cfg.steps:  # not a range: fit_deadline moves cfg.steps (after warmup, then at its refits)
        f = lr_at(step, cfg)
        for g in opt.param_groups:
            g["lr"] = g["base_lr"] * f
        metrics = {"loss": 0.0, "masked_acc": 0.0}
        for _ in range(cfg.grad_accum):
            exs = stream.take(cfg.batch_size)
            b = batch_to(make_batch([(e.prompt, e.target, e.changed) for e in exs], cfg.block_size,
                                    tok.special.mask, tok.special.pad, gen, emphasis=cfg.edit_emphasis), device)
            with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
                loss, m = bd3_loss(model, b)
            (loss / cfg.grad_accum).backward()
            n_tok += int(b.ids.numel())
            for k in metrics:
                metrics[k] += m[k] / cfg.grad_accum
        grad_norm = guard.step(step + 1)
        now = time.perf_counter()
        tps = n_tok / (now - t0)
        history.append({"step": step + 1, **metrics, "lr": opt.param_groups[0]["lr"], "tok_s": tps,
                        "grad_norm": grad_norm})
        bar.update(1)
        bar.set_postfix(loss=f"{metrics['loss']:.3f}", acc=f"{metrics['masked_acc']:.2f}", tok_s=f"{tps:.0f}")
        per_step = (now - t0) / (step + 1 - start)
        if cfg.fit_deadline and cfg.deadline > 0 and refit.due(step + 1, cfg):
            cfg.steps = refit.fit(step + 1, now, per_step, cfg)
            live.steps = bar.total = cfg.steps
        out_of_time = (cfg.max_minutes > 0 and now - t0 > cfg.max_minutes * 60) or (
            cfg.deadline > 0 and time.time() + per_step > cfg.deadline)
        stop = (out / "STOP").exists() or guard.diverged
        last = step + 1 == cfg.steps or out_of_time or stop
        if (step + 1) % cfg.val_every == 0 or last:
            vals.append({"step": step + 1, **evaluate(model, val, tok, cfg, dtype)})
            log.info("step %d val %s", step + 1, vals[-1])
            bar.write(f"step {step + 1} val loss {vals[-1]['loss']:.4f} acc {vals[-1]['masked_acc']:.3f}"
                      + (f" changed acc {vals[-1]['changed_acc']:.3f}" if "changed_acc" in vals[-1] else ""),
                      file=sys.stderr)
        if (step + 1) % cfg.save_every == 0 or last or (
                cfg.save_minutes > 0 and now - last_save > cfg.save_minutes * 60):
            save(step + 1)
            last_save = time.perf_counter()
        tail = history[-1] if history else {}
        live.update(history, now - t0, {"masked_acc": tail.get("masked_acc"), "lr": tail.get("lr"),
                                        "val_loss": vals[-1]["loss"] if vals else None,
                                        "tok_s": round(tps, 1)}, force=last)
        if out_of_time or stop:
            (out / "STOP").unlink(missing_ok=True)
            log.warning("stopping at step %d (%s)", step + 1,
                        f"diverged: {guard.in_row} non-finite steps in a row" if guard.diverged else
                        "STOP file" if stop else "deadline reached" if cfg.deadline > 0 and not (
                            cfg.max_minutes > 0 and now - t0 > cfg.max_minutes * 60)
                        else f"wall-clock budget of {cfg.max_minutes:.1f} min spent")
            break
        step += 1
    bar.close()
    elapsed = time.perf_counter() - t0
    done = history[-1]["step"] if history else start
    summary = {"steps": done, "train_loss_first": history[0]["loss"] if history else None,
               "train_loss_last": _mean_last(history, 10), "val": vals, "tokens": tokens_before + n_tok,
               "tok_s": n_tok / elapsed if elapsed else 0.0, "seconds": seconds_before + elapsed,
               "resumed_from": start, "skipped_steps": guard.skipped, "diverged": guard.diverged,
               "run_seconds": elapsed, "run_tokens": n_tok, "examples": stream.stats(), "history": history}
    log.info("examples this run (kind: made / tries, share): %s", ", ".join(
        f"{k} {v['made']}/{v['tries']} {v['share']:.0%}" for k, v in summary["examples"].items()))
    adapter_meta = export_meta(cfg, tok, meta, summary, device, corpus)
    save_adapter(out / "adapter", model, first, adapter_meta)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    summary["adapter"] = str(out / "adapter.safetensors")
    return summary


def _mean_last(history: list[dict[str, Any]], n: int) -> float | None:
    if not history:
        return None
    tail = history[-n:]
    return sum(h["loss"] for h in tail) / len(tail)


def _bar(total: int, start: int, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, initial=start, file=sys.stderr, disable=not enabled, desc="train", unit="step")


def _git_pairs(cfg: TrainConfig) -> list:
    """The git edit sessions of ``git_repos`` (.jsonl.gz files from `train git-sessions` / the GPU pack,
    repositories or bundles), for the mix's ``git`` kind."""
    if not cfg.git_repos or not cfg.mix.get("git"):
        return []
    from engine.train.git_sessions import load_git_sources

    sessions = load_git_sources(cfg.git_repos)
    log.info("git sessions: %d (%d hunks)", len(sessions), sum(len(s.steps) for s in sessions))
    return sessions


def export_meta(cfg: TrainConfig, tok: Tokenizer, meta: dict, summary: dict, device: torch.device,
                corpus: Corpus) -> dict[str, Any]:
    last = summary["val"][-1] if summary["val"] else {}
    trained_on = (torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu")
    label = cfg.label or (f"{'CPU smoke' if device.type == 'cpu' else trained_on.removeprefix('NVIDIA ')} adapter "
                          f"({summary['steps']} steps, val loss {last.get('loss', float('nan')):.3f})")
    return {
        "format": "edit-server-lora/1", **meta, "special_tokens": tok.special.as_dict(),
        # added_tokens.embed holds every row from the first special id on (engine.loading.adapter)
        "added_rows": {"first": base_vocab(tok), "count": tok.vocab_size - base_vocab(tok)},
        "model_args": {"attention": "block_causal", "shifted_logits": True, "block_size": cfg.block_size},
        "lora": {"rank": cfg.rank, "alpha": cfg.alpha, "targets": list(cfg.targets)},
        "label": label, "trained_on": trained_on, "training": asdict(cfg), "fim_layout": cfg.fim_layout,
        "edit_layout": cfg.edit_layout, "edit_history": EDIT_HISTORY,
        "data": {"docs": corpus.index.get("docs"), "tokens": corpus.index.get("tokens"),
                 "tokens_seen": summary["tokens"]},
        "validation": {"first": summary["val"][0] if summary["val"] else None, "last": last},
    }
