"""Sign-in with the organization's identity: LDAP and OpenID Connect (docs/deploy.md, "Identity").

- ``config``: the settings of both, read from the environment (neither is on unless configured);
- ``accounts``: the account of a user name, whatever its case (not PostgreSQL's folding);
- ``sync``: applies the groups of a sign-in (``core.identity``) through ``core.people``;
- ``ldap_backend``: django-auth-ldap, with the groups mapped and a directory outage said on
  the login page;
- ``oidc``: mozilla-django-oidc, the provider found from its issuer (discovery), with the
  same mapping from the groups claim;
- ``notices``: what the login page tells the person when a sign-in method is unavailable;
- ``sweep`` and ``provider_sweep``: people the directory, or the provider, no longer has
  lose the account, and the others get what their groups give now, without signing in
  (``refresh_tokens`` keeps the provider's tokens).

Local accounts (Django's ``ModelBackend``, first in ``AUTHENTICATION_BACKENDS``) keep working
whatever the directory or the provider do: the break-glass admins.
"""
