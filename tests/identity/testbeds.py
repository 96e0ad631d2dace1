"""The organization's identity services, real and throw-away, for the sign-in tests.

``Directory``: Debian's OpenLDAP ``slapd`` on a loopback port, its own ``slapd.conf`` and
database in a temporary folder (loaded with ``slapadd`` before it starts), run in the
foreground as a child of the tests: people under ``ou=people``, ``groupOfNames`` groups
under ``ou=groups``, and a service account the portal searches with. ``stop()`` is a
directory outage; ``start()`` brings it back with the same data.

``OidcProvider``: ``oidc-provider`` from npm (pinned in ``package.json``, installed with
``npm ci`` here when ``node_modules`` is missing) run by ``oidc_provider.mjs``, with the
accounts in a JSON file read again at every sign-in.

Recipes and traps: TESTBEDS.md of the shared docs ("Organization components").
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUFFIX = "dc=example,dc=org"
PEOPLE = f"ou=people,{SUFFIX}"
GROUPS = f"ou=groups,{SUFFIX}"
SERVICE_DN = f"cn=portal,ou=services,{SUFFIX}"
SERVICE_PASSWORD = "portal-service-pw"  # noqa: S105 - a throw-away directory
ROOT_DN = f"cn=admin,{SUFFIX}"
ROOT_PASSWORD = "directory-root-pw"  # noqa: S105
NOBODY = f"cn=nobody,{SUFFIX}"  # groupOfNames needs a member: every group has this one

SLAPD = "/usr/sbin/slapd"
SLAPADD = "/usr/sbin/slapadd"
INSTALL_HINT = "apt-get install -y slapd ldap-utils (.ci/run does it)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float, what: str, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not open port {port} within {timeout:.0f} s")


def ssha(password: str) -> str:
    """An ``{SSHA}`` userPassword value, as slappasswd makes."""
    salt = os.urandom(8)
    digest = hashlib.sha1(password.encode() + salt).digest()  # noqa: S324 - LDAP's format
    return "{SSHA}" + base64.b64encode(digest + salt).decode()


@dataclass
class Person:
    uid: str
    password: str
    groups: set[str] = field(default_factory=set)
    given_name: str = ""
    surname: str = ""

    @property
    def dn(self) -> str:
        return f"uid={self.uid},{PEOPLE}"


class Directory:
    """A throw-away OpenLDAP directory (see the module docstring)."""

    def __init__(self, root: Path, people: list[Person], groups: list[str]) -> None:
        for binary in (SLAPD, SLAPADD):
            if not Path(binary).exists():
                raise RuntimeError(f"{binary} is missing: {INSTALL_HINT}")
        self.root = root
        self.people = {p.uid: p for p in people}
        self.groups = list(groups)
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.deleted: set[str] = set()  # people delete_person took out
        self.conf = root / "slapd.conf"
        self._write_config()
        self._load()

    @property
    def uri(self) -> str:
        return f"ldap://127.0.0.1:{self.port}"

    def _write_config(self) -> None:
        (self.root / "db").mkdir(parents=True)
        schema = "\n".join(
            f"include /etc/ldap/schema/{name}.schema"
            for name in ("core", "cosine", "inetorgperson")
        )
        self.conf.write_text(
            f"""{schema}
