"""Settings ``remote.*`` → the remote backend (engine/remote/), for the engine worker.

With ``remote.url`` set the worker's engine is a :class:`~engine.remote.RemoteEngine`: the context is
still built here (exclusions and secret redaction apply before anything is sent), the gate and the
feedback store stay here, and only the built prompt travels. ``fallback: "local"`` loads the local model
(``settings.model``) on the first remote failure, not before — no model in memory while the remote
works. The key comes from ``remote.apiKey`` or the variable named by ``remote.apiKeyEnv``; it is sent
in the ``Authorization`` header only and never logged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from edit_server.core.settings import Remote, Settings
from engine import options
from engine.api import EngineAPI
from engine.remote import RemoteConfig, RemoteEngine

log = logging.getLogger(__name__)


def api_key(remote: Remote) -> str:
    if remote.api_key:
        return remote.api_key
    if remote.api_key_env:
        key = options.named(remote.api_key_env)
        if not key:
            log.warning("remote.apiKeyEnv: %s is not set; requests go without a key", remote.api_key_env)
        return key
    return ""


def config(remote: Remote) -> RemoteConfig:
    return RemoteConfig(url=remote.url, kind=remote.kind, api_key=api_key(remote), model=remote.model,
                        fim_format=remote.fim_format, connect_timeout_s=remote.connect_timeout_ms / 1000,
                        timeout_s=remote.timeout_ms / 1000, retry_s=remote.retry_s,
                        context_tokens=remote.context_tokens)


def remote_engine(settings: Settings, local: Callable[[], EngineAPI]) -> RemoteEngine:
    """The remote engine for ``settings.remote``; ``local`` loads the fallback model (called at most
    once, on the worker thread, at the first failure) when ``remote.fallback`` is "local"."""
    r = settings.remote
    return RemoteEngine(config(r), fallback=local if r.fallback == "local" else None)


def load_key(settings: Settings) -> tuple[object, ...]:
    """What makes the worker load a different engine: the model, the device and the remote backend."""
    return settings.model, settings.device, settings.remote
