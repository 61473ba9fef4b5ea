"""Imported by ``nixl_agent_instrument.pth`` at interpreter start-up when
NIXL_AGENT_INSTRUMENT is set to anything but off: instrumentation for
images whose entrypoint cannot change when it is on, one line on stderr
when it is not a word it takes. Never breaks the interpreter."""

import sys

try:
    from . import _boot

    _boot.boot(launched=False)
except Exception as e:  # pragma: no cover
    sys.stderr.write(f"nixl-agent-instrument: not instrumenting: {type(e).__name__}: {e}\n")
