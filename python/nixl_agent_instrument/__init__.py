"""nixl-agent for Python serving processes.

Zero code: ``nixl-agent-instrument python -m sglang.launch_server ...``
records every ``nixl_agent.register_memory`` / ``deregister_memory`` call
the program makes on its own NIXL agent and serves /metrics, /livez,
/readyz and /v1/status from nixl-agent's own threads (no GIL).

For code that wants to say what it registers::

    import nixl_agent_instrument as nai
    nai.instrument()                      # when not started by the launcher
    with nai.group("kv_cache", kind="kv"):
        descs = agent.register_memory(addrs, "VRAM")

Settings are environment variables (README "Python serving processes").
"""

import contextlib

from . import _native, _site
from ._native import RegistrationRefused

__all__ = [
    "RegistrationRefused",
    "address",
    "group",
    "instrument",
    "metrics",
    "status",
]
__version__ = _native.VERSION


def instrument():
    """Wraps NIXL's ``nixl_agent`` (now if imported, else when it is).

    Raises ValueError naming the setting when a ``NIXL_AGENT_*`` variable is
    unusable."""
    err = _native.settings_error()
    if err is not None:
        raise ValueError(f"nixl-agent-instrument: {err}")
    from . import _hook

    _hook.install()


@contextlib.contextmanager
def group(name, kind=None):
    """Records the ``register_memory`` calls made inside the block under
    group ``name`` (and ``kind``: kv, aux, state or a word of your own;
    derived from the name when omitted)."""
    if kind is None:
        _, kind = _native.name_call("", name, name, None)
    token = _site.explicit.set((name, kind))
    try:
        yield
    finally:
        _site.explicit.reset(token)


def address():
    """``host:port`` where /metrics is served, or None (not started yet,
    ``NIXL_AGENT_LISTEN=off``, or the port was taken)."""
    return _native.address()


def metrics():
    """The metrics in Prometheus text format, or None before the first
    NIXL agent is created."""
    return _native.metrics_text()


def status():
    """What /v1/status says, as a dict, or None before the first agent."""
    import json

    text = _native.status_json()
    return None if text is None else json.loads(text)
