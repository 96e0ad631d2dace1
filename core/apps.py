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

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_out

        user_logged_out.connect(_close_the_sessions_connections, dispatch_uid="core.sign_out")


def _close_the_sessions_connections(sender, request, user, **kwargs) -> None:
    """Sign-out ends the session's live connections too (``core.realtime``)."""
    from core import realtime

    session_key = getattr(getattr(request, "session", None), "session_key", None)
    if session_key:
        realtime.close_live_connections(session_key=session_key, reason="signed out")
