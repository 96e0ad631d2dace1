"""Finding the portal account of a user name an organization sign-in gives.

Both backends name accounts in lower case and find them whatever the case of an older
account. Django's ``iexact`` compares with PostgreSQL's ``UPPER``, which also folds letters
that are not case variants in Python (a dotless ``ı`` is ``I``): ``rıck``, another
person's name, found ``rick``. ``accounts_named`` keeps only the accounts whose name is the
given one in Python's lower case.

``profile_text`` is what an account keeps of the e-mail and names a sign-in brings (the
directory's ``mail``, ``givenName``, ``sn``; the provider's ``email``, ``given_name``,
``family_name``), which were copied as they came: a list, a NUL or a value longer than its
column was a 500 at sign-in.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password

from core.security import has_control_characters


def accounts_named(name: str) -> list[Any]:
    """The accounts whose user name, lower-cased, is ``name`` lower-cased (at most one,
    unless accounts differing only in case were made by hand)."""
    wanted = name.lower()
    model = get_user_model()
    candidates = model.objects.filter(**{f"{model.USERNAME_FIELD}__iexact": name})
    return [user for user in candidates if user.get_username().lower() == wanted]


def make_account(name: str) -> tuple[Any, bool]:
    """The account ``name`` for a sign-in, made now with no usable password (it signs in
    through the directory or the provider only) unless another sign-in of the same person
    made it a moment ago: (account, made). Two first sign-ins at once (a double click, two
    tabs) both made it, and the second was a 500."""
    model = get_user_model()
    return model.objects.get_or_create(
        **{model.USERNAME_FIELD: name}, defaults={"password": make_password(None)}
    )


def profile_text(field: str, value: object) -> str | None:
    """``value`` as the account's ``field`` (``email``, ``first_name``, ``last_name``), or
    None when it cannot be that: not text, holding a control character (PostgreSQL refuses
    NUL; a terminal escape is no name), or an e-mail longer than its column (cut, it would
    be another address). A name longer than its column is cut to it."""
    if not isinstance(value, str) or has_control_characters(value):
        return None
    limit = get_user_model()._meta.get_field(field).max_length
    if limit is not None and len(value) > limit:
        return None if field == "email" else value[:limit]
    return value
