"""The carried next edits and the location model: what the history's changes are, where they still apply,
the proposals' features, the model file and its fit, and the server's candidates (no model, no network)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import msgspec
import pytest

from edit_server.core.history import Hunk
from edit_server.core.requests import EditBuilt, EditRequest
from edit_server.core.settings import Settings
from edit_server.nextedit import carry, locator, propose, serve
from engine.templates import EDIT_REGION_ABOVE, EDIT_REGION_BELOW, EditPrompt
from engine.textdiff import line_span, unified_diff


def hunk(path: str, old: str, new: str) -> Hunk:
    return Hunk(path, unified_diff(path, old, new), 0.0, False)


# ---- the changes an edit made ---------------------------------------------------------------------------


def test_a_rename_is_a_change_with_its_member_access() -> None:
    assert carry.token_changes("  self.options,", "  self._original_options,") == [
        ("options", "_original_options"), ("self.options", "self._original_options")]


def test_insertions_and_deletions_lean_on_a_neighbour() -> None:
    assert carry.token_changes("def test_2():", "def test_2(mod: ModuleType):") == [("()", "(mod: ModuleType)")]
    assert ("handlers", "value.handlers") in carry.token_changes("  if handlers != nil {", "  if value.handlers != nil {")
    assert carry.token_changes("class A(typing.NamedTuple):", "class A(NamedTuple):") == [
        ("typing.NamedTuple", "NamedTuple"), ("typing.", "")]
    assert carry.token_changes("def f(env):", "def f():") == [("(env)", "()")]


def test_no_change_from_strings_operators_or_rewrites() -> None:
    assert carry.token_changes('print("hello world")', 'print("hello there")') == []  # a message
    assert carry.token_changes("a = b + c", "a = b - c") == []  # an operator is no rename
    assert carry.token_changes("x = foo(a, b, c)", "y = bar(d, b, e)") == []  # three places: rewritten


def test_changes_read_every_recent_hunk_newest_first() -> None:
    h1 = hunk("a.py", "x = old_name\n", "x = new_name\n")
    h2 = hunk("b.py", "def run(cfg):\n", "def run(config):\n")
    got = carry.changes([h1, h2])
    assert [(c.old, c.new, c.path, c.age) for c in got] == [("cfg", "config", "b.py", 0),
                                                            ("old_name", "new_name", "a.py", 1)]
    assert got[0].clean and got[0].pairs == 1 and not got[0].in_comment


# ---- where they still apply -------------------------------------------------------------------------------


def test_targets_skip_comments_prose_and_the_lines_just_written() -> None:
    text = "def f(cfg):\n    # cfg is the configuration we read\n    use(cfg)\n    s = 'cfg'\n"
    c = carry.changes([hunk("a.py", "def f(old):\n", "def f(cfg):\n")])  # unrelated: old → cfg
    assert [x.old for x in c] == ["old"]
    rename = carry.Change("cfg", "config", "a.py", 0, "def f(cfg):", 1, 1, 1, True, False)
    assert carry.targets(text, rename, "a.py", skip_rows={0}) == [2]
    assert carry.carry("    use(cfg)  # cfg", [rename], "a.py") == "    use(config)  # cfg"


# ---- proposals ---------------------------------------------------------------------------------------------


def _case(text: str, cursor: int, history: list[Hunk], path: str = "a.py") -> tuple[EditRequest, EditBuilt]:
    ra, rb = line_span(text, cursor, EDIT_REGION_ABOVE, EDIT_REGION_BELOW)
    req = EditRequest(f"file:///{path}", path, text, 1, cursor, history)
    return req, EditBuilt(EditPrompt(text[:ra], text[ra:rb], text[rb:], cursor - ra, path, ()), ra, rb)


BEFORE = "def area(size):\n    total = size * 2\n" + "\n" * 30 + "    return total + size\n"
AFTER = BEFORE.replace("def area(size)", "def area(dim)")


def test_a_rename_is_carried_in_the_region_and_offered_as_a_jump() -> None:
    h = [hunk("a.py", BEFORE, AFTER)]
    cursor = AFTER.index("dim") + 3
    req, built = _case(AFTER, cursor, h)
    props = propose.propose(AFTER, "a.py", cursor, built.region_start, built.region_end, h)
    region = [p for p in props if not p.jump]
    jumps = [p for p in props if p.jump]
    assert [p.new for p in region] == [AFTER[built.region_start:built.region_end].replace("size * 2", "dim * 2")]
    assert [(AFTER[p.start:p.end], p.new) for p in jumps] == [("    return total + size", "    return total + dim")]
    f = region[0].feats  # the renamed parameter's binding names the place: the ``b_`` half of the model
    assert f["b_o_carry"] == 1.0 and f["b_age0"] == 1.0 and f["b_new_fresh"] == 1.0 and f["b_lang_python"] == 1.0
    assert f["b_bound_decl"] == 1.0 and f["b_follows"] == 1.0 and f["b_strays"] == 0.0
    assert "below" not in propose.FEATURES  # the replays run top to bottom: no feature learns their order
    assert set(f) <= set(propose.FEATURES)
    assert jumps[0].feats["j_jump"] == 1.0 and jumps[0].feats["j_dist"] > f["b_dist"] and "dist" not in jumps[0].feats


def test_no_history_proposes_nothing() -> None:
    req, built = _case(AFTER, 5, [])
    assert propose.propose(AFTER, "a.py", 5, built.region_start, built.region_end, []) == []


# ---- the model file ----------------------------------------------------------------------------------------


def model(bias: float = 0.0, threshold: float = 0.5) -> locator.Locator:
    n = len(propose.FEATURES)
    coef = [0.0] * n
    coef[propose.FEATURES.index("o_carry")] = 2.0
    coef[propose.FEATURES.index("j_o_carry")] = 2.0
    coef[propose.FEATURES.index("b_o_carry")] = 2.0
    return locator.Locator(propose.FEATURES, (0.0,) * n, (1.0,) * n, tuple(coef), bias, threshold, {})


def test_the_probability_follows_the_coefficients() -> None:
    m = model(bias=-1.0)
    assert m.probability({}) == pytest.approx(1 / (1 + math.exp(1.0)))
    assert m.probability({"o_carry": 1.0}) == pytest.approx(1 / (1 + math.exp(-1.0)))
    assert m.thresholds()["edit:carry"] == 0.5 and set(m.thresholds()) == set(locator.KINDS)


def test_a_broken_model_file_names_the_file_and_the_field(tmp_path: Path) -> None:
    d = model().to_json()
    assert locator.from_json(d).coef == model().coef  # round trip
    bad = tmp_path / "loc.json"
    bad.write_text(json.dumps({**d, "coef": [1.0]}))
    with pytest.raises(ValueError, match=r"loc\.json: field 'coef' must be a list of \d+ numbers"):
        locator.load(str(bad))
    bad.write_text(json.dumps({**d, "format": "x"}))
    with pytest.raises(ValueError, match="field 'format'"):
        locator.from_json(json.loads(bad.read_text()), str(bad))
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not a locator model"):
        locator.load(str(bad) + "")


def test_the_shipped_model_loads_with_a_finite_threshold() -> None:
    m = locator.load()
    assert m.features == propose.FEATURES
    assert 0.0 < m.threshold < 1.0
    assert m.meta["trained_on"] and not {"click", "ky", "serde-json", "viper", "fmt"} & set(m.meta["trained_on"])


# ---- what the server offers -------------------------------------------------------------------------------


def settings(**next_edit: object) -> Settings:
    s = Settings()
    return msgspec.structs.replace(s, next_edit=msgspec.structs.replace(s.next_edit, **next_edit))


def test_the_server_scores_the_rules_and_the_carried_edits(tmp_path: Path) -> None:
    f = tmp_path / "loc.json"
    f.write_text(json.dumps(model(bias=1.0).to_json()))
    h = [hunk("a.py", BEFORE, AFTER)]
    cursor = AFTER.index("dim") + 3
    req, built = _case(AFTER, cursor, h)
    got = serve.rule_candidates(req, built, settings(locator=str(f)))
    by = {(c.origin, c.span is not None): c for c in got}
    assert ("repeat", False) in by and ("carry", True) in by
    assert by[("carry", True)].confidences == [pytest.approx(1 / (1 + math.exp(-3.0)))]
    assert by[("repeat", False)].confidences == [pytest.approx(1 / (1 + math.exp(-1.0)))]
    no_jumps = serve.rule_candidates(req, built, settings(locator=str(f), jumps=False))
    assert all(c.span is None for c in no_jumps)
    off = serve.rule_candidates(req, built, settings(locator="off"))
    assert [c.origin for c in off] == ["repeat"] and off[0].confidences == [0.95]  # the rule's fixed score
    assert serve.thresholds(settings(locator="off")) == {}
    assert serve.thresholds(settings(locator=str(f)))["edit:repeat"] == 0.5


def test_a_missing_model_fails_closed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    h = [hunk("a.py", BEFORE, AFTER)]
    req, built = _case(AFTER, AFTER.index("dim") + 3, h)
    got = serve.rule_candidates(req, built, settings(locator=str(tmp_path / "none.json")))
    assert [c.origin for c in got] == ["repeat"]  # no carried edit without the model
    assert "next-edit location model not used" in caplog.text


# ---- the location report ------------------------------------------------------------------------------------


def test_locate_finds_the_next_hunk_and_tells_due_from_done() -> None:
    from edit_server.cli import eval_locate

    cursor = AFTER.index("dim") + 3
    far = AFTER.index("    return total + size")
    due = {"id": "due", "kind": "edit", "language": "python", "path": "a.py", "files": {"a.py": AFTER},
           "cursor": {"path": "a.py", "offset": cursor}, "expected": None,
           "history": [unified_diff("a.py", BEFORE, AFTER)],
           "meta": {"category": "elsewhere", "pending": [{"start": far, "end": far + 24, "text": "    return total + dim\n"}]}}
    done = {**due, "id": "done", "history": [], "meta": {"category": "done", "pending": []}}
    assert eval_locate.next_hunk(due) == (32, 32) and eval_locate.next_hunk(done) is None
    rep = eval_locate.locate([due, done])["all"]
    assert rep["with_next"] == 1 and rep["reach"] == 1.0 and rep["top3"] == 1.0
    assert rep["due_auroc"] == 1.0  # the case with a carried edit is likelier due than the one with none
    assert "| all | 2 | 1 |" in eval_locate.format_table({"all": rep})


def test_align_locator_fits_a_model_the_server_loads(tmp_path: Path) -> None:
    from edit_server.cli import align_locator

    def case(i: int, repo: str, due: bool) -> dict:
        name = f"size{i}"
        before = f"def area({name}):\n    total = {name} * 2\n    return total\n"
        after = before.replace(f"def area({name})", f"def area(dim{i})")
        cursor = after.index(f"dim{i}") + len(f"dim{i}")
        line = after.index(f"{name} * 2")
        want = [{"path": "a.py", "start": line, "end": line + len(name), "text": f"dim{i}"}]
        return {"id": f"{repo}:{i}", "kind": "edit", "language": "python", "path": "a.py", "files": {"a.py": after},
                "cursor": {"path": "a.py", "offset": cursor}, "expected": want if due else None,
                "history": [unified_diff("a.py", before, after)],
                "meta": {"repo": repo, "category": "next-edit" if due else "done", "pending": []}}

    cases = [case(i, repo, due) for repo in ("r1", "r2", "r3") for i, due in enumerate([True] * 6 + [False] * 2)]
    loc, report = align_locator.train(cases, target=0.5)
    assert report["cases"] == 24 and report["right"] == 18 and report["repositories"] == ["r1", "r2", "r3"]
    assert loc.features == propose.FEATURES and loc.threshold <= 1.0
    f = tmp_path / "loc.json"
    f.write_text(json.dumps(loc.to_json()))
    assert locator.load(str(f)).coef == loc.coef
    assert [p["threshold"] for p in report["out_of_fold"]] == list(align_locator.THRESHOLDS)
