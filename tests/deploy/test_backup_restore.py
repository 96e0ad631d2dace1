"""The backup and restore drill of docs/deploy.md, on a real PostgreSQL (#17).

The same commands as the guide, with only the connection translated (``-h 127.0.0.1 -p
<test port> -U postgres`` where the guide runs them inside the ``postgres`` container as
``portal``): ``pg_dump -Fc`` of a database with jobs, events, alerts and audit records;
``createdb`` of a new database and ``pg_restore --no-owner --exit-on-error`` into it;
``deploy/scripts/row_counts.sql`` on both gives the same rows for every table; and the
restored copy needs no migration (``manage.py migrate --check``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
from django.conf import settings
from django.db import connection

from tests.deploy.stack import ROOT

pytestmark = pytest.mark.django_db(transaction=True)


def connection_args() -> list[str]:
    db = settings.DATABASES["default"]
    return ["-h", db["HOST"], "-p", str(db["PORT"]), "-U", db["USER"]]


def run(*argv: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, input=stdin, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done


def row_counts(database: str) -> dict[str, int]:
    sql = (ROOT / "deploy/scripts/row_counts.sql").read_bytes()
    out = run("psql", *connection_args(), "-d", database, "-At", "-v", "ON_ERROR_STOP=1",
              stdin=sql).stdout.decode()  # fmt: skip
    return {table: int(n) for table, n in (line.split("|") for line in out.splitlines())}


@pytest.fixture
def restored_name():
    name = f"restore_drill_{uuid.uuid4().hex[:8]}"
    yield name
    subprocess.run(["dropdb", *connection_args(), "--if-exists", name], capture_output=True)


def test_a_dump_restores_into_a_new_database_with_every_row(api, restored_name, tmp_path):
    client = api("researcher")
    for gpus in (4, 8, 16):
        body = {"name": f"drill-{gpus}", "queue": "llm-finetune", "gpus": gpus}
        assert client.post("/api/v1/jobs/", body, format="json").status_code == 201
    # an admin runs a cycle: jobs start (allocations, events) and it is audited
    assert api("admin").post("/api/v1/scheduler/cycle/").status_code in (200, 201)
    source = connection.settings_dict["NAME"]
    before = row_counts(source)
    assert before["scheduling_job"] > 0 and before["scheduling_jobevent"] > 0
    assert before["portal_auditrecord"] > 0 and before["django_migrations"] > 0

    dump = tmp_path / "portal.dump"
    dump.write_bytes(run("pg_dump", *connection_args(), "-d", source, "-Fc").stdout)
    run("createdb", *connection_args(), restored_name)
    run("pg_restore", *connection_args(), "-d", restored_name, "--no-owner", "--exit-on-error",
        str(dump))  # fmt: skip

    assert row_counts(restored_name) == before
    db = settings.DATABASES["default"]
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings", "DEBUG": "1",
           "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{restored_name}"}  # fmt: skip
    check = subprocess.run([sys.executable, "manage.py", "migrate", "--check"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
