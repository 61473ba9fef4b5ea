"""Wrapping NIXL's Python ``nixl_agent`` class when the program imports it.

Only what must be Python lives here: a post-import hook (a ``sys.meta_path``
finder that never imports NIXL itself) and the four wrappers. Each wrapper
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
        except Exception as e:
            _hook_failed("init", e)
        try:
            init(self, *args, **kwargs)
        except Exception as e:
            try:
                _native.agent_failed(e)
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
        try:
            group, kind = _site.group_of(sys._getframe(1), args, kwargs)
        except Exception as e:
            _hook_failed("register_memory", e)
            return register_memory(self, *args, **kwargs)
        return _native.register(group, kind, register_memory, self, args, kwargs)

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
    try:
        originals.update(_wrap_data_path(cls))
    except Exception as e:
        _hook_failed("import", e)
    setattr(cls, _MARK, True)
    # For benchmarks and tests: the methods as NIXL defined them.
    cls.__nixl_agent_originals__ = originals
    return cls


def _wrap_data_path(cls):
    """Wraps the transfer, peer and notification methods NIXL's class has
    (an older NIXL may lack some: those are left alone). Returns the
    originals. The hot ones (``transfer``, ``check_xfer_state``,
    ``get_new_notifs``, ``check_remote_metadata``) return before reaching
    the extension when there is nothing to record: an "in progress" poll
    costs one Python frame."""
    import functools

    originals = {}
    ns = time.monotonic_ns
    native = _native

    def have(name):
        f = getattr(cls, name, None)
        if callable(f):
            originals[name] = f
            return f
        return None

    f = have("transfer")
    if f is not None:
        transfer = f
        default = _notif_default(transfer)

        if default is not _NO_DEFAULT:
            # NIXL's own signature (handle, notif_msg=b""): no **kwargs dict
            # per call, and the default is NIXL's own object.
            @functools.wraps(transfer)
            def transfer_(self, handle, notif_msg=default):
                t0 = ns()
                try:
                    state = transfer(self, handle, notif_msg)
                except Exception as e:
                    native.xfer_posted(handle, t0, None, e)
                    raise
                native.xfer_posted(handle, t0, state, None)
                return state

        else:

            @functools.wraps(transfer)
            def transfer_(self, handle, *args, **kwargs):
                t0 = ns()
                try:
                    state = transfer(self, handle, *args, **kwargs)
                except Exception as e:
                    native.xfer_posted(handle, t0, None, e)
                    raise
                native.xfer_posted(handle, t0, state, None)
                return state

        cls.transfer = transfer_

    f = have("check_xfer_state")
    if f is not None:
        check_xfer_state = f

        if _params(check_xfer_state) == ["self", "handle"]:
            # NIXL's own signature: no *args/**kwargs, so a poll allocates
            # nothing (an empty **kwargs is a new dict per call).
            @functools.wraps(check_xfer_state)
            def check_xfer_state_(self, handle):
                try:
                    state = check_xfer_state(self, handle)
                except Exception as e:
                    native.xfer_state(self, handle, None, e)
                    raise
                if state == "PROC":
                    return state
                native.xfer_state(self, handle, state, None)
                return state

        else:

            @functools.wraps(check_xfer_state)
            def check_xfer_state_(self, handle, *args, **kwargs):
                try:
                    state = check_xfer_state(self, handle, *args, **kwargs)
                except Exception as e:
                    native.xfer_state(self, handle, None, e)
                    raise
                if state == "PROC":
                    return state
                native.xfer_state(self, handle, state, None)
                return state

        cls.check_xfer_state = check_xfer_state_

    def creation(name):
        original = have(name)
        if original is None:
            return

        @functools.wraps(original)
        def create(self, *args, **kwargs):
            try:
                handle = original(self, *args, **kwargs)
            except Exception as e:
                native.xfer_create_failed(self, name, args, kwargs, e)
                raise
            native.xfer_created(self, name, handle, args, kwargs)
            return handle

        setattr(cls, name, create)

    creation("initialize_xfer")
    creation("make_prepped_xfer")

    f = have("prep_xfer_dlist")
    if f is not None:
        prep_xfer_dlist = f

        @functools.wraps(prep_xfer_dlist)
        def prep_xfer_dlist_(self, *args, **kwargs):
            handle = prep_xfer_dlist(self, *args, **kwargs)
            native.dlist_prepped(self, handle, args, kwargs)
            return handle

        cls.prep_xfer_dlist = prep_xfer_dlist_

    def peer_call(name, event, answer_names_peer=False, truthy_only=False):
        original = have(name)
        if original is None:
            return

        @functools.wraps(original)
        def call(self, *args, **kwargs):
            try:
                result = original(self, *args, **kwargs)
            except Exception as e:
                native.peer(self, event, args, kwargs, None, e)
                raise
            if truthy_only and result is not True:
                return result
            native.peer(self, event, args, kwargs, result if answer_names_peer else None, None)
            return result

        setattr(cls, name, call)

    peer_call("add_remote_agent", "add", answer_names_peer=True)
    peer_call("remove_remote_agent", "remove")
    peer_call("fetch_remote_metadata", "fetch")
    peer_call("check_remote_metadata", "check", truthy_only=True)
    peer_call("make_connection", "connect")

    f = have("send_notif")
    if f is not None:
        send_notif = f

        @functools.wraps(send_notif)
        def send_notif_(self, *args, **kwargs):
            try:
                result = send_notif(self, *args, **kwargs)
            except Exception as e:
                native.notified(self, "send", None, e)
                raise
            native.notified(self, "send", None, None)
            return result

        cls.send_notif = send_notif_

    f = have("get_new_notifs")
    if f is not None:
        get_new_notifs = f

        @functools.wraps(get_new_notifs)
        def get_new_notifs_(self, *args, **kwargs):
            try:
                notifs = get_new_notifs(self, *args, **kwargs)
            except Exception as e:
                native.notified(self, "receive", None, e)
                raise
            if not notifs:
                return notifs
            native.notified(self, "receive", notifs, None)
            return notifs

        cls.get_new_notifs = get_new_notifs_
    return originals


_NO_DEFAULT = object()


def _notif_default(f):
    """The default of ``notif_msg`` when ``f``'s signature is exactly
    ``(self, handle, notif_msg=<default>)``, else ``_NO_DEFAULT``."""
    import inspect

    try:
        params = list(inspect.signature(f).parameters.values())
    except (TypeError, ValueError):
        return _NO_DEFAULT
    if [p.name for p in params] != ["self", "handle", "notif_msg"]:
        return _NO_DEFAULT
    if any(p.kind is not p.POSITIONAL_OR_KEYWORD for p in params) or params[1].default is not params[1].empty:
        return _NO_DEFAULT
    d = params[2].default
    return _NO_DEFAULT if d is params[2].empty else d


def _params(f):
    """The parameter names of ``f`` when they are all plain positional ones
    without defaults, else None."""
    import inspect

    try:
        params = list(inspect.signature(f).parameters.values())
    except (TypeError, ValueError):
        return None
    if any(p.kind is not p.POSITIONAL_OR_KEYWORD or p.default is not p.empty for p in params):
        return None
    return [p.name for p in params]


def wrap_handles(module):
    """Wraps the release of NIXL's transfer and prepared-list handles
    (``release()``, and ``__del__`` when a handle is collected unreleased),
    once: a transfer still in flight then ends as released in flight."""
    import functools

    for cls_name, released in (("nixl_xfer_handle", "xfer_released"), ("nixl_prepped_dlist_handle", "dlist_released")):
        cls = getattr(module, cls_name, None)
        if not isinstance(cls, type) or getattr(cls, _MARK, False):
            continue
        note = getattr(_native, released)
        release = getattr(cls, "release", None)
        finalize = getattr(cls, "__del__", None)
        if release is not None:

            def make_release(release=release, note=note):
                @functools.wraps(release)
                def release_(self):
                    was = getattr(self, "_released", True)
                    try:
                        return release(self)
                    finally:
                        if not was:
                            note(self)

                return release_

            cls.release = make_release()
        if finalize is not None:

            def make_finalize(finalize=finalize, note=note):
                @functools.wraps(finalize)
                def finalize_(self):
                    try:
                        if not getattr(self, "_released", True):
                            note(self)
                    except BaseException:
                        pass
                    finalize(self)

                return finalize_

            cls.__del__ = make_finalize()
        setattr(cls, _MARK, True)


def _backend_name(args, kwargs):
    name = args[0] if args else kwargs.get("backend", "")
    return name if isinstance(name, str) else ""


_settings_checked = False


def _load():
    """Loads the extension; False (said once on stderr) when the settings
    are unusable, and then nothing is wrapped."""
    global _native, _site, _settings_checked
    if _native is None:
        from . import _native as native, _site as site

        _native, _site = native, site
    err = _native.settings_error()
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

        atexit.register(_native.shutdown)
        # A forked child drops what it inherited (the parent's socket,
        # exporter, tap) and records on its own from its first NIXL agent.
        os.register_at_fork(
            before=_native.before_fork,
            after_in_parent=_native.after_fork_in_parent,
            after_in_child=_native.after_fork_in_child,
        )
    _settings_checked = True
    return True


def _patch(module):
    try:
        cls = getattr(module, "nixl_agent", None)
        if isinstance(cls, type) and _load():
            wrap_class(cls)
            try:
                wrap_handles(module)
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
