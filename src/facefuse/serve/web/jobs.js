// facefuse web page, batch / video section: start a job on the server, follow its progress, play or download
// the result. Uses app.js's $, state (the source photo, the option controls), headers() (API key) and friendly().
"use strict";

const jobs = { files: [], id: null, timer: null, resultUrl: null };

function jobsError(error) {
  sectionError("jobs", error);
}

async function jobsRequest(method, path, body) {
  let response;
  try {
    response = await fetch(path, { method, body, headers: headers() });
  } catch (_) {
    throw { code: "NETWORK", message: "Could not reach the server", hint: "check that facefuse serve is running" };
  }
  const answer = await response.json().catch(() => null);
  if (!response.ok) throw (answer && answer.error) || { code: "HTTP_" + response.status, message: "The server answered " + response.status };
  return answer;
}

function jobsChoose(files) {
  jobs.files = Array.from(files || []);
  const n = jobs.files.length;
  const video = n === 1 && jobs.files[0].type.startsWith("video/");
  $("jobs-chosen").textContent = n === 0 ? "Choose or drop several photos, a zip of photos, or a video clip"
    : video ? `Video: ${jobs.files[0].name}` : n === 1 ? jobs.files[0].name : `${n} files chosen`;
  $("jobs-drop").classList.toggle("chosen", n > 0);
  $("jobs-range").hidden = !video; // start and end apply to a video only
  jobsUpdateButton();
}

function jobsUpdateButton() {
  $("jobs-start").disabled = !(jobs.files.length && state.files.source) || jobs.id !== null;
}

function jobsClearResult() {
  if (jobs.resultUrl) URL.revokeObjectURL(jobs.resultUrl);
  jobs.resultUrl = null;
  const video = $("jobs-video");
  video.removeAttribute("src");
  video.hidden = true;
  $("jobs-download").hidden = true;
  for (const list of ["jobs-failures", "jobs-warnings"]) {
    $(list).hidden = true;
    $(list).replaceChildren();
  }
}

// What the server said about a finished job beyond its result (frames left unfused, the person chosen again
// after a scene cut, a resumed run…), shown as a list under the progress.
function jobsShowWarnings(warnings) {
  const list = $("jobs-warnings");
  list.replaceChildren();
  for (const text of warnings || []) {
    const line = document.createElement("li");
    line.textContent = text.charAt(0).toUpperCase() + text.slice(1) + ".";
    list.appendChild(line);
  }
  list.hidden = list.children.length === 0;
}

async function jobsStart() {
  if (!state.files.source) {
    jobsError({ code: "NO_SOURCE", message: "Choose a source photo in step 1 first" });
    return;
  }
  jobsError(null);
  jobsClearResult();
  const form = new FormData();
  form.append("source", state.files.source, state.files.source.name || "source.jpg");
  for (const file of state.moreSources) form.append("source", file, file.name || "source.jpg"); // step 1's others
  for (const file of jobs.files) form.append("targets", file, file.name);
  for (const [name, read] of state.controls) { // the same option controls as a single fusion
    const value = read();
    if (value !== null) form.append(name, value);
  }
  if (state.faceChoice.source_face !== undefined) form.append("source_face", state.faceChoice.source_face);
  if (!$("jobs-range").hidden) {
    for (const [field, id] of [["start", "jobs-start-s"], ["end", "jobs-end-s"]]) {
      if ($(id).value.trim() !== "") form.append(field, $(id).value.trim());
    }
  }
  $("jobs-status").hidden = false;
  $("jobs-progress").removeAttribute("value"); // indeterminate while uploading
  $("jobs-text").textContent = "Uploading…";
  $("jobs-start").disabled = true;
  try {
    const job = await jobsRequest("POST", "/v1/jobs", form);
    jobs.id = job.id;
    $("jobs-cancel").hidden = false;
    jobsShow(job);
    jobsPoll();
  } catch (error) {
    $("jobs-status").hidden = true;
    jobsError(error);
    jobsUpdateButton();
  }
}

