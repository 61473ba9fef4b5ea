"""Wrapping NIXL's Python ``nixl_agent`` class when the program imports it.

Only what must be Python lives here: a post-import hook (a ``sys.meta_path``
finder that never imports NIXL itself) and the four wrappers of the agent's
lifecycle and registrations (the data path's are in ``_xfer``), and the
methods counted only by how they ended (``COUNTED``). Each wrapper
hands its call to ``_native``, which records it on nixl-agent's recording
path and calls the original; what the original returns or raises reaches
the caller unchanged. A failure of the wrapping itself is counted, logged
once and swallowed: the original is called as if nothing were here.

Only ``Exception`` is ever caught. A ``KeyboardInterrupt`` or ``SystemExit``
(raised by a signal handler while the wrapper works) propagates exactly as
it would have from the bare call: the caller's control flow is never ours
to swallow.
"""

import _thread
import sys
import time

# Loaded when NIXL's module is (``_patch``): an interpreter that never
# imports NIXL never loads the extension, so start-up costs a finder only.
_native = None
_site = None

# NIXL's API module under each name a program may import it by. ``nixl._api``
# is an alias the ``nixl`` package puts in sys.modules (it imports one of the
# others, which is where the hook fires).
TARGETS = ("nixl_cu12._api", "nixl_cu13._api", "nixl_rocm._api", "nixl._api")
# Methods of ``nixl_agent`` the recording gives no meaning of their own:
# each call is counted by NIXL's method (the C++ name the interposer's table
# gives it) and status, as the interposer counts it.
COUNTED = (("query_memory", "queryMem"),)
# Frameworks whose presence chooses the default readiness groups.
FRAMEWORKS = ("sglang", "vllm", "dynamo")
_MARK = "__nixl_agent_instrumented__"

_installed = False
_lock = _thread.allocate_lock()


# Failures of the wrapping before the recording started (the import hook
# runs before the extension loads): kept, a few, and counted at start.
_pending = []
_MAX_PENDING = 16
_started = False


def _hook_failed(operation, exc):
    message = f"{type(exc).__name__}: {exc}"
    if _native is None or not _started:
        if len(_pending) < _MAX_PENDING:
            _pending.append((operation, message))
        return
    try:
        _native.hook_failed(operation, message)
    except Exception:
        pass


def _started_now():
    global _started
    _started = True
    while _pending:
        operation, message = _pending.pop(0)
        try:
            _native.hook_failed(operation, message)
        except Exception:
            pass


def _frameworks():
    return [f for f in FRAMEWORKS if f in sys.modules]


