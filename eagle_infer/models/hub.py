"""The Hugging Face hub, asked once: whether it can be reached now, so that an id that is not cached fails at once
with the line that says to give a local directory, rather than after the hub client's retries (32 s offline)."""
from __future__ import annotations

import os
import socket
from urllib.parse import urlparse

import huggingface_hub.constants

PROBE_TIMEOUT_S = 5.0
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def unreachable_reason() -> str | None:
    """Why the hub cannot be reached now: HF_HUB_OFFLINE set, or one TCP connection to its endpoint failing within
    PROBE_TIMEOUT_S; None when it answered (or a proxy is configured, which only the hub client can go through)."""
    if huggingface_hub.constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return "HF_HUB_OFFLINE is set"
    if any(os.environ.get(v) for v in PROXY_VARIABLES):
        return None
    url = urlparse(huggingface_hub.constants.ENDPOINT)
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S).close()
    except OSError as err:
        return f"{host}:{port} cannot be reached: {err.strerror or type(err).__name__}"
    return None
