"""A pattern made line after line: the history feature that says so (`propose.repeats`) and the sessions the
location model learns it from (`edit_server.cli.synth_patterns`), mined from git sessions' hunks."""

from __future__ import annotations

from edit_server.cli import synth_patterns
from edit_server.core.history import Hunk
from edit_server.nextedit import propose
from engine.git_history import GitSession
from engine.templates import EDIT_REGION_ABOVE, EDIT_REGION_BELOW
from engine.textdiff import line_span, unified_diff
from evals.next_edit import judge

BEFORE = '''def project_paths(root):
    return {
        "src": os.path.join(root, "src"),
        "tests": os.path.join(root, "tests"),
        "docs": os.path.join(root, "docs"),
        "build": os.path.join(root, "build"),
    }
'''
AFTER = BEFORE.replace('os.path.join(root, "src")', 'root / "src"').replace(
    'os.path.join(root, "tests")', 'root / "tests"').replace(
    'os.path.join(root, "docs")', 'root / "docs"').replace('os.path.join(root, "build")', 'root / "build"')


def _hunks(*texts: str) -> list[Hunk]:
    return [Hunk("p.py", unified_diff("p.py", a, b), float(i), False)
            for i, (a, b) in enumerate(zip(texts, texts[1:], strict=False))]


def test_repeats_counts_the_earlier_hunks_the_newest_change_makes_again() -> None:
    one = BEFORE.replace('os.path.join(root, "src")', 'root / "src"')
    two = one.replace('os.path.join(root, "tests")', 'root / "tests"')
    assert propose.repeats(_hunks(BEFORE, one, two)) == 1
    assert propose.repeats(_hunks(BEFORE, one)) == 0  # one hunk: nothing repeated yet
    other = one.replace('"tests": os.path.join', '"test": os.path.join')  # a different change next
    assert propose.repeats(_hunks(BEFORE, one, other)) == 0


def test_pattern_rows_need_one_change_on_every_line() -> None:
    b, a = BEFORE.split("\n"), AFTER.split("\n")
    assert synth_patterns.pattern_rows(b, a) == [2, 3, 4, 5]
    odd = list(a)
    odd[5] = '        "build": Path(root, "build"),'  # the commit wrote one line another way
    assert synth_patterns.pattern_rows(b, odd) is None
    assert synth_patterns.pattern_rows(b[:4], a[:4]) is None  # two lines: no rest to predict


def test_a_pattern_hunk_becomes_two_hunks_and_its_rest_the_truth() -> None:
    s = GitSession("r", "p.py", ["c0ffee"], BEFORE, [(0, len(BEFORE), AFTER)], [0])
    made = synth_patterns.from_sessions([s])
    assert len(made) == 1
    case = made[0]
    assert case["meta"]["repo"] == "r" and case["meta"]["synthetic"] == "pattern" and len(case["history"]) == 2
    text = case["files"]["p.py"]
    assert 'root / "tests"' in text and 'os.path.join(root, "docs")' in text
    cursor = case["cursor"]["offset"]
    ra, rb = line_span(text, cursor, EDIT_REGION_ABOVE, EDIT_REGION_BELOW)
    assert text[:ra] + case["expected"][0]["text"] + text[rb:] == AFTER
    hist = [Hunk("p.py", d, float(i), False) for i, d in enumerate(case["history"])]
    props = propose.propose(text, "p.py", cursor, ra, rb, hist, [("analog", AFTER[ra:len(AFTER) - (len(text) - rb)])])
    right = [p for p in props if judge(case, p.start, p.end, p.new)["exact"]]
    assert len(right) == 1 and right[0].feats["pattern"] > 0  # the proposal carries the repeated-pattern cue
    assert synth_patterns.from_sessions([GitSession("r", "p.py", ["c"], BEFORE, [(0, 3, "fn ")], [0])]) == []
