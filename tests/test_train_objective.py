"""BD3-LM mask entries vs the shared block-diffusion semantics, noise/loss masking, LoRA save/load/merge."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from engine.attention import bd3lm_layout, bd3lm_logit_index
from engine.config import preset
from engine.model import Transformer
from engine.tokenizer import Tokenizer
from engine.train.lora import (
    apply_lora,
    load_adapter,
    mark_trainable,
    merge_adapter,
    merge_lora,
    save_adapter,
)
from engine.train.objective import bd3_loss, make_batch, noise_canvas

TOK = Tokenizer.byte_level()


def _expected(n: int, c: int, bs: int) -> torch.Tensor:
    """The shared semantics, spelled out entry by entry (independent of engine.attention)."""
    L = n + 2 * c

    def kind(i: int) -> tuple[str, int]:
        if i < n:
            return "p", i
        if i < n + c:
            return "x0", (i - n) // bs
        return "xt", (i - n - c) // bs

    m = torch.zeros(L, L, dtype=torch.bool)
    for q in range(L):
        kq, bq = kind(q)
        for k in range(L):
            kk, bk = kind(k)
            if kq == "p":
                ok = kk == "p" and k <= q
            elif kq == "x0":
                ok = kk == "p" or (kk == "x0" and bk <= bq)
            else:
                ok = kk == "p" or (kk == "x0" and bk < bq) or (kk == "xt" and bk == bq)
            m[q, k] = ok
    return m


def test_bd3_mask_matches_semantics_entry_by_entry() -> None:
    for n, c, bs in [(5, 8, 4), (3, 12, 4), (1, 4, 4), (7, 6, 3)]:
        mask, pos = bd3lm_layout(n, c, bs)
        assert mask.shape == (n + 2 * c, n + 2 * c)
        assert torch.equal(mask, _expected(n, c, bs)), (n, c, bs)
        # positions: prompt 0..n-1, x0 and xt both reuse the canvas' logical positions n..n+c-1
        assert pos.tolist() == list(range(n + c)) + list(range(n, n + c))


def test_shifted_logit_index() -> None:
    n, c, bs = 5, 8, 4
    idx = bd3lm_logit_index(n, c, bs, shifted=True).tolist()
    # block 0: j=0 from the prompt's last token, j>=1 from xt j-1; block 1: j=4 from x0's last of block 0
    xt = n + c
    assert idx == [n - 1, xt + 0, xt + 1, xt + 2, n + 3, xt + 4, xt + 5, xt + 6]
    assert bd3lm_logit_index(n, c, bs, shifted=False).tolist() == list(range(xt, xt + c))


def test_noise_and_loss_masking() -> None:
    gen = torch.Generator().manual_seed(0)
    tgt = torch.arange(10, 42)
    xt, w = noise_canvas(tgt, 8, TOK.special.mask, gen)
    masked = xt == TOK.special.mask
    assert torch.equal(masked, w > 0)  # weight only where masked
    assert torch.equal(xt[~masked], tgt[~masked])
    assert all(masked[b * 8:(b + 1) * 8].any() for b in range(4))  # every block has a masked token
    assert (w[masked] >= 1).all()  # 1/t with t <= 1
    # batch: padding rows attend only to themselves; weights are zero on padded canvas slots
    b = make_batch([([1, 2, 3], [5] * 8), ([1] * 6, [6] * 16)], 8, TOK.special.mask, TOK.special.pad, gen)
    assert b.ids.shape == (2, 6 + 32) and b.mask.shape == (2, 1, 38, 38)
    L0 = 3 + 16
    assert torch.equal(b.mask[0, 0, L0:, L0:], torch.eye(38 - L0, dtype=torch.bool))
    assert not b.mask[0, 0, :L0, L0:].any()
    assert (b.weights[0, 8:] == 0).all() and b.n_tokens == 24
    # the x0 canvas of each row is the clean target; xt differs exactly at the masked positions
    assert b.ids[0, 3:11].tolist() == [5] * 8


def test_loss_only_counts_masked_positions() -> None:
    torch.manual_seed(0)
    args = preset("tiny", special_tokens=TOK.special.as_dict())
    model = Transformer(args).init_random(0)
    gen = torch.Generator().manual_seed(1)
    b = make_batch([([1, 2, 3, 4], [7] * 16)], 8, TOK.special.mask, TOK.special.pad, gen)
    loss, m = bd3_loss(model, b)
    # changing the target at an unmasked position must not change the loss
    keep = (b.weights[0] == 0).nonzero()[0, 0]
    b.targets[0, keep] = 99
    loss2, _ = bd3_loss(model, b)
    assert torch.allclose(loss, loss2)
    assert m["masked"] == int((b.weights > 0).sum())


def test_masked_xt_does_not_leak_into_clean_context() -> None:
    """Changing xt tokens of block 1 must not change predictions for block 0 (x0/xt separation)."""
    args = preset("tiny", special_tokens=TOK.special.as_dict())
    model = Transformer(args).init_random(0).eval()
    n, c, bs = 4, 16, 8
    mask, pos = bd3lm_layout(n, c, bs)
    ids = torch.randint(0, 250, (1, n + 2 * c))
    out1 = model(ids, positions=pos, mask=mask[None, None])
    ids2 = ids.clone()
    ids2[0, n + c + bs:] = TOK.special.mask  # noisy block 1
    out2 = model(ids2, positions=pos, mask=mask[None, None])
    assert torch.allclose(out1[0, : n + c + bs], out2[0, : n + c + bs], atol=1e-5)
    assert not torch.allclose(out1[0, n + c + bs:], out2[0, n + c + bs:], atol=1e-5)


def test_adapter_round_trip_merge_equals_unmerged(tmp_path: Path) -> None:
    torch.manual_seed(0)
    args = preset("tiny", special_tokens=TOK.special.as_dict())
    base = Transformer(args).init_random(0)
    base_state = {k: v.clone() for k, v in base.state_dict().items()}
    first = min(v for k, v in TOK.special.as_dict().items() if k != "eos")
    model = Transformer(args).init_random(0)
    apply_lora(model, rank=4, alpha=8)
    groups = mark_trainable(model, first)
    with torch.no_grad():  # pretend training happened
        for g in groups:
            for p in g["params"]:
                if p.shape[0] == args.vocab_size:  # embedding: only the added tokens' rows train
                    p[first:] += torch.randn_like(p[first:]) * 0.05
                else:
                    p.add_(torch.randn_like(p) * 0.05)
    emb = model.model.embed_tokens.weight
    meta = {"lora": {"rank": 4, "alpha": 8}, "special_tokens": TOK.special.as_dict()}
    save_adapter(tmp_path / "ad", model, first, meta)
    assert json.loads((tmp_path / "ad.json").read_text())["lora"]["rank"] == 4
    ids = torch.randint(0, 268, (1, 20))
    with torch.no_grad():
        ref = model(ids, is_causal=True)
        tensors, meta2 = load_adapter(tmp_path / "ad")
        assert "model.layers.0.self_attn.q_proj.weight.lora_A" in tensors
        assert tensors["added_tokens.embed"].shape == (268 - first, args.dim)
        state = merge_adapter(dict(base_state), tensors, meta2)
        merged = Transformer(args)
        merged.load_state_dict(state, strict=True)
        got = merged(ids, is_causal=True)
    assert torch.allclose(ref, got, atol=1e-4), (ref - got).abs().max()
    # base rows untouched by "training" are identical to the base (only the new rows changed)
    assert torch.equal(state["model.embed_tokens.weight"][:first], base_state["model.embed_tokens.weight"][:first])
    assert not torch.equal(emb[first:], base_state["model.embed_tokens.weight"][first:])
    # merging the LoRA modules in place gives the same function too
    merge_lora(model)
    with torch.no_grad():
        assert torch.allclose(model(ids, is_causal=True), ref, atol=1e-4)


def test_broken_adapter_names_file_and_field(tmp_path: Path) -> None:
    import pytest

    from engine.train.lora import AdapterError

    (tmp_path / "x.safetensors").write_bytes(b"")
    (tmp_path / "x.json").write_text('{"lora": {"rank": 2, "alpha": 2}}')
    with pytest.raises(AdapterError, match="x.json: missing field 'special_tokens'"):
        load_adapter(tmp_path / "x")
    with pytest.raises(AdapterError, match="y.safetensors"):
        load_adapter(tmp_path / "y")
