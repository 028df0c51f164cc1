"""Left only for ``remedy_actions.py`` (``from .kube_connection import KUBE_MUTATING``), which this change
must not edit while it becomes a controller elsewhere; the Kubernetes parts are controllers/kube*.py.
Delete this file once remedy_actions imports KUBE_MUTATING from controllers/kube_connection.py."""

from .controllers.kube_connection import KUBE_MUTATING

__all__ = ["KUBE_MUTATING"]
