"""The one start-up of an instrumented interpreter, :func:`start`. Every
way in delegates to it:

- the launcher (``nixl-agent-instrument COMMAND``, ``python -m
  nixl_agent_instrument``) puts ``_bootstrap`` on PYTHONPATH and execs the
  command, whose interpreter imports that ``sitecustomize``, which calls
  ``start(launched=True)``;
- ``nixl_agent_instrument.pth`` (images whose entrypoint cannot change)
  checks NIXL_AGENT_INSTRUMENT itself, cheaply, and only when it is set to
  anything but off calls ``start(launched=False)``.

``start`` reads NIXL_AGENT_INSTRUMENT and installs the import hook, a
pure-Python finder. The extension is loaded, and the other settings checked
(an unusable one is said once on stderr, and then nothing is wrapped), only
when the program imports NIXL. ``nixl_agent_instrument.instrument()`` is the
explicit API for a program that starts it itself."""

import os
import sys

KEY = "NIXL_AGENT_INSTRUMENT"
# The words the Rust side accepts too (instrument::INSTRUMENT_WORDS).
ON = ("1", "on", "true")
OFF = ("0", "off", "false")

_said = False


def setting():
    """``on``, ``off``, ``unset``, or ``None`` for a value that is none of
    those (said once on stderr, naming the key, the value and what is
    allowed: never taken for on or off silently)."""
    global _said
    v = os.environ.get(KEY, "").strip().lower()
    if v in ON:
        return "on"
    if v in OFF:
        return "off"
    if not v:
        return "unset"
    if not _said:
        _said = True
        allowed = ", ".join(ON + OFF)
        sys.stderr.write(f"nixl-agent-instrument: not instrumenting: config key `{KEY}`: `{v}` is not one of {allowed}\n")
    return None


def _the_launcher():
    """This interpreter runs ``nixl-agent-instrument`` itself, which execs
    the command at once: the command's interpreter boots (and says) for it."""
    argv = getattr(sys, "orig_argv", None) or sys.argv
    return os.path.basename(argv[1] if len(argv) > 1 else "") == "nixl-agent-instrument" or argv[1:3] == [
        "-m",
        "nixl_agent_instrument",
    ]


def start(launched):
    """Installs the hook: under the launcher (``launched``) unless switched
    off, without it (the .pth file) only when switched on. Never breaks the
    interpreter: a failure is one line on stderr and no instrumentation."""
    try:
        if not launched and _the_launcher():
            return
        s = setting()
        if s == "on" or (launched and s == "unset"):
            from . import _hook

            _hook.install()
    except Exception as e:  # pragma: no cover - the package is broken
        sys.stderr.write(f"nixl-agent-instrument: not instrumenting: {type(e).__name__}: {e}\n")
