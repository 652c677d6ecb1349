"""Qwen2.5-Coder as an autoregressive base, on a tiny random qwen2-shaped GGUF written here with gguf's
writer (Q4_K / Q5_0 / Q6_K / Q8_0 tensors, untied output, QKV biases, Qwen-like tokenizer metadata):
loading matches transformers' Qwen2ForCausalLM on the dequantized weights, our special tokens take
unused slots, the qwen-fim format, and the engine's greedy output equals transformers' greedy decoding."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.formats import for_model
from engine.loading import base
from engine.loading.ar_base import AR_DECODE, is_ar_base, load_ar_base
from engine.loading.gguf_file import load_gguf
from engine.registry import AR_MODELS, lookup
from engine.templates import FimPrompt, Section
from engine.tokens import SPECIAL_TOKENS
from tests import qwen_util as Qw

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, torch.nn.Module]:
    path = tmp_path_factory.mktemp("q") / "tiny-qwen.gguf"
    model = Qw.tiny_qwen2()
    held = Qw.write_qwen_gguf(path, model.state_dict())
    with torch.no_grad():  # the reference holds exactly what the file holds (dequantized)
        for k, p in model.state_dict().items():
            p.copy_(torch.from_numpy(np.ascontiguousarray(held[k])))
    return path, model


@pytest.fixture(scope="module")
def cached(tiny: tuple[Path, torch.nn.Module], tmp_path_factory: pytest.TempPathFactory,
           ) -> tuple[Path, base.PartedBase]:
    """The tiny file in a cache dir under the real entry's name and file name (pins patched to it)."""
    path, _ = tiny
    data = path.read_bytes()
    spec = dataclasses.replace(base.PARTED["qwen2.5-coder-0.5b"], size=len(data),
                               sha256=hashlib.sha256(data).hexdigest(), layers=Qw.LAYERS)
    cache = tmp_path_factory.mktemp("cache")
    (cache / spec.file).write_bytes(data)
    return cache, spec


def _ar_ck(cached: tuple[Path, base.PartedBase], monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
           merged: Path | None = None, **kw: bool):
    cache, spec = cached
    monkeypatch.setitem(base.PARTED, spec.name, spec)
    monkeypatch.setenv("EDIT_SERVER_MERGED_CACHE", str(merged or cache / "merged"))
    return load_ar_base(spec.name, cache, **kw)


def test_quantized_qwen2_gguf_matches_transformers(tiny: tuple[Path, torch.nn.Module]) -> None:
    from gguf import GGUFReader

    from engine.model import Transformer

    path, ref = tiny
    kinds = {t.tensor_type.name for t in GGUFReader(str(path)).tensors}
    assert {"Q4_K", "Q5_0", "Q6_K", "Q8_0", "F32"} <= kinds
    ck = load_gguf(path)
    a = ck.args
    assert (a.qkv_bias, a.tie_embeddings, a.rope_theta, a.max_seq_len) == (True, False, Qw.THETA, Qw.CTX)
    assert abs(a.norm_eps - Qw.EPS) < 1e-12 and a.vocab_size == Qw.VOCAB  # no rows appended
    model = Transformer(a, init=False)
    model.load_state_dict(ck.state_dict, strict=True, assign=True)
    ids = torch.tensor([[5, 17, 200, 3, 99, 256, 42, 7, 128, 64, 1, 250, 261, 262]])
    with torch.no_grad():
        ours = model.eval()(ids, is_causal=True)[0]
        want = ref(ids).logits[0]
    assert want.abs().max() > 1.0  # not a degenerate model
    torch.testing.assert_close(ours, want, atol=2e-4, rtol=1e-4)
    assert torch.equal(ours.argmax(-1), want.argmax(-1))


def test_special_tokens_take_unused_slots(tiny: tuple[Path, torch.nn.Module]) -> None:
    ck = load_gguf(tiny[0])
    tok, sp = ck.tokenizer, ck.tokenizer.special
    assert tok.vocab_size == Qw.VOCAB == ck.state_dict["model.embed_tokens.weight"].shape[0]
    unused = {i for i, t in enumerate(Qw.TYPES) if t == 5}
    for text in ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|file_sep|>"):  # Qwen's own
        assert tok.hf.token_to_id(text) == Qw.TOKENS.index(text)
    ours = [t for t in SPECIAL_TOKENS.values() if t not in Qw.TOKENS]
    placed = [tok.hf.token_to_id(t) for t in ours]
    assert set(placed) <= unused and len(set(placed)) == len(ours) and sp.mask in unused
    assert sp.eos == Qw.EOS and tok.token_text(sp.eos) == "<|im_end|>"
    assert tok.encode("<|mask|>") == [sp.mask]  # an added (special) token, not BPE pieces
    assert tok.encode("def re") == [Qw.TOKENS.index("def"), Qw.TOKENS.index("Ġre")]
    assert ck.meta["bos_token"] == "<|endoftext|>"


