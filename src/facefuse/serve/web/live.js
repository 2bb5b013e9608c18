// facefuse web page, live camera: camera frames go to the server over one WebSocket (/v1/live, protocol in
// docs/live.md), the fused frames come back and are drawn beside the camera, with frames/s and latency.
// Uses app.js's $, state (the source photo, the option controls) and friendly().
"use strict";

const LIVE_PROTOCOL = "facefuse.live.v1";
const LIVE_MAX_SIDE = 640; // frames are sent at most 640 px wide or high
const LIVE_QUALITY = 0.8; // JPEG quality of the frames sent
const LIVE_KEEP = 20000; // samples of each statistic kept (what a benchmark reads)
// Frames in flight, chosen from the measured capture-to-display latency (benchmarks/live.py, two cores): with two,
// the next frame travels and is decoded while the server fuses the one before (21 against 15 frames/s shown for
// one client), but on a server busy with other sessions each frame also waits for the one before it (p95 521 ms
// for three clients, against 223 with one). So a session starts with one and sends a second only while the
// frames come back fast, as TCP's slow start does, and goes back to one when they slow down.
const LIVE_MAX_IN_FLIGHT = 2;
const LIVE_ADAPT_FRAMES = 10; // latencies a decision looks at (their median), all of them since the last change
const LIVE_ROOM_MS = 100; // median latency with one in flight below which a second is sent
const LIVE_BUDGET_MS = 150; // median latency with more in flight above which the page goes back to one
const LIVE_FRAME_WAIT_MS = 100; // longest wait for the camera's next frame before the current one is sent
const LIVE_RECENT = 60; // frames the statistics line's medians and fused share are read over
const LIVE_CAPTION = { fused: "Fused (AI-generated)",
                       unfused: "Not fused: no face found, or turned too far (shown as captured)" };

const live = {
  ws: null,
  stream: null,
  seq: 0,
  sent: new Map(), // sequence number → capture time (performance.now()) of frames not answered yet
  grab: document.createElement("canvas"),
  lastError: null,
  // what the page shows and a test or benchmark reads (window.facefuseLive); inFlight: frames sent and not yet
  // answered, beyond which camera frames are skipped; adaptive: whether the page sets inFlight itself (liveAdapt)
  // fusedFlags: whether each frame shown had a face fused (1) or came back as captured (0)
  stats: { inFlight: 1, adaptive: true, shown: 0, fused: 0, skipped: 0, dropped: 0, latencyMs: [], serverMs: [],
           shownAt: [], fusedFlags: [], adaptedAt: 0 },
};
window.facefuseLive = live.stats;

function liveError(error) {
  sectionError("live", error);
}

function liveUpdateButton() {
  $("live-start").disabled = !state.files.source || live.ws !== null;
}

// The same option controls as a single fusion, as JSON values; live frames always come back as JPEG.
function liveOptions() {
  const options = {};
  for (const [name, read] of state.controls) {
    const value = read();
    if (value === null || name === "output_format" || name === "quality") continue;
    const number = Number(value);
    options[name] = value === "true" ? true : value === "false" ? false : value !== "" && !isNaN(number) ? number : value;
  }
  if (state.faceChoice.source_face !== undefined) options.source_face = state.faceChoice.source_face;
  options.segmentation = $("live-masks").checked ? "auto" : "off";
  return options;
}

