// eventlog ui: selection, state and diff in the inspector, paging by fetch, live updates.
// Plain script, no build step. Every fragment it puts in the page was escaped by the server.
"use strict";

(function () {
  const FRAGMENT = { "x-eventlog-fragment": "1" };

  async function fetchHtml(url) {
    const response = await fetch(url, { headers: FRAGMENT, credentials: "same-origin" });
    return response.text();
  }

  function withParams(url, params) {
    const u = new URL(url, location.href);
    for (const [k, v] of Object.entries(params)) {
      if (v === null || v === undefined || v === "") u.searchParams.delete(k);
      else u.searchParams.set(k, String(v));
    }
    return u.pathname + u.search;
  }

  function setLive(state) {
    const dot = document.getElementById("live");
    if (dot) dot.dataset.state = state;
  }

  function listen(url, handlers) {
    if (!url || !window.EventSource) return;
    const source = new EventSource(url);
    source.onopen = () => setLive("on");
    source.onerror = () => setLive(source.readyState === EventSource.CLOSED ? "off" : "wait");
    source.addEventListener("end", () => {  // the server stopped this stream for good: do not ask again
      source.close();
      setLive("off");
    });
    for (const [name, handler] of Object.entries(handlers)) {
      source.addEventListener(name, (e) => handler(JSON.parse(e.data)));
    }
    window.addEventListener("pagehide", () => source.close());
  }

  // A task that runs at most once at a time; asked again meanwhile, it runs once more after.
  function serial(task) {
    let running = false;
    let again = false;
    return async function run() {
      if (running) {
        again = true;
        return;
      }
      running = true;
      try {
        await task();
      } finally {
        running = false;
        if (again) {
          again = false;
          run();
        }
      }
    };
  }

  // -- the runs list ---------------------------------------------------------------------------

  function runsPage(root) {
    const search = document.getElementById("run-search");
    const rows = document.getElementById("run-rows");
    const filter = () => {
      const q = search.value.trim().toLowerCase();
      for (const tr of rows.querySelectorAll("tr.run-row")) {
        tr.hidden = q !== "" && !tr.dataset.run.toLowerCase().includes(q);
      }
    };
    search.addEventListener("input", filter);
    const refresh = serial(async () => {
      rows.innerHTML = await fetchHtml(root.dataset.rows);
      filter();
    });
    listen(root.dataset.stream, { runs: refresh });
  }

  // -- a run -----------------------------------------------------------------------------------

  function runPage(root) {
    const panel = document.getElementById("panel");
    const inspector = document.getElementById("inspector");
    let a = root.dataset.at === "" ? null : Number(root.dataset.at);
    let b = root.dataset.b === "" ? null : Number(root.dataset.b);

    function items() {
      return Array.from(panel.querySelectorAll("[data-offset]"));
    }

    function mark() {
      for (const el of items()) {
        const off = Number(el.dataset.offset);
        el.classList.toggle("sel-a", off === a);
        el.classList.toggle("sel-b", b !== null && off === b);
      }
    }

    function remember() {
      history.replaceState(null, "", withParams(location.href, { at: a, b: b }));
    }

    let asked = 0; // the inspector shows the answer to the latest question only
    async function show(url) {
      const ticket = ++asked;
      inspector.classList.add("loading");
      const html = await fetchHtml(url);
      if (ticket !== asked) return;
      inspector.classList.remove("loading");
      inspector.innerHTML = html;
    }

    async function select(offset, other) {
      a = offset;
      b = other === undefined ? null : other;
      mark();
      remember();
      if (b === null) await show(withParams(root.dataset.state, { at: a }));
      else await show(withParams(root.dataset.diff, { a: a, b: b }));
    }

    function step(delta) {
      const offsets = [...new Set(items().map((el) => Number(el.dataset.offset)))].sort((x, y) => x - y);
      if (!offsets.length) return;
      const i = offsets.indexOf(a);
      const next = offsets[Math.max(0, Math.min(offsets.length - 1, i < 0 ? 0 : i + delta))];
      const el = panel.querySelector(`[data-offset="${next}"]`);
      if (el) el.scrollIntoView({ block: "nearest" });
      select(next);
    }

    panel.addEventListener("mousedown", (e) => {
      if (e.shiftKey) e.preventDefault(); // a shift-click compares; it does not extend a text selection
    });

    panel.addEventListener("click", (e) => {
      const target = e.target;
      const compare = target.closest("[data-compare]");
      if (compare) {
        e.preventDefault();
        const off = Number(compare.dataset.compare);
        if (a === null || a === off) select(off);
        else select(a, off);
        return;
      }
      const prompt = target.closest("[data-prompt-at]");
      if (prompt) {
        e.preventDefault();
        show(withParams(root.dataset.prompt, { at: prompt.dataset.promptAt }));
        return;
      }
      if (target.closest("a, button, summary")) return;
      if (!e.shiftKey && String(window.getSelection()).length) return; // the user selects text
      const item = target.closest("[data-offset]");
      if (!item) return;
      const off = Number(item.dataset.offset);
      if (e.shiftKey && a !== null && a !== off) select(a, off);
      else select(off);
    });

    inspector.addEventListener("click", (e) => {
      const target = e.target;
      const toggle = target.closest("[data-show]");
      if (toggle) {
        const which = toggle.dataset.show;
        for (const btn of inspector.querySelectorAll("[data-show]")) btn.classList.toggle("on", btn === toggle);
        for (const pane of inspector.querySelectorAll("[data-pane]")) pane.hidden = pane.dataset.pane !== which;
        return;
      }
      if (target.closest("[data-swap]") && b !== null) select(b, a);
      else if (target.closest("[data-close-diff]")) select(a);
      else if (target.closest("[data-state-at]")) select(Number(target.closest("[data-state-at]").dataset.stateAt));
    });

    inspector.addEventListener("submit", async (e) => {
      const form = e.target.closest("#fork-form");
      if (!form) return;
      e.preventDefault();
      const key = document.querySelector('meta[name="eventlog-write"]');
      const out = form.querySelector(".fork-result");
      const body = JSON.stringify({
        run: form.dataset.run,
        at: Number(form.dataset.at),
        new: form.elements.new.value,
        number: Number(root.dataset.number), // the life of the run this page shows, and no other
      });
      const response = await fetch("/run/fork", {
        method: "POST",
        credentials: "same-origin",
        headers: { "content-type": "application/json", "x-eventlog-write": key ? key.content : "", ...FRAGMENT },
        body: body,
      });
      if (response.ok) location.href = (await response.json()).url;
      else if ((response.headers.get("content-type") || "").startsWith("text/html")) out.innerHTML = await response.text();
      else out.textContent = await response.text();
    });

    document.addEventListener("keydown", (e) => {
      if (e.target.closest("input, textarea") || e.metaKey || e.ctrlKey || e.altKey) return;
      if (e.key === "ArrowDown" || e.key === "j") {
        e.preventDefault();
        step(1);
      } else if (e.key === "ArrowUp" || e.key === "k") {
        e.preventDefault();
        step(-1);
      }
    });

    // Live: a new event refreshes the page of events when it shows the run's tail.
    const refresh = serial(async () => {
      const bar = panel.querySelector(".panel-bar");
      if (!bar || bar.dataset.tail !== "1") {
        const note = document.getElementById("new-events");
        if (note) note.hidden = false;
        return;
      }
      const nearBottom = panel.scrollHeight - panel.scrollTop - panel.clientHeight < 80;
      panel.innerHTML = await fetchHtml(root.dataset.panel);
      mark();
      if (nearBottom) panel.scrollTop = panel.scrollHeight;
    });
    listen(root.dataset.stream, {
      run: (change) => {
        if (String(change.number) !== root.dataset.number) {
          location.reload(); // the run was deleted and made again: this page shows a life that is gone
          return;
        }
        root.dataset.head = change.head;
        document.getElementById("run-head").textContent = Number(change.head).toLocaleString("en");
        const status = document.getElementById("run-status");
        if (status && change.status) {
          status.textContent = change.status;
          status.className = "status s-" + change.status;
        }
        refresh();
      },
    });

    mark();
    const chosen = panel.querySelector(`[data-offset="${a}"]`);
    if (chosen) chosen.scrollIntoView({ block: "center" });
    if (a !== null) select(a, b === null ? undefined : b);
  }

  document.addEventListener("DOMContentLoaded", () => {
    const runs = document.getElementById("runs");
    if (runs) runsPage(runs);
    const run = document.getElementById("run");
    if (run) runPage(run);
  });
})();
