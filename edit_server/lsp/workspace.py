"""The workspace as the editor changes it: folders added / removed (``workspace/didChangeWorkspaceFolders``;
pygls advertises change notifications for them) and files created / changed / deleted on disk
(``workspace/didChangeWatchedFiles``, whose watcher the server registers once the client is initialized
when the client allows dynamic registration: a branch switch, a formatter or another tool re-reads the
context of the files it touched instead of serving their old definitions)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer

from edit_server.context.options import changed_roots
from edit_server.lsp.convert import uri_path

if TYPE_CHECKING:
    from edit_server.serving.pipeline import Pipeline

log = logging.getLogger(__name__)
WATCHER_ID = "edit-server-watched-files"


class Host(Protocol):
    """What these handlers need of the server (``lsp/server.py``'s ``EditServer`` is one)."""

    roots: list[Path]

    @property
    def pipeline(self) -> Pipeline | None: ...


def watches_files(caps: lsp.ClientCapabilities | None) -> bool:
    """The client registers file watchers on request (VS Code, Neovim ≥ 0.10, Zed)."""
    ws = caps.workspace if caps else None
    watched = ws.did_change_watched_files if ws else None
    return bool(watched and watched.dynamic_registration)


def register(server: LanguageServer) -> None:
    """The handlers, on ``server`` (a pygls server that is also a :class:`Host`)."""

    @server.feature(lsp.INITIALIZED)
    async def initialized(ls: LanguageServer, _params: Any) -> None:
        if not watches_files(ls.protocol.client_capabilities):
            return
        try:
            await ls.client_register_capability_async(lsp.RegistrationParams(registrations=[lsp.Registration(
                id=WATCHER_ID, method=lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                register_options=lsp.DidChangeWatchedFilesRegistrationOptions(
                    watchers=[lsp.FileSystemWatcher(glob_pattern="**/*")]))]))
        except Exception as e:  # noqa: BLE001 - the client refused: context is read as before
            log.warning("file watcher not registered: %s", e)

    @server.feature(lsp.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    def did_change_workspace_folders(ls: Host, params: lsp.DidChangeWorkspaceFoldersParams) -> None:
        """Folders added to / removed from the editor's workspace: context follows them (a removed
        folder is not read again, its suggestions are not served again)."""
        removed = [p for f in params.event.removed or () if (p := uri_path(f.uri))]
        ls.roots = changed_roots(ls.roots, [uri_path(f.uri) for f in params.event.added or ()], removed)
        if ls.pipeline is not None:
            ls.pipeline.set_roots(ls.roots, [Path(p) for p in removed])

    @server.feature(lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def did_change_watched_files(ls: Host, params: lsp.DidChangeWatchedFilesParams) -> None:
        changes = [(p, c.type == lsp.FileChangeType.Deleted) for c in params.changes if (p := uri_path(c.uri))]
        if ls.pipeline is not None and changes:
            ls.pipeline.files_changed(changes)
