from django.http import HttpRequest

from core.roles import role_of


def role(request: HttpRequest) -> dict:
    """Expose the user's role to templates (display only; checks happen on the server)."""
    return {"portal_role": role_of(getattr(request, "user", None))}
