// facefuse web page: plain JavaScript, no dependencies, talks only to this server.
"use strict";

const $ = (id) => document.getElementById(id);

// The source and target cards share one body, the photo-card template of index.html: built here, before anything
// (this file or jobs.js, live.js, viewer.js, which load after it) looks up the elements by their ids.
function buildPhotoCard(card) {
  const role = card.dataset.role;
  const body = $("photo-card").content.cloneNode(true);
  for (const element of body.querySelectorAll("[data-id]")) {
    element.id = `${role}-${element.dataset.id}`;
    element.removeAttribute("data-id");
  }
  body.querySelector("img").alt = `${role[0].toUpperCase()}${role.slice(1)} photo`;
  body.querySelector(".camera").dataset.role = role;
  body.querySelector("legend").textContent = `Which face in the ${role}?`;
  card.insertBefore(body, card.querySelector(".more-sources")); // (null: at the end)
}
for (const card of document.querySelectorAll(".card.photo[data-role]")) buildPhotoCard(card);

const state = {
  files: { source: null, target: null },
  faces: { source: [], target: [] }, // what /v1/detect found in each photo
  faceChoice: {}, // option name (target_face, source_face) → "largest", "all" or an index, as text
  faceOptions: {}, // role → the face option's JSON Schema
  controls: [], // [name, read()] of every generated control
  resultUrl: null,
  previewUrls: { source: null, target: null },
  pending: null, // AbortController of the fusion in flight
  moreSources: [], // more photos of the source person, sent as more "source" fields (the server caps how many)
};

// Plain words for the codes a person can act on; anything else shows the server's own message.
const ABOUT_PHOTO = {
  NO_FACE: "No face found in the {role} photo",
  FACE_TOO_SMALL: "The face in the {role} photo is too small",
  POSE_TOO_LARGE: "The face in the {role} photo is turned too far away",
  TOO_BLURRY: "The {role} photo is too blurry",
  LOW_CONFIDENCE: "The face in the {role} photo is hard to make out",
  FACE_INDEX_OUT_OF_RANGE: "That face is not in the {role} photo",
  UNSUPPORTED_IMAGE: "The {role} file is not a photo this server can read",
  CORRUPT_IMAGE: "The {role} photo is damaged or incomplete",
  IMAGE_TOO_LARGE: "The {role} photo is too large",
  IMAGE_TOO_SMALL: "The {role} photo is too small",
};
const ABOUT_SERVER = {
  QUEUE_FULL: "The server is busy",
  DEADLINE_EXCEEDED: "The server took too long",
  NOT_READY: "The server is still starting",
  UNAUTHORIZED: "This server needs an API key",
};

function friendly(error) {
  const role = error.details && error.details.image;
  const which = error.details && error.details.source_photo; // one of several source photos, counted from 0
  if (role && ABOUT_PHOTO[error.code]) {
    const text = ABOUT_PHOTO[error.code].replace("{role}", role);
    return which === undefined ? text : `${text} (source photo ${which + 1})`;
  }
  if (ABOUT_SERVER[error.code]) return ABOUT_SERVER[error.code];
  const text = error.message || "Something went wrong";
  return text.charAt(0).toUpperCase() + text.slice(1);
}

function showError(error) {
  $("error-message").textContent = friendly(error) + ".";
  const hint = error.hint ? error.hint.charAt(0).toUpperCase() + error.hint.slice(1) + "." : "";
  if (error.code === "UNAUTHORIZED") {
    $("settings").open = true;
    $("api-key").focus();
  }
  $("error-hint").textContent = hint;
  $("error").hidden = false;
}

// The error box of a page section ("jobs", "live"): its <prefix>-error, -error-message and -error-hint; null hides it.
function sectionError(prefix, error) {
  const box = $(prefix + "-error");
  if (!error) {
    box.hidden = true;
    return;
  }
  $(prefix + "-error-message").textContent = friendly(error) + ".";
  $(prefix + "-error-hint").textContent = error.hint ? error.hint.charAt(0).toUpperCase() + error.hint.slice(1) + "." : "";
  if (error.code === "UNAUTHORIZED") $("settings").open = true;
  box.hidden = false;
}

function clearError() {
  $("error").hidden = true;
}

