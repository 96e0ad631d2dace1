"""gpuctl's configuration, HTTP client and rendering helpers, against a tiny local HTTP stub.

The stub (``http.server`` in a thread) answers from a table the test fills and records
every request, so the client's headers, paging, error lines and exit codes are checked
on the wire without a portal.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO
from urllib.parse import parse_qsl, urlsplit

import pytest

from gpuctl import __version__
from gpuctl.client import (
    EXIT_AUTH,
    EXIT_REFUSED,
    EXIT_SERVER,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    CliError,
    Config,
    Portal,
    _flatten_errors,
    config_path,
)
from gpuctl.output import fields, fmt_cell, fmt_time, print_json, table


class Stub:
    """Routes ``(METHOD, path)`` to ``(status, content type, body)``; records requests."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], object] = {}
        self.requests: list[dict] = []
        self.delay = 0.0
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                url = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                stub.requests.append({
                    "method": self.command, "path": url.path, "query": dict(parse_qsl(url.query, keep_blank_values=True)),
                    "headers": dict(self.headers), "body": json.loads(body) if body else None,
                })  # fmt: skip
                answer = stub.routes.get(
                    (self.command, url.path), (404, "text/html", "<h1>404</h1>")
                )
                if callable(answer):
                    answer = answer(stub.requests[-1])
                status, content_type, payload = answer
                time.sleep(stub.delay)
                data = payload if isinstance(payload, str) else json.dumps(payload)
                self.send_response(status)
                if content_type:
                    self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data.encode())))
                self.end_headers()
                self.wfile.write(data.encode())

            do_GET = do_POST = _serve

            def log_message(self, *args) -> None:  # keep the test output quiet
                pass

        self.server = QuietServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def json(self, method: str, path: str, body, status: int = 200) -> None:
        self.routes[(method, f"/api/v1/{path}")] = (status, "application/json", body)


class QuietServer(ThreadingHTTPServer):
    """A client that hangs up early (the timeout tests) is expected: no traceback on
    stderr, where it would land in whichever test captures stderr at that moment."""

    def handle_error(self, request, client_address) -> None:
        pass


