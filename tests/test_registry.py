"""The model registry, the per-model prompt formats (golden prompts built by hand from each model's
published example), tokenizers rebuilt from vocab.json + merges.txt, and ``random:<CONFIG>``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, pre_tokenizers

from engine.formats import FormatNotSupported, for_model
from engine.loading.archs import ARCHITECTURES, args_from_dict
from engine.registry import MODELS, lookup
from engine.templates import EditPrompt, FimPrompt, Section, render_fim
from tests.dllm_util import registry_tokenizer

SPECIALS = ("<|endoftext|>", "<|beginoftext|>", "<|mask|>", "<|expand|>", "<|im_start|>", "<|im_end|>",
            "<|file_sep|>", "<M>", "<think>", "</think>", "<|dlm_pad|>", "<|startoftext|>",
            "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|mdm_mask|>")
PREFIX = "def add(a, b):\n    "
SUFFIX = "\n\nprint(add(1, 2))\n"


@pytest.fixture(scope="module")
def tok():  # type: ignore[no-untyped-def]
    return registry_tokenizer(specials=SPECIALS)


def tid(tok, text: str) -> int:  # type: ignore[no-untyped-def]
    return int(tok.hf.token_to_id(text))


def full(lay, mask: int) -> list[int]:  # type: ignore[no-untyped-def]
    return lay.before + [mask] * lay.canvas + lay.after


# ---- registry ---------------------------------------------------------------------------------
def test_registry_rows_are_complete() -> None:
    families = {e.family for e in MODELS}
    assert {"Dream-Coder", "DreamOn", "DiffuCoder", "Open-dCoder", "CoDA", "LLaDA", "LLaDA-MoE", "LLaDA2.0",
            "Fast-dLLM v2", "SDAR"} <= families
    for e in MODELS:
        assert e.architecture in ARCHITECTURES, e.name
        assert e.fim in ("infill", "dreamon", "chat") and e.edit in (None, "chat"), e.name
        assert e.edit is not None or e.edit_note, e.name
        assert e.context > 0 and e.sources and e.license and e.mask_token, e.name
        assert (e.attention == "block_causal") == (e.block_align == "absolute"), e.name
        if e.attention == "block_causal":
            assert e.fim == "chat", f"{e.name}: a block-causal canvas cannot see a suffix after it"
    assert lookup("Dream-org/Dream-Coder-v0-Instruct-7B@abc").name == "Dream-org/Dream-Coder-v0-Instruct-7B"
    assert lookup("dream-coder-v0-instruct-7b").family == "Dream-Coder"
    assert lookup("apple/DiffuCoder-7B-cpGRPO").name == "apple/DiffuCoder-7B-Instruct"
    assert lookup("nobody/nothing") is None and lookup("") is None


@pytest.mark.parametrize("name, params", [("Dream-org/Dream-Coder-v0-Instruct-7B", 7.6e9),
                                          ("fredzzp/open-dcoder-0.5B", 0.49e9), ("GSAI-ML/LLaDA-8B-Base", 8.0e9),
                                          ("JetLM/SDAR-4B-Chat", 4.0e9), ("JetLM/SDAR-8B-Chat", 8.2e9),
                                          ("Efficient-Large-Model/Fast_dLLM_v2_1.5B", 1.5e9)])
def test_recorded_shapes_are_real_sizes(name: str, params: float) -> None:
    e = lookup(name)
    assert e is not None and e.shape is not None
    args, arch = args_from_dict(dict(e.shape, architectures=[e.architecture]))
    assert arch == e.architecture and (args.attention, args.shifted_logits) == (e.attention, e.shifted_logits) \
        or e.name.startswith("fredzzp")  # Open-dCoder's regime comes from the registry, not its config
    assert abs(args.param_count() / params - 1) < 0.06, args.param_count()


def test_random_config_spec(tmp_path: Path) -> None:
    from engine.engine import Engine
    from engine.specs import _random_args, load_checkpoint_spec
    from engine.tokenizer import Tokenizer

    args, label = _random_args("Dream-org/Dream-Coder-v0-Instruct-7B", Tokenizer.byte_level())
    assert (args.dim, args.n_layers, args.vocab_size, args.attention) == (3584, 28, 152064, "bidirectional")
    assert "Dream-Coder" in label
    od, _ = _random_args("fredzzp/open-dcoder-0.5B", Tokenizer.byte_level())
    assert (od.attention, od.shifted_logits, od.tie_embeddings) == ("bidirectional", True, True)
    sdar, _ = _random_args("JetLM/SDAR-8B-Chat", Tokenizer.byte_level())
    assert (sdar.block_size, sdar.block_align, sdar.head_dim, sdar.qk_norm) == (4, "absolute", 128, True)
    cfg = {"architectures": ["SDARForCausalLM"], "hidden_size": 32, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 48,
           "vocab_size": 300, "max_position_embeddings": 512}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    for spec in (f"random:{tmp_path / 'config.json'}", f"random:{tmp_path}"):
        ck = load_checkpoint_spec(spec)
        assert (ck.args.head_dim, ck.args.qk_norm, ck.args.block_size, ck.args.vocab_size) == (16, True, 4, 300)
    eng = Engine.from_checkpoint(ck, device="cpu")
    from engine.types import CanvasSpec

    res = eng.generate(eng.tokenizer.encode("def f():\n"), CanvasSpec(8))
    assert res.forwards > 0 and eng.info["regime"] == "block_causal"
    with pytest.raises(ValueError, match="random:nope"):
        load_checkpoint_spec("random:nope")


# ---- golden prompts ----------------------------------------------------------------------------
def test_dreamon_golden(tok) -> None:  # type: ignore[no-untyped-def]
    """DreamOn README `process_infilling_prompt`: [bos] + prefix + [mask]*n + suffix + [eos]."""
    fmt = for_model(tok, {"registry": "Dream-org/DreamOn-v0-7B", "bos_token": "<|beginoftext|>"})
    lay = fmt.fim(FimPrompt(PREFIX, SUFFIX), max_tokens=4)
    golden = ([tid(tok, "<|beginoftext|>")] + tok.encode(PREFIX) + [tok.special.mask] * 4 + tok.encode(SUFFIX)
              + [tid(tok, "<|endoftext|>")])
    assert full(lay, tok.special.mask) == golden
    assert lay.in_place and lay.expand_id == tid(tok, "<|expand|>")
    with pytest.raises(FormatNotSupported, match="infilling-only"):
        fmt.edit(EditPrompt("a\n", "b = 1\n", "c\n", cursor=2))


def test_dream_coder_and_open_dcoder_golden(tok) -> None:  # type: ignore[no-untyped-def]
    """Dream-Coder: DreamOn's fixed-length `infilling` (bos, eos); Open-dCoder eval_infill.py: prefix +
    masks + suffix (its tokenizer adds no specials)."""
    dc = for_model(tok, {"registry": "Dream-org/Dream-Coder-v0-Base-7B", "bos_token": "<|beginoftext|>"})
    lay = dc.fim(FimPrompt(PREFIX, SUFFIX), 8)
    assert full(lay, tok.special.mask) == ([tid(tok, "<|beginoftext|>")] + tok.encode(PREFIX)
                                           + [tok.special.mask] * 8 + tok.encode(SUFFIX) + [tok.special.eos])
    od = for_model(tok, {"registry": "fredzzp/open-dcoder-0.5B"}).fim(FimPrompt(PREFIX, SUFFIX), 8)
    assert full(od, tok.special.mask) == tok.encode(PREFIX) + [tok.special.mask] * 8 + tok.encode(SUFFIX)
    # other files go first as Qwen repo-level <|file_sep|> blocks
    ctx = dc.fim(FimPrompt(PREFIX, SUFFIX, path="m.py", sections=(Section("definition", "u.py", "X = 1"),)), 8)
    sep = tid(tok, "<|file_sep|>")
    assert ctx.before == ([tid(tok, "<|beginoftext|>"), sep] + tok.encode("u.py\nX = 1\n") + [sep]
                          + tok.encode("m.py\n") + tok.encode(PREFIX))


def test_diffucoder_instruct_chat_golden(tok) -> None:  # type: ignore[no-untyped-def]
    """DiffuCoder README (Instruct): the Qwen ChatML prompt with the system line, reply in the canvas;
    edits are a derived chat instruction; <|im_end|> and <|dlm_pad|> end the reply."""
    fmt = for_model(tok, {"registry": "apple/DiffuCoder-7B-Instruct"})
    lay = fmt.edit(EditPrompt("x = 1\n", "y = x\n", "print(y)\n", cursor=4, path="a.py"))
    ids = lay.before
    head = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
    tail = "<|im_end|>\n<|im_start|>assistant\n"
    assert ids[: len(tok.encode(head))] == tok.encode(head) and ids[-len(tok.encode(tail)):] == tok.encode(tail)
    text = tok.decode(ids)
    assert "x = 1\n[EDIT_START]y = [CURSOR]x\n[EDIT_END]print(y)\n" in text and "File: a.py" in text
    assert {tid(tok, "<|im_end|>"), tid(tok, "<|dlm_pad|>")} <= lay.stop_ids and not lay.in_place
    assert lay.canvas % 32 == 0 and lay.canvas >= len(tok.encode("y = x\n"))
    # FIM stays in place for this bidirectional model
    assert for_model(tok, {"registry": "apple/DiffuCoder-7B-Instruct"}).fim(FimPrompt(PREFIX, SUFFIX)).in_place


QWEN3_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and "
    "enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}")
LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] | trim }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}"
    "<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")


def test_sdar_chat_golden(tok) -> None:  # type: ignore[no-untyped-def]
    """SDAR generate.py: apply_chat_template(user message, add_generation_prompt=True) with the Qwen3
    template (thinking off); FIM puts prefix and suffix in the instruction (block-causal canvas)."""
    fmt = for_model(tok, {"registry": "JetLM/SDAR-1.7B-Chat", "chat_template": QWEN3_TEMPLATE})
    lay = fmt.fim(FimPrompt(PREFIX, SUFFIX), 16)
    content = ("Fill in the missing code at [FILL] in the file below. Reply with only the code that replaces "
               "[FILL]: no explanation, no code fences.\n\n" + PREFIX + "[FILL]" + SUFFIX)
    golden = f"<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert lay.before == tok.encode(golden) and lay.canvas == 16 and not lay.after
    assert tid(tok, "<|im_end|>") in lay.stop_ids


def test_llada_instruct_chat_golden(tok) -> None:  # type: ignore[no-untyped-def]
    """LLaDA generate.py: apply_chat_template on the user turn; the template writes the bos token
    as text, which must become the bos id (not its characters)."""
    fmt = for_model(tok, {"registry": "GSAI-ML/LLaDA-8B-Instruct", "chat_template": LLAMA3_TEMPLATE,
                          "bos_token": "<|startoftext|>"})
    lay = fmt.edit(EditPrompt("", "a = 1\n", "", cursor=0))
    assert lay.before[0] == tid(tok, "<|startoftext|>")
    rest = tok.decode(lay.before[1:])
    assert rest.startswith("<|start_header_id|>user<|end_header_id|>\n\n")
    assert rest.endswith("<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")


def test_native_format_is_the_engine_template(tok) -> None:  # type: ignore[no-untyped-def]
    p = FimPrompt(PREFIX, SUFFIX, path="a.py", history=("--- a\n+++ b\n",))
    lay = for_model(tok, {"label": "our adapter"}).fim(p, 24)
    assert lay.before == render_fim(tok, p).ids and lay.canvas == 24 and not lay.after


# ---- tokenizers from vocab.json + merges.txt -----------------------------------------------------
def test_vocab_merges_tokenizer_matches_transformers(tmp_path: Path) -> None:
    """Dream / DiffuCoder ship vocab.json + merges.txt and a remote-code tokenizer: our rebuild must
    encode like transformers' Qwen2 tokenizer from the same files (+ added tokens)."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import trainers

    from engine.loading.hf_tokenizer import QWEN2_SPLIT, load_tokenizer

    corpus = ["def add(a, b):\n    return a + b\n", "Ünïcödé — 变量 = 42  # comment\n\t\tx\r\n", "it's we'll"] * 20
    t = HFTokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(__import__("tokenizers").Regex(QWEN2_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                       show_progress=False))
    t.model.save(str(tmp_path))
    n = t.get_vocab_size()
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": {
        str(n): {"content": "<|endoftext|>", "special": True}, str(n + 1): {"content": "<|mask|>", "special": True}},
        "eos_token": "<|endoftext|>"}))
    ours = load_tokenizer(tmp_path)
    ref = transformers.Qwen2Tokenizer(vocab=str(tmp_path / "vocab.json"), merges=str(tmp_path / "merges.txt"))
    ref.add_special_tokens({"additional_special_tokens": ["<|endoftext|>", "<|mask|>"]})
    for text in [*set(corpus), "x<|mask|>y<|endoftext|>", "  \n\n  indented\n", "e\u0301"]:
        assert ours.encode(text, add_special_tokens=False).ids == ref.encode(text, add_special_tokens=False), text
    assert ours.token_to_id("<|mask|>") == n + 1


