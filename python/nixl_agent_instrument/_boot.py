"""Start-up of an instrumented interpreter (from the launcher's
sitecustomize or the ``nixl_agent_instrument.pth`` file): install the hook
unless the settings are unusable, in which case say so once on stderr and
leave the program alone."""

import sys


def boot():
    from . import _native

    err = _native.settings_error()
    if err is not None:
        sys.stderr.write(f"nixl-agent-instrument: not instrumenting: {err}\n")
        return
    from . import _hook

    _hook.install()
