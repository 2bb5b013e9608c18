"""The service on a real local Ray Serve (2 CPUs, no dashboard): the same API as the single process.

Ray starts once for the module (~10 s); the applications share it: ``main`` (API key, small body limit, batches of
two requests) for the whole module, then ``busy`` (a queue of one, no batching) and ``late`` (a 1 ms deadline)
one after the other for overload. Requests and assertions are the ones the
single-process tests use (``serve_helpers``), and answers are compared with a single-process server's.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from serve_helpers import LiveRayServer, LiveServer, assert_error, free_port, in_own_thread, run_async

from facefuse.config import StoreConfig
from facefuse.errors import ErrorCode
from facefuse.imageio import read_label

KEY = "ray-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
# half a CPU per replica: both applications' four replicas fit the two CPUs Ray is given
SHARED = {"num_cpus_per_replica": 0.5, "api_key": KEY, "max_body_mb": 3}


@pytest.fixture(scope="module")
def ray_http_port() -> Iterator[int]:
    import ray
    from ray import serve

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        yield port
    finally:
        serve.shutdown()
        ray.shutdown()


@pytest.fixture(scope="module")
def server(ray_http_port: int, store_config: StoreConfig) -> Iterator[LiveRayServer]:
    # a wait long enough that two requests sent together always meet in one batch on a loaded machine; a lone
    # detect pays it, a fusion does not (its two photos fill the batch of two at once)
    with LiveRayServer(store_config, http_port=ray_http_port, name="main", max_batch=2, max_wait_ms=1000,
                       **SHARED) as live:
        yield live


@pytest.fixture(scope="module")
def client(server: LiveRayServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60, headers=AUTH) as http:
        yield http


@pytest.fixture(scope="module")
def local(store_config: StoreConfig) -> Iterator[LiveServer]:
    with LiveServer(store_config, **SHARED) as live:
        yield live


@pytest.fixture(scope="module")
def photos(service_photos: dict[str, Path]) -> dict[str, bytes]:
    return {name: path.read_bytes() for name, path in service_photos.items()}


def pair(photos: dict[str, bytes], source: str = "source", target: str = "target") -> dict[str, tuple[str, bytes]]:
    return {"source": ("s.jpg", photos[source]), "target": ("t.jpg", photos[target])}


def test_readyz_reports_every_deployment(client: httpx.Client):
    ready = client.get("/readyz").json()
    assert ready["status"] == "ready" and ready["backend"] == "ray"
    assert set(ready["deployments"]) == {"Analysis", "Fusion"}
    for part in ready["deployments"].values():
        assert part["threads"] == 1  # half a CPU: ONNX Runtime and OpenCV pinned to one thread


def test_fuse_answers_as_the_single_process_does(client: httpx.Client, local: LiveServer, photos):
    ray_answer = client.post("/v1/fuse", files=pair(photos, target="group"), data={"target_face": "all"})
    local_answer = httpx.post(local.url + "/v1/fuse", files=pair(photos, target="group"),
                              data={"target_face": "all"}, headers=AUTH, timeout=60)
    assert ray_answer.status_code == local_answer.status_code == 200, ray_answer.text[:300]
    ours, theirs = ray_answer.json(), local_answer.json()
    assert set(ours) == set(theirs)
    assert len(ours["faces"]) == 2 and ours["faces"] == theirs["faces"]
    # the same stages ran, in the same order, split over the two deployments (analysis: decode … landmarks)
    def stages(answer: httpx.Response) -> list[str]:
        return [part.split(";")[0] for part in answer.headers["server-timing"].split(", ")]

    source = ["decode", "detect", "landmarks", "gate", "restore", "render", "segment"]
    target = ["decode", "detect", "landmarks", "gate", "restore", "align", "render", "segment", "relight", "blend",
              "label", "encode"]
    expected = ["queue", *(f"source_{n}" for n in source), *target, "total"]
    cached = {"detect", "landmarks", "source_detect", "source_landmarks"}  # not run on an analysis cache hit
    assert stages(ray_answer) == stages(local_answer)
    assert [n for n in stages(ray_answer) if n not in cached] == [n for n in expected if n not in cached]


def test_several_source_photos_answer_as_the_single_process_does(client: httpx.Client, local: LiveServer,
                                                                   faces_dir: Path):
    same = faces_dir / "hard" / "same-person"
    sent = [("source", ("a.jpg", (same / "jay_chou/01_studio_tilted_warm.jpg").read_bytes())),
            ("source", ("b.jpg", (same / "jay_chou/02_aligned_crop_frontal.jpg").read_bytes())),
            ("target", ("t.jpg", (same / "yang_mi/01_selfie_indoor_ambient.jpg").read_bytes()))]
    ray_answer = client.post("/v1/fuse", files=sent)
    local_answer = httpx.post(local.url + "/v1/fuse", files=sent, headers=AUTH, timeout=60)
    assert ray_answer.status_code == local_answer.status_code == 200, ray_answer.text[:300]
    assert ray_answer.json()["faces"] == local_answer.json()["faces"]
    assert ray_answer.json()["faces"][0]["source_photo"] == 1
    # a photo without a face is named by its place whichever deployment refuses it
    named = [sent[0], ("source", ("c.jpg", (faces_dir / "insightface/inspireface/bulk/view.jpg").read_bytes())),
             sent[2]]
    for answer in (client.post("/v1/fuse", files=named), httpx.post(local.url + "/v1/fuse", files=named,
                                                                       headers=AUTH, timeout=60)):
        assert answer.json()["error"]["details"]["source_photo"] == 1, answer.text[:300]


def test_fuse_as_image_is_labelled(client: httpx.Client, photos):
    response = client.post("/v1/fuse", files=pair(photos), headers={"Accept": "image/png"})
    assert response.status_code == 200 and response.headers["content-type"] == "image/png"
    assert read_label(response.content)["xmp_digital_source_type"].endswith("trainedAlgorithmicMedia")


def test_same_openapi_and_web_page(client: httpx.Client, local: LiveServer):
    ours = client.get("/openapi.json").json()
    assert ours.pop("servers") == [{"url": "/main"}]  # the application's route prefix on the Ray proxy
    assert ours == httpx.get(local.url + "/openapi.json").json()
    assert client.get("/").text == httpx.get(local.url + "/").text


def test_detect_reports_faces_and_verdict(client: httpx.Client, photos):
    found = client.post("/v1/detect", files={"image": ("g.jpg", photos["group"])})
    assert found.status_code == 200 and len(found.json()["faces"]) == 2
    empty = client.post("/v1/detect", files={"image": ("n.jpg", photos["no_face"])}, data={"role": "target"})
    assert empty.status_code == 200 and empty.json()["verdict"]["code"] == "NO_FACE"


def test_errors_keep_their_codes_across_replicas(client: httpx.Client, server: LiveRayServer, photos):
    no_face = assert_error(client.post("/v1/fuse", files=pair(photos, target="no_face")), ErrorCode.NO_FACE)
    assert no_face["details"]["image"] == "target"
    assert_error(client.post("/v1/detect", files={"image": ("x.jpg", b"not a photo")}),
                 ErrorCode.UNSUPPORTED_IMAGE)
    assert_error(client.post("/v1/fuse", files=pair(photos), data={"feature_degree": "101"}),
                 ErrorCode.INVALID_OPTION)
    assert_error(httpx.post(server.url + "/v1/detect", files={"image": ("s.jpg", photos["source"])}),
                 ErrorCode.UNAUTHORIZED)
    too_big = client.post("/v1/detect", files={"image": ("big.jpg", b"\xff" * (4 * 1024 * 1024))})
    assert_error(too_big, ErrorCode.IMAGE_TOO_LARGE)
    assert server.metric("facefuse_requests_total", route="/v1/fuse", code="422") >= 1


def test_batch_jobs_are_refused_with_a_reason(client: httpx.Client, photos):
    refused = client.post("/v1/jobs", files=[("source", ("s.jpg", photos["source"])),
                                             ("targets", ("t.jpg", photos["target"]))])
    assert assert_error(refused, ErrorCode.BAD_REQUEST)["details"] == {"backend": "ray"}


def test_two_concurrent_requests_share_one_model_batch(client: httpx.Client, server: LiveRayServer, photos):
    from ray import serve

    analysis = serve.get_deployment_handle("Analysis", app_name=server.name)
    before = in_own_thread(lambda: analysis.stats.remote().result()["batch_sizes"])
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda name: client.post("/v1/detect", files={"image": ("p.jpg", photos[name])}),
                                ["source", "group"]))
    assert [len(a.json()["faces"]) for a in answers] == [1, 2]  # each request got its own photo's faces back
    after = in_own_thread(lambda: analysis.stats.remote().result()["batch_sizes"])
    assert after.get(2, 0) == before.get(2, 0) + 1  # one FaceMesh batch held both requests' faces
    assert after.get(1, 0) == before.get(1, 0)


async def _burst(url: str, photos: dict[str, bytes], count: int) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits, headers=AUTH) as http:
        return await asyncio.gather(*(http.post("/v1/fuse", files=pair(photos)) for _ in range(count)))


def test_tiny_queue_refuses_with_429_and_retry_after(ray_http_port: int, store_config: StoreConfig, photos):
    # a deadline far beyond the burst's length: every request ends as 200 or 429, even on a loaded machine
    # the burst comes from one address: the per-client upload cap is lifted so the queue is what refuses
    with LiveRayServer(store_config, http_port=ray_http_port, name="busy", queue_size=1, max_batch=1,
                       deadline_ms=120_000, max_uploads_per_client=16, **SHARED) as busy:
        responses = run_async(_burst(busy.url, photos, 16))
        codes = [r.status_code for r in responses]
        ok, refused = codes.count(200), codes.count(429)
        assert ok + refused == len(codes), sorted(set(codes))
        assert ok >= 1 and refused >= 1
        for response in responses:
            if response.status_code == 429:
                assert_error(response, ErrorCode.QUEUE_FULL)
                assert int(response.headers["retry-after"]) >= 1
        assert busy.metric("facefuse_queue_rejected_total", headers=AUTH) == refused
        assert busy.metric("facefuse_requests_total", headers=AUTH, route="/v1/fuse", code="429") == refused


def test_the_single_process_path_does_not_import_ray():
    code = ("import sys; from facefuse.serve import create_app, ServeSettings; import facefuse.cli.serve_cmd; "
            "create_app(ServeSettings()); print('ray' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"


def test_missed_deadline_is_504_and_the_service_carries_on(ray_http_port: int, store_config: StoreConfig, photos):
    with (LiveRayServer(store_config, http_port=ray_http_port, name="late", deadline_ms=1, **SHARED) as late,
          httpx.Client(base_url=late.url, timeout=60, headers=AUTH) as http):
        for _ in range(2):  # the cancelled work of the first request does not wedge the second
            assert_error(http.post("/v1/fuse", files=pair(photos)), ErrorCode.DEADLINE_EXCEEDED)
        assert http.get("/readyz").status_code == 200


def test_kuberay_manifest_builds_this_application():
    """deploy/rayservice.yaml: a valid Serve config whose builder, arguments and deployment names are this code's."""
    import importlib

    import yaml
    from ray.serve.schema import ServeDeploySchema

    from facefuse.serve import ray_serve

    manifest = yaml.safe_load((Path(__file__).resolve().parents[1] / "deploy/rayservice.yaml").read_text())
    config = ServeDeploySchema.model_validate(yaml.safe_load(manifest["spec"]["serveConfigV2"]))
    (application,) = config.applications
    module, _, name = application.import_path.partition(":")
    builder = getattr(importlib.import_module(module), name)
    assert builder is ray_serve.ray_app
    built = builder(application.args)
    assert built._bound_deployment.name == ray_serve.INGRESS
    assert {d.name for d in application.deployments} == {ray_serve.ANALYSIS, ray_serve.FUSION}
