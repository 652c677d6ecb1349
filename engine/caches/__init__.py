"""Caches: the exact prefix KV cache (`prefix`), the merged default model on disk (`merged`)."""