def test_qwen_fim_layout_file_and_repo_level(tiny: tuple[Path, torch.nn.Module]) -> None:
    ck = load_gguf(tiny[0])
    tok = ck.tokenizer
    entry = lookup("qwen2.5-coder-0.5b")
    assert entry is not None and entry in AR_MODELS and entry.context == 32768
    fmt = for_model(tok, {"registry": entry.name})
    assert fmt.name == "qwen-fim"
    T = Qw.TOKENS.index
    lay = fmt.fim(FimPrompt("def re", "ret", path="pkg/a.py"), 16)
    assert lay.before == [T("<|fim_prefix|>"), T("<|fim_suffix|>"), T("ret"), T("<|fim_middle|>"), T("def")]
    assert lay.heal == " re"  # the cursor's line after the middle token, its last piece healed (test below)
    assert lay.canvas == 16 and not lay.in_place
    assert lay.stop_ids == {T(t) for t in ("<|endoftext|>", "<|fim_pad|>", "<|file_sep|>", "<|repo_name|>",
                                           "<|im_end|>")}
    rep = fmt.fim(FimPrompt("x", "", path="pkg/a.py", sections=(Section("definition", "pkg/b.py", "re"),)))
    assert tok.decode(rep.before) == ("<|repo_name|>pkg\n<|file_sep|>pkg/b.py\nre\n<|file_sep|>pkg/a.py\n"
                                      "<|fim_prefix|><|fim_suffix|><|fim_middle|>") and rep.heal == "x"
    assert [p[0] for p in rep.parts] == ["repo", "section:0:definition", "header", "prefix", "suffix", "middle"]


def test_qwen_fim_puts_the_typed_line_after_the_middle_token_and_heals_its_last_piece(
        tiny: tuple[Path, torch.nn.Module]) -> None:
    """As llama.cpp's ``/infill`` with llama.vim's ``prompt``: the cursor's line up to the cursor goes after
    ``<|fim_middle|>`` (typing on it changes the prompt's end only), its last piece left out to be healed;
    where text follows the cursor on its line, the line stays in the prefix (the model must see the suffix
    go on right there: more than MOVE_REST characters of it)."""
    ck = load_gguf(tiny[0])
    tok = ck.tokenizer
    fmt = for_model(tok, {"registry": "qwen2.5-coder-0.5b"})
    T = Qw.TOKENS.index
    lay = fmt.fim(FimPrompt("x = 1\n  ret", "\nprint(x)\n"), 8)
    assert lay.before == [T("<|fim_prefix|>"), *tok.encode("x = 1\n"), T("<|fim_suffix|>"),
                          *tok.encode("\nprint(x)\n"), T("<|fim_middle|>"), T("Ġ")]
    assert lay.heal == " ret"  # the pre-tokenizer's last piece: tokens never cross its start
    assert fmt.fim(FimPrompt("x = 1\n  ret", "\n"), 8).heal == " ret"
    assert [p[0] for p in lay.parts] == ["prefix", "suffix", "middle"]
    short = fmt.fim(FimPrompt("a = f(x", ", y)\n"), 8)  # a short rest of the line: moved too
    assert short.before == [T("<|fim_prefix|>"), T("<|fim_suffix|>"), *tok.encode(", y)\n"), T("<|fim_middle|>"),
                            *tok.encode("a = f")] and short.heal == "(x"
    long = fmt.fim(FimPrompt("a = f(x", ", yy, zz, w)\n"), 8)  # more than MOVE_REST: the line stays in the prefix
    assert long.before == [T("<|fim_prefix|>"), *tok.encode("a = f"), T("<|fim_suffix|>"),
                           *tok.encode(", yy, zz, w)\n"), T("<|fim_middle|>")] and long.heal == "(x"
    for suffix in ("y\n", "a long line after the cursor\n"):  # at a line's start: nothing typed, nothing healed
        start = fmt.fim(FimPrompt("x = 1\n", suffix), 8)
        assert start.before == [T("<|fim_prefix|>"), *tok.encode("x = 1\n"), T("<|fim_suffix|>"), *tok.encode(suffix),
                                T("<|fim_middle|>")] and start.heal == ""
    spaced = fmt.fim(FimPrompt("x = 1\n  ret ", "\n"), 8)  # whitespace after text: as typed, nothing healed
    assert spaced.before == [T("<|fim_prefix|>"), *tok.encode("x = 1\n"), T("<|fim_suffix|>"), *tok.encode("\n"),
                             T("<|fim_middle|>"), *tok.encode("  ret ")] and spaced.heal == ""
    assert tok.ids_starting_with("ret") == sorted(T(t) for t in ("ret", "retu", "retur", "return"))
    assert tok.ids_of_prefixes("retu") == [T("r"), T("re"), T("ret")]
    assert tok.ids_starting_with("<|fim") == []  # special tokens are never a choice
    assert tok.ids_starting_with("\n") == [T("Ċ")] and tok.ids_starting_with("\n", line_breaks=False) == []


