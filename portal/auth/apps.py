"""``portal.auth`` as a Django app: its one model (``DirectoryAccount``), the directory
sweep's beat task (``portal/auth/tasks.py``) and ``manage.py sync_directory``."""

from django.apps import AppConfig


class PortalAuthConfig(AppConfig):
    """Label ``portal_auth``: ``auth`` is Django's."""

    name = "portal.auth"
    label = "portal_auth"
    verbose_name = "Organization sign-in"
