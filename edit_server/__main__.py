"""`python -m edit_server` = the `edit-server` command."""

import sys

from edit_server.cli import main

sys.exit(main())