function jobsPoll() {
  clearTimeout(jobs.timer);
  jobs.timer = setTimeout(async () => {
    if (!jobs.id) return;
    try {
      const job = await jobsRequest("GET", "/v1/jobs/" + jobs.id);
      if (job.id !== jobs.id) return; // cancelled or replaced meanwhile
      jobsShow(job);
      if (job.state === "queued" || job.state === "running") jobsPoll();
      else jobsFinished(job);
    } catch (error) {
      jobsError(error);
      jobsPoll(); // a brief server restart must not lose the job: it resumes there, so keep asking
    }
  }, 500);
}

function jobsShow(job) {
  const p = job.progress;
  const bar = $("jobs-progress");
  bar.value = p.percent;
  const unit = job.kind === "video" ? "frames" : "photos";
  const parts = [job.state === "queued" ? "Waiting for the server" : `${p.percent.toFixed(0)} %`];
  if (p.frames_total) parts.push(`${p.frames_done} / ${p.frames_total} ${unit}`);
  if (p.fps && job.state === "running") parts.push(`${p.fps.toFixed(1)} ${unit}/s`);
  if (p.eta_s && job.state === "running") parts.push(`about ${Math.ceil(p.eta_s)} s left`);
  $("jobs-text").textContent = parts.join(" · ");
}

async function jobsFinished(job) {
  const id = jobs.id;
  jobs.id = null;
  $("jobs-cancel").hidden = true;
  jobsUpdateButton();
  const failures = $("jobs-failures");
  for (const item of job.errors) {
    const line = document.createElement("li");
    line.textContent = `${item.name}: ${friendly(item.error)}`;
    failures.appendChild(line);
  }
  failures.hidden = job.errors.length === 0;
  jobsShowWarnings(job.warnings);
  if (job.state !== "done") {
    $("jobs-text").textContent = job.state === "cancelled" ? "Cancelled" : "The job failed";
    if (job.error) jobsError(job.error);
    return;
  }
  const done = job.kind === "video" ? "Done" : `Done: ${job.items.length - job.errors.length} of ${job.items.length} photos fused`;
  $("jobs-text").textContent = done + " — fetching the result…";
  try {
    const response = await fetch(job.result_url, { headers: headers() }); // the API key travels in a header
    if (!response.ok) throw ((await response.json().catch(() => null)) || {}).error || { message: "The result could not be fetched" };
    const blob = await response.blob();
    jobs.resultUrl = URL.createObjectURL(blob);
  } catch (error) {
    jobsError(error);
    return;
  }
  const link = $("jobs-download");
  link.href = jobs.resultUrl;
  link.download = `facefuse-${id.slice(0, 12)}.${job.kind === "video" ? "mp4" : "zip"}`;
  link.textContent = job.kind === "video" ? "Download the video" : "Download the photos (zip)";
  link.hidden = false;
  if (job.kind === "video") {
    const video = $("jobs-video");
    video.src = jobs.resultUrl;
    video.hidden = false;
  }
  $("jobs-text").textContent = done + ".";
}

async function jobsCancel() {
  const id = jobs.id;
  if (!id) return;
  jobs.id = null;
  clearTimeout(jobs.timer);
  try {
    await jobsRequest("DELETE", "/v1/jobs/" + id);
    $("jobs-text").textContent = "Cancelled";
  } catch (error) {
    jobsError(error);
  }
  $("jobs-cancel").hidden = true;
  jobsUpdateButton();
}

function wireJobs() {
  const drop = $("jobs-drop");
  const input = $("jobs-files");
  input.addEventListener("change", () => jobsChoose(input.files));
  drop.addEventListener("keydown", (event) => {
    if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      input.click();
    }
  });
  drop.addEventListener("dragover", (event) => {
    event.preventDefault();
    drop.classList.add("over");
  });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (event) => {
    event.preventDefault();
    drop.classList.remove("over");
    jobsChoose(event.dataTransfer.files);
  });
  $("jobs-start").addEventListener("click", jobsStart);
  $("jobs-cancel").addEventListener("click", jobsCancel);
  $("source-file").addEventListener("change", jobsUpdateButton);
  $("source-drop").addEventListener("drop", () => setTimeout(jobsUpdateButton));
}

wireJobs();
