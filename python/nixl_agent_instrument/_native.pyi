# The extension module (python/native/src: lib.rs, agents.rs, registrations.rs,
# xfer_args.rs, dlists.rs).
# Checked against the built module by tests/python_stub.rs (mypy's stubtest).
from typing import Any, Callable, Optional, Union

__all__ = [
    "RegistrationRefused",
    "DEFAULT_LISTEN",
    "VERSION",
    "BUFFER_HOLDERS",
    "RANK_HOLDERS",
    "settings_error",
    "explicit_group",
    "start",
    "shutdown",
    "output_tapped",
    "drain_output",
    "rank",
    "after_fork_in_child",
    "address",
    "metrics_text",
    "status_json",
    "agent_creating",
    "agent_created",
    "agent_released",
    "agent_failed",
    "backend",
    "hook_failed",
    "nixl_called",
    "register",
    "deregister",
    "hand_down",
    "hand_down_done",
    "hand_down_process",
    "interposer",
    "clock_base",
    "xfer_posted",
    "xfer_state",
    "xfer_created",
    "xfer_create_failed",
    "dlist_prepped",
    "xfer_descs_made",
    "xfer_released",
    "dlist_released",
    "peer",
    "notified",
    "notifs_grew",
]

class RegistrationRefused(ValueError): ...

DEFAULT_LISTEN: str
VERSION: str
# Attribute paths on a framework's ``self`` (``kv_args.kv_data_ptrs``): where
# buffers' addresses are kept, and where a process's rank is.
BUFFER_HOLDERS: tuple[str, ...]
RANK_HOLDERS: tuple[str, ...]

# The process: settings, the recording, what it serves.
def settings_error() -> Optional[str]: ...
def explicit_group(name: str, kind: Optional[str] = None) -> tuple[str, str]: ...
def start(frameworks: list[str], rank_hint: Optional[int] = None) -> Optional[str]: ...
def rank() -> Optional[int]: ...
def shutdown(exception: Optional[str] = None) -> None: ...
def output_tapped() -> bool: ...
def drain_output() -> None: ...
def after_fork_in_child() -> None: ...
def address() -> Optional[str]: ...
def metrics_text() -> Optional[str]: ...
def status_json() -> Optional[str]: ...

# NIXL agents, their backends and registrations.
def agent_creating(agent: object) -> None: ...
def agent_created(agent: object, name: str, plugins: list[str], telemetry: bool = False) -> Optional[int]: ...
def agent_released(id: int) -> None: ...
def agent_failed(error: BaseException, agent: Optional[object] = None) -> None: ...
def backend(agent: object, name: str, seconds: float, error: Optional[BaseException] = None) -> None: ...
def hook_failed(operation: str, message: str) -> None: ...
# A call counted only by method (NIXL's C++ name, one of the interposer's
# table's plain methods: `queryMem`) and how it ended (``_hook.COUNTED``).
def nixl_called(method: str, error: Optional[BaseException] = None) -> None: ...
# What names a registration's group: an explicit block's (group, kind), or
# the call site's (module, function, argument, holder) (``_site.facts``).
_Site = Union[tuple[str, str], tuple[str, str, Optional[str], Optional[str]]]

def register(
    site: _Site, func: Callable[..., Any], self_: Any, args: tuple[Any, ...], kwargs: Optional[dict[str, Any]] = None
) -> Any: ...
def deregister(
    func: Callable[..., Any], self_: Any, args: tuple[Any, ...], kwargs: Optional[dict[str, Any]] = None
) -> Any: ...

# Under the interposer (`nixl-agent instrument`): True when it records every
# NIXL call, the reason it refused this NIXL build, or None without one;
# `hand_down` gives it the group `site` names for this thread's next call.
def interposer() -> Union[bool, str, None]: ...
def hand_down(site: _Site) -> bool: ...
def hand_down_done() -> None: ...
def hand_down_process(frameworks: list[str], rank_hint: Optional[int] = None) -> bool: ...

# The data path (python/nixl_agent_instrument/_xfer.py): each is handed what
# NIXL's method was given and what it returned or raised, after the call.
# `handle`: NIXL's handle object (`nixl_xfer_handle`, `nixl_prepped_dlist_handle`).
def clock_base(now_ns: int) -> None: ...
def xfer_posted(handle: object, t0_ns: int, state: Optional[str], error: Optional[BaseException]) -> None: ...
def xfer_state(agent: object, handle: object, state: Optional[str], error: Optional[BaseException]) -> None: ...
def xfer_created(
    agent: object, method: str, handle: object, args: tuple[Any, ...], kwargs: Optional[dict[str, Any]] = None
) -> None: ...
def xfer_create_failed(
    agent: object, method: str, args: tuple[Any, ...], kwargs: Optional[dict[str, Any]], error: BaseException
) -> None: ...
def dlist_prepped(agent: object, handle: object, args: tuple[Any, ...], kwargs: Optional[dict[str, Any]] = None) -> None: ...
def xfer_descs_made(list: object, args: tuple[Any, ...], kwargs: Optional[dict[str, Any]] = None) -> None: ...
def xfer_released(handle: object) -> None: ...
def dlist_released(handle: object) -> None: ...
def peer(
    agent: object,
    event: str,
    args: tuple[Any, ...],
    kwargs: Optional[dict[str, Any]],
    result: object,
    error: Optional[BaseException],
) -> None: ...
def notified(
    agent: object,
    direction: str,
    notifs: object,
    error: Optional[BaseException],
    args: Optional[tuple[Any, ...]] = None,
    kwargs: Optional[dict[str, Any]] = None,
) -> None: ...
def notifs_grew(
    agent: object,
    notifs: dict[Any, Any],
    before: dict[Any, int],
    removed_from: object = None,
    removed_new: object = None,
) -> None: ...
