"""Start-up of an instrumented interpreter (from the launcher's
sitecustomize or the ``nixl_agent_instrument.pth`` file): installs the
import hook, a pure-Python finder. The extension is loaded, and the
settings checked (an unusable one is said once on stderr, and then nothing
is wrapped), only when the program imports NIXL."""


def boot():
    from . import _hook

    _hook.install()