def _greedy_reference(model: torch.nn.Module, ids: list[int], n: int, stops: set[int],
                      never: Sequence[int] = ()) -> list[int]:
    """transformers' greedy tokens after ``ids``, never one of ``never`` (the prompt markers the engine does not
    generate)."""
    out: list[int] = []
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([ids + out])).logits[0, -1]
            logits[list(never)] = float("-inf")
            nxt = int(logits.argmax())
            if nxt in stops:
                break
            out.append(nxt)
    return out


def _healed_reference(model: torch.nn.Module, tok: object, lay: object, n: int,
                      stops: set[int], never: Sequence[int] = ()) -> tuple[str, list[int]]:
    """transformers' greedy answer to a layout: where it heals, its first tokens are the best of those whose
    text (decoded here, one id at a time) starts with the healed text or is a proper prefix of it — a prefix
    over the best token spelling all of it only when the prefix's log-probability plus the mass of what may
    follow it (the same choices for the rest) is the larger; then the text they add past it and the greedy
    tokens after them."""
    ids, rest, lead = list(lay.before), lay.heal, ""  # type: ignore[attr-defined]
    added = {int(i) for i in tok.hf.get_added_tokens_decoder()}  # type: ignore[attr-defined]
    texts = {i: tok.decode([i]) for i in range(Qw.VOCAB) if i not in added}  # type: ignore[attr-defined]

    def allowed(text: str) -> list[int]:
        return [i for i, t in texts.items() if (t.startswith(text) and "\n" not in t[len(text):])
                or (0 < len(t) < len(text) and text.startswith(t))]

    def logprobs(prompt: list[int]) -> torch.Tensor:
        return torch.log_softmax(model(torch.tensor([prompt])).logits[0, -1].float(), dim=-1)

    with torch.no_grad():
        while rest:
            ok = allowed(rest)
            lp = logprobs(ids)
            pick = max(ok, key=lambda i: float(lp[i]))
            whole = [i for i in ok if len(texts[i]) >= len(rest)]
            if len(ok) > 1 and whole and len(texts[pick]) < len(rest):
                best_whole = max(whole, key=lambda i: float(lp[i]))
                after = allowed(rest[len(texts[pick]):]) or tok.encode(rest[len(texts[pick]):])[:1]  # type: ignore[attr-defined]
                path = float(lp[pick]) + float(torch.logsumexp(logprobs([*ids, pick])[after], dim=0))
                pick = pick if path > float(lp[best_whole]) else best_whole
            ids.append(pick)
            rest, lead = (rest[len(texts[pick]):], "") if len(texts[pick]) < len(rest) else \
                ("", texts[pick][len(rest):])
    return lead, _greedy_reference(model, ids, n, stops, never)


