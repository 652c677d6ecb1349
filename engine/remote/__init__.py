"""The remote backend: ``EngineAPI`` over HTTP (another ``edit-server http``, an OpenAI-compatible
FIM server such as vLLM / TGI, or SGLang), with timeouts, forwarded cancellation and a local fallback.

Only prompts the caller already built reach this package: the server's context builder (exclusions,
secret redaction), gate and feedback stay local. ``transport.py`` is the one engine module that does
network I/O (aiohttp's client, on its own event-loop thread).
"""

from engine.remote.engine import RemoteConfig, RemoteEngine, insecure
from engine.remote.transport import Aborted, RemoteError, Transport, redacted_url

__all__ = ["Aborted", "RemoteConfig", "RemoteEngine", "RemoteError", "Transport", "insecure", "redacted_url"]
