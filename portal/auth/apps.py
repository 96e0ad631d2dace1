"""``portal.auth`` as a Django app: its models (``DirectoryAccount``, ``ProviderAccount``),
the sweeps' beat tasks (``portal/auth/tasks.py``), ``manage.py sync_directory`` and
``manage.py sweep_provider``."""

from django.apps import AppConfig


class PortalAuthConfig(AppConfig):
    """Label ``portal_auth``: ``auth`` is Django's."""

    name = "portal.auth"
    label = "portal_auth"
    verbose_name = "Organization sign-in"
