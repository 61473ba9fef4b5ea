"""The group and kind of a ``register_memory`` call, from its call site.

An explicit ``nixl_agent_instrument.group(...)`` block wins. Otherwise the
caller's module, function and the name of the local variable it passed are
handed to nixl-agent's naming rules (``_native.name_call``) once per call
site (code object and line), then cached.
"""

import contextvars

from . import _native

explicit = contextvars.ContextVar("nixl_agent_group", default=None)

_MAX_SITES = 1024
_sites = {}


def group_of(frame, args, kwargs):
    chosen = explicit.get()
    if chosen is not None:
        return chosen
    code = frame.f_code
    key = (code, frame.f_lineno)
    hit = _sites.get(key)
    if hit is not None:
        return hit
    reg_list = args[0] if args else kwargs.get("reg_list")
    mem_type = args[1] if len(args) > 1 else kwargs.get("mem_type")
    argument = None
    for name, value in frame.f_locals.items():
        if value is reg_list:
            argument = name
            break
    module = frame.f_globals.get("__name__", "")
    function = getattr(code, "co_qualname", code.co_name)
    hit = _native.name_call(
        str(module), function, argument, mem_type if isinstance(mem_type, str) else None
    )
    if len(_sites) < _MAX_SITES:
        _sites[key] = hit
    return hit
