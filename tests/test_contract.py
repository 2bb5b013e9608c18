"""The HTTP contract: the served OpenAPI document is checked against the running server, and a client generated
from it works.

- Schemathesis (its own CLI, as a user would run it) sends examples, coverage cases and fuzzed requests to a real
  uvicorn server on 127.0.0.1 with every check on: undocumented statuses, content types and headers, response
  bodies against their schemas, schema-valid requests refused, schema-violating ones accepted, 405 with ``Allow``,
  ignored authentication. Real photos from ../shared replace generated image bytes (tests/contract_hooks.py).
- openapi-python-client generates a client package from ``/openapi.json`` into a temporary folder; the test imports
  it, fuses two real photos and receives typed errors.
"""

from __future__ import annotations

import base64
import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import schemathesis
from schemathesis.checks import not_a_server_error
from serve_helpers import LiveServer

from facefuse.config import StoreConfig
from facefuse.errors import ERROR_TABLE, ErrorCode
from facefuse.imageio import read_label
from facefuse.serve import ServeSettings, create_app

KEY = "contract-test-key"
TESTS = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
CLIENT_PACKAGE = "facefuse_contract_client"


@pytest.fixture(scope="module")
def server(store_config: StoreConfig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """Small limits, so that 413 and 429 can be provoked for real (Schemathesis, one request at a time, stays well
    within them with its photos)."""
    with LiveServer(store_config, api_key=KEY, deadline_ms=60_000, max_body_mb=2, queue_size=1, workers=1,
                    max_batch=1, jobs_dir=tmp_path_factory.mktemp("contract-jobs"), job_max_items=4) as live:
        yield live


@pytest.fixture(scope="module")
def photos(faces_dir: Path) -> dict[str, Path]:
    rec = faces_dir / "face_recognition"
    paths = {"source": rec / "obama_small.jpg", "target": rec / "obama-240p.jpg", "png": rec / "alex-lacamoire.png",
             "big_source": rec / "obama.jpg", "big_target": rec / "biden.jpg",
             "no_face": faces_dir / "insightface/inspireface/bulk/view.jpg"}
    for path in paths.values():
        assert path.is_file(), path
    return paths


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONPATH": path, **extra}


def test_schemathesis_finds_no_difference_between_schema_and_server(server, photos, tmp_path):
    photo_list = os.pathsep.join(str(photos[name]) for name in ("source", "target", "png"))
    command = [str(BIN / "schemathesis"), "--config-file", str(TESTS / "schemathesis.toml"), "run",
               f"{server.url}/openapi.json", "--checks", "all", "--phases", "examples,coverage,fuzzing,stateful",
               "--max-examples", "25", "--seed", "20261130", "--workers", "1", "--request-timeout", "60",
               "--header", f"Authorization: Bearer {KEY}", "--generation-database", "none", "--no-color"]
    hooks = _env(SCHEMATHESIS_HOOKS="contract_hooks", FACEFUSE_CONTRACT_PHOTOS=photo_list)
    run = subprocess.run(command, check=False, env=hooks, capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)  # its cache stays out of the repository
    report = "\n".join(line[:300] for line in run.stdout.splitlines())  # request bodies carry whole photos
    assert run.returncode == 0, report[-12_000:]
    assert "Examples" in report and "Coverage" in report and "Fuzzing" in report


def test_security_scheme_only_where_a_key_is_required():
    open_schema = create_app(ServeSettings()).openapi()
    keyed_schema = create_app(ServeSettings(api_key=KEY)).openapi()
    assert "securitySchemes" not in open_schema["components"]
    assert "401" not in open_schema["paths"]["/v1/fuse"]["post"]["responses"]
    assert keyed_schema["components"]["securitySchemes"]["apiKey"]["scheme"] == "bearer"
    for path, item in keyed_schema["paths"].items():
        for operation in item.values():
            assert ("security" in operation) == path.startswith("/v1/"), path  # /v1/options too (probe defect 12)
    code_enum = keyed_schema["components"]["schemas"]["ErrorCode"]["enum"]
    assert code_enum == [code.value for code in ErrorCode]
    fuse = keyed_schema["paths"]["/v1/fuse"]["post"]["responses"]
    not_of_fuse = {ErrorCode.NOT_FOUND, ErrorCode.METHOD_NOT_ALLOWED,  # routing, not fusion
                   ErrorCode.JOB_NOT_DONE, ErrorCode.JOB_EXPIRED, ErrorCode.STORAGE_FULL, ErrorCode.CANCELLED}  # jobs
    assert set(fuse) == {"200", *{str(ERROR_TABLE[code].http_status) for code in ErrorCode if code not in not_of_fuse}}


def test_head_wherever_get_and_allow_on_405(server):
    with httpx.Client(base_url=server.url, timeout=30) as http:
        for path in ("/healthz", "/readyz", "/metrics", "/", "/static/app.js"):
            got, head = http.get(path), http.head(path)
            assert head.status_code == 200 and head.content == b"", path
            assert head.headers["content-type"] == got.headers["content-type"], path
        refused = http.delete("/v1/fuse", headers={"Authorization": f"Bearer {KEY}"})
        assert refused.status_code == 405 and refused.headers["allow"] == "POST"
        assert refused.json()["error"]["code"] == ErrorCode.METHOD_NOT_ALLOWED.value
        assert http.request("TRACE", "/healthz").headers["allow"] == "GET, HEAD"
        assert http.head("/v1/fuse").headers["allow"] == "POST"  # HEAD only where GET is


def test_option_values_are_read_as_the_schema_declares_them(server, photos):
    """Form booleans are true/false only; in JSON a boolean must be one, and 53.0 is an integer as in JSON Schema."""
    auth = {"Authorization": f"Bearer {KEY}"}
    pair = {"source": photos["source"].read_bytes(), "target": photos["target"].read_bytes()}
    as_json = {name: base64.b64encode(data).decode() for name, data in pair.items()}
    with httpx.Client(base_url=server.url, timeout=60, headers=auth) as http:
        for word in ("0", "yes", "on"):
            refused = http.post("/v1/fuse", files=pair, data={"visible_label": word})
            assert refused.status_code == 400 and refused.json()["error"]["code"] == "INVALID_OPTION", word
        assert http.post("/v1/fuse", files=pair, data={"visible_label": "False"}).status_code == 200
        refused = http.post("/v1/fuse", json={**as_json, "visible_label": "true"})
        assert refused.status_code == 400 and refused.json()["error"]["details"]["option"] == "visible_label"
        assert http.post("/v1/fuse", json={**as_json, "quality": "53"}).status_code == 400
        assert http.post("/v1/fuse", json={**as_json, "quality": 53.0, "visible_label": False}).status_code == 200


def post(http: httpx.Client, path: str, files: dict[str, bytes]) -> httpx.Response:
    """A multipart POST whose request body stays readable afterwards (Schemathesis looks at the request too)."""
    request = http.build_request("POST", path, files=files)
    request.read()
    return http.send(request)


def assert_documented(url: str, method: str, path: str, response: httpx.Response) -> None:
    """Schemathesis's response checks (status, content type, headers, body schema) against the served document."""
    operation = schemathesis.openapi.from_url(f"{url}/openapi.json")[path][method]
    case = operation.Case(media_type="multipart/form-data" if method == "POST" else None,
                          headers={"Authorization": response.request.headers.get("authorization", "")})
    # 503 and 504 are the point here, so "not a server error" is the one check left out
    case.validate_response(response, excluded_checks=[not_a_server_error])


def test_answers_schemathesis_cannot_provoke_are_documented_too(server, store_config, photos):
    """413, 429, 503 and 504 need a big body, a full queue, a broken model set or a passed deadline."""
    auth = {"Authorization": f"Bearer {KEY}"}
    pair = {"source": photos["big_source"].read_bytes(), "target": photos["big_target"].read_bytes()}
    with httpx.Client(base_url=server.url, timeout=60, headers=auth) as http:
        too_big = post(http, "/v1/fuse", {**pair, "target": b"\0" * (3 << 20)})
        assert too_big.status_code == 413
        assert_documented(server.url, "POST", "/v1/fuse", too_big)
        with ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(lambda _: post(http, "/v1/fuse", pair), range(12)))
    assert {answer.status_code for answer in answers} == {200, 429}
    for answer in answers:
        assert_documented(server.url, "POST", "/v1/fuse", answer)
    with LiveServer(store_config, deadline_ms=1) as late, httpx.Client(base_url=late.url, timeout=60) as http:
        expired = post(http, "/v1/fuse", pair)
        assert expired.status_code == 504
        assert_documented(late.url, "POST", "/v1/fuse", expired)
    with (LiveServer(store_config, wait_ready=False, engines="no-such-engine") as broken,
          httpx.Client(base_url=broken.url, timeout=60) as http):
        for method, path, answer in [("GET", "/readyz", http.get("/readyz")),
                                     ("GET", "/v1/models", http.get("/v1/models")),
                                     ("POST", "/v1/detect", post(http, "/v1/detect", {"image": pair["source"]}))]:
            assert answer.status_code == 503, path
            assert_documented(broken.url, method, path, answer)