def test_engine_decodes_greedy_left_to_right_like_transformers(
        tiny: tuple[Path, torch.nn.Module], cached: tuple[Path, base.PartedBase],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from engine import Engine
    from engine.api import InfillCall

    monkeypatch.delenv("EDIT_SERVER_DECODE", raising=False)
    monkeypatch.delenv("EDIT_SERVER_FASTCPU", raising=False)
    assert is_ar_base("Qwen2.5-Coder-0.5B") and not is_ar_base("default")
    ck = _ar_ck(cached, monkeypatch)
    assert ck.meta["registry"] == "qwen2.5-coder-0.5b" and ck.meta["decode"] == AR_DECODE
    eng = Engine.from_checkpoint(ck, device="cpu")
    assert (eng.sampler.window, eng.sampler.speculate) == (1, 8) and eng.format.name == "qwen-fim"
    assert eng.info["fast_cpu"] is None  # float32: exactly the file's weights
    ref = tiny[1]
    stops = set(eng.format.fim(FimPrompt("", "")).stop_ids) | set(eng.tokenizer.special.end_ids)
    healed: list[str] = []
    for prefix, suffix in (("def re", " + ret(x, y)\n"), ("x = 1\nde", "\n"), ("ret", ""), ("x = 1\n  re", "\n")):
        prompt = FimPrompt(prefix, suffix)
        lay = eng.format.fim(prompt, 12)
        lead, want = _healed_reference(ref, eng.tokenizer, lay, 12, stops, eng.suppressed_ids)  # markers never generated
        res = eng.complete([InfillCall(prompt, max_tokens=12)])[0]
        assert len(want) >= 2 and res.tokens == want, (prefix, res.tokens, want)
        assert res.lead == lead and res.text.startswith(lead)
        again = eng.complete([InfillCall(prompt, max_tokens=12, cache_key="doc")])[0]  # prefix KV reused
        assert again.tokens == want and again.text == res.text
        healed.append(lay.heal)
    assert healed == [" re", "de", "ret", " re"]  # the first in the prefix (a long rest), the others moved
    odd = FimPrompt("x = 1\ny = 'é", "\n")  # "é" is two byte tokens here: no whole token spells it, none is chosen
    lay = eng.format.fim(odd, 12)
    assert lay.heal == "é" and eng.tokenizer.ids_starting_with("é") == []
    res = eng.complete([InfillCall(odd, max_tokens=12)])[0]  # the piece goes in as typed: no error, no lead
    assert res.lead == "" and res.tokens and res.tokens == _greedy_reference(
        ref, lay.before + eng.tokenizer.encode("é"), 12, stops)
    suffix = "\nprint(x)\n"  # typing at a line's end: each keystroke recomputes the line's last tokens only
    typed = [eng.complete([InfillCall(FimPrompt(p, suffix), max_tokens=4, cache_key="typing")])[0]
             for p in ("x = 1\n  r", "x = 1\n  re", "x = 1\n  ret")]
    lay = eng.format.fim(FimPrompt("x = 1\n  ret", suffix), 4)
    middle = next(s for label, s, _ in lay.parts if label == "middle")
    assert typed[0].cached_tokens == 0 and typed[2].cached_tokens > middle  # the suffix's KV was reused


def test_layouts_are_cached_and_int8_runs(cached: tuple[Path, base.PartedBase], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from engine import Engine
    from engine.cpu import fastcpu

    first = _ar_ck(cached, monkeypatch, tmp_path)
    assert "merged_cache" not in first.meta
    again = _ar_ck(cached, monkeypatch, tmp_path)  # the merged-model cache, same weights, tokenizer and registry row
    assert again.meta["merged_cache"].endswith(".safetensors") and again.meta["registry"] == "qwen2.5-coder-0.5b"
    assert all(torch.equal(again.state_dict[k], v) for k, v in first.state_dict.items())
    assert again.tokenizer.special == first.tokenizer.special and again.tokenizer.encode("def re") == [
        Qw.TOKENS.index("def"), Qw.TOKENS.index("Ġre")]
    fast = _ar_ck(cached, monkeypatch, tmp_path, fast_cpu=True)
    assert fast.meta["layout"] == fastcpu.FORMAT
    assert _ar_ck(cached, monkeypatch, tmp_path, fast_cpu=True).meta["merged_cache"].endswith(".safetensors")
    eng = Engine.from_checkpoint(fast, device="cpu")
    assert eng.info["fast_cpu"] == fastcpu.FORMAT and eng.format.name == "qwen-fim"
    res = eng.infill(FimPrompt("def re", "ret"), max_tokens=8)
    assert res.tokens and res.forwards >= 1


def test_training_keeps_qwens_fim_rows_and_initialises_only_ours(
        cached: tuple[Path, base.PartedBase], monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.train.trainer import TrainConfig, load_model

    ck = _ar_ck(cached, monkeypatch)
    assert ck.meta["base"]["sha256"] == cached[1].sha256  # provenance of the pinned file
    placed = ck.meta["new_special_ids"]
    assert placed == sorted(ck.tokenizer.hf.token_to_id(t) for t in SPECIAL_TOKENS.values() if t not in Qw.TOKENS)
    monkeypatch.setattr(base, "default_cache_dir", lambda: cached[0])
    model, tok, meta = load_model(TrainConfig(model="qwen2.5-coder-0.5b"), torch.device("cpu"), torch.float32)
    emb, orig = model.model.embed_tokens.weight, ck.state_dict["model.embed_tokens.weight"]
    for text in ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|file_sep|>"):  # trained rows: kept
        i = tok.hf.token_to_id(text)
        assert torch.equal(emb[i], orig[i]), text
    assert not torch.equal(emb[tok.special.mask], orig[tok.special.mask])  # ours: initialised from words
    assert meta["base"]["file"] == cached[1].file and "new_special_ids" not in meta


def test_ar_requests_carry_the_serving_stop_rules(cached: tuple[Path, base.PartedBase],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """One set of stop rules: an infill call on the autoregressive base (qwen-fim) gets the same scope, line
    cap, loop, line-length, echo (re-typed suffix / dedent / prose) and budget rules as on a diffusion model."""
    from engine import Engine
    from engine.api import InfillCall
    from engine.calls import call_request

    monkeypatch.delenv("EDIT_SERVER_DECODE", raising=False)
    monkeypatch.delenv("EDIT_SERVER_FASTCPU", raising=False)
    ar = Engine.from_checkpoint(_ar_ck(cached, monkeypatch), device="cpu")
    diff = Engine.load("tiny-random", device="cpu")
    assert ar.format.name == "qwen-fim" and diff.format.name != "qwen-fim"
    prompt = FimPrompt("def f(xs):\n    total = 0\n    ", "\n    return total\n", path="a.py")
    for call in (InfillCall(prompt, max_tokens=64, max_lines=4, budget_ms=5000.0),
                 InfillCall(prompt, max_tokens=16, single_line=True)):
        a, d = call_request(ar, call).canvas, call_request(diff, call).canvas
        for f in ("single_line", "scope_indent", "max_lines", "stop_loops", "max_chars", "echo"):
            assert getattr(a, f) == getattr(d, f), f
        assert a.echo is not None and a.echo.suffix_lines[:1] == ("return total",)
        assert (a.deadline is None) == (d.deadline is None) == call.single_line
    multi = call_request(ar, InfillCall(prompt, max_tokens=64, max_lines=4)).canvas
    assert (multi.scope_indent, multi.max_lines, multi.stop_loops) == (4, 4, True)


def test_the_ar_tier_serves_int8_on_a_cpu_and_float32_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """`Engine.load` of a registry AR base: the int8 CPU layout unless ``$EDIT_SERVER_FASTCPU=0`` (the llama.cpp
    reference, `scripts/bench_peer.py`) or ``fast_cpu=False``; a GPU never asks for it."""
    from engine import Engine
    from engine.loading import ar_base

    asked: list[bool] = []

    def fake(spec: str, cache_dir: object = None, *, fast_cpu: bool = False, use_cache: bool = True) -> object:
        asked.append(fast_cpu)
        raise RuntimeError("stop here")

    monkeypatch.setattr(ar_base, "load_ar_base", fake)
    for env, kw, want in ((None, {}, True), ("0", {}, False), ("1", {}, True), (None, {"fast_cpu": False}, False)):
        if env is None:
            monkeypatch.delenv("EDIT_SERVER_FASTCPU", raising=False)
        else:
            monkeypatch.setenv("EDIT_SERVER_FASTCPU", env)
        with pytest.raises(RuntimeError, match="stop here"):
            Engine.load("qwen2.5-coder-0.5b", device="cpu", **kw)
        assert asked[-1] is want, (env, kw)
    assert len(asked) == 4


def test_the_tiers_show_thresholds_reach_the_ar_engine(cached: tuple[Path, base.PartedBase], tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """An AR base has no adapter file to carry the gate's thresholds: its tier row in engine/tiers.json
    does (the 0.5B's rewrites were never right: edit ∞, so the server does not ask it for next edits), read
    at every load — a model from the merged-model cache gets a threshold measured after it was cached."""
    from edit_server.selectivity.thresholds import model_thresholds
    from engine import Engine, tiers

    recorded = tiers.show_thresholds("qwen2.5-coder-0.5b")
    assert recorded is not None and recorded["edit"]["threshold"] == float("inf")
    assert recorded["edit"]["measured"]
    first = _ar_ck(cached, monkeypatch, tmp_path)  # built from the GGUF, then cached
    assert first.meta["show_thresholds"] == recorded
    assert model_thresholds(Engine.from_checkpoint(first, device="cpu").info) == {"edit": float("inf")}
    later = {"edit": {"threshold": 0.7}, "fim": {"threshold": 0.4}}
    monkeypatch.setattr(tiers, "show_thresholds", lambda model: later)
    again = _ar_ck(cached, monkeypatch, tmp_path)
    assert "merged_cache" in again.meta and again.meta["show_thresholds"]["edit"]["threshold"] == 0.7
    monkeypatch.setattr(tiers, "show_thresholds", lambda model: None)  # none recorded: the gate's setting
    assert "show_thresholds" not in _ar_ck(cached, monkeypatch, tmp_path).meta
