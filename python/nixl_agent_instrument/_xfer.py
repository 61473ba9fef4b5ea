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

    _wrap_map_notifs(cls, native, have, functools)
    return originals


def _wrap_map_notifs(cls, native, have, functools):
    """``update_notifs`` and ``check_remote_xfer_done``: NIXL's ``getNotifs``
    returns a new map of the agent (``self.notifs``), each peer's old
    messages followed by those that arrived, and leaves the old map as it
    was; ``check_remote_xfer_done`` then removes the first message of the
    peer that matches the tag, the old ones scanned first. Each message
    delivered counts once as received, as the interposer counts
    ``getNotifs``: from the peers' lengths in the old map and the new one,
    and the one removed, old or new. A poll that found nothing and got
    nothing holds the old map a moment and reads lengths, nothing else: it
    never reaches the extension."""
    grew = native.notifs_grew
    # Set when a map changed in place (not NIXL's binding): what it held
    # before a call is not known, so nothing more is counted.
    blind = []

    def failed(e):
        try:
            native.hook_failed("notification", f"{type(e).__name__}: {e}")
        except Exception:
            pass

    def record(self, held, e=None, peer=None, tag=None, prefix=True, found=None):
        """After the call: ``held`` the agent's map before it, ``e`` what
        NIXL raised, ``found`` what ``check_remote_xfer_done`` returned."""
        try:
            now = self.notifs
            if not isinstance(held, dict) or now is held or any(now.get(k) is v for k, v in held.items()):
                if e is not None:
                    # getNotifs did not answer: a failed call.
                    native.notified(self, "receive", None, e)
                elif not blind:
                    blind.append(True)
                    raise TypeError("the agent's notification map changed in place: its notifications are not counted")
                return
            before = {k: len(v) for k, v in held.items()}
            if found is True:
                grew(self, now, before, *_removed(now, peer, tag, prefix, held.get(peer)))
            elif _longer(now, held):
                grew(self, now, before)
        except Exception as inner:
            failed(inner)

    def unchanged(self, held):
        """Whether the map NIXL left holds what ``held`` held (the hot path:
        a poll that got nothing)."""
        try:
            now = self.notifs
            if now is held or len(now) != len(held):
                return False
            for k, v in now.items():
                o = held.get(k)
                if o is None or len(v) != len(o):
                    return False
            return True
        except Exception:
            return False

    f = have("update_notifs")
    if f is not None:
        update_notifs = f
        plain = _plain_params(update_notifs)
        if plain is not None and [n for n, _ in plain] == ["self", "backends"]:
            default = plain[1][1]

            # NIXL's own signature: no **kwargs dict per poll, and the
            # default is NIXL's own object.
            def update_notifs_(self, backends=default):
                if blind:
                    return update_notifs(self, backends)
                try:
                    held = self.notifs
                except Exception:
                    held = None
                try:
                    notifs = update_notifs(self, backends)
                except Exception as e:
                    record(self, held, e)
                    raise
                if not unchanged(self, held):
                    record(self, held)
                return notifs

        else:

            def update_notifs_(self, *args, **kwargs):
                if blind:
                    return update_notifs(self, *args, **kwargs)
                try:
                    held = self.notifs
                except Exception:
                    held = None
                try:
                    notifs = update_notifs(self, *args, **kwargs)
                except Exception as e:
                    record(self, held, e)
                    raise
                if not unchanged(self, held):
                    record(self, held)
                return notifs

        cls.update_notifs = functools.wraps(update_notifs)(update_notifs_)

    f = have("check_remote_xfer_done")
    if f is not None:
        check = f
        plain = _plain_params(check)
        names = ["self", "remote_agent_name", "lookup_tag", "backends", "tag_is_prefix"]
        if plain is not None and [n for n, _ in plain] == names:
            d_backends, d_prefix = plain[3][1], plain[4][1]

            # NIXL's own signature: no **kwargs dict per poll.
            def check_remote_xfer_done_(
                self, remote_agent_name, lookup_tag, backends=d_backends, tag_is_prefix=d_prefix
            ):
                if blind:
                    return check(self, remote_agent_name, lookup_tag, backends, tag_is_prefix)
                try:
                    held = self.notifs
                except Exception:
                    held = None
                try:
                    found = check(self, remote_agent_name, lookup_tag, backends, tag_is_prefix)
                except Exception as e:
                    record(self, held, e)
                    raise
                if found is not True and unchanged(self, held):
                    return found
                record(self, held, None, remote_agent_name, lookup_tag, tag_is_prefix, found)
                return found

        else:

            def check_remote_xfer_done_(self, *args, **kwargs):
                if blind:
                    return check(self, *args, **kwargs)
                try:
                    held = self.notifs
                except Exception:
                    held = None
                try:
                    found = check(self, *args, **kwargs)
                except Exception as e:
                    record(self, held, e)
                    raise
                if found is not True and unchanged(self, held):
                    return found
                peer = args[0] if args else kwargs.get("remote_agent_name")
                tag = args[1] if len(args) > 1 else kwargs.get("lookup_tag")
                prefix = args[3] if len(args) > 3 else kwargs.get("tag_is_prefix", True)
                record(self, held, None, peer, tag, prefix, found)
                return found

        cls.check_remote_xfer_done = functools.wraps(check)(check_remote_xfer_done_)


def _longer(now, held):
    """Whether the agent's map ``now`` holds more than ``held``, the one
    before the call (``getNotifs`` only appends, to new lists)."""
    if len(now) != len(held):
        return True
    for k, v in now.items():
        o = held.get(k)
        if o is None or len(v) != len(o):
            return True
    return False


def _removed(now, peer, tag, prefix, old):
    """The message ``check_remote_xfer_done`` found for ``tag`` in
    ``peer``'s list, as the extension's ``removed_from`` and
    ``removed_new``: NIXL scans the old messages (``old``, the peer's list
    before the call) then the new ones, and removes the first that matches
    when it is not empty. () when nothing was removed; (peer,) for an old
    one; (peer, tag) for a new one, classified by the tag it matched."""
    for m in old or ():
        if m.startswith(tag) if prefix else tag in m:
            return (peer,) if m else ()
    if tag:
        return (peer, tag)
    # An empty tag matched the first new message, removed when not empty:
    # an empty one where the new ones start is taken as that one.
    b = len(old or ())
    mine = now.get(peer)
    if mine is not None and len(mine) > b and not mine[b]:
        return ()
    return (peer, tag)


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