# ---- the engine runs the new architectures ---------------------------------------------------------
def test_engine_runs_moe_block_causal_and_bidirectional(tmp_path: Path) -> None:
    from engine.engine import Engine
    from engine.types import CanvasSpec
    from tests.crosscheck_util import save_checkpoint
    from tests.test_crosscheck_moe import _llada_moe_config
    from tests.test_loading_hf import N_BASE

    cfg = _llada_moe_config()
    g = torch.Generator().manual_seed(0)
    from engine.loading.archs import args_from_dict as a_f_d
    from engine.loading.common import expected_shapes

    args, _ = a_f_d(cfg)
    sd = {k: torch.randn(s, generator=g) * 0.05 for k, s in expected_shapes(args).items()}
    ck = __import__("engine.loading.hf", fromlist=["load_hf"]).load_hf(save_checkpoint(tmp_path / "moe", sd, cfg))
    eng = Engine.from_checkpoint(ck, device="cpu")
    res = eng.generate(eng.tokenizer.encode("print(1)\n"), CanvasSpec(8))
    assert eng.info["regime"] == "bidirectional" and res.steps > 0
    cfg2 = dict(cfg, architectures=["LLaDA2MoeModelLM"], intermediate_size=48, moe_intermediate_size=16,
                num_shared_experts=1, first_k_dense_replace=1, n_group=2, topk_group=1, use_qk_norm=True,
                partial_rotary_factor=0.5)
    args2, _ = a_f_d(cfg2)
    sd2 = {k: torch.randn(s, generator=g) * 0.05 for k, s in expected_shapes(args2).items()}
    ck2 = __import__("engine.loading.hf", fromlist=["load_hf"]).load_hf(save_checkpoint(tmp_path / "l2", sd2, cfg2))
    eng2 = Engine.from_checkpoint(ck2, device="cpu")
    assert eng2.info["regime"] == "block_causal" and eng2.block_size == 32 and N_BASE < eng2.args.vocab_size
    res2 = eng2.generate(eng2.tokenizer.encode("print(1)\n"), CanvasSpec(32), cache_key="doc")
    assert res2.steps > 0