function headers(extra) {
  const h = Object.assign({ Accept: "application/json" }, extra || {});
  const key = $("api-key").value.trim();
  if (key) h.Authorization = "Bearer " + key;
  return h;
}

async function post(path, form, signal) {
  let response;
  try {
    response = await fetch(path, { method: "POST", body: form, headers: headers(), signal });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw { code: "NETWORK", message: "Could not reach the server", hint: "check that facefuse serve is running" };
  }
  let body = null;
  try {
    body = await response.json();
  } catch (_) {
    body = null;
  }
  if (!response.ok) {
    const error = (body && body.error) || { code: "HTTP_" + response.status, message: "The server answered " + response.status };
    const retry = response.headers.get("Retry-After");
    if (retry && !error.hint) error.hint = `try again in ${retry} s`;
    throw error;
  }
  return body;
}

// ---- inputs ---------------------------------------------------------------------------------------------------

function setFile(role, file) {
  if (!file) return;
  state.files[role] = file;
  if (state.previewUrls[role]) URL.revokeObjectURL(state.previewUrls[role]);
  state.previewUrls[role] = URL.createObjectURL(file);
  const img = $(role + "-preview");
  $(role + "-drop").querySelector(".placeholder").textContent = PLACEHOLDER;
  if (file.type && !file.type.startsWith("image/")) {
    showNoPreview(role); // not a picture: no broken-image icon, the server's verdict says what it is
  } else {
    img.src = state.previewUrls[role];
    img.hidden = false;
    $(role + "-drop").classList.add("filled");
  }
  state.faces[role] = [];
  const option = state.faceOptions[role];
  if (option) state.faceChoice[option.name] = String(option.default);
  renderFacePicker(role);
  clearError();
  checkPhoto(role, file);
  updateButton();
  if (state.files.source && state.files.target) fuse();
}

const PLACEHOLDER = "Choose or drop a photo";

// A file the browser cannot show (not a picture, or a format such as TIFF it does not decode): the drop zone
// names it instead of a broken-image icon; the server still checks it and says whether it can use it.
function showNoPreview(role) {
  const img = $(role + "-preview");
  img.hidden = true;
  img.removeAttribute("src");
  $(role + "-drop").classList.remove("filled");
  const name = state.files[role] ? state.files[role].name : "this file";
  $(role + "-drop").querySelector(".placeholder").textContent = `No preview of ${name} — choose another photo`;
}

async function checkPhoto(role, file) {
  const verdict = $(role + "-verdict");
  verdict.className = "verdict";
  verdict.textContent = "Looking for faces…";
  const form = new FormData();
  form.append("image", file, file.name || role + ".jpg");
  form.append("role", role);
  try {
    const report = await post("/v1/detect", form);
    if (state.files[role] !== file) return; // replaced meanwhile
    const n = report.faces.length;
    if (report.verdict.accepted) {
      verdict.classList.add("ok");
      verdict.textContent = n === 1 ? "1 face found" : `${n} faces found`;
    } else {
      verdict.classList.add("bad");
      verdict.textContent = friendly({ code: report.verdict.code, message: report.verdict.message, details: { image: role } }) +
        (report.verdict.hint ? " — " + report.verdict.hint : "");
    }
    state.faces[role] = report.faces;
    renderFacePicker(role, report.image_size);
  } catch (error) {
    if (state.files[role] !== file) return;
    verdict.classList.add("bad");
    verdict.textContent = friendly(error);
  }
}

