"""`python -m edit_server.cli` = the `edit-server` command (the LSP client starts the server so)."""

import sys

from edit_server.cli import main

sys.exit(main())
