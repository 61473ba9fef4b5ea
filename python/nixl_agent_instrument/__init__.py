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

Settings are environment variables (docs/python.md).
"""

# The extension is loaded on first use, not on import: the launcher's
# start-up hook imports this package in every interpreter it starts.

__all__ = [
    "RegistrationRefused",
    "address",
    "group",
    "instrument",
    "metrics",
    "shutdown",
    "status",
]


def __getattr__(name):
    if name in ("RegistrationRefused", "__version__"):
        from . import _native

        return _native.RegistrationRefused if name == "RegistrationRefused" else _native.VERSION
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def instrument():
    """Wraps NIXL's ``nixl_agent`` (now if imported, else when it is).

    Raises ValueError naming the setting when a ``NIXL_AGENT_*`` variable is
    unusable."""
    from . import _hook

    err = _hook._settings_error()
    if err is not None:
        raise ValueError(f"nixl-agent-instrument: {err}")
    _hook._load()

    _hook.install()


class group:
    """Records the ``register_memory`` calls made inside the block under
    group ``name`` (and ``kind``: kv, aux, state or a word of your own;
    derived from the name when omitted). Raises ValueError naming the word
    when ``name`` (ASCII letters, digits, ``_ - .``) or ``kind`` (lowercase
    letters, digits, ``_``) cannot be a label. A context manager; nests, and one
    instance may be entered by several threads or asyncio tasks at once:
    each entry keeps its own token in its own context."""

    def __init__(self, name, kind=None):
        import contextvars

        from . import _native

        for what, v in (("name", name), ("kind", kind)):
            if v is not None and not isinstance(v, str):
                raise TypeError(f"nixl_agent_instrument.group: {what} must be a str, not {type(v).__name__}")
            if v is not None:
                v.encode("utf-8")  # lone surrogates: UnicodeEncodeError here, not in NIXL's call
        # The kind derived from the name when not given; a name or kind
        # that cannot be a label is refused here (ValueError), in the
        # caller's frame, rather than recorded as `other` without a word.
        self._chosen = _native.explicit_group(name, kind)
        # The tokens of this instance's open entries, per context (thread,
        # task): an exit resets the token its own entry set.
        self._entries = contextvars.ContextVar(f"nixl_agent_instrument.group:{name}", default=())

    def __enter__(self):
        from . import _site

        token = _site.explicit.set(self._chosen)
        self._entries.set(self._entries.get() + (token,))
        return self

    def __exit__(self, *exc):
        from . import _site

        entries = self._entries.get()
        self._entries.set(entries[:-1])
        _site.explicit.reset(entries[-1])
        return False


def address():
    """``host:port`` where /metrics is served, or None (not started yet,
    ``NIXL_AGENT_LISTEN=off``, or the port was taken)."""
    from . import _native

    return _native.address()


def metrics():
    """The metrics in Prometheus text format, or None before the first
    NIXL agent is created."""
    from . import _native

    return _native.metrics_text()


def shutdown():
    """Ends this process's rank: its file in the pod directory gets an end
    record (an exit, not a death: the pod keeps serving what it counted)
    and its slot is freed; then its traces are flushed. Runs at interpreter
    exit; a process that ends with ``os._exit`` (as multiprocessing's fork
    children do) may call it first, else the pod reads it as died."""
    from . import _native

    _native.shutdown()


def status():
    """This process's own recording, as a dict (what /v1/status carries as
    ``ranks[0]["status"]``), or None before the first agent."""
    import json

    from . import _native

    text = _native.status_json()
    return None if text is None else json.loads(text)
