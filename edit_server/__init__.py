"""edit-server: LSP (and Zed HTTP) front end for the in-process diffusion engine."""

__version__ = "0.1.0"