// The face picker of a photo: shown when the photo has several faces and the server takes a face option for it
// (target_face, source_face). Its fixed choices ("largest", "all") come from that option's schema.
function renderFacePicker(role, imageSize) {
  const picker = $(role + "-face-picker");
  const choices = $(role + "-face-choices");
  const boxes = $(role + "-boxes");
  choices.replaceChildren();
  boxes.replaceChildren();
  const option = state.faceOptions[role];
  const faces = state.faces[role];
  picker.hidden = !option || faces.length < 2;
  if (picker.hidden) return;
  const chosen = state.faceChoice[option.name];
  const named = enumOf(option.schema).map((value) => [value, value.charAt(0).toUpperCase() + value.slice(1)]);
  const all = named.concat(faces.map((_, i) => [String(i), `Face ${i + 1}`]));
  for (const [value, text] of all) {
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = text;
    button.dataset.face = value;
    button.setAttribute("aria-pressed", String(value === chosen));
    button.addEventListener("click", () => chooseFace(role, value));
    choices.appendChild(button);
  }
  if (!imageSize) return;
  const [w, h] = imageSize;
  faces.forEach((face, i) => {
    const [x, y, bw, bh] = face.box;
    const box = document.createElement("span");
    box.className = "box" + (String(i) === chosen ? " chosen" : "");
    box.style.left = (100 * x / w) + "%";
    box.style.top = (100 * y / h) + "%";
    box.style.width = (100 * bw / w) + "%";
    box.style.height = (100 * bh / h) + "%";
    box.textContent = String(i + 1);
    box.title = `Face ${i + 1}`;
    box.addEventListener("click", (event) => {
      event.preventDefault();
      chooseFace(role, String(i));
    });
    boxes.appendChild(box);
  });
}

function chooseFace(role, value) {
  state.faceChoice[state.faceOptions[role].name] = value;
  renderFacePicker(role, imageSizeOf($(role + "-preview")));
  fuse();
}

function imageSizeOf(img) {
  return img.naturalWidth ? [img.naturalWidth, img.naturalHeight] : null;
}

function wireDrop(role) {
  const drop = $(role + "-drop");
  const input = $(role + "-file");
  $(role + "-preview").addEventListener("error", () => {
    if ($(role + "-preview").getAttribute("src")) showNoPreview(role);
  });
  input.addEventListener("change", () => setFile(role, input.files[0]));
  drop.addEventListener("keydown", (event) => {
    if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      input.click();
    }
  });
  for (const type of ["dragenter", "dragover"]) {
    drop.addEventListener(type, (event) => {
      event.preventDefault();
      drop.classList.add("over");
    });
  }
  for (const type of ["dragleave", "drop"]) {
    drop.addEventListener(type, () => drop.classList.remove("over"));
  }
  drop.addEventListener("drop", (event) => {
    event.preventDefault();
    const file = event.dataTransfer.files[0];
    if (file) setFile(role, file);
  });
}

// ---- camera ---------------------------------------------------------------------------------------------------

let cameraRole = null;
let cameraStream = null;

function wireCamera() {
  if (!(navigator.mediaDevices && navigator.mediaDevices.getUserMedia && window.HTMLDialogElement)) return;
  for (const button of document.querySelectorAll("button.camera")) {
    button.hidden = false;
    button.addEventListener("click", () => openCamera(button.dataset.role));
  }
  $("camera-shoot").addEventListener("click", shoot);
  $("camera-cancel").addEventListener("click", closeCamera);
}

async function openCamera(role) {
  try {
    cameraStream = await navigator.mediaDevices.getUserMedia({ video: { facingMode: "user" }, audio: false });
  } catch (err) {
    showError({ code: "CAMERA", message: "The camera is not available", hint: "allow camera access, or choose a photo instead" });
    return;
  }
  cameraRole = role;
  $("camera-video").srcObject = cameraStream;
  $("camera-dialog").showModal();
}

function shoot() {
  const video = $("camera-video");
  const canvas = document.createElement("canvas");
  canvas.width = video.videoWidth;
  canvas.height = video.videoHeight;
  canvas.getContext("2d").drawImage(video, 0, 0);
  const role = cameraRole;
  canvas.toBlob((blob) => {
    if (blob) setFile(role, new File([blob], role + "-camera.jpg", { type: "image/jpeg" }));
  }, "image/jpeg", 0.92);
  closeCamera();
}

function closeCamera() {
  if (cameraStream) cameraStream.getTracks().forEach((t) => t.stop());
  cameraStream = null;
  $("camera-dialog").close();
}

// ---- fusion ---------------------------------------------------------------------------------------------------

function updateButton() {
  $("fuse").disabled = !(state.files.source && state.files.target);
}

