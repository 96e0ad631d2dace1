from django.apps import AppConfig


class PortalShellConfig(AppConfig):
    """The shell on top (settings, URLs, web server, beat schedule) as a Django app, so its
    management commands (``prune``, ``check_health``) and beat tasks (``portal/tasks.py``)
    are found. No models. Its label is ``shell``: ``portal`` is the base layer's label
    (core/apps.py)."""

    name = "portal"
    label = "shell"
    verbose_name = "Portal shell"