@pytest.fixture
def stub() -> Iterator[Stub]:
    s = Stub()
    thread = threading.Thread(target=s.server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield s
    s.server.shutdown()
    s.server.server_close()


@pytest.fixture
def client(stub) -> Portal:
    return Portal(Config(url=stub.url, token="s3cret", timeout=2.0))


def failure(call) -> CliError:
    with pytest.raises(CliError) as info:
        call()
    return info.value


# -- configuration ----------------------------------------------------------------------------


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for name in ("GPUCTL_URL", "GPUCTL_TOKEN", "GPUCTL_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    return tmp_path


def test_the_config_file_is_gpuctl_config_then_xdg_then_home(clean_env, monkeypatch):
    assert config_path() == clean_env / "xdg" / "gpuctl.yaml"
    monkeypatch.setenv("GPUCTL_CONFIG", "~/elsewhere.yaml")
    assert config_path().name == "elsewhere.yaml" and "~" not in str(config_path())
    monkeypatch.delenv("GPUCTL_CONFIG")
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(clean_env / "home"))
    assert config_path() == clean_env / "home" / ".config" / "gpuctl.yaml"


def test_flag_then_environment_then_file_each_value_on_its_own(clean_env, monkeypatch):
    (clean_env / "xdg").mkdir()
    (clean_env / "xdg" / "gpuctl.yaml").write_text("url: http://file/\ntoken: file-token\n")
    assert Config.load() == Config("http://file", "file-token")
    monkeypatch.setenv("GPUCTL_TOKEN", "env-token")
    assert Config.load() == Config("http://file", "env-token")
    monkeypatch.setenv("GPUCTL_URL", "https://env//")
    assert Config.load(timeout=3) == Config("https://env", "env-token", 3)
    assert Config.load(url="http://flag:8000/").url == "http://flag:8000"


@pytest.mark.parametrize(
    "env,text,code,fragment",
    [
        ({"GPUCTL_TOKEN": "t"}, None, EXIT_UNREACHABLE, "no portal URL: set GPUCTL_URL or put url:"),
        ({"GPUCTL_URL": "http://x"}, None, EXIT_AUTH, "no API token: set GPUCTL_TOKEN"),
        ({"GPUCTL_URL": "portal:8000", "GPUCTL_TOKEN": "t"}, None, EXIT_USAGE,
         "portal URL must start with http:// or https://, not 'portal:8000'"),
        ({}, "- a list\n", EXIT_USAGE, "must be a mapping with url: and token:"),
        ({}, "url: [unclosed\n", EXIT_USAGE, "cannot read "),
        ({"GPUCTL_URL": "http://x"}, "token: ''\n", EXIT_AUTH, "no API token"),
        ({}, b"url: http://caf\xe9\n", EXIT_USAGE, "cannot read "),
        ({"GPUCTL_URL": "http://x", "GPUCTL_TOKEN": "t\u00f6ken"}, None, EXIT_AUTH,
         "the API token has characters no token has"),
        ({"GPUCTL_URL": "http://x", "GPUCTL_TOKEN": "abc\ndef"}, None, EXIT_AUTH,
         "the API token has characters no token has"),
        ({"GPUCTL_URL": "http://x"}, "token: abc def\n", EXIT_AUTH,
         "the API token has characters no token has"),
        ({}, b"url: " + b"[" * 5000, EXIT_USAGE, "cannot read "),
    ],
)  # fmt: skip
def test_configuration_errors_say_what_to_set_with_their_exit_code(
    clean_env, monkeypatch, env, text, code, fragment
):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if text is not None:
        (clean_env / "xdg").mkdir()
        path = clean_env / "xdg" / "gpuctl.yaml"
        path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
    error = failure(Config.load)
    assert error.code == code and fragment in str(error)


def test_an_empty_config_file_counts_as_no_values(clean_env, monkeypatch):
    (clean_env / "xdg").mkdir()
    (clean_env / "xdg" / "gpuctl.yaml").write_text("")
    monkeypatch.setenv("GPUCTL_TOKEN", "t")
    assert failure(Config.load).code == EXIT_UNREACHABLE


# -- errors in one line -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "errors,lines",
    [
        ({"gpus": ["too many", "not a multiple of 8"]}, ["gpus: too many", "gpus: not a multiple of 8"]),
        ({"x": {"y": ["bad"]}, "z": "plain"}, ["x.y: bad", "z: plain"]),
        ({"non_field_errors": ["whole thing"]}, ["whole thing"]),
        ({"detail": "Not found."}, ["Not found."]),
        ({"placement": [{"node": ["unknown"]}, {"gpus": ["busy"]}]},
         ["placement.node: unknown", "placement.gpus: busy"]),
        ({"q": {"non_field_errors": ["nested whole"]}}, ["q: nested whole"]),
        ("  spread\n over   lines ", ["spread over lines"]),
        ([], []),
    ],
)  # fmt: skip
def test_api_errors_flatten_to_field_prefixed_lines(errors, lines):
    assert _flatten_errors(errors) == lines


