"""The web page in a real browser: Playwright drives Debian's Chromium against a real server on loopback.

Screenshots (desktop and phone, with a result and with an error hint) are written to ``artifacts/`` for a person
to look at; the assertions check what a user would see.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Collection, Iterator
from pathlib import Path

import pytest
from serve_helpers import LiveServer

from facefuse.config import StoreConfig

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def server(store_config: StoreConfig) -> Iterator[LiveServer]:
    with LiveServer(store_config) as live:
        yield live


@pytest.fixture(scope="module")
def photos(service_photos: dict[str, Path]) -> dict[str, str]:
    return {name: str(path) for name, path in service_photos.items()}


def open_page(browser, server: LiveServer, api_errors: Collection[int] = (), **context_options):
    """A page of the service in a new browser context, and the list of problems seen on it: requests leaving the
    server, script errors, and every console error. ``api_errors`` are the HTTP statuses of ``/v1/`` answers the
    test provokes on purpose (no face: 422, no key: 401); Chromium logs each such answer as a console error, and
    only those lines are not problems."""
    context = browser.new_context(**context_options)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    problems: list[str] = []

    def console(message) -> None:
        if message.type != "error":
            return
        url = message.location.get("url", "")
        # a fetch answered with an error status, or a WebSocket handshake refused with one (its URL is in the text)
        status = re.search(r"(?:the server responded with a status of|Unexpected response code:) (\d{3})",
                           message.text)
        socket = re.search(r"WebSocket connection to '(ws://[^']+)'", message.text)
        called = socket.group(1).replace("ws://", "http://", 1) if socket else url
        if status and called.startswith(server.url + "/v1/") and int(status.group(1)) in api_errors:
            return
        problems.append(f"console error: {message.text} ({url})")

    page.on("request", lambda r: None if r.url.startswith((server.url, "blob:", "data:")) else problems.append(r.url))
    page.on("pageerror", lambda error: problems.append(f"script error: {error}"))
    page.on("console", console)
    page.goto(server.url + "/")
    return context, page, problems


def result_src(page) -> str:
    return page.locator("#result").get_attribute("src") or ""


def wait_for_new_result(page, previous: str) -> str:
    page.wait_for_function("prev => { const i = document.getElementById('result');"
                           " return !i.hidden && i.src && i.src !== prev && i.complete && i.naturalWidth > 0; }",
                           arg=previous)
    return result_src(page)


def test_fuse_on_desktop_then_slider_then_no_face_hint(browser, server, photos):
    ARTIFACTS.mkdir(exist_ok=True)
    context, page, problems = open_page(browser, server, api_errors={422}, viewport={"width": 1280, "height": 900})
    try:
        assert "consent" in page.locator("#consent-notice").inner_text().lower()
        assert page.locator("#visible-label").is_checked()
        # the controls are built from GET /v1/options: every request option, no operator-only one
        assert page.locator("#blend option").all_inner_texts() == ["multiband", "poisson"]
        assert page.locator("#sharpen").get_attribute("max") == "1"
        assert page.locator("#crop-size").count() == 0
        page.set_input_files("#source-file", photos["source"])
        page.set_input_files("#target-file", photos["target"])
        first = wait_for_new_result(page, "")
        page.locator("#target-verdict.ok").wait_for()
        assert page.locator("#source-verdict").inner_text() == "1 face found"
        assert page.locator("#download").is_visible()
        assert page.locator("#timings tr.total").count() == 2  # server sum and round trip
        size = page.evaluate("() => [document.getElementById('result').naturalWidth,"
                             " document.getElementById('result').naturalHeight]")
        assert size == [970, 2204]  # the target photo's size (biden.jpg)

        page.locator("#profile-degree").fill("20")
        assert page.locator("#profile-degree-value").inner_text() == "20"
        second = wait_for_new_result(page, first)
        assert second != first
        page.screenshot(path=str(ARTIFACTS / "web-desktop-result.png"), full_page=True)

        page.set_input_files("#target-file", photos["no_face"])
        page.locator("#error").wait_for(state="visible")
        assert page.locator("#error-message").inner_text() == "No face found in the target photo."
        assert page.locator("#error-hint").inner_text()
        assert not page.locator("#result").is_visible()  # the old result no longer matches the photos
        page.locator("#target-verdict.bad").wait_for()
        page.screenshot(path=str(ARTIFACTS / "web-desktop-no-face.png"), full_page=True)
        assert problems == []  # no CDN, no telemetry (the page works offline), no script error
    finally:
        context.close()


def drop_file(page, zone: str, path: str) -> None:
    """Drag-and-drop of a real file onto a drop zone, as the browser delivers it (a DataTransfer with a File)."""
    data = base64.b64encode(Path(path).read_bytes()).decode()
    page.evaluate("""([zone, name, data]) => {
        const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
        const transfer = new DataTransfer();
        transfer.items.add(new File([bytes], name, { type: "image/jpeg" }));
        const target = document.getElementById(zone);
        for (const type of ["dragenter", "dragover", "drop"]) {
            target.dispatchEvent(new DragEvent(type, { dataTransfer: transfer, bubbles: true, cancelable: true }));
        }
    }""", [zone, Path(path).name, data])


def test_face_picker_for_a_group_photo_dropped_on_the_page(browser, server, photos):
    context, page, problems = open_page(browser, server, viewport={"width": 1280, "height": 900})
    try:
        drop_file(page, "source-drop", photos["source"])
        drop_file(page, "target-drop", photos["group"])
        first = wait_for_new_result(page, "")
        page.locator("#target-face-picker").wait_for(state="visible")
        assert page.locator("#target-boxes .box").count() >= 2
        page.locator("#target-face-choices button", has_text="Face 2").click()
        wait_for_new_result(page, first)
        assert page.locator("#target-face-choices button[aria-pressed=true]").inner_text() == "Face 2"
        assert page.locator("#target-boxes .box.chosen").inner_text() == "2"
        page.screenshot(path=str(ARTIFACTS / "web-desktop-group.png"), full_page=True)
        assert problems == []
    finally:
        context.close()


def test_readable_on_a_phone(browser, server, photos):
    ARTIFACTS.mkdir(exist_ok=True)
    context, page, problems = open_page(browser, server, api_errors={422}, viewport={"width": 390, "height": 844},
                                        device_scale_factor=2, is_mobile=True, has_touch=True)
    try:
        page.set_input_files("#source-file", photos["source"])
        page.set_input_files("#target-file", photos["target"])
        wait_for_new_result(page, "")
        overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0  # nothing forces sideways scrolling
        font = page.evaluate("() => parseFloat(getComputedStyle(document.body).fontSize)")
        assert font >= 14
        page.screenshot(path=str(ARTIFACTS / "web-phone-result.png"), full_page=True)
        page.set_input_files("#source-file", photos["no_face"])
        page.locator("#error").wait_for(state="visible")
        assert page.locator("#error-message").inner_text() == "No face found in the source photo."
        page.locator("#error").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "web-phone-no-face.png"))
        assert problems == []
    finally:
        context.close()


def test_camera_photo_becomes_an_input(browser, server, photos):
    context, page, problems = open_page(browser, server, viewport={"width": 1280, "height": 900},
                                        permissions=["camera"])
    try:
        page.locator("button.camera[data-role=target]").click()
        page.locator("#camera-dialog[open]").wait_for()
        page.wait_for_function("() => document.getElementById('camera-video').videoWidth > 0")
        page.locator("#camera-shoot").click()
        page.locator("#target-preview").wait_for(state="visible")
        # Chromium's synthetic camera shows a test pattern, so the page must say there is no face in it
        page.locator("#target-verdict.bad").wait_for()
        assert page.locator("#target-verdict").inner_text().startswith("No face found in the target photo")
        assert not page.locator("#camera-dialog").is_visible()
        assert problems == []
    finally:
        context.close()


def test_api_docs_render_offline(browser, server):
    context, page, problems = open_page(browser, server, viewport={"width": 1280, "height": 900})
    try:
        page.goto(server.url + "/docs")
        page.locator(".swagger-ui .info .title", has_text="facefuse").wait_for()
        page.locator("#operations-fusion-fuse").wait_for()
        assert problems == []  # Swagger UI's scripts come from this server, not a CDN
    finally:
        context.close()


def test_result_full_size_with_zoom_and_before_after(browser, server, photos):
    context, page, problems = open_page(browser, server, viewport={"width": 1280, "height": 900})
    try:
        assert "jpg" not in page.locator("#output-format option").all_inner_texts()  # one spelling of JPEG
        assert "jpeg" in page.locator("#output-format option").all_inner_texts()
        page.set_input_files("#source-file", photos["source"])
        page.set_input_files("#target-file", photos["target"])
        wait_for_new_result(page, "")
        page.locator("#view-full").wait_for(state="visible")
        page.locator("#result").click()
        page.locator("#viewer[open]").wait_for()
        assert page.locator("#viewer-after").get_attribute("src") == result_src(page)
        assert page.locator("#viewer-before").get_attribute("src") == page.locator("#target-preview").get_attribute("src")
        page.select_option("#viewer-zoom", "1")  # 100 %: the result's own pixels, scrollable
        width = page.evaluate("() => document.getElementById('viewer-after').getBoundingClientRect().width")
        assert abs(width - 970) < 2  # biden.jpg is 970 px wide
        assert page.evaluate("() => document.getElementById('viewer-stage').scrollHeight") > 2000
        page.select_option("#viewer-zoom", "2")
        width = page.evaluate("() => document.getElementById('viewer-after').getBoundingClientRect().width")
        assert abs(width - 1940) < 2
        page.select_option("#viewer-zoom", "fit")
        page.locator("#viewer-compare").fill("30")  # the left 30 % shows the result, the rest the target photo
        clip = page.evaluate("() => document.getElementById('viewer-after').style.clipPath")
        assert clip == "inset(0px 70% 0px 0px)"
        page.screenshot(path=str(ARTIFACTS / "web-viewer-before-after.png"))
        page.locator("#viewer-close").click()
        assert not page.locator("#viewer").is_visible()
        assert page.request.get(server.url + "/favicon.ico").headers["content-type"] == "image/x-icon"
        assert problems == []
    finally:
        context.close()


def test_a_file_that_is_no_photo_gets_words_not_a_broken_image(browser, server, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("not a photo\n")
    tiff_like = tmp_path / "scan.jpg"
    tiff_like.write_bytes(b"\xff\xd8\xff\xe0" + b"\x00" * 64)  # claims to be a JPEG, cannot be shown
    context, page, problems = open_page(browser, server, api_errors={400, 415}, viewport={"width": 1280, "height": 900})
    try:
        for path in (notes, tiff_like):
            page.set_input_files("#source-file", str(path))
            page.locator("#source-verdict.bad").wait_for()
            assert not page.locator("#source-preview").is_visible()  # no broken-image icon, no overlapping alt text
            page.wait_for_function("name => document.querySelector('#source-drop .placeholder').textContent"
                                   ".startsWith('No preview of ' + name)", arg=path.name)
            assert page.locator("#source-drop .placeholder").is_visible()
        page.screenshot(path=str(ARTIFACTS / "web-not-a-photo.png"))
        assert problems == []
    finally:
        context.close()


def test_more_photos_of_the_source_person(browser, server, faces_dir: Path):
    same = faces_dir / "hard" / "same-person"
    context, page, problems = open_page(browser, server, api_errors={422}, viewport={"width": 1280, "height": 900})
    try:
        page.set_input_files("#source-file", str(same / "jay_chou/01_studio_tilted_warm.jpg"))
        page.set_input_files("#target-file", str(same / "yang_mi/01_selfie_indoor_ambient.jpg"))
        first = wait_for_new_result(page, "")
        assert page.locator("#result-source").is_hidden()  # one source photo: nothing to say
        page.set_input_files("#more-sources-file", str(same / "jay_chou/02_aligned_crop_frontal.jpg"))
        assert "1 more photo" in page.locator("#more-sources-note").inner_text()
        second = wait_for_new_result(page, first)
        # the target looks down; the frontal photo is the nearer pose
        assert page.locator("#result-source").inner_text() == "Fused from source photo 2"
        page.screenshot(path=str(ARTIFACTS / "web-more-sources.png"), full_page=True)
        # a photo without a face among them is named
        page.set_input_files("#more-sources-file", str(faces_dir / "insightface/inspireface/bulk/view.jpg"))
        page.locator("#error").wait_for()
        assert "(source photo 2)" in page.locator("#error-message").inner_text()
        page.locator("#more-sources-clear").click()
        wait_for_new_result(page, second)
        assert page.locator("#result-source").is_hidden() and page.locator("#error").is_hidden()
        assert problems == []
    finally:
        context.close()
