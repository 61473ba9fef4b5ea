"""``nixl-agent-instrument <command...>``: runs the command with NIXL's
Python API instrumented, in the manner of ``opentelemetry-instrument``: a
``sitecustomize`` on PYTHONPATH hands every Python process the command
starts to the package's one start-up (``_boot.start``), then the command
replaces this process."""

import errno
import os
import shutil
import sys

USAGE = """usage: nixl-agent-instrument COMMAND [ARGS...]
       nixl-agent-instrument --version | --help

Runs COMMAND with the NIXL calls it makes recorded by nixl-agent: NIXL's
Python API (nixl_agent) is instrumented, and the interposer under libnixl.so
is preloaded (NIXL_AGENT_INTERPOSER, else for a command that is no Python
program the one this package ships, else the one beside nixl-agent on PATH),
so a C++ or Rust command is recorded too.
  nixl-agent-instrument python -m sglang.launch_server --disaggregation-mode prefill ...
Settings are NIXL_AGENT_* environment variables (see docs/python.md); the
instrumentation is off when NIXL_AGENT_INSTRUMENT=off.
"""


def version():
    """This package's version, as its wheel's metadata says."""
    from importlib import metadata

    return metadata.version("nixl-agent-instrument")


INTERPOSER = "libnixl_agent_interpose.so"


def searched(python=False):
    """Where the interposer under libnixl.so is looked for, in order: the
    path NIXL_AGENT_INTERPOSER names (alone), else (for a command that is no
    Python program: the Python front-end records a Python one) the copy this
    package ships beside this file, else beside a ``nixl-agent`` on PATH or
    in its ``../lib/`` or ``../lib/nixl-agent/`` (as ``nixl-agent
    instrument`` looks)."""
    named = os.environ.get("NIXL_AGENT_INTERPOSER")
    if named:
        return [named]
    places = [] if python else [os.path.join(os.path.dirname(os.path.abspath(__file__)), INTERPOSER)]
    exe = shutil.which("nixl-agent")
    if exe is not None:
        here = os.path.dirname(os.path.realpath(exe))
        for d in (here, os.path.join(here, "..", "lib"), os.path.join(here, "..", "lib", "nixl-agent")):
            places.append(os.path.normpath(os.path.join(d, INTERPOSER)))
    return places


def interposer(python=False):
    """The interposer to preload: the path NIXL_AGENT_INTERPOSER names,
    else the first of :func:`searched` that is a file. ``None`` without
    one: the Python front-end alone records."""
    named = os.environ.get("NIXL_AGENT_INTERPOSER")
    if named:
        return named
    for p in searched(python):
        if os.path.isfile(p):
            return os.path.realpath(p)
    return None


def runs_python(exe):
    """Whether ``exe`` is a Python interpreter, or a script one runs (its
    ``#!`` line names python): what the Python front-end instruments without
    the interposer."""
    if os.path.basename(exe).startswith("python"):
        return True
    try:
        with open(exe, "rb") as f:
            first = f.readline(256)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


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
    # A name with a slash runs as given, as the shell's exec and execvp run
    # it: the kernel decides. shutil.which would check access itself, through
    # every symlink, and refuse an interpreter whose link leads through a
    # directory this user may not search (a venv over /root/.pyenv, run as
    # another user) although the kernel runs it.
    exe = argv[0] if os.sep in argv[0] else shutil.which(argv[0])
    if exe is None:
        sys.stderr.write(f"nixl-agent-instrument: command not found: {argv[0]}\n")
        return 127
    python = runs_python(exe)
    lib = interposer(python)
    if lib is None and not python:
        # Nothing would record this command's NIXL calls: said once, and the
        # command runs as it would bare.
        sys.stderr.write(
            f"nixl-agent-instrument: not recording the NIXL calls of {argv[0]}: {INTERPOSER} not found "
            f"(looked at: {', '.join(searched())}); set NIXL_AGENT_INTERPOSER to its path\n"
        )
    if lib is not None:
        if not os.path.isfile(lib):
            sys.stderr.write(f"nixl-agent-instrument: NIXL_AGENT_INTERPOSER: {lib} is not a file\n")
            return 2
        # Every NIXL call of the command, any language, at libnixl.so; the
        # Python front-end hands its group names down to it.
        pre = os.environ.get("LD_PRELOAD")
        os.environ["LD_PRELOAD"] = lib + (":" + pre if pre else "")
    paths = [bootstrap_dir()]
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    try:
        os.execv(exe, argv)
    except OSError as e:
        sys.stderr.write(f"nixl-agent-instrument: cannot run {argv[0]}: {e.strerror}\n")
        return 127 if e.errno == errno.ENOENT else 126


if __name__ == "__main__":
    sys.exit(main())
