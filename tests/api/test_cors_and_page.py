"""`--allowed-origins` (CORS, api/server/cors.py) and the chat page's files (api/ui/), on an
app whose engine never loads: neither needs one, and a preflight must be answered while the
server starts, before any API-key check."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from litestar.testing import TestClient

from api.server.app import create_app
from api.server.cli import build_parser
from api.server.cors import parse_origin
from api.server.serve import settings_from_args
from api.server.settings import Settings
from api.ui.route import STATIC_DIR

ALLOWED = "https://chat.example.com"
KEY = "sk-test"
PREFLIGHT = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type"}


def client_for(**settings) -> TestClient:
    # No lifespan: the engine never loads, so the API answers 503 "starting" to anything let through.
    return TestClient(app=create_app(Settings(api_key=KEY, **settings)))


@pytest.fixture(scope="module")
def cors_client():
    return client_for(allowed_origins=(ALLOWED,))


def test_a_preflight_from_an_allowed_origin_is_answered_before_the_key_and_while_starting(cors_client):
    for path in ("/v1/chat/completions", "/v1/messages", "/inference/v1/completions"):
        response = cors_client.options(path, headers={"Origin": ALLOWED, **PREFLIGHT})
        assert response.status_code == 204, response.text
        assert response.headers["access-control-allow-origin"] == ALLOWED
        allowed_headers = response.headers["access-control-allow-headers"].lower()
        assert "authorization" in allowed_headers and "content-type" in allowed_headers
        assert "POST" in response.headers["access-control-allow-methods"]


def test_a_preflight_from_another_origin_is_refused(cors_client):
    response = cors_client.options("/v1/chat/completions", headers={"Origin": "https://evil.example", **PREFLIGHT})
    assert response.status_code == 400
    assert "access-control-allow-origin" not in response.headers


def test_answers_to_an_allowed_origin_carry_its_headers_errors_included(cors_client):
    refused = cors_client.get("/v1/models", headers={"Origin": ALLOWED})  # no key: 401
    assert refused.status_code == 401
    assert refused.headers["access-control-allow-origin"] == ALLOWED  # so the page can read why
    starting = cors_client.get("/v1/models", headers={"Origin": ALLOWED, "Authorization": f"Bearer {KEY}"})
    assert starting.status_code == 503 and starting.headers["access-control-allow-origin"] == ALLOWED
    assert "x-request-id" in starting.headers["access-control-expose-headers"].lower()
    other = cors_client.get("/v1/models", headers={"Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in other.headers


def test_without_allowed_origins_there_are_no_cors_headers():
    client = client_for()
    response = client.get("/v1/models", headers={"Origin": ALLOWED})
    assert not any(name.startswith("access-control-") for name in response.headers)
    preflight = client.options("/v1/chat/completions", headers={"Origin": ALLOWED, **PREFLIGHT})
    assert "access-control-allow-origin" not in preflight.headers


@pytest.mark.parametrize("text, origin", [("https://Chat.Example.com", "https://chat.example.com"),
                                          ("http://localhost:5173/", "http://localhost:5173"), ("*", "*")])
def test_origins_are_parsed_as_browsers_write_them(text, origin):
    assert parse_origin(text) == origin


@pytest.mark.parametrize("flag", ["chat.example.com", "ftp://example.com", "https://example.com/app",
                                  "https://user@example.com", "https://example.com?x=1"])
def test_a_value_that_is_not_an_origin_is_refused_by_the_parser(flag, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["serve", "--allowed-origins", flag])
    assert exit_.value.code == 2
    assert "--allowed-origins" in capsys.readouterr().err


def test_the_flag_reaches_the_settings():
    args = build_parser().parse_args(["serve", "--allowed-origins", ALLOWED, "http://localhost:3000"])
    assert settings_from_args(args).allowed_origins == (ALLOWED, "http://localhost:3000")
    assert settings_from_args(build_parser().parse_args(["serve"])).allowed_origins == ()


def test_the_chat_page_is_served_open_with_a_policy_that_allows_only_this_server():
    client = client_for()  # with an API key set and the engine still starting
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert "<title>Flint chat</title>" in page.text
    for path in referenced_files(page.text):
        asset = client.get(path)
        assert asset.status_code == 200, path
        assert asset.content == (STATIC_DIR / path.removeprefix("/ui/")).read_bytes()
    assert client.get("/ui/missing.js").status_code == 404


def referenced_files(html: str) -> list[str]:
    """The page's scripts and styles (they must all be this server's: no CDN)."""
    paths = re.findall(r'(?:src|href)="([^"]+)"', html)
    files = [path for path in paths if not path.startswith("data:")]
    assert files and all(path.startswith("/ui/") for path in files), files
    return files


def test_the_page_scripts_import_only_files_that_exist():
    for script in (STATIC_DIR / "js").glob("*.js"):
        for imported in re.findall(r'from "\./([^"]+)"', script.read_text()):
            assert (script.parent / imported).is_file(), f"{script.name} imports {imported}"


def test_the_vendored_libraries_are_the_pinned_files_with_their_licences():
    vendor = STATIC_DIR / "vendor"
    sums = dict(reversed(line.split()) for line in (vendor / "SHA256SUMS").read_text().splitlines())
    assert {Path(name).name for name in sums} == {path.name for path in vendor.glob("*.js")} | \
        {path.name for path in vendor.glob("*.css")}
    for name, digest in sums.items():
        assert hashlib.sha256((vendor / name).read_bytes()).hexdigest() == digest, f"{name} was changed by hand"
    versions = (vendor / "VERSIONS").read_text()
    pinned = dict(re.findall(r"^(\S+)=(\S+)", (Path(__file__).parents[2] / "tools/vendor_ui.sh").read_text(), re.M))
    for package, variable in (("marked", "MARKED"), ("dompurify", "DOMPURIFY"), ("highlightjs/cdn-assets", "HIGHLIGHT")):
        assert f"{package} {pinned[variable]}" in versions
    assert sorted(path.name for path in (vendor / "licenses").iterdir()) == [
        "dompurify.LICENSE", "highlight.js.LICENSE", "marked.LICENSE"]
