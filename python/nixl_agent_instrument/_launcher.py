"""``nixl-agent-instrument <command...>``: runs the command with NIXL's
Python API instrumented, in the manner of ``opentelemetry-instrument``: a
``sitecustomize`` on PYTHONPATH hands every Python process the command
starts to the package's one start-up (``_boot.start``), then the command
replaces this process."""

import os
import shutil
import sys

USAGE = """usage: nixl-agent-instrument COMMAND [ARGS...]
       nixl-agent-instrument --version | --help

Runs COMMAND with NIXL's Python API (nixl_agent) instrumented by nixl-agent.
  nixl-agent-instrument python -m sglang.launch_server --disaggregation-mode prefill ...
Settings are NIXL_AGENT_* environment variables (see docs/python.md); the
instrumentation is off when NIXL_AGENT_INSTRUMENT=off.
"""


def version():
    """This package's version, as its wheel's metadata says."""
    from importlib import metadata

    return metadata.version("nixl-agent-instrument")


def bootstrap_dir():
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bootstrap")


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        sys.stdout.write(f"nixl-agent-instrument {version()}\n")
        return 0
    if argv[0].startswith("-"):
        sys.stderr.write(f"nixl-agent-instrument: unknown option {argv[0]}\n{USAGE}")
        return 2
    exe = shutil.which(argv[0])
    if exe is None:
        sys.stderr.write(f"nixl-agent-instrument: command not found: {argv[0]}\n")
        return 127
    paths = [bootstrap_dir()]
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    os.execv(exe, argv)


if __name__ == "__main__":
    sys.exit(main())
