"""Imported by ``nixl_agent_instrument.pth`` at interpreter start-up when
NIXL_AGENT_INSTRUMENT=1: instrumentation for images whose entrypoint
cannot change. Never breaks the interpreter."""

import sys

try:
    from . import _boot

    _boot.boot()
except Exception as e:  # pragma: no cover
    sys.stderr.write(f"nixl-agent-instrument: not instrumenting: {type(e).__name__}: {e}\n")
