// eventlog ui: selection, state and diff in the inspector, paging by fetch, live updates.
// Plain script, no build step. Every fragment it puts in the page was escaped by the server.
"use strict";

(function () {
  const FRAGMENT = { "x-eventlog-fragment": "1" };

  // The server's answer as text (an error's page fragment too); a network failure says so.
  async function fetchHtml(url) {
    let response;
    try {
      response = await fetch(url, { headers: FRAGMENT, credentials: "same-origin" });
    } catch (err) {
      connectionLost();
      throw new Error("the server did not answer: it may have stopped");
    }
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
    if (!dot) return;
    dot.dataset.state = state;
    dot.textContent = { on: "live", wait: "reconnecting", off: "offline" }[state] || "live";
  }

  // -- the connection --------------------------------------------------------------------------
  // Lost when the live stream breaks or a request gets no answer; said in a banner until a
  // stream opens again (the page asks again every few seconds).

  let lost = false;
  function connectionLost() {
    if (lost) return;
    lost = true;
    setLive("off");
    const banner = document.getElementById("conn");
    if (!banner) return;
    banner.textContent = "The connection to the server is lost: what this page shows may be out of date. Retrying…";
    banner.hidden = false;
  }

  function connectionBack() {
    if (!lost) return false;
    lost = false;
    const banner = document.getElementById("conn");
    if (banner) banner.hidden = true;
    return true;
  }

  function listen(url, handlers, reconnected) {
    if (!url || !window.EventSource) return;
    let source = null;
    let wait = 1000;
    let ended = false;
    function open(target) {
      source = new EventSource(target);
      source.onopen = () => {
        wait = 1000;
        setLive("on");
        if (connectionBack() && reconnected) reconnected();
      };
      source.onerror = () => {
        if (ended) return;
        connectionLost();
        if (source.readyState === EventSource.CLOSED) {  // the browser gave up: ask again, from now on
          setTimeout(() => open(withParams(url, { position: null })), wait);
          wait = Math.min(wait * 2, 10000);
        }
      };
      source.addEventListener("end", (e) => {  // the server stopped this stream for good: do not ask again
        ended = true;
        source.close();
        setLive("off");
        const banner = document.getElementById("conn");
        if (banner) {
          banner.textContent = "Live updates stopped: " + JSON.parse(e.data).message;
          banner.hidden = false;
        }
      });
      for (const [name, handler] of Object.entries(handlers)) {
        source.addEventListener(name, (e) => handler(JSON.parse(e.data)));
      }
    }
    open(url);
    window.addEventListener("pagehide", () => source && source.close());
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
    const form = document.getElementById("run-filters");
    const body = document.getElementById("runs-body");
    const hint = document.getElementById("search-hint");
    // The question in the form; the page shown is kept for a live update, not for a new question.
    function query(samePage) {
      const params = { page: samePage ? new URL(location.href).searchParams.get("page") : null };
      for (const [k, v] of new FormData(form)) params[k] = String(v).trim();
      if (params.sort === "activity") params.sort = "";
      return withParams("/", params);
    }
    let asked = 0; // the list shows the answer to the latest question only
    async function refresh(samePage) {
      const ticket = ++asked;
      const target = query(samePage === true);
      hint.textContent = "searching…";
      let html;
      try {
        html = await fetchHtml(withParams(target, { fragment: 1 }));
      } catch (err) {
        hint.textContent = err.message;
        return;
      }
      if (ticket !== asked) return;
      body.innerHTML = html;
      hint.textContent = "the server searches every run as you type";
      if (location.pathname + location.search !== target) history.replaceState(null, "", target);
    }
    let timer = null;
    form.addEventListener("input", (e) => {
      if (!e.target.matches("input")) return;
      clearTimeout(timer);
      timer = setTimeout(() => refresh(false), 200);
    });
    form.addEventListener("change", (e) => {
      if (e.target.matches("select")) refresh(false);
    });
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      clearTimeout(timer);
      refresh(false);
    });
    const live = serial(() => refresh(true));
    listen(root.dataset.stream, { runs: live }, live);
  }

  // -- a run -----------------------------------------------------------------------------------

  function runPage(root) {
    const panel = document.getElementById("panel");
    const inspector = document.getElementById("inspector");
    const status = document.getElementById("find-status");
    let a = root.dataset.at === "" ? null : Number(root.dataset.at);
    let b = root.dataset.b === "" ? null : Number(root.dataset.b);

    function items() {
      return Array.from(panel.querySelectorAll("[data-offset]"));
    }

    function bar() {
      return panel.querySelector(".panel-bar") || { dataset: {} };
    }

    // The selected event (else the first) is the one place Tab stops in the list; j/k, the arrows
    // and Enter work from there.
    function mark() {
      let stop = null;
      for (const el of items()) {
        const off = Number(el.dataset.offset);
        el.classList.toggle("sel-a", off === a);
        el.classList.toggle("sel-b", b !== null && off === b);
        el.tabIndex = -1;
        if (off === a && stop === null) stop = el;
      }
      stop = stop || panel.querySelector("[data-offset]");
      if (stop) stop.tabIndex = 0;
    }

    function remember() {
      history.replaceState(null, "", withParams(location.href, { at: a, b: b }));
    }

    // What takes longer than half a second says so, with the time it has taken, until it is shown.
    let progressTimer = null;
    function progress(what) {
      clearInterval(progressTimer);
      const old = inspector.querySelector(".progress");
      if (old) old.remove();
      if (!what) return;
      const t0 = performance.now();
      progressTimer = setInterval(function () {
        const ms = performance.now() - t0;
        if (ms < 500) return;
        let line = inspector.querySelector(".progress");
        if (!line) {
          line = document.createElement("div");
          line.className = "progress";
          line.setAttribute("role", "status");
          line.innerHTML = '<span class="spinner"></span><span class="progress-text"></span>';
          inspector.prepend(line);
        }
        line.lastChild.textContent = `${what}… ${(ms / 1000).toFixed(1)} s`;
      }, 100);
    }

    let asked = 0; // the inspector shows the answer to the latest question only
    async function show(url, what) {
      const ticket = ++asked;
      inspector.classList.add("loading");
      progress(what || "Reading");
      let html;
      try {
        html = await fetchHtml(url);
      } catch (err) {
        html = `<div class="error-box" role="alert"></div>`;
        if (ticket !== asked) return;
        progress(null);
        inspector.classList.remove("loading");
        inspector.innerHTML = html;
        inspector.firstChild.textContent = "Not shown: " + err.message + ".";
        return;
      }
      if (ticket !== asked) return;
      progress(null);
      inspector.classList.remove("loading");
      inspector.innerHTML = html;
    }

    // The status's "following the tail" line, while the selection follows the newest event:
    // another selection, or the toggle off, takes it away (and leaves any other line there).
    let tailLine = "";
    function sayTail(line) {
      if (line) {
        status.classList.remove("bad");
        status.textContent = line;
      } else if (tailLine && status.textContent === tailLine) status.textContent = "";
      tailLine = line;
    }

    async function select(offset, other) {
      a = offset;
      b = other === undefined ? null : other;
      if (b !== null || a !== Number(root.dataset.head)) sayTail("");
      mark();
      remember();
      if (b === null) await show(withParams(root.dataset.state, { at: a }), `Reading the state after offset ${a.toLocaleString("en")}`);
      else await show(withParams(root.dataset.diff, { a: a, b: b }), `Reading the states after offsets ${a} and ${b}`);
    }

    function focusOn(offset) {
      const el = panel.querySelector(`[data-offset="${offset}"]`);
      if (!el) return;
      el.scrollIntoView({ block: "nearest" });
      el.focus({ preventScroll: true });
    }

    function putPanel(html) {
      panel.innerHTML = html;
      const waiting = panel.querySelector("template[data-waiting]");
      if (waiting) document.getElementById("waiting").replaceChildren(waiting.content.cloneNode(true));
      mark();
    }

    async function loadPanel(url) {
      let html;
      try {
        html = await fetchHtml(url);
      } catch (err) {
        status.textContent = err.message;
        return false;
      }
      putPanel(html);
      return true;
    }

    // The page's first answer draws a screen of its events, around the selected one (the bar's
    // data-rest: the whole page); the rest is asked for once that screen is painted, and put in
    // place with the event at the top of the screen where it was.
    function afterPaint() {
      return new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));
    }

    async function fillPage() {
      const url = bar().dataset.rest;
      if (!url) return;
      let html;
      try {
        html = await fetchHtml(url);
      } catch (err) {
        status.textContent = err.message;
        return;
      }
      if (!bar().dataset.rest) return; // a live update drew the whole page meanwhile
      const box = panel.getBoundingClientRect().top;
      const anchor = items().find((el) => el.getBoundingClientRect().bottom > box + 40) || null;
      const offset = anchor ? anchor.dataset.offset : null;
      const top = anchor ? anchor.getBoundingClientRect().top : 0;
      const hadFocus = panel.contains(document.activeElement);
      putPanel(html);
      const again = offset === null ? null : panel.querySelector(`[data-offset="${offset}"]`);
      if (again) panel.scrollTop += again.getBoundingClientRect().top - top;
      if (hadFocus && a !== null) focusOn(a);
    }
    let filled = Promise.resolve();

    // j/k: the next or previous event; past the page's edge, the next or previous page.
    const step = serial(async function () {
      await filled; // the whole page first: j/k go through its events, not past the first screen's
      const delta = pending;
      pending = 0;
      if (!delta) return;
      let offsets = [...new Set(items().map((el) => Number(el.dataset.offset)))].sort((x, y) => x - y);
      let i = offsets.indexOf(a);
      let next;
      if (i >= 0 && i + delta >= offsets.length && bar().dataset.next) {
        if (!(await loadPanel(bar().dataset.next))) return;
        offsets = [...new Set(items().map((el) => Number(el.dataset.offset)))].sort((x, y) => x - y);
        next = offsets.find((o) => o > a);
      } else if (i >= 0 && i + delta < 0 && bar().dataset.prev) {
        if (!(await loadPanel(bar().dataset.prev))) return;
        offsets = [...new Set(items().map((el) => Number(el.dataset.offset)))].sort((x, y) => x - y);
        next = offsets.filter((o) => o < a).pop();
      } else if (offsets.length) {
        next = offsets[Math.max(0, Math.min(offsets.length - 1, i < 0 ? 0 : i + delta))];
      }
      if (next === undefined) return;
      select(next);
      focusOn(next);
    });
    let pending = 0;
    function move(delta) {
      pending += delta;
      step();
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
        show(withParams(root.dataset.prompt, { at: prompt.dataset.promptAt }), "Reading what the LLM was sent");
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

    // The state tree is read a subtree at a time: a folded map or list is asked for when it is
    // opened, the next items of a long one when asked.
    async function subtree(params, replace) {
      const insp = inspector.querySelector('.insp[data-kind="state"]');
      if (!insp) return;
      progress(`Reading the state after offset ${Number(insp.dataset.at).toLocaleString("en")}`);
      let html;
      try {
        html = await fetchHtml(withParams(root.dataset.node, { at: insp.dataset.at, ...params }));
      } catch (err) {
        html = `<ul class="tree"><li class="t-more error-box" role="alert"></li></ul>`;
        const box = document.createElement("template");
        box.innerHTML = html;
        box.content.querySelector("li").textContent = "Not shown: " + err.message + ".";
        html = box.innerHTML;
      } finally {
        progress(null);
      }
      if (!inspector.contains(insp)) return; // another state was selected meanwhile
      const box = document.createElement("template");
      box.innerHTML = html;
      replace(box.content);
    }

    inspector.addEventListener(
      "toggle",
      (e) => {
        const node = e.target;
        if (!(node instanceof HTMLDetailsElement) || !node.open || !node.dataset.node) return;
        const lazy = node.querySelector(":scope > ul.lazy");
        if (!lazy || lazy.dataset.asked) return;
        lazy.dataset.asked = "1";
        subtree({ path: node.dataset.node }, (content) => lazy.replaceWith(content));
      },
      true, // toggle does not bubble
    );

    inspector.addEventListener("click", (e) => {
      const more = e.target.closest("button[data-more]");
      if (!more) return;
      const item = more.closest("li");
      more.disabled = true;
      const params = { path: more.dataset.more, from: more.dataset.from, upto: more.dataset.upto };
      subtree(params, (content) => {
        const list = content.querySelector("ul.tree");
        item.replaceWith(...(list ? list.children : content.childNodes));
      });
    });

    // Writes (only with --allow-writes): a fork, its values edited or not, and a paused run's answer.
    async function post(path, body, out, what) {
      const key = document.querySelector('meta[name="eventlog-write"]');
      let response;
      try {
        response = await fetch(path, {
          method: "POST",
          credentials: "same-origin",
          headers: { "content-type": "application/json", "x-eventlog-write": key ? key.content : "", ...FRAGMENT },
          body: JSON.stringify(body),
        });
      } catch (err) {
        connectionLost();
        out.textContent = `Not ${what}: the server did not answer.`;
        return;
      }
      if (response.ok) location.href = (await response.json()).url;
      else if ((response.headers.get("content-type") || "").startsWith("text/html")) out.innerHTML = await response.text();
      else out.textContent = await response.text();
    }

    function json(text, out, what) {
      try {
        return { value: JSON.parse(text) };
      } catch (err) {
        out.textContent = `Not ${what}: that is not JSON (${err.message}).`;
        return null;
      }
    }

    inspector.addEventListener("submit", async (e) => {
      const fork = e.target.closest("#fork-form");
      const resume = e.target.closest("#resume-form");
      if (!fork && !resume) return;
      e.preventDefault();
      if (fork) {
        const out = fork.querySelector(".fork-result");
        const body = {
          run: fork.dataset.run,
          at: Number(fork.dataset.at),
          new: fork.elements.new.value,
          number: Number(root.dataset.number), // the life of the run this page shows, and no other
        };
        const edit = fork.elements.values;
        if (edit && edit.value !== edit.defaultValue) {
          const parsed = json(edit.value, out, "forked");
          if (!parsed) return;
          if (!parsed.value || typeof parsed.value !== "object" || Array.isArray(parsed.value)) {
            out.textContent = "Not forked: the values must be a JSON object.";
            return;
          }
          body.values = parsed.value;
        }
        await post("/run/fork", body, out, "forked");
      } else {
        const out = resume.querySelector(".resume-result");
        const parsed = json(resume.elements.value.value, out, "resumed");
        if (!parsed) return;
        const body = { run: resume.dataset.run, head: Number(resume.dataset.head), value: parsed.value, number: Number(root.dataset.number) };
        await post("/run/resume", body, out, "resumed");
      }
    });

    // Finding: go to an offset, the next or previous error (asked of the server, a bounded
    // scan at a time, with the progress said).
    function goTo(offset) {
      if (panel.querySelector(`[data-offset="${offset}"]`)) {
        select(offset);
        focusOn(offset);
      } else {
        location.href = withParams("/run", { id: root.dataset.run, view: root.dataset.view, at: offset });
      }
    }

    document.getElementById("jump").addEventListener("submit", (e) => {
      e.preventDefault();
      const raw = e.target.elements.at.value.trim();
      const head = Number(root.dataset.head);
      const base = Number(root.dataset.base);
      status.classList.remove("bad");
      if (!/^[0-9]{1,16}$/.test(raw) || Number(raw) > head || Number(raw) < base) {
        status.classList.add("bad");
        status.textContent = `No offset ${raw.slice(0, 20)}: this run's offsets go from ${base} to ${head}.`;
        return;
      }
      status.textContent = "";
      goTo(Number(raw));
    });

    document.getElementById("kind-filter").addEventListener("change", (e) => e.target.form.submit());

    let searching = 0;
    async function findError(forward) {
      const ticket = ++searching;
      const head = Number(root.dataset.head);
      let from = a === null ? (forward ? Number(root.dataset.base) : head + 1) : a;
      const start = from;
      status.classList.remove("bad");
      for (;;) {
        const url = withParams(root.dataset.find, { from: Math.min(from, head), direction: forward ? "next" : "previous", kind: "failed" });
        let found;
        try {
          const response = await fetch(url, { credentials: "same-origin" });
          found = await response.json();
          if (!response.ok) throw new Error(found.error);
        } catch (err) {
          if (err instanceof TypeError) connectionLost();
          status.classList.add("bad");
          status.textContent = "Not searched: " + err.message;
          return;
        }
        if (ticket !== searching) return;
        if (found.offset !== null) {
          status.textContent = `error at offset ${found.offset.toLocaleString("en")}`;
          goTo(found.offset);
          return;
        }
        if (found.done) {
          status.textContent = `No error ${forward ? "after" : "before"} offset ${start.toLocaleString("en")}.`;
          return;
        }
        status.textContent = `searching… offset ${found.scanned.toLocaleString("en")} of ${head.toLocaleString("en")}`;
        from = forward ? found.scanned : found.scanned + 1;
      }
    }
    document.getElementById("next-error").addEventListener("click", () => findError(true));
    document.getElementById("prev-error").addEventListener("click", () => findError(false));

    document.addEventListener("keydown", (e) => {
      if (e.target.closest("input, textarea, select") || e.metaKey || e.ctrlKey || e.altKey) return;
      if (e.key === "ArrowDown" || e.key === "j") {
        e.preventDefault();
        move(1);
      } else if (e.key === "ArrowUp" || e.key === "k") {
        e.preventDefault();
        move(-1);
      } else if ((e.key === "Enter" || e.key === " ") && e.target.matches("[data-offset]")) {
        e.preventDefault();
        select(Number(e.target.dataset.offset));
      }
    });

    // Live: a new event refreshes the page of events when it shows the run's tail. Following the
    // tail (the toggle, on by default) with the head selected moves the selection and the state
    // to the new head, and says so; an older event selected stays selected, and "N new events"
    // offers the jump (docs/guides/ui.md, "Live").
    const follow = document.getElementById("follow");
    const jumpNew = document.getElementById("jump-new");
    try {
      if (localStorage.getItem("eventlog-follow") === "0") follow.checked = false;
    } catch (err) {} // storage refused: the toggle starts on
    follow.addEventListener("change", () => {
      try {
        localStorage.setItem("eventlog-follow", follow.checked ? "1" : "0");
      } catch (err) {}
      if (!follow.checked) sayTail("");
    });
    let unseen = 0;
    let toHead = false;
    let followed = null; // the selection when an arrival decided to follow: one made meanwhile wins
    function sayUnseen() {
      jumpNew.hidden = unseen === 0;
      jumpNew.textContent = `${unseen.toLocaleString("en")} new event${unseen === 1 ? "" : "s"} ↓`;
    }
    jumpNew.addEventListener("click", () => {
      unseen = 0;
      sayUnseen();
      goTo(Number(root.dataset.head));
    });
    function arrived(before, head) {
      if (head <= before) return;
      if (follow.checked && b === null && (a === null || a === before)) {
        toHead = true;
        followed = a;
      }
      else {
        unseen += head - before;
        sayUnseen();
      }
    }
    const refresh = serial(async () => {
      await filled;
      const follows = toHead;
      toHead = false;
      const head = Number(root.dataset.head);
      const nearBottom = panel.scrollHeight - panel.scrollTop - panel.clientHeight < 80;
      const hadFocus = panel.contains(document.activeElement);
      if (bar().dataset.tail !== "1") {
        const note = document.getElementById("new-events");
        if (note) note.hidden = false;
      } else if (!(await loadPanel(bar().dataset.self))) return;
      if (follows && a === followed && b === null && follow.checked && a !== head) {
        select(head);
        sayTail(`following the tail: offset ${head.toLocaleString("en")} is the newest event`);
        const el = panel.querySelector(`[data-offset="${head}"]`);
        if (el) el.scrollIntoView({ block: "nearest" });
        if (hadFocus) focusOn(head);
        return;
      }
      if (nearBottom) panel.scrollTop = panel.scrollHeight;
      if (hadFocus && a !== null) focusOn(a);
    });
    listen(
      root.dataset.stream,
      {
        run: (change) => {
          if (String(change.number) !== root.dataset.number) {
            location.reload(); // the run was deleted and made again: this page shows a life that is gone
            return;
          }
          const before = Number(root.dataset.head);
          root.dataset.head = change.head;
          const headText = Number(change.head).toLocaleString("en");
          document.getElementById("run-head").textContent = headText;
          for (const el of panel.querySelectorAll(".range-head")) el.textContent = headText; // a page off the tail too
          const st = document.getElementById("run-status");
          if (st && change.status) {
            st.textContent = change.status;
            st.className = "status s-" + change.status;
          }
          arrived(before, Number(change.head));
          refresh();
        },
      },
      refresh, // back after the connection was lost: what this page shows may have changed
    );

    mark();
    const chosen = panel.querySelector(`[data-offset="${a}"]`);
    if (chosen) chosen.scrollIntoView({ block: "center" });
    // The state is asked for once the whole page is in: what the inspector shows, the panel holds.
    filled = afterPaint()
      .then(fillPage)
      .then(() => {
        if (a !== null) select(a, b === null ? undefined : b);
      });
  }

  document.addEventListener("DOMContentLoaded", () => {
    const runs = document.getElementById("runs");
    if (runs) runsPage(runs);
    const run = document.getElementById("run");
    if (run) runPage(run);
  });
})();
