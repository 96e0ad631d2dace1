"""Finding the portal account of a user name an organization sign-in gives.

Both backends name accounts in lower case and find them whatever the case of an older
account. Django's ``iexact`` compares with PostgreSQL's ``UPPER``, which also folds letters
that are not case variants in Python (a dotless ``ı`` is ``I``): ``rıck``, another
person's name, found ``rick``. ``accounts_named`` keeps only the accounts whose name is the
given one in Python's lower case.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model


def accounts_named(name: str) -> list[Any]:
    """The accounts whose user name, lower-cased, is ``name`` lower-cased (at most one,
    unless accounts differing only in case were made by hand)."""
    wanted = name.lower()
    model = get_user_model()
    candidates = model.objects.filter(**{f"{model.USERNAME_FIELD}__iexact": name})
    return [user for user in candidates if user.get_username().lower() == wanted]