@pytest.fixture(scope="module")
def generated_client(server, tmp_path_factory):
    """The package openapi-python-client writes from the served document, imported from a temporary folder."""
    folder = tmp_path_factory.mktemp("client")
    command = [str(BIN / "openapi-python-client"), "generate", "--url", f"{server.url}/openapi.json",
               "--config", str(TESTS / "client_generator.yaml"), "--meta", "none",
               "--output-path", str(folder / CLIENT_PACKAGE)]
    run = subprocess.run(command, check=False, env=_env(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and (folder / CLIENT_PACKAGE / "api").is_dir(), run.stdout + run.stderr
    assert "Warning" not in run.stdout, run.stdout  # every part of the document could be turned into code
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module(CLIENT_PACKAGE)
    finally:
        sys.path.remove(str(folder))
        for name in [name for name in sys.modules if name.split(".")[0] == CLIENT_PACKAGE]:
            del sys.modules[name]


def test_generated_client_fuses_two_photos_and_receives_typed_errors(server, generated_client, photos):
    client_module = generated_client
    fuse = importlib.import_module(f"{CLIENT_PACKAGE}.api.fusion.fuse")
    models = importlib.import_module(f"{CLIENT_PACKAGE}.models")
    types = importlib.import_module(f"{CLIENT_PACKAGE}.types")

    def form(source: Path, target: Path) -> object:
        # the source field repeats (several photos of one person): the client sends a list
        return models.FuseForm(source=[types.File(payload=source.open("rb"), file_name=source.name)],
                               target=types.File(payload=target.open("rb"), file_name=target.name),
                               feature_degree=80.0, output_format=models.FuseFormFormat.PNG)

    with client_module.AuthenticatedClient(base_url=server.url, token=KEY, timeout=60) as client:
        fused = fuse.sync(client=client, body=form(photos["source"], photos["target"]))
        assert isinstance(fused, models.FuseAnswer), fused
        assert fused.format_ is models.FuseAnswerFormat.PNG and len(fused.faces) == 1
        assert isinstance(fused.faces[0], models.FusedFace) and fused.faces[0].index == 0
        assert len(fused.faces[0].box) == 4 and isinstance(fused.faces[0].pose, models.Pose)
        assert fused.faces[0].source_photo == 0
        assert read_label(base64.b64decode(fused.image_base64))

        refused = fuse.sync_detailed(client=client, body=form(photos["source"], photos["no_face"]))
        assert refused.status_code == 422 and isinstance(refused.parsed, models.ErrorResponse)
        assert refused.parsed.error.code is models.ErrorCode.NO_FACE
        assert refused.parsed.request_id == refused.headers["x-request-id"]

    with client_module.Client(base_url=server.url, timeout=60) as anonymous:
        denied = fuse.sync_detailed(client=anonymous, body=form(photos["source"], photos["target"]))
        assert denied.status_code == 401 and denied.parsed.error.code is models.ErrorCode.UNAUTHORIZED
