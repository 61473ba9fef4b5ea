# Put on PYTHONPATH by nixl-agent-instrument: hands over to the package's one
# start-up (`nixl_agent_instrument._boot.start`), then runs the
# sitecustomize this one shadows, if any. Never breaks the
# program: a failure here is one line on stderr and no instrumentation.
import os
import sys


def _nixl_agent_boot():
    if os.environ.get("NIXL_AGENT_INSTRUMENT", "").strip().lower() in ("0", "off", "false"):
        return
    try:
        from nixl_agent_instrument import _boot
    except ImportError:
        # The launcher's environment is not the program's: this Python has
        # no nixl_agent_instrument (another virtualenv, the system Python).
        sys.stderr.write(
            "nixl-agent-instrument: not instrumenting: nixl_agent_instrument is not installed for "
            f"{sys.executable}; install the wheel into the environment that runs the program "
            f"({sys.executable} -m pip install nixl_agent_instrument-*.whl), or run the "
            "nixl-agent-instrument of that environment\n"
        )
        return
    # The one start-up (it says a failure on stderr itself).
    _boot.start(launched=True)


def _next_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    import importlib.machinery

    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        import importlib.util  # only then: it costs start-up time

        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


_nixl_agent_boot()
_next_sitecustomize()
