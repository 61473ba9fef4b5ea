"""The group and kind of a ``register_memory`` call, from its call site.

An explicit ``nixl_agent_instrument.group(...)`` block wins. Otherwise the
caller's module, function and the variable its bytecode passes as the
first argument (``kv_addrs``, ``aux_addrs``, ...) go to nixl-agent's naming
rules (``_native.name_call``) once per call site (code object and
instruction), then are cached. The caller's frame is read, never its
locals: nothing of the caller is kept alive.
"""

import contextvars
import dis  # loaded with NIXL's module (see _hook._load), not on the first call

from . import _native

explicit = contextvars.ContextVar("nixl_agent_group", default=None)

_MAX_SITES = 1024
_sites = {}
_instructions = {}

# Instructions that load a variable by name, as the first argument of a call.
_LOADS = ("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW", "LOAD_NAME", "LOAD_GLOBAL", "LOAD_DEREF",
          "LOAD_FAST_LOAD_FAST", "LOAD_FAST_BORROW_LOAD_FAST_BORROW")
_ATTRS = ("LOAD_METHOD", "LOAD_ATTR")


def _argument(code, lasti):
    """The name of the variable the call at ``lasti`` passes first, if any."""
    ins = _instructions.get(code)
    if ins is None:
        ins = list(dis.get_instructions(code))
        if len(_instructions) < _MAX_SITES:
            _instructions[code] = ins
    # The last load of the method before the call, then the first load after it.
    start = None
    for i, x in enumerate(ins):
        if x.offset > lasti:
            break
        if x.opname in _ATTRS and x.argval == "register_memory":
            start = i
    if start is None:
        return None
    for x in ins[start + 1:]:
        if x.offset > lasti:
            return None
        if x.opname in _LOADS:
            v = x.argval
            if isinstance(v, tuple):
                v = v[0] if v else None
            return v if isinstance(v, str) else None
        if x.opname.startswith("LOAD_CONST") or x.opname.startswith("BUILD_"):
            return None
    return None


def group_of(frame, args, kwargs):
    chosen = explicit.get()
    if chosen is not None:
        return chosen
    code = frame.f_code
    key = (code, frame.f_lasti)
    hit = _sites.get(key)
    if hit is not None:
        return hit
    module = frame.f_globals.get("__name__", "")
    function = getattr(code, "co_qualname", code.co_name)
    hit = _native.name_call(
        module if isinstance(module, str) else "",
        function,
        _argument(code, frame.f_lasti),
    )
    if len(_sites) < _MAX_SITES:
        _sites[key] = hit
    return hit
