"""Wrapping the data path of NIXL's Python ``nixl_agent``: transfer
requests, posts and status polls, the release of transfer handles, peers and
notifications. Each wrapper calls NIXL's method first and hands what it was
given and what it returned (or raised) to the extension (``_native``) after;
what NIXL returned or raised reaches the caller unchanged. A poll that says
"in progress" returns from the wrapper's own frame.
"""

import time


def wrap(cls, native):
    """Wraps the transfer, peer and notification methods NIXL's class has
    (an older NIXL may lack some: those are left alone). Returns the
    originals. The hot ones (``transfer``, ``check_xfer_state``,
    ``get_new_notifs``, ``check_remote_metadata``) return before reaching
    the extension when there is nothing to record: an "in progress" poll
    costs one Python frame."""
    import functools
    import inspect

    originals = {}
    ns = time.monotonic_ns
    # The hot paths' native calls, looked up once (not an attribute of the
    # module per call).
    xfer_posted, xfer_state = native.xfer_posted, native.xfer_state

    def have(name):
        f = getattr(cls, name, None)
        if callable(f):
            originals[name] = f
            return f
        return None

    f = have("transfer")
    if f is not None:
        transfer = f
        params = _plain_params(transfer) or []
        empty = inspect.Parameter.empty
        if [n for n, _ in params] == ["self", "handle", "notif_msg"] and params[1][1] is empty and params[2][1] is not empty:
            default = params[2][1]
            # NIXL's own signature (handle, notif_msg=b""): no **kwargs dict
            # per call, and the default is NIXL's own object.
            @functools.wraps(transfer)
            def transfer_(self, handle, notif_msg=default):
                t0 = ns()
                try:
                    state = transfer(self, handle, notif_msg)
                except Exception as e:
                    xfer_posted(handle, t0, None, e)
                    raise
                xfer_posted(handle, t0, state, None)
                return state

        else:

            @functools.wraps(transfer)
            def transfer_(self, handle, *args, **kwargs):
                t0 = ns()
                try:
                    state = transfer(self, handle, *args, **kwargs)
                except Exception as e:
                    xfer_posted(handle, t0, None, e)
                    raise
                xfer_posted(handle, t0, state, None)
                return state

        cls.transfer = transfer_

    f = have("check_xfer_state")
    if f is not None:
        check_xfer_state = f

        plain = [("self", inspect.Parameter.empty), ("handle", inspect.Parameter.empty)]
        if _plain_params(check_xfer_state) == plain:
            # NIXL's own signature: no *args/**kwargs, so a poll allocates
            # nothing (an empty **kwargs is a new dict per call).
            @functools.wraps(check_xfer_state)
            def check_xfer_state_(self, handle):
                try:
                    state = check_xfer_state(self, handle)
                except Exception as e:
                    xfer_state(self, handle, None, e)
                    raise
                if state == "PROC":
                    return state
                xfer_state(self, handle, state, None)
                return state

        else:

            @functools.wraps(check_xfer_state)
            def check_xfer_state_(self, handle, *args, **kwargs):
                try:
                    state = check_xfer_state(self, handle, *args, **kwargs)
                except Exception as e:
                    xfer_state(self, handle, None, e)
                    raise
                if state == "PROC":
                    return state
                xfer_state(self, handle, state, None)
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

    f = have("get_xfer_descs")
    if f is not None:
        get_xfer_descs = f

        # The list NIXL made is summarised now, from the same input NIXL
        # read (an N×3 array in place, else the list's serialised form): a
        # request over it then costs a lookup, whatever its length.
        @functools.wraps(get_xfer_descs)
        def get_xfer_descs_(self, *args, **kwargs):
            made = get_xfer_descs(self, *args, **kwargs)
            native.xfer_descs_made(made, args, kwargs)
            return made

        cls.get_xfer_descs = get_xfer_descs_

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
            native.notified(self, "send", None, None, args, kwargs)
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


def _plain_params(f):
    """``f``'s parameters as (name, default) pairs when all are plain
    positional-or-keyword ones (``inspect.Parameter.empty``: no default),
    else None."""
    import inspect

    try:
        params = list(inspect.signature(f).parameters.values())
    except (TypeError, ValueError):
        return None
    if any(p.kind is not p.POSITIONAL_OR_KEYWORD for p in params):
        return None
    return [(p.name, p.default) for p in params]


def wrap_handles(module, native, mark):
    """Wraps the release of NIXL's transfer and prepared-list handles
    (``release()``, and ``__del__`` when a handle is collected), once (a
    class wrapped already carries the attribute ``mark``): a transfer still
    in flight then ends as released in flight. The extension knows each
    handle object it saw created and ends it once, on its first release
    that returns or at its collection, whichever comes first; NIXL's private
    state (``_released``) is never read. A release that raises (NIXL could
    not cancel the transfer and keeps the handle) records nothing: the
    transfer is still in flight. The caller (``_hook``) hands the mark over,
    so this module imports nothing of the package."""
    import functools

    for cls_name, released in (("nixl_xfer_handle", "xfer_released"), ("nixl_prepped_dlist_handle", "dlist_released")):
        cls = getattr(module, cls_name, None)
        if not isinstance(cls, type) or getattr(cls, mark, False):
            continue
        note = getattr(native, released)
        release = getattr(cls, "release", None)
        finalize = getattr(cls, "__del__", None)
        if release is not None:

            def make_release(release=release, note=note):
                @functools.wraps(release)
                def release_(self):
                    result = release(self)
                    note(self)
                    return result

                return release_

            cls.release = make_release()
        if finalize is not None:

            def make_finalize(finalize=finalize, note=note):
                @functools.wraps(finalize)
                def finalize_(self):
                    try:
                        finalize(self)
                    finally:
                        try:
                            note(self)
                        except Exception:
                            pass

                return finalize_

            cls.__del__ = make_finalize()
        setattr(cls, mark, True)