@pytest.mark.parametrize(
    "status,body,code,message",
    [
        (400, {"errors": {"gpus": ["too many"], "queue": ["unknown"]}}, EXIT_REFUSED,
         "refused: gpus: too many; queue: unknown"),
        (403, {"detail": "on-call engineers and admins only"}, EXIT_REFUSED,
         "not allowed: on-call engineers and admins only"),
        (404, {"detail": "Not found."}, EXIT_REFUSED, "not found: Not found."),
        (409, {"errors": {"state": ["job is already cancelled"]}}, EXIT_REFUSED,
         "conflict: state: job is already cancelled"),
        (429, {"detail": "Too many failed token attempts"}, EXIT_REFUSED,
         "refused: Too many failed token attempts"),
        (401, {"detail": "Invalid token."}, EXIT_AUTH,
         "not authenticated: Invalid token. (check GPUCTL_TOKEN)"),
        (400, {}, EXIT_REFUSED, "refused: HTTP 400 Bad Request"),
        (500, {"detail": "boom"}, EXIT_SERVER, "the portal failed: HTTP 500 on POST jobs/"),
        (503, "<html>maintenance</html>", EXIT_SERVER, "the portal failed: HTTP 503 on POST jobs/"),
    ],
)  # fmt: skip
def test_http_failures_become_one_line_and_an_exit_code(client, stub, status, body, code, message):
    stub.json("POST", "jobs/", body, status)
    error = failure(lambda: client.post("jobs/", {"name": "x"}))
    assert (error.code, str(error)) == (code, message)


def test_a_non_json_error_body_is_named_by_its_status(client, stub):
    stub.routes[("POST", "/api/v1/jobs/")] = (400, "text/plain", "nope")
    assert str(failure(lambda: client.post("jobs/"))) == "refused: HTTP 400 Bad Request"


def test_an_html_404_means_the_portal_has_no_such_path(client, stub):
    error = failure(lambda: client.get("quota-requests/?x=1"))
    assert error.code == EXIT_REFUSED
    assert str(error) == "this portal has no GET /api/v1/quota-requests/ (an older portal version?)"


def test_a_200_that_is_not_json_means_the_url_is_not_the_portal(client, stub):
    stub.routes[("GET", "/api/v1/jobs/")] = (200, "text/html", "<html>login</html>")
    error = failure(lambda: client.get("jobs/"))
    assert error.code == EXIT_SERVER
    assert str(error) == (
        f"unexpected answer from {stub.url}/api/v1/jobs/ (HTTP 200, not JSON): is GPUCTL_URL "
        "the portal's base URL?"
    )


def test_204_is_none(client, stub):
    stub.routes[("POST", "/api/v1/x/")] = (204, "", "")
    assert client.post("x/") is None


def test_an_unreachable_portal_exits_4_and_names_the_error_kind(stub):
    stub.server.server_close()
    closed = Portal(Config(url=stub.url, token="t", timeout=1.0))
    error = failure(lambda: closed.get("jobs/"))
    assert error.code == EXIT_UNREACHABLE
    assert str(error) == f"cannot reach the portal at {stub.url}: ConnectionError"


def test_a_portal_slower_than_the_timeout_exits_4_and_names_the_timeout(stub):
    stub.json("GET", "jobs/", [])
    stub.delay = 0.6
    slow = Portal(Config(url=stub.url, token="t", timeout=0.25))
    error = failure(lambda: slow.get("jobs/"))
    assert error.code == EXIT_UNREACHABLE
    assert str(error) == f"the portal at {stub.url} did not answer within 0.25s"


# -- requests on the wire ---------------------------------------------------------------------


def test_every_request_carries_the_token_json_accept_and_the_client_version(client, stub):
    stub.json("POST", "jobs/", {"id": 1}, 201)
    assert client.post("/jobs/", {"name": "x", "gpus": 2}) == {"id": 1}
    (req,) = stub.requests
    assert (req["method"], req["path"], req["body"]) == (
        "POST",
        "/api/v1/jobs/",
        {"name": "x", "gpus": 2},
    )
    assert req["headers"]["Authorization"] == "Token s3cret"
    assert req["headers"]["Accept"] == "application/json"
    assert req["headers"]["User-Agent"] == f"gpuctl/{__version__}"
    assert req["headers"]["Content-Type"] == "application/json"


def test_a_post_without_a_body_sends_an_empty_object(client, stub):
    stub.json("POST", "alerts/3/ack/", {"id": 3})
    client.post("alerts/3/ack/")
    assert stub.requests[0]["body"] == {}


