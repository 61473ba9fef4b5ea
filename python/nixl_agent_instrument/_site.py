"""What only Python can see of a ``register_memory`` call's site: the facts
the extension names the call's group and kind from (``_native.register``,
one crossing a call; the naming rules and what is known of each framework
are the extension's, ``instrument::frameworks``).

An explicit ``nixl_agent_instrument.group(...)`` block wins: its
``(group, kind)`` is handed over as it is. Otherwise, once per call site
(code object and instruction), then cached, the facts
``(module, function, argument, holder)``:

1. ``holder``: the framework attribute on the caller's ``self`` that holds
   the call's first address, among the paths the extension lists
   (``_native.BUFFER_HOLDERS``: SGLang's ``kv_args.kv_data_ptrs`` /
   ``aux_data_ptrs`` / ``state_data_ptrs``, vLLM's
   ``kv_caches_base_addr``). Renamed locals cannot change that.
2. Else ``argument``: the variable the caller's bytecode passes as the first
   argument (``kv_addrs``, ``aux_addrs``, ...).

with the caller's module and (qualified) function. What is read of the
caller (its ``self``, a few integer attributes) is read during the call and
dropped; the caches hold code objects (which live as long as their functions
do anyway) and strings, never a frame, a local or an instance.

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
    ins = _decode(code)
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


def _decode(code):
    """Every instruction of ``code``, cached (the expensive part of a
    call-site read: ~7 µs an instruction with Python 3.11's dis)."""
    ins = _instructions.get(code)
    if ins is None:
        ins = list(dis.get_instructions(code))
        if len(_instructions) < _MAX_SITES:
            _instructions[code] = ins
    return ins


def prepare(frame):
    """At ``nixl_agent(...)``, in the frame that creates the agent: decodes
    now the methods of its ``self`` that call ``register_memory`` (SGLang's
    NixlKVManager, vLLM's NixlConnectorWorker create their agent in
    ``__init__``), so that the first registration — the one a serving
    process waits on — does not pay for the call-site read. Agent creation
    costs hundreds of milliseconds anyway; this adds a few."""
    this = _self_of(frame)
    if this is None:
        return
    for klass in type(this).__mro__[:-1]:
        for f in list(vars(klass).values()):
            code = getattr(getattr(f, "__func__", f), "__code__", None)
            if code is not None and "register_memory" in code.co_names and len(_instructions) < _MAX_SITES:
                _decode(code)


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


# The framework attributes that hold buffers' addresses, as attribute
# names to follow from the caller's ``self`` (the extension's list, in its
# order: the first holding the call's first address names the call).
_HOLDERS = tuple((path, tuple(path.split("."))) for path in _native.BUFFER_HOLDERS)
# At most this many addresses read from one attribute.
_MAX_DATA = 1 << 16


def _ints(v, out, depth=0):
    """The integers in ``v`` (a list, a list of lists, a dict of those)."""
    if len(out) >= _MAX_DATA or depth > 3:
        return
    if isinstance(v, int) and not isinstance(v, bool):
        out.add(v)
    elif isinstance(v, dict):
        for x in v.values():
            _ints(x, out, depth + 1)
    elif isinstance(v, (list, tuple)):
        for x in v:
            _ints(x, out, depth + 1)


def _first_address(reg_list):
    """The first address a ``register_memory`` call names, or None."""
    if hasattr(reg_list, "descCount"):
        # A nixlRegDList: its __getitem__ is not bounds-checked.
        if reg_list.descCount() == 0:
            return None
    elif hasattr(reg_list, "data_ptr"):
        return int(reg_list.data_ptr())
    first = reg_list[0]
    if hasattr(first, "data_ptr"):
        return int(first.data_ptr())
    return int(first[0])


def _self_of(frame):
    code = frame.f_code
    if code.co_argcount and code.co_varnames[0] == "self":
        return frame.f_locals.get("self")
    return None


def _holder(frame, args, kwargs):
    """The framework attribute (a ``_HOLDERS`` path) that holds the call's
    first address, if one does."""
    this = _self_of(frame)
    if this is None:
        return None
    reg_list = args[0] if args else kwargs.get("reg_list")
    if reg_list is None:
        return None
    try:
        addr = _first_address(reg_list)
    except Exception:
        return None
    if addr is None:
        return None
    for path, names in _HOLDERS:
        v = this
        for name in names:
            v = getattr(v, name, None)
            if v is None:
                break
        if v is None:
            continue
        found = set()
        _ints(v, found)
        if addr in found:
            return path
    return None


# Where a framework keeps the rank of the process creating a NIXL agent
# (the extension's list: SGLang's kv_args.engine_rank, then .gpu_id, vLLM's
# tp_rank).
_RANKS = tuple(tuple(path.split(".")) for path in _native.RANK_HOLDERS)


def rank_hint(frame):
    """The rank the framework gives the process whose frame creates a NIXL
    agent, read from that frame's ``self``; None when it says none."""
    this = _self_of(frame)
    if this is None:
        return None
    for path in _RANKS:
        v = this
        for name in path:
            v = getattr(v, name, None)
        if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 256:
            return v
    return None


def _qualname(frame):
    """The function's qualified name (``Class.method``). Python 3.9/3.10
    code objects have no ``co_qualname``: the class is the one in the MRO
    of the frame's ``self`` (or ``cls``) that defines this code."""
    code = frame.f_code
    q = getattr(code, "co_qualname", None)
    if q is not None:
        return q
    if code.co_argcount and code.co_varnames[0] in ("self", "cls"):
        first = frame.f_locals.get(code.co_varnames[0])
        cls = first if isinstance(first, type) else type(first)
        for klass in getattr(cls, "__mro__", ()):
            f = klass.__dict__.get(code.co_name)
            f = getattr(f, "__func__", f)
            c = getattr(f, "__code__", None)
            if c is not None and (c is code or (c.co_filename, c.co_firstlineno) == (code.co_filename, code.co_firstlineno)):
                return f"{klass.__qualname__}.{code.co_name}"
    return code.co_name


def facts(frame, args, kwargs):
    """What names the ``register_memory`` call made from ``frame``: an
    explicit block's ``(group, kind)``, or the call site's ``(module,
    function, argument, holder)``."""
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
    # The framework's data beats a variable's name (nearest frame first).
    holder = None
    f = frame
    for _ in chain:
        holder = _holder(f, args, kwargs)
        if holder is not None:
            site, argument = f, None
            break
        f = f.f_back
        if f is None:
            break
    module = site.f_globals.get("__name__", "")
    hit = (module if isinstance(module, str) else "", _qualname(site), argument, holder)
    if len(_sites) < _MAX_SITES:
        _sites[chain if len(chain) > 1 else key] = hit
    return hit
