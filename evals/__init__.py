"""Headless evaluations: HumanEval-infilling pass@1, git-history replay, JSONL edit cases.

`edit-server eval ...` (see :mod:`evals.cli`). Runners drive the engine API or the real stdio server.
"""