def wrap_class(cls):
    """Wraps ``nixl_agent``'s lifecycle and registration methods, once."""
    if getattr(cls, _MARK, False):
        return cls
    import functools
    init = cls.__init__
    create_backend = cls.create_backend
    register_memory = cls.register_memory
    deregister_memory = cls.deregister_memory

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        try:
            _native.start(_frameworks(), _site.rank_hint(sys._getframe(1)))
            if not _started:
                _started_now()
            if _native.output_tapped():
                _wrap_os_exit()
            # One identity from here on: the backends NIXL's config creates
            # inside __init__ are this agent's.
            _native.agent_creating(self)
        except Exception as e:
            _hook_failed("init", e)
        try:
            init(self, *args, **kwargs)
        except Exception as e:
            try:
                _native.agent_failed(e, self)
            except Exception as inner:
                _hook_failed("init", inner)
            raise
        try:
            # The framework's methods that will register, read now rather
            # than on its first (cold, waited-on) registration.
            _site.prepare(sys._getframe(1))
        except Exception as e:
            _hook_failed("init", e)
        try:
            conf = args[1] if len(args) > 1 else kwargs.get("nixl_conf")
            token = _native.agent_created(
                self,
                str(getattr(self, "name", "")),
                [str(p) for p in getattr(self, "plugin_list", [])],
                getattr(conf, "capture_telemetry", False) is True,
            )
            if token is not None:
                # The agent is an identity of the recording: when the
                # instance is collected, NIXL releases its memory and the
                # recording releases what it held. Nothing runs at exit.
                import weakref

                weakref.finalize(self, _native.agent_released, token).atexit = False
        except Exception as e:
            _hook_failed("init", e)

    @functools.wraps(create_backend)
    def create_backend_(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            result = create_backend(self, *args, **kwargs)
        except Exception as e:
            try:
                _native.backend(self, _backend_name(args, kwargs), time.perf_counter() - t0, e)
            except Exception as inner:
                _hook_failed("create_backend", inner)
            raise
        try:
            _native.backend(self, _backend_name(args, kwargs), time.perf_counter() - t0)
        except Exception as e:
            _hook_failed("create_backend", e)
        return result

    @functools.wraps(register_memory)
    def register_memory_(self, *args, **kwargs):
        # What only Python sees of the call site, then one crossing: the
        # extension names the group, records and calls through.
        try:
            site = _site.facts(sys._getframe(1), args, kwargs)
        except Exception as e:
            _hook_failed("register_memory", e)
            return register_memory(self, *args, **kwargs)
        return _native.register(site, register_memory, self, args, kwargs)

    @functools.wraps(deregister_memory)
    def deregister_memory_(self, *args, **kwargs):
        return _native.deregister(deregister_memory, self, args, kwargs)

    cls.__init__ = __init__
    cls.create_backend = create_backend_
    cls.register_memory = register_memory_
    cls.deregister_memory = deregister_memory_
    originals = {
        "__init__": init,
        "create_backend": create_backend,
        "register_memory": register_memory,
        "deregister_memory": deregister_memory,
    }
    for name, method in COUNTED:
        original = getattr(cls, name, None)
        if callable(original):
            originals[name] = original
            setattr(cls, name, _counted(original, method, functools))
    try:
        from . import _xfer

        originals.update(_xfer.wrap(cls, _native))
    except Exception as e:
        _hook_failed("import", e)
    setattr(cls, _MARK, True)
    # For benchmarks and tests: the methods as NIXL defined them.
    cls.__nixl_agent_originals__ = originals
    return cls


def _counted(original, method, functools):
    """``original`` (a method of NIXL's), each call counted by ``method`` and
    how it ended (the neutral call record). Under an interposer that
    records it is never wrapped (``hand_down_class``): counted once."""

    @functools.wraps(original)
    def counted(self, *args, **kwargs):
        try:
            result = original(self, *args, **kwargs)
        except Exception as e:
            try:
                _native.nixl_called(method, e)
            except Exception as inner:
                _hook_failed("nixl_call", inner)
            raise
        try:
            _native.nixl_called(method)
        except Exception as e:
            _hook_failed("nixl_call", e)
        return result

    return counted


def _backend_name(args, kwargs):
    name = args[0] if args else kwargs.get("backend", "")
    return name if isinstance(name, str) else ""


_settings_checked = False

# The values NIXL_AGENT_TRANSPORTS takes for on (instrument::Settings).
_TRANSPORTS_ON = ("1", "on", "true")


def _ask_proto_info(environ):
    """``NIXL_AGENT_TRANSPORTS=1``: asks UCX for its protocol report
    (``UCX_PROTO_INFO=y``) unless the operator set it, and says so
    (``NIXL_AGENT_PROTO_INFO_SET=1``): UCX's tables are then kept off the
    program's stdout. An operator's own report passes. True when it set
    them."""
    if environ.get("NIXL_AGENT_TRANSPORTS", "").strip().lower() not in _TRANSPORTS_ON:
        return False
    if "UCX_PROTO_INFO" in environ:
        return False
    environ["UCX_PROTO_INFO"] = "y"
    environ["NIXL_AGENT_PROTO_INFO_SET"] = "1"
    return True


def _settings_error():
    """Why the settings are unusable, or None. The extension reads them
    once (the first call), so UCX's report is asked for just before, and
    taken back when they are refused: it stays only where the settings were
    accepted and ask for transports. Set before NIXL creates a UCX context,
    it is what UCX reads."""
    import os

    from . import _native as native

    asked = _ask_proto_info(os.environ)
    err = native.settings_error()
    if err is not None and asked:
        os.environ.pop("UCX_PROTO_INFO", None)
        os.environ.pop("NIXL_AGENT_PROTO_INFO_SET", None)
    return err


def _load():
    """Loads the extension; False (said once on stderr) when the settings
    are unusable, and then nothing is wrapped."""
    global _native, _site, _settings_checked
    if _native is None:
        from . import _native as native, _site as site

        _native, _site = native, site
    err = _settings_error()
    if err is not None:
        if not _settings_checked:
            sys.stderr.write(f"nixl-agent-instrument: not instrumenting: {err}\n")
        _settings_checked = True
        return False
    if not _settings_checked:
        import atexit
        import os

        # The Python clock transfer posts are stamped with, against Rust's.
        _native.clock_base(time.monotonic_ns())

        atexit.register(_at_exit)
        # A forked child drops what it inherited (the parent's socket,
        # exporter, tap) and records on its own from its first NIXL agent.
        # Nothing is held across the fork (the program's own at-fork hooks
        # may run finalizers that call back in).
        os.register_at_fork(after_in_child=_native.after_fork_in_child)
    _settings_checked = True
    return True


_exit_wrapped = False


def _wrap_os_exit():
    """Once the fd tap is in place (``NIXL_AGENT_CAPTURE=on`` or
    ``NIXL_AGENT_TRANSPORTS=1``): ``os._exit`` first writes out what is
    still in the tap's pipes (waiting at most about a second), then is the
    real one. ``os._exit`` runs no exit handler of C's or Python's, so
    without this the program's last bytes die with the pipe."""
    global _exit_wrapped
    if _exit_wrapped:
        return
    import functools
    import os

    real = os._exit

    @functools.wraps(real)
    def _exit(*args, **kwargs):
        try:
            _native.drain_output()
        except Exception:
            pass
        return real(*args, **kwargs)

    os._exit = _exit
    _exit_wrapped = True


def _at_exit():
    """At interpreter exit: the rank's file gets its end record, naming the
    uncaught exception the interpreter is exiting after, if any (the
    interpreter sets ``sys.last_exc``/``sys.last_value`` when it prints
    one, before exit handlers run). Reads only; never raises."""
    name = None
    try:
        exc = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
        if exc is not None and not isinstance(exc, SystemExit):
            name = type(exc).__qualname__
    except Exception:
        name = None
    _native.shutdown(name)


def hand_down_class(cls):
    """Under an interposer that records every NIXL call of the process
    (``nixl-agent instrument``): ``__init__`` hands the frameworks and the
    framework's rank down before the constructor starts its recording, and
    ``register_memory`` the group name of the call; nothing is recorded
    here, so each call is counted once."""
    if getattr(cls, _MARK, False):
        return cls
    import functools

    init = cls.__init__
    register_memory = cls.register_memory

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        try:
            _native.hand_down_process(_frameworks(), _site.rank_hint(sys._getframe(1)))
        except Exception as e:
            _hook_failed("init", e)
        return init(self, *args, **kwargs)

    @functools.wraps(register_memory)
    def register_memory_(self, *args, **kwargs):
        handed = False
        try:
            handed = _native.hand_down(_site.facts(sys._getframe(1), args, kwargs))
        except Exception as e:
            _hook_failed("register_memory", e)
        try:
            return register_memory(self, *args, **kwargs)
        finally:
            # A call that raised before NIXL's registerMem leaves no name
            # behind for a later one.
            if handed:
                try:
                    _native.hand_down_done()
                except Exception:
                    pass

    cls.__init__ = __init__
    cls.register_memory = register_memory_
    setattr(cls, _MARK, True)
    return cls


def _patch(module):
    try:
        cls = getattr(module, "nixl_agent", None)
        if isinstance(cls, type) and _load() and _native.interposer() is True:
            hand_down_class(cls)
        elif isinstance(cls, type) and _load():
            wrap_class(cls)
            try:
                from . import _xfer

                _xfer.wrap_handles(module, _native, _MARK)
            except Exception as e:
                _hook_failed("import", e)
    except Exception as e:
        _hook_failed("import", e)


# Plain classes (the import protocol is duck-typed): importlib.abc would
# pull importlib.resources, pathlib and tempfile into every start-up.
class _Loader:
    """The module's own loader, then the wrapping."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        # The settings are read before NIXL's module runs: UCX's protocol
        # report (NIXL_AGENT_TRANSPORTS=1) is asked for before NIXL can
        # create a UCX context, and only when they are accepted.
        try:
            _load()
        except Exception as e:
            _hook_failed("import", e)
        self._loader.exec_module(module)
        _patch(module)

    def __getattr__(self, name):
        # Only called for what this class lacks; never for _loader itself
        # (copy and pickle build instances without __init__).
        if name == "_loader" or (name.startswith("__") and name.endswith("__")):
            raise AttributeError(name)
        return getattr(self._loader, name)

    def __reduce__(self):
        return (_unwrap, (self._loader,))


def _unwrap(loader):
    return loader


class _Finder:
    """Finds NIXL's API module through the other finders and wraps its loader."""

    def __init__(self):
        self._busy = set()

    def find_spec(self, name, path, target=None):
        if name not in TARGETS or name in self._busy:
            return None
        self._busy.add(name)
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
            else:
                return None
        except Exception as e:
            _hook_failed("import", e)
            return None
        finally:
            self._busy.discard(name)
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _Loader(spec.loader)
        return spec


def install():
    """Installs the hook once; wraps NIXL's class at once if it is imported
    and not wrapped yet. Idempotent."""
    global _installed
    with _lock:
        if not _installed:
            _installed = True
            sys.meta_path.insert(0, _Finder())
        # NIXL imported already (or imported while the hook failed): wrapped
        # now. A class wrapped before is left as it is.
        for name in TARGETS:
            module = sys.modules.get(name)
            if module is not None:
                _patch(module)
