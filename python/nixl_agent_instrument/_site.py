"""The group and kind of a ``register_memory`` call, from its call site.

An explicit ``nixl_agent_instrument.group(...)`` block wins. Otherwise the
caller's module, function and the variable its bytecode passes as the
first argument (``kv_addrs``, ``aux_addrs``, ...) go to nixl-agent's naming
rules (``_native.name_call``) once per call site (code object and
instruction), then are cached. The caller's frame is read, never its
locals: nothing of the caller is kept alive.

Another wrapper on ``nixl_agent.register_memory`` (a tracer, a decorator, a
framework shim) puts its own frame between the framework and this one, and
passes the buffers on as ``*args``: when the nearest frame names no buffer,
the frames above it (a few at most) are read for the one that does.
"""

import contextvars
import dis  # loaded with NIXL's module (see _hook._load), not on the first call

from . import _native

explicit = contextvars.ContextVar("nixl_agent_group", default=None)

_MAX_SITES = 1024
# Frames above the caller read when it names no buffer (wrappers in between).
_MAX_WRAPPERS = 4
_sites = {}
_instructions = {}

# Instructions that load a variable by name, as the first argument of a call.
_LOADS = ("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW", "LOAD_NAME", "LOAD_GLOBAL", "LOAD_DEREF",
          "LOAD_FAST_LOAD_FAST", "LOAD_FAST_BORROW_LOAD_FAST_BORROW")
_ATTRS = ("LOAD_METHOD", "LOAD_ATTR")


_NOTHING = object()
_arguments = {}


def _argument(code, lasti, current=False):
    """The name of the variable the call at ``lasti`` passes first, if any
    (cached per instruction). ``current``: only when the call executing at
    ``lasti`` is that ``register_memory`` call itself (a frame above a
    wrapper), not an earlier one of the same function."""
    hit = _arguments.get((code, lasti, current), _NOTHING)
    if hit is not _NOTHING:
        return hit
    found = _read_argument(code, lasti, current)
    if len(_arguments) < _MAX_SITES:
        _arguments[(code, lasti, current)] = found
    return found


def _read_argument(code, lasti, current):
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
    if current and sum(1 for x in ins[start + 1:] if x.offset <= lasti and x.opname.startswith("CALL")) > 1:
        # Another call runs between the method's load and this frame's
        # current call (``f_lasti`` is at or just past it): the call this
        # frame is in is not register_memory.
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


def _site_of(frame):
    """The frame that names the call: the caller, or — when the caller
    passes no named buffer (a wrapper forwarding ``*args``) — the nearest
    frame above it that does. With the chain of (code, instruction) read."""
    chain = []
    f = frame
    for depth in range(_MAX_WRAPPERS + 1):
        if f is None:
            break
        chain.append((f.f_code, f.f_lasti))
        argument = _argument(f.f_code, f.f_lasti, current=depth > 0)
        if argument is not None:
            return f, argument, tuple(chain)
        f = f.f_back
    return frame, None, tuple(chain)


def group_of(frame, args, kwargs):
    chosen = explicit.get()
    if chosen is not None:
        return chosen
    key = (frame.f_code, frame.f_lasti)
    hit = _sites.get(key)
    if hit is not None:
        return hit
    site, argument, chain = _site_of(frame)
    if len(chain) > 1:
        # Through a wrapper (or from a site naming no buffer): the answer
        # belongs to the whole chain, as one wrapper serves many callers.
        hit = _sites.get(chain)
        if hit is not None:
            return hit
    code = site.f_code
    module = site.f_globals.get("__name__", "")
    function = getattr(code, "co_qualname", code.co_name)
    hit = _native.name_call(module if isinstance(module, str) else "", function, argument)
    if len(_sites) < _MAX_SITES:
        _sites[chain if len(chain) > 1 else key] = hit
    return hit
