"""A failure of nixl-agent's import hook before its extension is loaded
(here: another finder that raises when asked through ours) leaves NIXL
imported unwrapped; ``nai.instrument()`` wraps it later, and the failure is
counted once the recording starts. Run under nixl-agent-instrument by
tests/python.rs; prints the instrumentation error series."""

import sys
import traceback


class Picky:
    def find_spec(self, name, path, target=None):
        asked_through_hook = any(
            f.name == "find_spec" and f.filename.endswith("_hook.py") for f in traceback.extract_stack()
        )
        if name == "nixl_cu12._api" and asked_through_hook:
            raise RuntimeError("this finder fails when asked through another")
        return None


# Ahead of the path finder, behind nixl-agent's own (first) finder.
sys.meta_path.insert(1, Picky())

from nixl._api import nixl_agent, nixl_agent_config  # noqa: E402

import nixl_agent_instrument as nai  # noqa: E402

print("wrapped at import", hasattr(nixl_agent, "__nixl_agent_instrumented__"), flush=True)
nai.instrument()
print("wrapped after instrument()", hasattr(nixl_agent, "__nixl_agent_instrumented__"), flush=True)
agent = nixl_agent("late", nixl_agent_config(backends=["UCX"]))
for line in (nai.metrics() or "").splitlines():
    if line.startswith("nixl_agent_instrumentation_errors_total"):
        print(line, flush=True)
