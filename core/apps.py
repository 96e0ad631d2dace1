from django.apps import AppConfig


class CoreConfig(AppConfig):
    """The base layer as a Django app: people, roles, the audit log.

    Its label stays ``portal`` (these models lived in ``portal`` before the shell and
    the base were split), so the tables, migration history, content types and admin
    URLs of an existing deployment are unchanged.
    """

    name = "core"
    label = "portal"
    verbose_name = "Portal: people, roles, audit"
