"""Tokenizer wrapper: a `tokenizers.Tokenizer` plus the resolved special-token ids."""

from __future__ import annotations

from bisect import bisect_left
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers

from engine.tokens import SPECIAL_TOKENS, SpecialIds

REPLACEMENT = "\ufffd"  # what invalid UTF-8 decodes to


class Tokenizer:
    """Encodes without adding BOS/EOS; decodes skipping nothing but our special tokens' text."""

    def __init__(self, hf: HFTokenizer, special: SpecialIds) -> None:
        self.hf = hf
        self.special = special
        self._special_set = frozenset(special.as_dict().values())
        # `ids_starting_with`'s indexes (every token's text, sorted; and those without a line break), built once
        self._by_text: tuple[tuple[list[str], list[int]], tuple[list[str], list[int]]] | None = None
        self._texts: list[str] | None = None  # `texts`

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def with_special_tokens(cls, hf: HFTokenizer, *, eos_token: str,
                            ids: dict[str, int] | None = None) -> Tokenizer:
        """Add our special tokens (those missing) to ``hf`` and resolve every role's id.

        ``ids`` (role -> id, from a model config) is checked against the tokenizer: a mismatch
        means the checkpoint and tokenizer disagree, which is an error, not a guess.
        """
        missing = [t for t in SPECIAL_TOKENS.values() if hf.token_to_id(t) is None]
        if missing:
            hf.add_special_tokens(missing)
        resolved: dict[str, int] = {}
        for role, text in SPECIAL_TOKENS.items():
            resolved[role] = int(hf.token_to_id(text))
        eos = hf.token_to_id(eos_token)
        if eos is None:
            raise ValueError(f"tokenizer has no eos token {eos_token!r}")
        resolved["eos"] = int(eos)
        if ids:
            bad = {k: (v, resolved.get(k)) for k, v in ids.items() if resolved.get(k) != v}
            if bad:
                raise ValueError(f"special token ids in config disagree with the tokenizer: {bad}")
        return cls(hf, SpecialIds.from_mapping(resolved, source="tokenizer"))

    @classmethod
    def from_file(cls, path: str | Path, *, eos_token: str,
                  ids: dict[str, int] | None = None) -> Tokenizer:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: tokenizer.json not found")
        return cls.with_special_tokens(HFTokenizer.from_file(str(path)), eos_token=eos_token, ids=ids)

    @classmethod
    def byte_level(cls) -> Tokenizer:
        """A deterministic byte-level tokenizer (256 byte tokens + eos + specials) for tests."""
        alphabet = pre_tokenizers.ByteLevel.alphabet()
        vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
        vocab["<|endoftext|>"] = len(vocab)
        hf = HFTokenizer(models.BPE(vocab=vocab, merges=[]))
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)  # ids: bytes (no merges); pieces: GPT-2's
        hf.decoder = decoders.ByteLevel()
        hf.add_special_tokens(["<|endoftext|>"])
        return cls.with_special_tokens(hf, eos_token="<|endoftext|>")

    # ---- use ----------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        if not text:
            return []
        return self.hf.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self.hf.decode([int(i) for i in ids], skip_special_tokens=False)

    def decode_content(self, ids: list[int]) -> str:
        """Decode model output, dropping our special tokens and every U+FFFD: a byte-level or
        byte-fallback tokenizer decodes a multi-byte character cut by the end of the output to the
        replacement character (the text is cut before it), and invalid bytes a model unmasked inside
        the output too (dropped). Neither may reach an editor."""
        text = self.decode([i for i in ids if i not in self._special_set])
        return text.replace(REPLACEMENT, "") if REPLACEMENT in text else text

    def token_text(self, i: int) -> str:
        return self.hf.id_to_token(int(i)) or ""

    def last_piece(self, text: str) -> int:
        """Where the last piece of ``text``'s pre-tokenization starts (no token crosses a piece's edge: ``'    retur'``
        is ``'   '``, ``' retur'``, whatever tokens then spell ``' retur'``); the last token's start without a
        pre-tokenizer."""
        if not text:
            return 0
        pre = self.hf.pre_tokenizer
        if pre is not None:
            return pre.pre_tokenize_str(text)[-1][1][0]
        kept = self.decode(self.encode(text)[:-1])
        return len(kept) if text.startswith(kept) else 0

    def ids_starting_with(self, text: str, line_breaks: bool = True) -> list[int]:
        """The tokens whose own text starts with ``text`` — token healing's choices for a prompt whose last
        piece was taken back (`engine.decoding.heal`); ``line_breaks=False``: none holding a line break. Added
        and special tokens never, nor a token that decodes to an invalid byte sequence alone."""
        keys, ids = self._text_index()[0 if line_breaks else 1]
        lo = bisect_left(keys, text)
        hi = bisect_left(keys, text + "\U0010ffff", lo)
        return ids[lo:hi]

    def ids_of_prefixes(self, text: str) -> list[int]:
        """The tokens whose own text is a proper prefix of ``text`` (shortest first), as `ids_starting_with`."""
        keys, ids = self._text_index()[0]
        out = []
        for k in range(1, len(text)):
            at = bisect_left(keys, text[:k])
            if at < len(keys) and keys[at] == text[:k]:
                out.append(ids[at])
        return out

    def texts(self) -> list[str]:
        """Every token's own text, by id (decoded once, in one batch, at first use)."""
        if self._texts is None:
            self._texts = self.hf.decode_batch([[i] for i in range(self.vocab_size)], skip_special_tokens=False)
        return self._texts

    def _text_index(self) -> tuple[tuple[list[str], list[int]], tuple[list[str], list[int]]]:
        if self._by_text is None:
            added = {int(i) for i in self.hf.get_added_tokens_decoder()}
            texts = self.texts()
            pairs = sorted((t, i) for i, t in enumerate(texts) if t and i not in added and REPLACEMENT not in t)
            flat = [(t, i) for t, i in pairs if "\n" not in t]
            self._by_text = (([t for t, _ in pairs], [i for _, i in pairs]),
                             ([t for t, _ in flat], [i for _, i in flat]))
        return self._by_text
