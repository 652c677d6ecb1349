"""Context builder: workspace + document + cursor + edit history → prompt sections (no pygls here).

Use::

    b = open_builder(roots, tokenizer, ContextOptions.from_settings(settings, budget))  # never raises
    b.degraded                                      # None, or why the context is limited (report it)
    b.update_options(exclude=("**/*.sql",))         # workspace/didChangeConfiguration
    b.update_document(path, text, version, edits)   # didOpen / didChange (cheap: records tree edits)
    b.close_document(path)                          # didClose
    fim = b.build_fim(path, text, offset, history.recent(n), budget=ctx - canvas)   # worker thread
    edit = b.build_edit(path, text, offset, history.recent(n), budget=...)          # worker thread

* ``edits``: LSP-style, applied in order — ``(start_offset, old_text, new_text)`` in characters of the
  text before that edit, or tree-sitter's ``(start_byte, old_end_byte, new_end_byte, start_point,
  old_end_point, new_end_point)``. Omitted: inferred from the texts (common prefix/suffix). Either way
  the tree is updated with ``tree.edit`` and reparsed incrementally, lazily, by the next build.
* Threads: ``update_document`` is safe on the event loop; ``build_*`` take a few ms (more right after
  an edit: the reparse) — call them from the worker thread. Indexing and git run in the builder's own
  background thread (``wait_idle`` for tests / CLI).
* Options: ``ContextOptions.from_settings`` (the one settings struct, core/settings.py; no other defaults).
* Budget: tokens of ``render_fim``/``render_edit`` ids, a build's ``budget`` or ``options.budget`` (the
  server's: serving/contexts.auto_budget); ``report.total`` is exact with a tokenizer (rendered and trimmed if the tokenizer is not additive).
* ``report.blocked`` set: the current file is excluded or too large, or the editable region holds a
  secret — the prompt is empty and no suggestion should be made.
* Secrets never reach a prompt: every section is redacted (``secrets.py``, detect-secrets + supplements),
  lines are capped at ``max_line_chars``; git never runs a repository-configured program (``safegit.py``).
* ``history``: any objects with ``.path .diff .timestamp .open`` (``edit_server.core.history.Hunk``).
* ``edit-server context FILE:LINE:COL`` shows what would be sent; ``edit-server bench context`` times it.
"""

from edit_server.context.budget import Shares, TokenCounter
from edit_server.context.builder import ContextBuilder, open_builder
from edit_server.context.exclusions import Exclusions
from edit_server.context.options import BuildReport, ContextOptions, EditBuilt, FimBuild
from edit_server.context.secrets import is_secret_line, redact

__all__ = ["BuildReport", "ContextBuilder", "ContextOptions", "EditBuilt", "Exclusions", "FimBuild",
           "Shares", "TokenCounter", "is_secret_line", "open_builder", "redact"]
