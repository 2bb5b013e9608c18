"""Batch jobs over HTTP against a real server on loopback: real photos, real models, real files on disk."""

from __future__ import annotations

import io
import json
import time
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
from job_helpers import submit, wait_for, zip_of
from PIL import Image
from serve_helpers import LiveServer
from test_serve_api import assert_error

from facefuse.config import StoreConfig
from facefuse.errors import ErrorCode
from facefuse.imageio import read_label
from facefuse.jobs import JobKind
from facefuse.jobs.files import tree_bytes
from facefuse.jobs.space import estimate_bytes

KEY = "batch-key"


@pytest.fixture(scope="module")
def jobs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("jobs")


@pytest.fixture(scope="module")
def server(store_config: StoreConfig, jobs_dir: Path) -> Iterator[LiveServer]:
    with LiveServer(store_config, jobs_dir=jobs_dir, job_workers=1, job_max_items=30, job_max_unzipped_mb=20,
                    max_body_mb=8) as live:
        yield live


@pytest.fixture(scope="module")
def photos(faces_dir: Path) -> dict[str, Path]:
    rec = faces_dir / "face_recognition"
    return {"source": rec / "obama.jpg", "biden": rec / "biden.jpg", "obama2": rec / "obama2.jpg",
            "group": rec / "two_people.jpg", "small": rec / "obama_small.jpg", "480p": rec / "obama-480p.jpg",
            "no_face": faces_dir / "insightface/inspireface/bulk/view.jpg"}


def test_photo_job_gives_a_zip_of_labelled_images(server, photos):
    targets = [photos["biden"], photos["obama2"], photos["group"]]
    answer = submit(server.url, photos["source"], targets, feature_degree="80", output_format="png")
    assert answer.status_code == 202, answer.text
    job = answer.json()
    assert answer.headers["location"] == f"/v1/jobs/{job['id']}"
    assert job["kind"] == "photos" and job["state"] in ("queued", "running")
    assert [item["name"] for item in job["items"]] == ["biden.jpg", "obama2.jpg", "two_people.jpg"]

    job = wait_for(server.url, job["id"])
    assert job["state"] == "done", job
    assert job["progress"]["percent"] == 100.0 and job["progress"]["frames_done"] == 3
    assert job["errors"] == [] and job["error"] is None
    result = httpx.get(server.url + job["result_url"], timeout=30)
    assert result.status_code == 200 and result.headers["content-type"] == "application/zip"
    assert "attachment" in result.headers["content-disposition"]
    archive = zipfile.ZipFile(io.BytesIO(result.content))
    assert archive.namelist() == ["0001-biden.png", "0002-obama2.png", "0003-two_people.png"]
    for name, target in zip(archive.namelist(), targets):
        data = archive.read(name)
        assert read_label(data)  # the AI-generated metadata label on every photo of the batch
        fused = Image.open(io.BytesIO(data))
        assert fused.format == "PNG" and fused.size == Image.open(target).size
        assert not np.array_equal(np.asarray(fused.convert("RGB")), np.asarray(Image.open(target).convert("RGB")))

    assert server.metric("facefuse_jobs", state="done") >= 1
    assert server.metric("facefuse_job_frames_processed_total", kind="photos") >= 3
    assert server.metric("facefuse_job_duration_seconds_count", kind="photos", state="done") >= 1


def test_zip_of_photos_keeps_only_member_names(server, photos):
    archive = zip_of({"holiday/day1/biden.jpg": photos["biden"].read_bytes(),
                      "holiday/obama2.jpg": photos["obama2"].read_bytes(),
                      "__MACOSX/holiday/._obama2.jpg": b"resource fork", "holiday/": b""})
    answer = submit(server.url, photos["source"], [("photos.zip", archive), photos["small"]])
    assert answer.status_code == 202, answer.text
    assert [item["name"] for item in answer.json()["items"]] == ["biden.jpg", "obama2.jpg", "obama_small.jpg"]
    job = wait_for(server.url, answer.json()["id"])
    assert job["state"] == "done" and job["errors"] == [], job
    names = zipfile.ZipFile(io.BytesIO(httpx.get(server.url + job["result_url"]).content)).namelist()
    assert names == ["0001-biden.jpg", "0002-obama2.jpg", "0003-obama_small.jpg"]