def test_get_leaves_out_parameters_that_are_none_or_false(client, stub):
    stub.json("GET", "jobs/", [])
    client.get("jobs/", state="pending", queue=None, mine=False, limit=0, owner="")
    assert stub.requests[0]["query"] == {"state": "pending", "limit": "0", "owner": ""}


def paged(rows: list[dict]):
    """A DRF limit/offset list endpoint over ``rows``."""

    def answer(req):
        limit, offset = int(req["query"].get("limit", 100)), int(req["query"].get("offset", 0))
        page = rows[offset : offset + limit]
        more = offset + limit < len(rows)
        return 200, "application/json", {
            "count": len(rows), "results": page, "next": "http://elsewhere/next" if more else None,
        }  # fmt: skip

    return answer


def test_lists_page_by_offset_until_the_end(client, stub, monkeypatch):
    monkeypatch.setattr("gpuctl.client.PAGE_MAX", 3)
    rows = [{"id": i} for i in range(8)]
    stub.routes[("GET", "/api/v1/jobs/")] = paged(rows)
    got, total = client.fetch_list("jobs/", state="pending")
    assert (got, total) == (rows, 8)
    assert [r["query"] for r in stub.requests] == [
        {"limit": "3", "state": "pending"},
        {"limit": "3", "offset": "3", "state": "pending"},
        {"limit": "3", "offset": "6", "state": "pending"},
    ]


def test_a_limit_asks_only_for_what_is_missing_and_stops_there(client, stub, monkeypatch):
    monkeypatch.setattr("gpuctl.client.PAGE_MAX", 3)
    stub.routes[("GET", "/api/v1/jobs/")] = paged([{"id": i} for i in range(10)])
    got, total = client.fetch_list("jobs/", limit=5)
    assert [r["id"] for r in got] == [0, 1, 2, 3, 4] and total == 10
    assert [r["query"]["limit"] for r in stub.requests] == ["3", "2"]


def test_an_empty_page_ends_the_listing_even_if_next_is_set(client, stub):
    stub.json("GET", "jobs/", {"count": 50, "results": [], "next": "http://x/next"})
    assert client.fetch_list("jobs/") == ([], 50)
    assert len(stub.requests) == 1


def test_an_unpaginated_list_is_cut_to_the_limit_and_counted_whole(client, stub):
    stub.json("GET", "nodes/", [{"n": i} for i in range(4)])
    assert client.fetch_list("nodes/", limit=2) == ([{"n": 0}, {"n": 1}], 4)
    assert client.fetch_list("nodes/") == ([{"n": i} for i in range(4)], 4)
    stub.json("GET", "odd/", {"no": "results"})
    assert client.fetch_list("odd/") == ([], 0)


# -- rendering --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value,text",
    [
        (None, "-"),
        ("", "-"),
        ("2026-03-01T10:15:59Z", "2026-03-01 10:15"),
        ("2026-03-01T10:15:00.123456+00:00", "2026-03-01 10:15"),
        ("2026-03-01T01:30:00+02:00", "2026-02-28 23:30"),
        ("2026-03-01T23:30:00-05:00", "2026-03-02 04:30"),
        ("next week", "next week"),
    ],
)
def test_times_are_shown_in_utc_to_the_minute(value, text):
    assert fmt_time(value) == text


@pytest.mark.parametrize(
    "value,text",
    [
        (None, "-"), ("", "-"), (0, "0"), (False, "no"), (True, "yes"), (0.5, "0.50"),
        (2.0 / 3, "0.67"), ("a\tb\n  c", "a b c"), (["x"], "['x']"), (12, "12"),
    ],
)  # fmt: skip
def test_cells_are_one_line_with_dashes_for_nothing_and_words_for_booleans(value, text):
    assert fmt_cell(value) == text


def render_table(rows, columns) -> str:
    out = StringIO()
    table(rows, columns, out=out)
    return out.getvalue()


