"""Context builder: workspace + document + cursor + edit history → prompt sections (no pygls here).

``ContextBuilder(roots, tokenizer, options)``; ``update_document`` / ``close_document`` from the
server's didOpen/didChange/didClose; ``build_fim`` / ``build_edit`` from a worker thread.
"""

from edit_server.context.budget import Shares, TokenCounter
from edit_server.context.builder import BuildReport, ContextBuilder, ContextOptions, EditBuild, FimBuild
from edit_server.context.exclusions import Exclusions, is_secret_line, redact

__all__ = ["BuildReport", "ContextBuilder", "ContextOptions", "EditBuild", "Exclusions", "FimBuild",
           "Shares", "TokenCounter", "is_secret_line", "redact"]
