// facefuse web page, full-size viewer: the result at fit / 100 % / 200 % / 400 %, scrollable, with a before/after
// slider over the target photo (the result has the target's size). Uses app.js's $ and the page's images.
"use strict";

function viewerOpen() {
  const result = $("result");
  if (result.hidden || !result.src) return;
  $("viewer-after").src = result.src;
  $("viewer-before").src = $("target-preview").src;
  $("viewer-compare").value = "100";
  viewerCompare();
  viewerZoom();
  $("viewer").showModal();
}

function viewerZoom() {
  const zoom = $("viewer-zoom").value;
  const pair = $("viewer-pair");
  const after = $("viewer-after");
  pair.classList.toggle("fit", zoom === "fit");
  pair.style.width = zoom === "fit" ? "" : `${after.naturalWidth * Number(zoom)}px`;
}

function viewerCompare() {
  // the "after" picture covers the "before" one up to the slider's position
  $("viewer-after").style.clipPath = `inset(0 ${100 - Number($("viewer-compare").value)}% 0 0)`;
}

function wireViewer() {
  $("result").addEventListener("click", viewerOpen);
  $("result").addEventListener("keydown", (event) => {
    if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      viewerOpen();
    }
  });
  $("view-full").addEventListener("click", viewerOpen);
  $("viewer-zoom").addEventListener("change", viewerZoom);
  $("viewer-after").addEventListener("load", viewerZoom);
  $("viewer-compare").addEventListener("input", viewerCompare);
  $("viewer-close").addEventListener("click", () => $("viewer").close());
  // the "View full size" button follows the result image
  new MutationObserver(() => { $("view-full").hidden = $("result").hidden; })
    .observe($("result"), { attributes: true, attributeFilter: ["hidden"] });
}

wireViewer();
