"""Renames that follow their binding and started edits completed: the document's bindings (tree-sitter), the
places a rename's binding names, the completions' rewrites, and the synthetic sessions the location model
learns them from (no model, no network)."""

from __future__ import annotations

import random

from edit_server.cli import synth_completions, synth_renames
from edit_server.core.history import Hunk
from edit_server.nextedit import bindings, complete_edit, propose
from edit_server.nextedit.carry import changes, written_rows
from engine.templates import EDIT_REGION_ABOVE, EDIT_REGION_BELOW
from engine.textdiff import line_span, unified_diff
from evals.next_edit import judge


def hunk(path: str, old: str, new: str) -> Hunk:
    return Hunk(path, unified_diff(path, old, new), 0.0, False)


# ---- bindings ----------------------------------------------------------------------------------------------

RS = """fn parse(line: &str) -> usize {
    let line = line.trim();
    line.len()
}

fn count(text: &str) -> usize {
    let mut line = 0;
    line += text.len();
    line
}
"""


def test_a_let_binds_after_its_statement_and_only_in_its_function() -> None:
    b = bindings.of(RS, "src/lib.rs")
    assert b is not None
    assert [(s.row, s.scope) for s in b.sites("line")] == [(0, (0, 3)), (1, (0, 3)), (6, (5, 9))]
    rhs = RS.split("\n")[1].rindex("line")
    # ``let line = line.trim()``: the right side is the parameter, the rows after it the new line
    assert [s.row for s in b.visible("line", 1, rhs)] == [0]
    assert [s.row for s in b.visible("line", 2)] == [0, 1] and [s.row for s in b.visible("line", 7)] == [6]


def test_keyword_names_are_labels_and_template_substitutions_are_code() -> None:
    py = "def f(maxsize):\n    return g(maxsize=maxsize)\n"
    b = bindings.of(py, "a.py")
    assert b is not None and b.labels(1) == frozenset({13})
    assert b.refs("maxsize") == [(1, 21)]  # the keyword is not a use
    js = "function serve(port) {\n  log(`on ${port}`);\n}\n"
    jb = bindings.of(js, "a.js")
    assert jb is not None and jb.refs("port") == [(1, 12)]
    assert bindings.of("x = 1\n", "notes.txt") is None  # no grammar: no bindings


# ---- renames that follow the binding -----------------------------------------------------------------------


def _proposals(before: str, after: str, path: str, cursor: int) -> list[propose.Proposal]:
    h = [hunk(path, before, after)]
    ra, rb = line_span(after, cursor, EDIT_REGION_ABOVE, EDIT_REGION_BELOW)
    return propose.propose(after, path, cursor, ra, rb, h)


def test_a_renamed_parameter_carries_to_the_uses_its_binding_left_and_not_to_a_shadow() -> None:
    after = RS.replace("fn parse(line", "fn parse(source")
    props = [p for p in _proposals(RS, after, "src/lib.rs", after.index("source") + 6) if p.origin == "carry"]
    assert len(props) == 1 and not props[0].jump
    region = after[props[0].start:props[0].end]
    # the shadowing ``let line`` keeps its name; only the use of the parameter follows; count() is untouched
    assert props[0].new == region.replace("let line = line.trim()", "let line = source.trim()")
    assert props[0].feats["b_bound_decl"] == 1.0 and props[0].feats["b_follows"] == 1.0


def test_a_one_letter_receiver_renamed_is_carried_through_its_method_only() -> None:
    before = ("type S struct{ n int }\n\nfunc (s *S) A() int {\n\treturn s.n\n}\n\n"
              "func (s *S) B() int {\n\treturn s.n\n}\n")
    after = before.replace("func (s *S) A()", "func (srv *S) A()", 1)
    carry = chg = changes([hunk("s.go", before, after)])
    assert [(c.old, c.new) for c in chg] == [("s", "srv")]  # kept: a rename, one letter or not
    props = [p for p in _proposals(before, after, "s.go", after.index("srv") + 3) if p.origin == "carry"]
    assert [p.new.count("srv.n") for p in props] == [1] and props[0].new.count("s.n") == 1  # B keeps its own s
    assert carry