def test_damaged_and_faceless_targets_are_item_errors(server, photos):
    good = photos["480p"].read_bytes()
    targets = [photos["biden"], ("cut.jpg", good[: len(good) // 2]), ("notes.txt", b"not a photo at all"),
               photos["no_face"]]
    job = wait_for(server.url, submit(server.url, photos["source"], targets).json()["id"])
    assert job["state"] == "done", job  # one photo worked: the job is done, with its failures listed
    codes = {item["name"]: item["error"]["code"] for item in job["errors"]}
    assert codes == {"cut.jpg": "CORRUPT_IMAGE", "notes.txt": "UNSUPPORTED_IMAGE", "view.jpg": "NO_FACE"}
    assert [item["state"] for item in job["items"]] == ["done", "failed", "failed", "failed"]
    archive = zipfile.ZipFile(io.BytesIO(httpx.get(server.url + job["result_url"]).content))
    assert archive.namelist() == ["0001-biden.jpg", "errors.json"]
    listed = json.loads(archive.read("errors.json"))
    assert [entry["error"]["code"] for entry in listed] == ["CORRUPT_IMAGE", "UNSUPPORTED_IMAGE", "NO_FACE"]


def test_source_without_a_face_fails_the_job(server, photos):
    answer = submit(server.url, photos["no_face"], [photos["biden"], photos["obama2"]])
    job = wait_for(server.url, answer.json()["id"])
    assert job["state"] == "failed"
    assert job["error"]["code"] == "NO_FACE" and job["error"]["details"]["image"] == "source"
    assert_error(httpx.get(f"{server.url}/v1/jobs/{job['id']}/result"), ErrorCode.JOB_NOT_DONE)


def test_result_waits_for_the_job_and_delete_of_a_running_job_leaves_nothing(server, photos, jobs_dir, caplog):
    """Probe defect 5: a cancelled + deleted running job left ``out/0003-p.jpg`` on disk and logged IndexError."""
    many = [photos["480p"], photos["small"], photos["obama2"]] * 8
    first = submit(server.url, photos["source"], many).json()
    second = submit(server.url, photos["source"], [photos["biden"]]).json()
    # one job worker: the second job waits behind the first
    pending = httpx.get(f"{server.url}/v1/jobs/{second['id']}/result")
    assert_error(pending, ErrorCode.JOB_NOT_DONE)
    assert pending.json()["error"]["details"]["state"] == "queued"

    wait_for(server.url, first["id"], lambda j: j["progress"]["frames_done"] >= 1)
    deleted = httpx.delete(f"{server.url}/v1/jobs/{first['id']}")
    assert deleted.status_code == 200 and deleted.json()["state"] == "deleted"
    assert deleted.json()["was"] in ("running", "done")  # "done" only if the machine fused 24 photos meanwhile
    assert_error(httpx.get(f"{server.url}/v1/jobs/{first['id']}"), ErrorCode.NOT_FOUND)  # gone at once
    assert_error(httpx.get(f"{server.url}/v1/jobs/{first['id']}/result"), ErrorCode.NOT_FOUND)
    assert_error(httpx.delete(f"{server.url}/v1/jobs/{first['id']}"), ErrorCode.NOT_FOUND)

    done = wait_for(server.url, second["id"])  # the worker moved on to the next job
    assert done["state"] == "done"
    assert not (jobs_dir / first["id"]).exists()  # its worker let go of the files before taking the next job
    assert not [path for path in jobs_dir.rglob("*") if first["id"] in str(path)]
    assert httpx.delete(f"{server.url}/v1/jobs/{second['id']}").json() | {"deleted_at": 0} == {
        "id": second["id"], "state": "deleted", "was": "done", "deleted_at": 0}
    assert not (jobs_dir / second["id"]).exists()
    assert_error(httpx.get(f"{server.url}/v1/jobs/{second['id']}"), ErrorCode.NOT_FOUND)
    tracebacks = [r for r in caplog.records if r.name.startswith("facefuse") and (r.exc_info or r.levelname == "ERROR")]
    assert not tracebacks, [r.getMessage() for r in tracebacks]


def test_finished_job_keeps_only_its_result(server, photos, jobs_dir):
    job = wait_for(server.url, submit(server.url, photos["source"], [photos["small"]]).json()["id"])
    assert job["state"] == "done"
    # the runner marks the job done, then removes its inputs (that order survives a crash in between): a client
    # polling fast can see "done" a moment before the folder is trimmed
    deadline = time.monotonic() + 10
    while (left := sorted(p.name for p in (jobs_dir / job["id"]).iterdir())) != ["result.zip"] and \
            time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == ["result.zip"]


def test_large_job_answers_with_a_page_of_items_and_their_counts(server, photos):
    """Probe defect 16: every poll of a 10,000-photo job answered 5 MB (all items, twice for the failed ones)."""
    targets = [(f"n{i:02d}.txt", b"not a photo") for i in range(25)] + [photos["small"]]
    job = wait_for(server.url, submit(server.url, photos["source"], targets).json()["id"])
    assert job["state"] == "done"
    assert job["summary"] == {"pending": 0, "done": 1, "failed": 25}
    assert job["items_page"] == {"offset": 0, "limit": 100, "total": 26}
    page = httpx.get(f"{server.url}/v1/jobs/{job['id']}", params={"offset": 20, "limit": 4}).json()
    assert [item["name"] for item in page["items"]] == ["n20.txt", "n21.txt", "n22.txt", "n23.txt"]
    assert [item["name"] for item in page["errors"]] == ["n00.txt", "n01.txt", "n02.txt", "n03.txt"]
    assert page["items_page"] == {"offset": 20, "limit": 4, "total": 26} and page["summary"] == job["summary"]
    tail = httpx.get(f"{server.url}/v1/jobs/{job['id']}", params={"offset": 24, "limit": 1000}).json()
    assert [item["name"] for item in tail["items"]] == ["n24.txt", "obama_small.jpg"]
    for bad in ({"limit": 0}, {"limit": 1001}, {"offset": -1}, {"limit": "all"}):
        assert_error(httpx.get(f"{server.url}/v1/jobs/{job['id']}", params=bad), ErrorCode.BAD_REQUEST)


def test_hidden_files_and_macos_folders_in_zips_are_skipped(server, photos):
    """Probe defect 10: ``.hidden.jpg`` was fused, ``.DS_Store`` became an item error, and a zip of only those
    became a failed job instead of a 400."""
    photo = photos["small"].read_bytes()
    archive = zip_of({"trip/.hidden.jpg": photo, ".DS_Store": b"\0\0\0\1Bud1", "trip/._beach.jpg": b"fork",
                      "__MACOSX/trip/._beach.jpg": b"fork", "trip/.thumbs/a.jpg": photo, "./trip/beach.jpg": photo})
    answer = submit(server.url, photos["source"], [("trip.zip", archive)])
    assert answer.status_code == 202, answer.text
    assert [item["name"] for item in answer.json()["items"]] == ["beach.jpg"]
    only_junk = zip_of({"__MACOSX/._a.jpg": b"fork", ".DS_Store": b"\0\0\0\1Bud1", "a/.hidden.jpg": photo})
    refused = submit(server.url, photos["source"], [("junk.zip", only_junk)])
    assert_error(refused, ErrorCode.BAD_REQUEST)
    assert "no photos" in refused.json()["error"]["message"]


def test_hostile_zips_are_refused(server, photos, jobs_dir):
    photo = photos["small"].read_bytes()
    bomb = zip_of({"a.jpg": photo, "b.jpg": bytes(60 * 1024 * 1024)})  # 60 MB of zeros inflating from ~60 kB
    assert_error(submit(server.url, photos["source"], [("bomb.zip", bomb)]), ErrorCode.JOB_TOO_LARGE)
    rng = np.random.default_rng(0)  # one random bit per byte: inflates ~7×, no bomb, but 24 MB in all
    big = zip_of({f"{i}.jpg": rng.integers(0, 2, 2_000_000, dtype=np.uint8).tobytes() for i in range(12)})
    too_big = submit(server.url, photos["source"], [("big.zip", big)])  # over the 20 MB setting
    assert_error(too_big, ErrorCode.JOB_TOO_LARGE)
    assert too_big.json()["error"]["details"]["max_unzipped_bytes"] == 20 * 1024 * 1024
    crowd = zip_of({f"p{i}.jpg": photo[:100] for i in range(31)})
    assert_error(submit(server.url, photos["source"], [("crowd.zip", crowd)]), ErrorCode.JOB_TOO_LARGE)
    for name in ("../../escaped.jpg", "/etc/escaped.jpg", "ok/../../escaped.jpg", "C:\\escaped.jpg"):
        refused = submit(server.url, photos["source"], [("evil.zip", zip_of({"fine.jpg": photo, name: photo}))])
        assert_error(refused, ErrorCode.BAD_ARCHIVE)
        assert refused.json()["error"]["details"]["member"] == name
    assert_error(submit(server.url, photos["source"], [("cut.zip", bomb[:5000])]), ErrorCode.BAD_ARCHIVE)
    assert not list(jobs_dir.parent.rglob("escaped.jpg"))
    assert not [p for p in jobs_dir.iterdir() if p.name.startswith(".")]  # no half-written upload left behind


def test_malformed_job_requests(server, photos):
    assert_error(submit(server.url, photos["source"], []), ErrorCode.BAD_REQUEST)
    no_source = httpx.post(server.url + "/v1/jobs", files=[("targets", ("t.jpg", photos["biden"].read_bytes()))])
    assert_error(no_source, ErrorCode.BAD_REQUEST)
    assert_error(submit(server.url, photos["source"], [photos["biden"]], feature_degree="140"),
                 ErrorCode.INVALID_OPTION)
    assert_error(submit(server.url, photos["source"], [photos["biden"]], colour="blue"), ErrorCode.INVALID_OPTION)
    for field, word in (("smoothing", "yes"), ("match_source", "1"), ("visible_label", "on")):  # probe defect 8
        lax = submit(server.url, photos["source"], [photos["biden"]], **{field: word})
        assert assert_error(lax, ErrorCode.INVALID_OPTION)["details"]["option"] == field
    clip = b"\x00\x00\x00\x20ftypisom" + bytes(200)
    assert_error(submit(server.url, photos["source"], [("a.mp4", clip), photos["biden"]]), ErrorCode.BAD_REQUEST)
    json_body = httpx.post(server.url + "/v1/jobs", json={"source": "x"})
    assert_error(json_body, ErrorCode.UNSUPPORTED_IMAGE)
    oversized = submit(server.url, photos["source"], [("big.jpg", bytes(9 * 1024 * 1024))])
    assert_error(oversized, ErrorCode.IMAGE_TOO_LARGE)
    for path in ("/v1/jobs/0123456789abcdef0123456789abcdef", "/v1/jobs/../../etc/passwd", "/v1/jobs/x/result"):
        assert httpx.get(server.url + path).status_code == 404
    assert_error(httpx.delete(server.url + "/v1/jobs/0123456789abcdef0123456789abcdef"), ErrorCode.NOT_FOUND)


def _estimate(photos: dict[str, Path], targets: list[str], fmt: str = "JPEG") -> int:
    return estimate_bytes(JobKind.PHOTOS, [photos["source"].read_bytes()],
                          [photos[name].read_bytes() for name in targets], fmt)


@pytest.fixture(scope="module")
def strict_server(store_config: StoreConfig, tmp_path_factory: pytest.TempPathFactory,
                  photos: dict[str, Path]) -> Iterator[LiveServer]:
    """An API key, a disk budget of 1.5 jobs of (biden, obama2), and jobs that expire 7.2 s after they end; ten
    uploads from this one address may arrive at once."""
    budget_mb = 1.5 * _estimate(photos, ["biden", "obama2"]) / 2**20
    with LiveServer(store_config, jobs_dir=tmp_path_factory.mktemp("strict-jobs"), api_key=KEY,
                    job_max_disk_mb=budget_mb, job_retention_hours=0.002, max_uploads_per_client=16) as live:
        yield live


def test_api_key_guards_every_job_route(strict_server, photos):
    url = strict_server.url
    assert_error(submit(url, photos["source"], [photos["small"]]), ErrorCode.UNAUTHORIZED)
    wrong = {"Authorization": "Bearer nope"}
    assert_error(submit(url, photos["source"], [photos["small"]], headers=wrong), ErrorCode.UNAUTHORIZED)
    key = {"Authorization": f"Bearer {KEY}"}
    job = submit(url, photos["small"], [photos["480p"]], headers=key).json()
    for method, path in (("GET", ""), ("GET", "/result"), ("DELETE", "")):
        answer = httpx.request(method, f"{url}/v1/jobs/{job['id']}{path}", headers=wrong)
        assert_error(answer, ErrorCode.UNAUTHORIZED)
    assert wait_for(url, job["id"], headers=key)["state"] == "done"
    assert httpx.get(f"{url}/v1/jobs/{job['id']}/result", headers=key).status_code == 200
    assert httpx.delete(f"{url}/v1/jobs/{job['id']}", headers=key).status_code == 200


def test_disk_budget_is_reserved_at_admission(strict_server, photos):
    """Probe defect 2: ten simultaneous jobs all passed a check-then-act budget (49 MB against 5 MB), and a PNG
    job's outputs were not counted at all (16 MB from one 2 MB photo)."""
    url, key = strict_server.url, {"Authorization": f"Bearer {KEY}"}
    budget = strict_server.settings.job_max_disk_bytes
    root = strict_server.settings.jobs_dir
    png = submit(url, photos["source"], [photos["biden"]], headers=key, output_format="png")
    assert_error(png, ErrorCode.STORAGE_FULL)  # its PNG output would not fit; the same job as JPEG does
    assert png.json()["error"]["details"]["needed_bytes"] == _estimate(photos, ["biden"], "PNG") > budget
    with ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(lambda _: submit(url, photos["source"], [photos["biden"], photos["obama2"]],
                                                 headers=key), range(10)))
    accepted = [a.json()["id"] for a in answers if a.status_code == 202]
    assert len(accepted) == 1, [a.status_code for a in answers]  # 1.5 jobs fit: one is admitted, nine refused
    for answer in answers:
        if answer.status_code != 202:
            assert_error(answer, ErrorCode.STORAGE_FULL)
    peak = 0
    while httpx.get(f"{url}/v1/jobs/{accepted[0]}", headers=key).json()["state"] in ("queued", "running"):
        peak = max(peak, sum(tree_bytes(folder) for folder in root.iterdir() if folder.is_dir()))
        time.sleep(0.05)
    assert 0 < peak <= budget
    job = wait_for(url, accepted[0], headers=key)
    assert job["state"] == "done" and job["expires_at"] > job["finished_at"]
    expired = wait_for(url, accepted[0], lambda j: j["state"] == "expired", headers=key, timeout_s=60)
    assert expired["result_url"] is None
    assert_error(httpx.get(f"{url}/v1/jobs/{accepted[0]}/result", headers=key), ErrorCode.JOB_EXPIRED)
    assert strict_server.metric("facefuse_jobs", state="expired") >= 1
    assert not (root / accepted[0]).exists()


def test_openapi_documents_the_job_routes(server):
    schema = httpx.get(server.url + "/openapi.json").json()
    post = schema["paths"]["/v1/jobs"]["post"]
    fields = post["requestBody"]["content"]["multipart/form-data"]["schema"]["properties"]
    assert {"source", "targets", "feature_degree", "every_n"} <= set(fields)
    # every status from the one error table (401 only where the server has an API key: this one has none)
    assert {"202", "413", "507"} <= set(post["responses"]) and "401" not in post["responses"]
    assert "--job-max-disk-mb" in post["description"]
    assert {"get", "delete"} <= set(schema["paths"]["/v1/jobs/{job_id}"])
    assert post["requestBody"]["content"]["multipart/form-data"]["schema"]["additionalProperties"] is False
    deleted = schema["paths"]["/v1/jobs/{job_id}"]["delete"]
    assert "404" in deleted["description"] and deleted["responses"]["200"]["content"]
    assert "409" in schema["paths"]["/v1/jobs/{job_id}/result"]["get"]["responses"]