async function fuse() {
  if (!(state.files.source && state.files.target)) return;
  if (state.pending) state.pending.abort(); // the newest settings win; the server drops the abandoned request
  const controller = new AbortController();
  state.pending = controller;
  const form = new FormData();
  form.append("source", state.files.source, state.files.source.name || "source.jpg");
  for (const file of state.moreSources) form.append("source", file, file.name || "source.jpg");
  form.append("target", state.files.target, state.files.target.name || "target.jpg");
  for (const [name, read] of state.controls) {
    const value = read();
    if (value !== null) form.append(name, value);
  }
  for (const [name, value] of Object.entries(state.faceChoice)) form.append(name, value);
  $("busy").hidden = false;
  clearError();
  const started = performance.now();
  try {
    const answer = await post("/v1/fuse", form, controller.signal);
    showResult(answer, performance.now() - started);
  } catch (error) {
    if (error && error.name === "AbortError") return;
    clearResult(); // an older result would no longer match the chosen photos and settings
    showError(error);
  } finally {
    if (state.pending === controller) {
      state.pending = null;
      $("busy").hidden = true;
    }
  }
}

function showResult(answer, roundTripMs) {
  const bytes = Uint8Array.from(atob(answer.image_base64), (c) => c.charCodeAt(0));
  const blob = new Blob([bytes], { type: answer.media_type });
  if (state.resultUrl) URL.revokeObjectURL(state.resultUrl);
  state.resultUrl = URL.createObjectURL(blob);
  const img = $("result");
  img.src = state.resultUrl;
  img.hidden = false;
  $("result-placeholder").hidden = true;
  const link = $("download");
  link.href = state.resultUrl;
  link.download = `facefuse-${answer.request_id}.${answer.extension}`;
  link.hidden = false;
  showSourcePhotos(answer.faces);
  showTimings(answer.timings_ms, roundTripMs);
}

// With more photos of the source person: which one each face came from (1: the source photo, 2…: the others)
function showSourcePhotos(faces) {
  const note = $("result-source");
  note.hidden = !state.moreSources.length;
  const used = faces.map((face) => face.source_photo + 1);
  note.textContent = used.length === 1 ? `Fused from source photo ${used[0]}` : `Faces from source photos ${used.join(", ")}`;
}

function wireMoreSources() {
  const input = $("more-sources-file");
  const note = $("more-sources-note");
  const idle = note.textContent;
  const show = () => {
    const n = state.moreSources.length;
    note.textContent = n ? `${n} more photo${n === 1 ? "" : "s"}: each face is fused from the one turned most like it` : idle;
    $("more-sources-clear").hidden = !n;
    if (state.files.source && state.files.target) fuse();
  };
  input.addEventListener("change", () => {
    state.moreSources = Array.from(input.files);
    show();
  });
  $("more-sources-clear").addEventListener("click", () => {
    state.moreSources = [];
    input.value = "";
    show();
  });
}

// The pipeline reports sub-stages too (source_decode, target_detect, …); the page shows the main stages and
// their sum, plus the round trip the browser measured (upload and download included).
function showTimings(timings, roundTripMs) {
  const body = $("timings").tBodies[0];
  body.replaceChildren();
  const addRow = (name, ms, className) => {
    const row = body.insertRow();
    row.insertCell().textContent = name;
    row.insertCell().textContent = ms.toFixed(0) + " ms";
    if (className) row.className = className;
  };
  let server = 0;
  for (const [stage, ms] of Object.entries(timings)) {
    if (stage === "total" || stage.startsWith("source_") || stage.startsWith("target_")) continue;
    addRow(stage.replace(/_/g, " "), ms);
    server += ms;
  }
  addRow("on the server", server, "total");
  addRow("round trip", roundTripMs, "total");
  $("timings-card").hidden = false;
}

function clearResult() {
  $("result").hidden = true;
  $("download").hidden = true;
  $("result-placeholder").hidden = false;
  $("timings-card").hidden = true;
}

function debounce(fn, ms) {
  let timer = null;
  return () => {
    clearTimeout(timer);
    timer = setTimeout(fn, ms);
  };
}

// ---- controls, built from the server's option schema ----------------------------------------------------------

// The string values a field allows ("enum", "const", or either inside "anyOf"); [] when it is free.
function enumOf(schema) {
  if (schema.enum) return schema.enum.filter((v) => v !== null).map(String);
  if (schema.const !== undefined) return [String(schema.const)];
  return (schema.anyOf || []).flatMap(enumOf);
}

function idFor(name) {
  return name.replace(/_/g, "-");
}