function base64url(text) {
  return btoa(unescape(encodeURIComponent(text))).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

async function liveStart() {
  if (!state.files.source) {
    liveError({ code: "NO_SOURCE", message: "Choose a source photo in step 1 first" });
    return;
  }
  liveError(null);
  try {
    live.stream = await navigator.mediaDevices.getUserMedia({ video: { width: 640, height: 480 }, audio: false });
  } catch (_) {
    liveError({ code: "CAMERA", message: "The camera is not available", hint: "allow camera access and try again" });
    return;
  }
  const video = $("live-camera");
  video.srcObject = live.stream;
  video.play().catch(() => {}); // besides autoplay, which a browser's policy may hold back
  $("live-views").hidden = false;
  Object.assign(live.stats, { shown: 0, fused: 0, skipped: 0, dropped: 0, latencyMs: [], serverMs: [], shownAt: [],
                              fusedFlags: [], adaptedAt: 0 });
  $("live-output-caption").textContent = LIVE_CAPTION.fused;
  if (live.stats.adaptive) live.stats.inFlight = 1;
  live.sent.clear();
  live.lastError = null;
  const protocols = [LIVE_PROTOCOL];
  const key = $("api-key").value.trim();
  if (key) protocols.push("facefuse.key." + base64url(key)); // a browser cannot send an Authorization header here
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const ws = new WebSocket(`${scheme}//${location.host}/v1/live`, protocols);
  ws.binaryType = "arraybuffer";
  live.ws = ws;
  liveUpdateButton();
  $("live-stop").hidden = false;
  $("live-stats").textContent = "Connecting…";
  let opened = false;
  ws.onopen = async () => {
    opened = true;
    // the source photo, then the more photos of this person (step 1): each followed face keeps the one turned
    // most like it when it is first seen
    const sources = [state.files.source, ...state.moreSources];
    ws.send(JSON.stringify({ type: "start", options: liveOptions(), sources: sources.length }));
    for (const file of sources) ws.send(await file.arrayBuffer());
    $("live-stats").textContent = sources.length > 1 ? `Preparing the ${sources.length} source photos…` : "Preparing the source face…";
  };
  ws.onmessage = (event) => (typeof event.data === "string" ? liveText(JSON.parse(event.data)) : liveShow(event.data));
  ws.onclose = (event) => liveClosed(event, opened);
}

function liveText(message) {
  if (message.type === "ready") {
    $("live-stats").textContent = "Live";
    liveNextFrame();
  } else if (message.type === "error") {
    live.lastError = message.error;
  }
}

// One camera frame per video frame (requestVideoFrameCallback), sent only while fewer than stats.inFlight wait
// for their answer: a slow server makes the page skip camera frames rather than pile them up. The timer is there
// for a browser that stops presenting the video (it may, for a video it considers out of sight): the page then
// sends the frame it has every LIVE_FRAME_WAIT_MS instead of stalling.
function liveNextFrame() {
  const video = $("live-camera");
  if (!live.ws) return;
  let pending = true;
  let callback = null;
  const capture = (presented) => {
    if (!pending) return;
    pending = false;
    clearTimeout(timer);
    if (callback !== null && !presented) video.cancelVideoFrameCallback(callback);
    liveCapture(presented);
  };
  const timer = setTimeout(() => capture(false), LIVE_FRAME_WAIT_MS);
  if (video.requestVideoFrameCallback) callback = video.requestVideoFrameCallback(() => capture(true));
}

// presented: a new camera frame is there (not the timer's call), so a frame not sent now counts as skipped
function liveCapture(presented) {
  const ws = live.ws;
  if (!ws || ws.readyState !== WebSocket.OPEN) return;
  const video = $("live-camera");
  if (live.sent.size >= live.stats.inFlight || !video.videoWidth) {
    live.stats.skipped += presented && video.videoWidth ? 1 : 0;
    liveNextFrame();
    return;
  }
  const scale = Math.min(1, LIVE_MAX_SIDE / Math.max(video.videoWidth, video.videoHeight));
  live.grab.width = Math.round(video.videoWidth * scale);
  live.grab.height = Math.round(video.videoHeight * scale);
  const captured = performance.now();
  live.grab.getContext("2d").drawImage(video, 0, 0, live.grab.width, live.grab.height);
  const seq = live.seq = (live.seq + 1) >>> 0;
  live.sent.set(seq, captured);
  live.grab.toBlob((blob) => {
    if (blob && live.ws === ws && ws.readyState === WebSocket.OPEN) {
      const header = new DataView(new ArrayBuffer(4));
      header.setUint32(0, seq);
      ws.send(new Blob([header.buffer, blob]));
    } else {
      live.sent.delete(seq); // never sent, so never answered: it must not hold a place in flight
    }
  }, "image/jpeg", LIVE_QUALITY);
  liveNextFrame();
}

async function liveShow(data) {
  const header = new DataView(data, 0, 16);
  const seq = header.getUint32(0);
  const serverMs = header.getUint32(4) / 1000;
  const captured = live.sent.get(seq);
  for (const waiting of live.sent.keys()) if (waiting <= seq) live.sent.delete(waiting); // older ones were dropped
  const session = live.ws;
  const bitmap = await createImageBitmap(new Blob([new Uint8Array(data, 16)], { type: "image/jpeg" }));
  if (live.ws !== session || !session) { // stopped (or started again) while this frame was being decoded
    bitmap.close();
    return;
  }
  const canvas = $("live-output");
  if (canvas.width !== bitmap.width || canvas.height !== bitmap.height) {
    canvas.width = bitmap.width;
    canvas.height = bitmap.height;
  }
  canvas.getContext("2d").drawImage(bitmap, 0, 0);
  bitmap.close();
  const now = performance.now();
  const s = live.stats;
  const fused = header.getUint32(12);
  s.shown += 1;
  s.fused += fused;
  s.dropped = header.getUint32(8);
  // a frame without a face fused must not pass for a fused one: the caption says so while it is shown
  $("live-output-caption").textContent = fused ? LIVE_CAPTION.fused : LIVE_CAPTION.unfused;
  if (captured === undefined) return; // not a frame this page sent (cannot happen with a well-behaved server)
  // one sample of each per frame shown, so latencyMs[i], serverMs[i] and fusedFlags[i] are the same frame's
  for (const [list, value] of [[s.shownAt, now], [s.serverMs, serverMs], [s.latencyMs, now - captured],
                               [s.fusedFlags, fused]]) {
    list.push(value);
    if (list.length > LIVE_KEEP) list.splice(0, list.length - LIVE_KEEP); // an hour-long session stays small
  }
  liveAdapt();
  liveStatsText();
}

// One more frame in flight while the latency has room, one again when it passes the budget (see LIVE_ROOM_MS).
function liveAdapt() {
  const s = live.stats;
  if (!s.adaptive || s.shown - s.adaptedAt < LIVE_ADAPT_FRAMES) return;
  const recent = s.latencyMs.slice(-LIVE_ADAPT_FRAMES).sort((a, b) => a - b);
  const median = recent[recent.length >> 1];
  const wanted = s.inFlight === 1 && median < LIVE_ROOM_MS ? LIVE_MAX_IN_FLIGHT
    : s.inFlight > 1 && median > LIVE_BUDGET_MS ? 1 : s.inFlight;
  if (wanted !== s.inFlight) {
    s.inFlight = wanted;
    s.adaptedAt = s.shown;
  }
}

function liveStatsText() {
  const s = live.stats;
  const now = performance.now();
  let recent = 0; // frames shown in the last 2 s
  for (let i = s.shownAt.length - 1; i >= 0 && now - s.shownAt[i] <= 2000; i--) recent += 1;
  recent /= 2;
  const last = (list) => list.slice(-LIVE_RECENT).sort((a, b) => a - b);
  const latency = last(s.latencyMs);
  const server = last(s.serverMs);
  const median = (list) => (list.length ? list[Math.floor(list.length / 2)] : 0);
  const flags = s.fusedFlags.slice(-LIVE_RECENT);
  const share = flags.length ? (100 * flags.reduce((a, b) => a + b, 0)) / flags.length : 0;
  $("live-stats").textContent = `${recent.toFixed(1)} frames/s · latency ${median(latency).toFixed(0)} ms ` +
    `(camera to screen) · server ${median(server).toFixed(0)} ms · ${s.dropped + s.skipped} frames skipped · ` +
    `a face fused in ${share.toFixed(0)} % of the last ${flags.length} frames`;
}

function liveClosed(event, opened) {
  liveCleanup();
  if (live.lastError) {
    liveError(live.lastError);
  } else if (!opened) {
    liveRefused(); // the browser hides a refused handshake's status: ask the server why
  } else if (event.code !== 1000) {
    liveError({ code: "NETWORK", message: "The live connection was lost", hint: "start it again" });
  }
  $("live-stats").textContent = "Stopped";
}

async function liveRefused() {
  try {
    const response = await fetch("/v1/live", { headers: headers() });
    const body = await response.json().catch(() => null);
    if (!response.ok && body && body.error) {
      const retry = response.headers.get("Retry-After");
      if (retry && !body.error.hint) body.error.hint = `try again in ${retry} s`;
      liveError(body.error);
      return;
    }
  } catch (_) {
    // fall through to the plain message
  }
  liveError({ code: "NETWORK", message: "The server refused the live connection", hint: "reload the page and try again" });
}

function liveCleanup() {
  if (live.stream) live.stream.getTracks().forEach((t) => t.stop());
  live.stream = null;
  live.ws = null;
  live.sent.clear();
  $("live-camera").srcObject = null;
  $("live-stop").hidden = true;
  liveUpdateButton();
}

function liveStop() {
  const ws = live.ws;
  if (!ws) return;
  ws.onclose = ws.onmessage = null;
  ws.close(1000, "stopped by the user");
  liveCleanup();
  $("live-stats").textContent = "Stopped";
}

function wireLive() {
  if (!(navigator.mediaDevices && navigator.mediaDevices.getUserMedia && window.WebSocket)) {
    $("live-start").title = "this browser has no camera access";
    return;
  }
  $("live-start").addEventListener("click", liveStart);
  $("live-stop").addEventListener("click", liveStop);
  const restartWithNewSource = () => {
    liveUpdateButton();
    if (live.ws) { // a new source face: start again with it
      liveStop();
      liveStart();
    }
  };
  $("source-file").addEventListener("change", restartWithNewSource);
  $("more-sources-file").addEventListener("change", restartWithNewSource);
  $("more-sources-clear").addEventListener("click", restartWithNewSource);
  $("source-drop").addEventListener("drop", () => setTimeout(liveUpdateButton));
}

wireLive();
