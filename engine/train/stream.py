"""The training examples a run draws: an endless, deterministic stream over the corpus documents (and the git
sessions), in the config's task mix, counting per kind what it tried and made."""

from __future__ import annotations

import random

from engine.templates import Section
from engine.tokenizer import Tokenizer
from engine.train.corpus import Doc
from engine.train.sections import Neighbours
from engine.train.tasks import Budget, Example, make_continuation, make_fim
from engine.train.tasks_edit import make_edit, make_noedit


class ExampleStream:
    """Endless, deterministic (per seed) stream of training examples over corpus documents."""

    def __init__(self, docs: list[Doc], tok: Tokenizer, budget: Budget, mix: dict[str, float], seed: int,
                 git_pairs: list | None = None, fim_layout: str | None = None,
                 edit_layout: str | None = None) -> None:
        if not docs:
            raise ValueError("no documents to train on (empty corpus split)")
        self.docs, self.tok, self.budget = docs, tok, budget
        self.git_pairs = git_pairs or []
        self.fim_layout, self.edit_layout = fim_layout, edit_layout
        self.kinds = [k for k, w in mix.items() if w > 0 and (k != "git" or self.git_pairs)]
        # context sections from neighbouring files in a share of the FIM prompts (budget.sections_share)
        self.neighbours = Neighbours(docs) if budget.sections_share > 0 else None
        self.weights = [mix[k] for k in self.kinds]
        self.rng = random.Random(seed)
        # per kind: draws tried and examples made — a kind whose examples do not fit the budget is dropped
        # silently otherwise (served-region edits whose canvases exceed max_canvas are)
        self.tries: dict[str, int] = dict.fromkeys(self.kinds, 0)
        self.made: dict[str, int] = dict.fromkeys(self.kinds, 0)

    def stats(self) -> dict[str, dict[str, float]]:
        """Per kind: tries, examples made, the share of tries that made one and of all examples made (the
        mix as trained, against the config's)."""
        total = sum(self.made.values()) or 1
        return {k: {"tries": self.tries[k], "made": self.made[k],
                    "yield": round(self.made[k] / self.tries[k], 3) if self.tries[k] else 0.0,
                    "share": round(self.made[k] / total, 3)} for k in self.kinds}

    def one(self) -> Example:
        kind = self.rng.choices(self.kinds, self.weights)[0]
        for attempt in range(600):  # keep the drawn kind for a while: the mix stays what the config says
            if attempt and attempt % 30 == 0:
                kind = self.rng.choices(self.kinds, self.weights)[0]
            if kind == "git":
                from engine.train.git_sessions import git_example

                ex = git_example(self.tok, self.rng.choice(self.git_pairs), self.rng, self.budget,
                                 layout=self.edit_layout)
            else:
                i = self.rng.randrange(len(self.docs))  # as rng.choice draws
                d = self.docs[i]
                if kind == "fim" or kind.startswith("fim:"):  # "fim:block": one span kind (tasks.FIM_SPANS)
                    ex = make_fim(self.tok, d.text, d.path, d.lang, self.rng, self.budget,
                                  how=kind[4:] or None, layout=self.fim_layout, sections=self._sections(i))
                elif kind == "edit":
                    ex = make_edit(self.tok, d.text, d.path, self.rng, self.budget, layout=self.edit_layout)
                elif kind == "noedit":
                    ex = make_noedit(self.tok, d.text, d.path, self.rng, self.budget, layout=self.edit_layout)
                else:
                    ex = make_continuation(self.tok, d.text, d.path, self.rng, self.budget)
            self.tries[kind] += 1
            if ex is not None and len(ex) <= self.budget.max_len:
                self.made[kind] += 1
                return ex
        raise RuntimeError("could not make an example in 600 tries (documents too short for the budget?)")

    def _sections(self, i: int) -> tuple[Section, ...]:
        if self.neighbours is None or self.rng.random() >= self.budget.sections_share:
            return ()
        return self.neighbours.draw(i, self.tok, self.rng, self.budget.max_len // 4)

    def take(self, n: int) -> list[Example]:
        return [self.one() for _ in range(n)]