def test_a_rename_at_a_use_carries_to_the_declaration() -> None:
    before = "def run(job):\n    elapsed = job.time()\n    print(job.name, elapsed)\n"
    after = before.replace("job.name, elapsed", "job.name, duration")
    skip = written_rows([hunk("a.py", before, after)], "a.py")
    c = changes([hunk("a.py", before, after)])[0]
    k = propose.follow(after, "a.py", c, skip)
    assert k is not None and k.kind == "use" and k.rows == frozenset({1})
    props = [p for p in _proposals(before, after, "a.py", after.index("duration") + 8) if not p.jump]
    assert any("    duration = job.time()" in p.new for p in props)


def test_a_renamed_name_used_as_a_shorthand_field_keeps_the_field() -> None:
    ts = "function serve(port) {\n  const opts = {port, host: 'x'};\n  return {port: 1, opts};\n}\n"
    after = ts.replace("serve(port)", "serve(listenPort)")
    props = [p for p in _proposals(ts, after, "a.ts", after.index("listenPort") + 10) if p.origin == "carry"]
    assert len(props) == 1  # ``{port: 1}`` is a key, not a use: untouched
    assert props[0].new.count("{port: listenPort, host: 'x'}") == 1 and props[0].new.count("{port: 1, opts}") == 1
    rs = "fn make(name: String) -> Config {\n    Config { name }\n}\n"
    after = rs.replace("make(name", "make(label")
    props = [p for p in _proposals(rs, after, "a.rs", after.index("label") + 5) if p.origin == "carry"]
    assert len(props) == 1 and "Config { name: label }" in props[0].new


def test_a_hunk_of_several_renames_follows_each_binding_together() -> None:
    js = ("test('q', async t => {\n\tconst searchParams = new URLSearchParams(arrayParams);\n"
          "\tt.is(await ky(url, {searchParams: arrayParams}).text(), 'x');\n"
          "\tt.is(await ky(url, {searchParams}).text(), 'x');\n});\n")
    after = js.replace("const searchParams = new URLSearchParams(arrayParams)",
                       "const searchParameters = new URLSearchParams(arrayParameters)")
    props = [p for p in _proposals(js, after, "a.js", after.index("arrayParameters)") + 16) if p.origin == "carry"]
    joint = [p for p in props if "arrayParameters})" in p.new and "searchParameters}" in p.new]
    assert len(joint) == 1
    assert "{searchParams: arrayParameters}" in joint[0].new and "{searchParams: searchParameters}" in joint[0].new


# ---- started edits completed -------------------------------------------------------------------------------


def _complete(before: str, after: str, path: str) -> list[complete_edit.Rewrite]:
    h = [hunk(path, before, after)]
    return complete_edit.stored_parameter(after, path, h)


def test_a_new_parameter_is_stored_like_the_one_before_it() -> None:
    before = ("class C:\n    def __init__(self, url, timeout=5):\n        self.url = url\n"
              "        self.timeout = timeout\n        self._s = None\n")
    after = before.replace("timeout=5)", "timeout=5, retries=3)")
    assert _complete(before, after, "a.py") == [(3, 1, ["        self.timeout = timeout", "        self.retries = retries"])]
    used = after + "        print(retries)\n"  # the body uses it already: nothing was left to do
    assert _complete(before + "        print(retries)\n", used, "a.py") == []


def test_a_go_literal_keeps_its_value_column_and_rust_follows_the_field_order() -> None:
    go_before = ("type C struct {\n\turl   string\n\ttoken string\n\twait  int\n}\n\n"
                 "func New(url, token string) *C {\n\treturn &C{\n\t\turl:   url,\n\t\ttoken: token,\n\t}\n}\n")
    go_after = go_before.replace("func New(url, token string)", "func New(url, token string, wait int)")
    assert _complete(go_before, go_after, "c.go") == [(9, 1, ["\t\ttoken: token,", "\t\twait:  wait,"])]
    rs_before = ("struct Q {\n    name: String,\n    items: Vec<u8>,\n    cap: usize,\n}\n\nimpl Q {\n"
                 "    fn new(name: String) -> Self {\n        Self {\n            name,\n            items: Vec::new(),\n"
                 "        }\n    }\n}\n")
    rs_after = rs_before.replace("fn new(name: String)", "fn new(name: String, cap: usize)")
    assert _complete(rs_before, rs_after, "q.rs") == [(10, 1, ["            items: Vec::new(),", "            cap,"])]