def test_bench_engine_random_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`edit-server bench engine --model random:CONFIG`: random weights at a config's shape."""
    from edit_server.cli import build_parser

    cfg = {"architectures": ["DreamModel"], "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 512, "rope_theta": 1e6}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    args = build_parser().parse_args(["bench", "engine", "--model", f"random:{tmp_path / 'config.json'}",
                                      "--device", "cpu", "--prompt", "32", "--tokens", "8", "--contexts", "64",
                                      "--json"])
    assert args.func(args) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["model"]["regime"] == "bidirectional" and "DreamModel shape" in r["model"]["label"]
    assert r["decoding"]["diffusion"][0]["tokens"] == 8


def _sdar_engine(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A tiny random SDAR-shaped checkpoint found as ``JetLM/SDAR-1.7B-Chat`` by its directory name."""
    from engine.engine import Engine
    from engine.loading.common import expected_shapes
    from engine.loading.hf import load_hf
    from tests.crosscheck_util import save_checkpoint
    from tests.test_loading_hf import N_BASE

    cfg = {"architectures": ["SDARForCausalLM"], "hidden_size": 32, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 48,
           "vocab_size": N_BASE + 3, "max_position_embeddings": 512, "mask_token_id": N_BASE}
    args, _ = args_from_dict(cfg)
    g = torch.Generator().manual_seed(0)
    sd = {k: torch.randn(s, generator=g) * 0.05 for k, s in expected_shapes(args).items()}
    root = save_checkpoint(tmp_path / "SDAR-1.7B-Chat", sd, cfg, extra_tokens=("<|MASK|>", "<|im_start|>", "<|im_end|>"))
    ck = load_hf(root)
    assert ck.meta["registry"] == "JetLM/SDAR-1.7B-Chat"  # found by the directory name
    return Engine.from_checkpoint(ck, device="cpu")


def test_chat_layout_runs_on_the_engine(tmp_path: Path) -> None:
    """A block-causal chat model (SDAR layout) prompted through its registry format, end to end."""
    from engine.formats.run import cut_at_stops, run_layout

    eng = _sdar_engine(tmp_path)
    fmt = for_model(eng.tokenizer, eng.meta)
    lay = fmt.fim(FimPrompt(PREFIX, SUFFIX), 6)
    res = run_layout(eng, lay, max_tokens=6, cache_key="doc")
    assert len(res.tokens) <= 6 and res.steps > 0
    im_end = tid(eng.tokenizer, "<|im_end|>")
    res.tokens, res.confidences = [5, 6, im_end, 7], [0.9] * 4
    assert cut_at_stops(eng, res, lay.stop_ids, False).tokens == [5, 6]
    with pytest.raises(FormatNotSupported, match="in-place"):
        run_layout(eng, for_model(eng.tokenizer, {"registry": "fredzzp/open-dcoder-0.5B"}).fim(
            FimPrompt(PREFIX, SUFFIX), 6))


def test_a_chat_rewrite_that_retypes_the_prompts_markers_answers_the_region(tmp_path: Path) -> None:
    """Zero-shot instruct models re-type the chat prompt's plain-text markers into their rewrite (measured on
    Qwen2.5-Coder-1.5B-Instruct: `[EDIT_START]from attr import …`); the engine answers the region between
    them, without `[CURSOR]` — unless the region itself holds that text — and the markers' tokens do not
    count as changes the gate scores."""
    from engine.formats.chat import CURSOR, REGION_END, REGION_START, edit_reply
    from engine.templates import EditPrompt
    from engine.types import GenerateResult

    def reply(text: str, region: str) -> str:
        return "".join(text[a:b] for a, b in edit_reply(text, region))

    assert reply(f"before\n{REGION_START}x = 1{CURSOR}\n{REGION_END}\nafter", "x = 0\n") == "x = 1\n"
    assert reply(f"{REGION_START}x = 1\n", "x\n") == "x = 1\n"
    assert reply(f"x = 1\n{REGION_END}", "x\n") == "x = 1\n"
    assert edit_reply("y = 2\n", "x\n") == [(0, 6)]  # a clean reply is the region as it is
    assert reply(f"s = '{CURSOR}'\n", f"s = '{CURSOR}!'\n") == f"s = '{CURSOR}'\n"  # the file's own text
    assert reply(f"{CURSOR}{REGION_END}", "x\n") == ""
    eng = _sdar_engine(tmp_path)
    body = ["def f(a, b):", "\n    return a + b\n"]
    region = "def f(a):\n    return a\n"
    # the markers' tokens at confidence 0.1, the region's at 0.9: what the gate scores must be 0.9 only
    pieces = [(REGION_START, 0.1), (body[0], 0.9), (CURSOR, 0.1), (body[1], 0.9), (REGION_END, 0.1)]
    ids = [t for text, _ in pieces for t in eng.tokenizer.encode(text)]
    conf = [c for text, c in pieces for _ in eng.tokenizer.encode(text)]
    text = "".join(t for t, _ in pieces)
    assert eng.tokenizer.decode(ids) == text

    def run(reqs, hooks):  # type: ignore[no-untyped-def]
        return [GenerateResult(text, list(ids), list(conf), 1, 2, 10, 0, "end") for _ in reqs]

    eng._run = run  # the decoding replaced by that reply: what the engine makes of it is under test
    res = eng.rewrite(EditPrompt(before="", region=region, after="", cursor=8))
    assert res.text == "def f(a, b):\n    return a + b\n"
    assert res.changed and set(res.changed) == {0.9}
    assert len(res.tokens) == len(eng.tokenizer.encode(body[0])) + len(eng.tokenizer.encode(body[1]))