modulepath /usr/lib/ldap
moduleload back_mdb
pidfile {self.root}/slapd.pid
database mdb
maxsize 16777216
suffix "{SUFFIX}"
rootdn "{ROOT_DN}"
rootpw {ROOT_PASSWORD}
directory {self.root}/db
access to attrs=userPassword by self read by anonymous auth by * none
access to * by users read by * none
"""
        )

    def _ldif(self) -> str:
        entries = [
            f"dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\no: Example\ndc: example",
            *(
                f"dn: ou={ou},{SUFFIX}\nobjectClass: organizationalUnit\nou: {ou}"
                for ou in ("people", "groups", "services")
            ),
            f"dn: {SERVICE_DN}\nobjectClass: organizationalRole\nobjectClass: simpleSecurityObject\n"
            f"cn: portal\nuserPassword: {ssha(SERVICE_PASSWORD)}",
        ]
        for p in self.people.values():
            entries.append(
                f"dn: {p.dn}\nobjectClass: inetOrgPerson\nuid: {p.uid}\ncn: {p.given_name or p.uid}"
                f" {p.surname or p.uid}\nsn: {p.surname or p.uid}\ngivenName: {p.given_name or p.uid}"
                f"\nmail: {p.uid}@example.org\nuserPassword: {ssha(p.password)}"
            )
        for group in self.groups:
            members = [NOBODY] + [p.dn for p in self.people.values() if group in p.groups]
            entries.append(
                f"dn: cn={group},{GROUPS}\nobjectClass: groupOfNames\ncn: {group}\n"
                + "\n".join(f"member: {m}" for m in members)
            )
        return "\n\n".join(entries) + "\n"

    def _load(self) -> None:
        ldif = self.root / "data.ldif"
        ldif.write_text(self._ldif())
        subprocess.run(
            [SLAPADD, "-f", str(self.conf), "-l", str(ldif)],
            check=True, capture_output=True, timeout=30,
        )  # fmt: skip

    def start(self) -> Directory:
        log = (self.root / "slapd.log").open("ab")
        self.proc = subprocess.Popen(
            [SLAPD, "-h", self.uri, "-f", str(self.conf), "-d", "0"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        wait_port(self.port, 15, "slapd", self.proc)
        return self

    def stop(self) -> None:
        """Stop the directory (an outage); ``start()`` brings it back."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def set_groups(self, uid: str, groups: set[str]) -> None:
        """Make ``uid`` a member of exactly ``groups`` (an HR change in the directory)."""
        import ldap

        person = self.people[uid]
        conn = ldap.initialize(self.uri)
        try:
            conn.simple_bind_s(ROOT_DN, ROOT_PASSWORD)
            for group in self.groups:
                dn = f"cn={group},{GROUPS}"
                if group in groups and group not in person.groups:
                    conn.modify_s(dn, [(ldap.MOD_ADD, "member", [person.dn.encode()])])
                elif group not in groups and group in person.groups:
                    conn.modify_s(dn, [(ldap.MOD_DELETE, "member", [person.dn.encode()])])
        finally:
            conn.unbind_s()
        person.groups = set(groups)

    def _root(self):
        import ldap

        conn = ldap.initialize(self.uri)
        conn.simple_bind_s(ROOT_DN, ROOT_PASSWORD)
        return conn

    def delete_person(self, uid: str) -> None:
        """Delete ``uid``'s entry (someone who left), as a directory without the referential
        integrity overlay does: their ``member`` values stay in the groups, naming nobody."""
        conn = self._root()
        try:
            conn.delete_s(self.people[uid].dn)
        finally:
            conn.unbind_s()
        self.deleted.add(uid)

    def restore_person(self, uid: str) -> None:
        """Bring back the entry ``delete_person`` deleted (same DN, same password)."""
        import ldap.modlist

        p = self.people[uid]
        entry = {
            "objectClass": [b"inetOrgPerson"], "uid": [p.uid.encode()],
            "cn": [f"{p.given_name or p.uid} {p.surname or p.uid}".encode()],
            "sn": [(p.surname or p.uid).encode()], "givenName": [(p.given_name or p.uid).encode()],
            "mail": [f"{p.uid}@example.org".encode()], "userPassword": [ssha(p.password).encode()],
        }  # fmt: skip
        conn = self._root()
        try:
            conn.add_s(p.dn, ldap.modlist.addModlist(entry))
        finally:
            conn.unbind_s()
        self.deleted.discard(uid)

    def set_attribute(self, uid: str, attribute: str, value: bytes) -> None:
        """Replace ``attribute`` of ``uid``'s entry with ``value`` (raw bytes: the directory
        holds whatever it is given)."""
        import ldap

        conn = ldap.initialize(self.uri)
        try:
            conn.simple_bind_s(ROOT_DN, ROOT_PASSWORD)
            conn.modify_s(self.people[uid].dn, [(ldap.MOD_REPLACE, attribute, [value])])
        finally:
            conn.unbind_s()

    def portal_env(self, **mapping: str) -> dict[str, str]:
        """The portal's environment for this directory (docs/deploy.md, "Identity")."""
        return {
            "LDAP_SERVER_URI": self.uri,
            "LDAP_BIND_DN": SERVICE_DN,
            "LDAP_BIND_PASSWORD": SERVICE_PASSWORD,
            "LDAP_USER_SEARCH_BASE": PEOPLE,
            "LDAP_GROUP_SEARCH_BASE": GROUPS,
            "LDAP_TIMEOUT": "2",
            **mapping,
        }


def ensure_node_modules() -> None:
    """``npm ci`` the provider's pinned packages when they are not installed yet."""
    if (HERE / "node_modules" / "oidc-provider" / "package.json").exists():
        return
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise RuntimeError("node and npm are needed for the OpenID Connect provider (.ci/run)")
    subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=HERE, check=True, capture_output=True, timeout=300,
    )  # fmt: skip


class OidcProvider:
    """``oidc-provider`` on a loopback port with the accounts of ``accounts`` (module docstring)."""

    CLIENT_ID = "gpu-portal"
    CLIENT_SECRET = "gpu-portal-client-secret-0123456789"  # noqa: S105 - a throw-away provider

    def __init__(self, root: Path, accounts: dict[str, dict], redirect_uris: list[str]) -> None:
        ensure_node_modules()
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.accounts_file = root / "accounts.json"
        self.accounts = accounts
        self.write_accounts()
        self.config = root / "provider.json"
        self.config.write_text(
            json.dumps(
                {
                    "port": self.port,
                    "issuer": self.issuer,
                    "accounts": str(self.accounts_file),
                    "clients": [
                        {
                            "client_id": self.CLIENT_ID,
                            "client_secret": self.CLIENT_SECRET,
                            "redirect_uris": redirect_uris,
                        }
                    ],
                }
            )
        )
        self.proc: subprocess.Popen | None = None

    def write_accounts(self) -> None:
        tmp = self.accounts_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.accounts))
        tmp.replace(self.accounts_file)

    def set_groups(self, login: str, groups: list[str]) -> None:
        self.accounts[login]["groups"] = list(groups)
        self.write_accounts()

    def start(self) -> OidcProvider:
        log = (self.root / "provider.log").open("ab")
        self.proc = subprocess.Popen(
            ["node", str(HERE / "oidc_provider.mjs"), str(self.config)],
            cwd=HERE, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        wait_port(self.port, 30, "the OpenID Connect provider", self.proc)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def portal_env(self, **mapping: str) -> dict[str, str]:
        return {
            "OIDC_ISSUER": self.issuer,
            "OIDC_CLIENT_ID": self.CLIENT_ID,
            "OIDC_CLIENT_SECRET": self.CLIENT_SECRET,
            "OIDC_LABEL": "Example Corp SSO",
            "OIDC_TIMEOUT": "5",
            **mapping,
        }