def test_a_pasted_copy_is_adapted_to_its_changed_word() -> None:
    base = "    def width(self):\n        return self._width\n"
    pasted = base + "\n" + base
    changed = base + "\n" + base.replace("def width", "def height")
    h = [hunk("a.py", base, pasted), hunk("a.py", pasted, changed)]
    assert complete_edit.adapted_copy(changed, "a.py", h) == [
        (2, 3, ["", "    def height(self):", "        return self._height"])]
    assert complete_edit.adapted_copy(changed, "a.py", h[1:]) == []  # no paste before the change


# ---- synthetic sessions ------------------------------------------------------------------------------------

FILE = '''import json


def load(path):
    raw = open(path).read()
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError(path)
    data.setdefault("theme", "light")
    return data


def other(rows):
    data = []
    for r in rows:
        data.append(r)
    return data


class Client:
    def __init__(self, url, timeout, retries):
        self.url = url
        self.timeout = timeout
        self.retries = retries


NAME_KEY = "name"
EMAIL_KEY = "email"
'''


def _src() -> dict:
    return {"id": "r:1:a.py:1", "path": "a.py", "files": {"a.py": FILE}, "language": "python",
            "meta": {"repo": "r"}}


def _reached(case: dict) -> bool:
    text = case["files"][case["path"]]
    cursor = case["cursor"]["offset"]
    ra, rb = line_span(text, cursor, EDIT_REGION_ABOVE, EDIT_REGION_BELOW)
    hist = [Hunk(case["path"], d, float(i), False) for i, d in enumerate(case["history"])]
    return any(judge(case, p.start, p.end, p.new)["exact"]
               for p in propose.propose(text, case["path"], cursor, ra, rb, hist) if not p.jump)


def test_rename_sessions_have_truths_the_binding_reaches() -> None:
    made = synth_renames.from_case(_src(), random.Random(3), ["payload", "items", "config"])
    kinds = {c["meta"]["synthetic"] for c in made}
    assert {"rename-declaration", "rename-use"} <= kinds
    for c in made:
        assert c["meta"]["repo"] == "r" and len(c["history"]) == 1
    due = [c for c in made if c["expected"]]
    assert due and all(_reached(c) for c in due)
    assert all(c["expected"] is None for c in made if c["meta"]["synthetic"] == "rename-done")


def test_started_edit_sessions_are_real_code_taken_out() -> None:
    store = synth_completions.stored_parameter(_src(), random.Random(0))
    assert [c["meta"]["synthetic"] for c in store] == ["complete-store"]
    kept = [s for s in ("self.timeout = timeout", "self.retries = retries") if s in store[0]["files"]["a.py"]]
    assert len(kept) == 1 and _reached(store[0])  # one store taken out, its parameter typed again
    copy = synth_completions.adapted_copy(_src(), random.Random(0))
    assert [c["meta"]["synthetic"] for c in copy] == ["complete-copy"] and _reached(copy[0])
    assert len(copy[0]["history"]) == 2  # the paste, then the one word changed


def test_a_new_member_is_listed_after_the_member_before_it() -> None:
    before = ('const (\n\tIdle State = iota\n\tRunning\n\tStopped\n)\n\nfunc (s State) String() string {\n'
              '\tswitch s {\n\tcase Idle:\n\t\treturn "idle"\n\tcase Running:\n\t\treturn "running"\n'
              '\tcase Stopped:\n\t\treturn "stopped"\n\t}\n\treturn ""\n}\n')
    after = before.replace("\tRunning\n", "\tRunning\n\tDraining\n", 1)
    h = [hunk("s.go", before, after)]
    assert complete_edit.member_entry(after, "s.go", h) == [
        (12, 1, ['\t\treturn "running"', "\tcase Draining:", '\t\treturn "draining"'])]
    locals_ = before.replace("Idle", "idle").replace("Running", "running").replace("Stopped", "stopped")
    assert complete_edit.member_entry(locals_.replace("\trunning\n", "\trunning\n\tdraining\n", 1), "s.go",
                                      [hunk("s.go", locals_, locals_.replace("\trunning\n", "\trunning\n\tdraining\n", 1))]) == []