def test_numbers_are_right_aligned_only_when_every_row_has_one():
    cols = [("N", lambda r: r["n"]), ("B", lambda r: r["b"]), ("M", lambda r: r["m"])]
    rows = [{"n": 5, "b": True, "m": 1}, {"n": 1234, "b": False, "m": "x"}]
    assert render_table(rows, cols) == "   N  B    M\n   5  yes  1\n1234  no   x\n"


def test_a_table_without_rows_is_its_header_and_trailing_spaces_are_cut():
    assert render_table([], [("LONG HEADER", len), ("X", len)]) == "LONG HEADER  X\n"
    rows = [{"a": "wide value", "b": ""}]
    assert render_table(rows, [("A", lambda r: r["a"]), ("B", lambda r: r["b"])]) == (
        "A           B\nwide value  -\n"
    )


def test_fields_align_labels_and_format_only_values_that_are_not_text():
    out = StringIO()
    fields([("a", True), ("longer", None), ("x", "kept  as   is")], out=out)
    assert out.getvalue() == "a       yes\nlonger  -\nx       kept  as   is\n"
    empty = StringIO()
    fields([], out=empty)
    assert empty.getvalue() == ""


def test_json_is_sorted_indented_and_writes_dates_as_text():
    out = StringIO()
    print_json({"b": datetime(2026, 3, 1, tzinfo=UTC), "a": [1]}, out=out)
    assert out.getvalue() == '{\n  "a": [\n    1\n  ],\n  "b": "2026-03-01 00:00:00+00:00"\n}\n'


# -- answers that are not the API's shape -----------------------------------------------------


def test_a_json_labelled_answer_that_is_not_json_exits_5_on_one_line(client, stub):
    stub.routes[("GET", "/api/v1/jobs/")] = (200, "application/json", '{"count": 3, "resu')
    error = failure(lambda: client.get("jobs/"))
    assert error.code == EXIT_SERVER
    assert (
        str(error) == f"unexpected answer from {stub.url}/api/v1/jobs/ (HTTP 200): not valid JSON"
    )


# (argv, method, path, the answer's JSON): each command fed JSON of the wrong shape
ODD_ANSWERS = [
    (["jobs"], "GET", "jobs/", {"count": 1, "results": None}),
    (["jobs"], "GET", "jobs/", {"count": 2, "results": [1, None]}),
    (["nodes"], "GET", "nodes/", {"count": 1, "results": [{}], "next": None}),
    (["alerts"], "GET", "alerts/", [None]),
    (["quota", "list"], "GET", "quota-requests/", [1, 2]),
    (["summary"], "GET", "metrics/summary/", {}),
    (["summary"], "GET", "metrics/summary/", [1]),
    (["version"], "GET", "version/", None),
    (["explain", "7"], "GET", "jobs/7/", ["a job"]),
    (["cancel", "7"], "POST", "jobs/7/cancel/", {}),
    (["nodes", "cordon", "n1", "--reason", "fan"], "POST", "nodes/n1/cordon/", []),
    (["alerts", "ack", "3"], "POST", "alerts/3/ack/", {"id": 3}),
    (["submit", "x", "-q", "q", "-g", "1"], "POST", "jobs/", None),
    (["quota", "approve", "4", "--note", "ok"], "POST", "quota-requests/4/approve/", 4),
]  # fmt: skip


@pytest.mark.parametrize("argv,method,path,answer", ODD_ANSWERS)
def test_an_answer_of_another_shape_is_one_line_and_exit_5_never_a_traceback(
    stub, clean_env, monkeypatch, capsys, argv, method, path, answer
):
    from gpuctl.main import main

    monkeypatch.setenv("GPUCTL_URL", stub.url)
    monkeypatch.setenv("GPUCTL_TOKEN", "s3cret")
    stub.json(method, path, answer)
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == EXIT_SERVER, (code, out, err)
    assert err.startswith(f"gpuctl: error: the portal's answer is not what gpuctl {argv[0]} ")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert stub.requests[0]["path"] == f"/api/v1/{path}"
