"""``{% sign_in_methods as methods %}``: the sign-in methods the login page offers.

``methods.sso_label`` is the organization's single sign-on (OpenID Connect) when it is
configured, else empty; ``methods.directory`` is true when the directory (LDAP) accepts
its passwords in the form. Local accounts always sign in with the form.
"""

from __future__ import annotations

from django import template
from django.conf import settings

register = template.Library()


@register.simple_tag
def sign_in_methods() -> dict[str, object]:
    sso = bool(getattr(settings, "OIDC_ENABLED", False))
    return {
        "sso_label": getattr(settings, "OIDC_LABEL", "") if sso else "",
        "directory": bool(getattr(settings, "LDAP_ENABLED", False)),
    }
