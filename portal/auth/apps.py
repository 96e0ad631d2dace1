"""``portal.auth`` as a Django app: its models (``DirectoryAccount``, ``ProviderAccount``),
the sweeps' beat tasks (``portal/auth/tasks.py``), ``manage.py sync_directory`` and
``manage.py sweep_provider``; an offboarded person's refresh token revoked at the provider
(``portal.auth.revocation.offboarded``)."""

from django.apps import AppConfig


class PortalAuthConfig(AppConfig):
    """Label ``portal_auth``: ``auth`` is Django's."""

    name = "portal.auth"
    label = "portal_auth"
    verbose_name = "Organization sign-in"

    def ready(self) -> None:
        from core.people import offboarded
        from portal.auth.revocation import offboarded as revoke_offboarded

        offboarded.connect(revoke_offboarded, dispatch_uid="portal.auth.revocation.offboarded")