function addSlider(name, schema, onChange) {
  const id = idFor(name);
  const label = document.createElement("label");
  label.htmlFor = id;
  label.title = schema.description || "";
  const shown = document.createElement("output");
  shown.id = id + "-value";
  label.append(schema.title || name, " ", shown);
  const input = document.createElement("input");
  input.type = "range";
  input.id = id;
  input.min = schema.minimum;
  input.max = schema.maximum;
  input.step = schema.type === "integer" || schema.maximum - schema.minimum >= 20 ? 1 : (schema.maximum - schema.minimum) / 100;
  input.value = schema.default;
  shown.textContent = input.value;
  input.addEventListener("input", () => {
    shown.textContent = input.value;
    onChange();
  });
  $("sliders").append(label, input);
  return () => input.value;
}

function addCheckbox(name, schema, onChange) {
  const label = document.createElement("label");
  label.title = schema.description || "";
  const input = document.createElement("input");
  input.type = "checkbox";
  input.id = idFor(name);
  input.checked = Boolean(schema.default);
  input.addEventListener("change", onChange);
  label.append(input, " " + (schema.title || name));
  $("choices").append(label);
  return () => (input.checked ? "true" : "false");
}

function addSelect(name, schema, values, onChange) {
  // spellings of one value the schema accepts side by side ("x-aliases": the format "jpg" is "jpeg"): offer one
  const aliases = schema["x-aliases"] || {};
  values = values.filter((value) => !(aliases[value] && values.includes(aliases[value])));
  const label = document.createElement("label");
  label.title = schema.description || "";
  const select = document.createElement("select");
  select.id = idFor(name);
  const nullable = (schema.anyOf || []).some((s) => s.type === "null");
  if (nullable) select.add(new Option("default", ""));
  for (const value of values) select.add(new Option(value, value));
  select.value = schema.default === null || schema.default === undefined ? "" : String(schema.default);
  select.addEventListener("change", onChange);
  label.append((schema.title || name) + " ", select);
  label.hidden = values.length < 2 && !nullable; // one choice is no choice
  $("choices").append(label);
  return () => (select.value === "" ? null : select.value);
}

// One control per field: a number with a range → slider, a boolean → checkbox, a fixed set of values → select,
// "x-control": "face" → the face picker of the photo its name starts with; anything else is sent as its default.
function buildControls(schema) {
  const refuse = debounce(fuse, 250);
  for (const [name, field] of Object.entries(schema.properties)) {
    if (field["x-control"] === "face") {
      const role = name.split("_")[0];
      state.faceOptions[role] = { name, schema: field, default: field.default };
      state.faceChoice[name] = String(field.default);
      continue;
    }
    const values = enumOf(field);
    let read = null;
    if ((field.type === "number" || field.type === "integer") && field.minimum !== undefined && field.maximum !== undefined) {
      read = addSlider(name, field, refuse);
    } else if (field.type === "boolean") {
      read = addCheckbox(name, field, refuse);
    } else if (values.length) {
      read = addSelect(name, field, values, refuse);
    }
    if (read) state.controls.push([name, read]);
  }
}

async function loadOptions() {
  if (state.controls.length) return;  // built once; a later key change finds them there
  try {
    const response = await fetch("/v1/options", { headers: headers({ Accept: "application/json" }) });
    if (response.status === 401) {  // the server asks for a key: the options load once the user gives it
      showError({ code: "UNAUTHORIZED", message: "This server needs an API key",
                  hint: "enter it under Settings; the fusion options load then" });
      return;
    }
    if (!response.ok) throw new Error(String(response.status));
    clearError();
    buildControls((await response.json()).schema);
  } catch (err) {
    showError({ code: "NETWORK", message: "Could not load the fusion options", hint: "reload the page" });
  }
}

function wireControls() {
  $("fuse").addEventListener("click", fuse);
  const key = sessionStorage.getItem("facefuse-api-key");
  if (key) $("api-key").value = key;
  $("api-key").addEventListener("change", () => {
    sessionStorage.setItem("facefuse-api-key", $("api-key").value);
    loadOptions();
  });
}

wireDrop("source");
wireDrop("target");
wireMoreSources();
wireCamera();
wireControls();
loadOptions();
