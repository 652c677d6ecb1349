"""`edit-server bench context`: context-build latency on a synthetic repository (made in a temp dir).

The repository: ``--files`` Python modules that import each other plus one ``--lines``-line file,
committed in several commits with git (for co-change). Reports warm build times (median / p95 / max)
for FIM and edit at a ``--budget`` token budget, and per keystroke: didChange (``update_document``),
the incremental reparse, the build after it, and the secret redaction of the edited line (uncached).
The builder's options are the server's for the settings (``build_settings``: ``--budget`` is
``contextBudget``, ``--set`` any other key; ``serving/contexts.context_options``).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    from edit_server.cli.flags import settings_flags
    from edit_server.core.settings import MAX_CONTEXT_BUDGET

    p = sub.add_parser("context", help="context builder latency on a synthetic repo")
    p.add_argument("--files", type=int, default=2000)
    p.add_argument("--lines", type=int, default=10_000)
    p.add_argument("--budget", type=int, default=MAX_CONTEXT_BUDGET,
                   help="prompt tokens: the contextBudget setting (default: %(default)s)")
    settings_flags(p, model=False)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--tokenizer", choices=["byte", "none"], default="byte",
                   help="byte: the byte-level tokenizer (exact counts); none: estimates")
    p.add_argument("--gguf", type=Path, default=None,
                   help="count with the tokenizer stored in this GGUF file (e.g. the SmolLM2 base)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def _module(i: int, n: int) -> str:
    imports = "".join(f"from pkg{j % 20}.mod{j} import func_{j}\n" for j in (i * 7 % n, i * 13 % n))
    body = "".join(f"\n\ndef func_{i}_{k}(x, y):\n    z = x + y * {k}\n    return helper_{k % 50}(z)\n"
                   for k in range(4))
    return f'"""Module {i}."""\n{imports}\n\ndef func_{i}(a):\n    return a + {i}\n\n\nclass Thing{i}:\n' \
           f"    def method(self, v):\n        return func_{i}(v)\n{body}"


def make_repo(root: Path, files: int, lines: int) -> Path:
    import git

    repo = git.Repo.init(root)
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "bench")
        cw.set_value("user", "email", "bench@example.com")
    paths = []
    for i in range(files):
        p = root / f"pkg{i % 20}" / f"mod{i}.py"
        p.parent.mkdir(exist_ok=True)
        p.write_text(_module(i, files))
        paths.append(str(p.relative_to(root)))
    (root / ".gitignore").write_text("build/\n*.log\n")
    big, out, k = root / "big.py", ["import pkg0.mod0\nfrom pkg1.mod1 import func_1\n\n"], 0
    while sum(s.count("\n") for s in out) < lines:
        out.append(f"\n\ndef big_{k}(items, limit):\n    total = 0\n    for it in items:\n"
                   f"        if it > limit:\n            total += func_{k % files}(it)\n"
                   f"        else:\n            total -= helper_{k % 50}(it)\n    return total\n")
        k += 1
    big.write_text("".join(out))
    repo.index.add(paths + [".gitignore", "big.py"])
    repo.index.commit("initial")
    for c in range(20):  # small commits: co-change signal
        touched = [paths[(c * 31 + j) % files] for j in range(3)] + ["big.py"]
        for t in touched:
            with open(root / t, "a") as f:
                f.write(f"\n# change {c}\n")
        repo.index.add(touched)
        repo.index.commit(f"change {c}")
    return big


def _stats(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {"median_ms": statistics.median(xs), "p95_ms": xs[int(0.95 * (len(xs) - 1))], "max_ms": xs[-1]}


def run(args: argparse.Namespace) -> int:
    from edit_server.cli.flags import settings_from_args
    from edit_server.context.builder import ContextBuilder
    from edit_server.context.secrets import redact_line
    from edit_server.serving.contexts import context_options
    from engine.tokenizer import Tokenizer

    try:
        settings = settings_from_args(args, {"contextBudget": args.budget})
    except ValueError as e:
        print(f"edit-server bench context: {e}", file=sys.stderr)
        return 2

    tok = Tokenizer.byte_level() if args.tokenizer == "byte" else None
    if args.gguf is not None:
        from gguf import GGUFReader

        from engine.loading.gguf_file import gguf_tokenizer

        tok, args.tokenizer = gguf_tokenizer(GGUFReader(args.gguf), args.gguf), f"gguf:{args.gguf.name}"
    results: dict[str, object] = {"machine": f"{platform.machine()} {platform.processor() or ''} "
                                             f"{platform.system()} python {platform.python_version()}",
                                  "files": args.files, "lines": args.lines, "budget": args.budget,
                                  "tokenizer": args.tokenizer}
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        t0 = time.perf_counter()
        big = make_repo(root, args.files, args.lines)
        results["repo_setup_s"] = time.perf_counter() - t0
        text = big.read_text()
        t0 = time.perf_counter()
        b = ContextBuilder([root], tok, context_options(settings, None))  # the server's, for these settings
        b.update_document(str(big), text, 1)
        b.wait_idle(600)
        results["index_s"] = time.perf_counter() - t0
        results["symbols_files"] = b.index.files_indexed
        offset = text.index("def big_", len(text) // 2) + 30
        rows: dict[str, list[float]] = {"fim": [], "edit": []}
        b.build_fim(str(big), text, offset, [])  # warm caches
        b.build_edit(str(big), text, offset, [])
        for _ in range(args.runs):
            t = time.perf_counter()
            r = b.build_fim(str(big), text, offset, [])
            rows["fim"].append((time.perf_counter() - t) * 1e3)
            t = time.perf_counter()
            b.build_edit(str(big), text, offset, [])
            rows["edit"].append((time.perf_counter() - t) * 1e3)
        results["fim_tokens"] = r.report.total
        results["counting"] = r.report.counting
        results["sections"] = len(r.prompt.sections)
        for i in range(args.runs):  # type "x", then delete it: didChange, lazy reparse, build
            if i % 2 == 0:
                new, edit, cursor = text[:offset] + "x" + text[offset:], (offset, "", "x"), offset + 1
            else:
                new, edit, cursor = text[:offset] + text[offset + 1:], (offset, "x", ""), offset
            t0 = time.perf_counter()
            b.update_document(str(big), new, 100 + i, [edit])
            t1 = time.perf_counter()
            _ = b.docs[str(big)].tree  # the incremental reparse (else done inside the build)
            t2 = time.perf_counter()
            b.build_fim(str(big), new, cursor, [])
            t3 = time.perf_counter()
            doc = b.docs[str(big)]
            line = doc.lines[doc.line_of(cursor)]
            t4 = time.perf_counter()
            redact_line(line, str(big), b.options.max_line_chars)  # what a keystroke pays (the build: cached)
            t5 = time.perf_counter()
            for k, v in (("didChange", t1 - t0), ("reparse", t2 - t1), ("build after edit", t3 - t2),
                         ("keystroke total", t3 - t0), ("redact edited line", t5 - t4)):
                rows.setdefault(k, []).append(v * 1e3)
            text = new
        b.close()
    results["timings"] = {k: _stats(v) for k, v in rows.items()}
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    print(f"context builder: {args.files} files + a {args.lines}-line file, budget {args.budget}, "
          f"tokenizer {args.tokenizer} (counting: {results['counting']}); index {results['index_s']:.1f} s ({results['symbols_files']} files)")
    print(f"prompt: {results['fim_tokens']} tokens, {results['sections']} sections; {results['machine']}")
    print(f"{'step':<18}{'median ms':>10}{'p95 ms':>10}{'max ms':>10}")
    for k, s in results["timings"].items():  # type: ignore[union-attr]
        print(f"{k:<18}{s['median_ms']:>10.2f}{s['p95_ms']:>10.2f}{s['max_ms']:>10.2f}")
    return 0
