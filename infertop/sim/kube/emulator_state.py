"""What the emulator's parts share, declared once for the type checker.

:class:`~.server.KubeEmulator` is built of parts that are its base classes (access control, the
seeding helpers, pod runtime and logs): their methods are the emulator's public API. Each part
reads the emulator's state; :class:`EmulatorState` names that state and its types. It holds no
value: ``KubeEmulator.__init__`` sets every attribute, and the emulator (or the part that defines
one) provides the methods declared here as callables.
"""

from __future__ import annotations

import random
import threading
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from .api import Api
    from .controllers import Controllers
    from .hpa import HpaController
    from .logs import ContainerLog
    from .store import Store

#: ``allocate(namespace, pod_name)``: ``(ip, port)``, ``WAIT`` or None (see ``set_endpoint_allocator``).
EndpointAllocator = Callable[[str, str], "tuple[str, int | None] | str | None"]


class EmulatorState:
    """The emulator's shared state (annotations only; see the module docstring)."""

    # identity and access
    token: str | None
    username: str
    _rules: list[tuple] | None
    # the objects and the control plane
    clock: Callable[[], float]
    rng: random.Random
    store: Store
    api: Api
    controllers: Controllers
    hpa_controller: HpaController | None
    strict_namespaces: bool
    _stopping: bool
    _node_count: int
    # pod runtime: failure modes, endpoints, readiness, logs
    _image_failures: list[tuple[str, str]]
    _args_failures: list[tuple[Any, str, int, str]]
    _endpoints: list[tuple[str, str | None, str, int | None]]
    _allocator: EndpointAllocator | None
    _ready_overrides: dict[tuple[str, str], bool]
    _hpa_pinned: dict[tuple[str, str], set]
    _logs: dict[tuple[str, str, str], ContainerLog]
    _logs_changed: threading.Condition
    # methods of the emulator that its parts call
    _poke: Callable[[], None]
    get: Callable[..., "dict | None"]
    _ensure_namespace: Callable[[str], None]
