"""The password hasher of a sign-in: Argon2id at OWASP's parameters (#15 item 11).

Django's ``Argon2PasswordHasher`` defaults to 100 MiB of memory and 8 lanes a check. On the
2-core machine the portal shares with its loop and worker, one such check took 0.7 s at
load 20 (PBKDF2 at 1,000,000 iterations: 0.8 s), so putting it first in
``PASSWORD_HASHERS`` did not make a sign-in faster. OWASP's password storage cheat sheet
gives Argon2id with 19 MiB, 2 passes and 1 lane as its first configuration: memory-hard
as Django's default, at a cost that fits a 2-core server (76 ms at the same moment).

The algorithm name stays ``argon2``: hashes written with Django's default parameters
still verify (the parameters are read from each hash) and are rewritten with these at
the user's next sign-in (``must_update``).
"""

from __future__ import annotations

from django.contrib.auth.hashers import Argon2PasswordHasher


class OwaspArgon2PasswordHasher(Argon2PasswordHasher):
    """Argon2id, 19 MiB of memory, 2 passes, 1 lane (OWASP's first configuration)."""

    time_cost = 2
    memory_cost = 19 * 1024  # KiB
    parallelism = 1
