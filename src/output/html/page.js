"use strict";
// pyinspect's HTML profile: everything below runs from the data in
// #profile-data; nothing is fetched.
(function () {
  const D = JSON.parse(document.getElementById("profile-data").textContent);
  const flame = document.getElementById("flame");
  const details = document.getElementById("details");
  const crumbs = document.getElementById("crumbs");
  const threadSelect = document.getElementById("thread");
  const search = document.getElementById("search");
  const matched = document.getElementById("matched");
  const ROW = 18;
  const MAX_NODES = 20000;
  let thread = -1;
  let zoom = [];
  let query = null;
  let sortKey = "self";

  D.threads.forEach(function (name, i) {
    const o = document.createElement("option");
    o.value = String(i);
    o.textContent = name;
    threadSelect.appendChild(o);
  });

  function hash(s) {
    let h = 2166136261;
    for (let i = 0; i < s.length; i++) {
      h ^= s.charCodeAt(i);
      h = Math.imul(h, 16777619);
    }
    return h >>> 0;
  }

  // Warm colours for Python, blue-green for native, grey for roots: a
  // function keeps its colour across profiles.
  function color(frame) {
    const h = hash(D.functions[D.frameFunction[frame]]);
    const kind = D.kinds[frame];
    if (kind === 2) return "hsl(0, 0%, " + (72 + (h % 10)) + "%)";
    if (kind === 1) return "hsl(" + (170 + (h % 40)) + ", 55%, " + (58 + (h >>> 8) % 12) + "%)";
    return "hsl(" + (h % 50) + ", " + (80 + (h >>> 8) % 20) + "%, " + (55 + (h >>> 16) % 12) + "%)";
  }

  function matches(frame) {
    return query !== null && query.test(D.frames[frame]);
  }

  function buildTree() {
    const root = { frame: -1, total: 0, self: 0, children: new Map(), parent: null };
    for (const s of D.samples) {
      const stack = s[0], t = s[1], count = s[2];
      if (thread >= 0 && t !== thread) continue;
      let node = root;
      root.total += count;
      for (const f of D.stacks[stack]) {
        let c = node.children.get(f);
        if (!c) {
          c = { frame: f, total: 0, self: 0, children: new Map(), parent: node };
          node.children.set(f, c);
        }
        c.total += count;
        node = c;
      }
      node.self += count;
    }
    return root;
  }

  function pct(n, of) {
    return of > 0 ? (100 * n / of).toFixed(2) + "%" : "0%";
  }

  function render() {
    const tree = buildTree();
    let view = tree;
    for (const f of zoom) {
      const c = view.children.get(f);
      if (!c) { zoom = []; view = tree; break; }
      view = c;
    }
    flame.textContent = "";
    const width = flame.clientWidth || 1000;
    let drawn = 0, depthMax = 0;
    function draw(node, depth, x, w) {
      if (w * width < 0.5 || drawn >= MAX_NODES) return;
      drawn++;
      depthMax = Math.max(depthMax, depth);
      const div = document.createElement("div");
      div.className = "fg-node";
      const label = node.frame < 0 ? "all (" + tree.total + " samples)" : D.frames[node.frame];
      div.style.left = (x * 100) + "%";
      div.style.width = (w * 100) + "%";
      div.style.top = (depth * ROW) + "px";
      div.style.background = node.frame < 0 ? "hsl(0, 0%, 80%)" : color(node.frame);
      if (node.frame >= 0 && matches(node.frame)) div.classList.add("match");
      if (w * width > 24) div.textContent = label;
      const info = label + ": " + node.total + " samples, " + pct(node.total, tree.total) +
        " of all, own " + node.self;
      div.title = info;
      div.addEventListener("mouseenter", function () { details.textContent = info; });
      div.addEventListener("click", function () {
        const path = [];
        for (let n = node; n && n.frame >= 0; n = n.parent) path.unshift(n.frame);
        zoom = path;
        render();
      });
      flame.appendChild(div);
      const kids = Array.from(node.children.values());
      kids.sort(function (a, b) {
        const la = D.frames[a.frame], lb = D.frames[b.frame];
        return la < lb ? -1 : la > lb ? 1 : 0;
      });
      let cx = x;
      for (const c of kids) {
        const cw = node.total > 0 ? w * c.total / node.total : 0;
        draw(c, depth + 1, cx, cw);
        cx += cw;
      }
    }
    draw(view, 0, 0, 1);
    flame.style.height = ((depthMax + 1) * ROW + 2) + "px";
    flame.dataset.nodes = String(drawn);

    crumbs.textContent = "";
    if (zoom.length > 0) {
      const all = document.createElement("a");
      all.textContent = "all";
      all.addEventListener("click", function () { zoom = []; render(); });
      crumbs.appendChild(all);
      zoom.forEach(function (f, i) {
        crumbs.appendChild(document.createTextNode("› "));
        const a = document.createElement("a");
        a.textContent = D.frames[f];
        a.addEventListener("click", function () { zoom = zoom.slice(0, i + 1); render(); });
        crumbs.appendChild(a);
      });
    }
    renderSearch(tree);
    renderTop();
    document.body.dataset.rendered = "yes";
  }

  function renderSearch(tree) {
    if (query === null) { matched.textContent = ""; return; }
    let hit = 0;
    for (const s of D.samples) {
      if (thread >= 0 && s[1] !== thread) continue;
      if (D.stacks[s[0]].some(matches)) hit += s[2];
    }
    matched.textContent = "matched " + hit + " samples, " + pct(hit, tree.total);
  }

  function renderTop() {
    const own = new Map(), total = new Map();
    let all = 0;
    for (const s of D.samples) {
      if (thread >= 0 && s[1] !== thread) continue;
      const stack = D.stacks[s[0]], count = s[2];
      all += count;
      if (stack.length === 0) continue;
      const leaf = D.frameFunction[stack[stack.length - 1]];
      own.set(leaf, (own.get(leaf) || 0) + count);
      const seen = new Set();
      for (const f of stack) {
        const fn = D.frameFunction[f];
        if (seen.has(fn)) continue;
        seen.add(fn);
        total.set(fn, (total.get(fn) || 0) + count);
      }
    }
    const rows = Array.from(total.keys()).map(function (fn) {
      return { fn: fn, name: D.functions[fn], self: own.get(fn) || 0, total: total.get(fn) };
    });
    rows.sort(function (a, b) {
      if (sortKey === "name") return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
      return b[sortKey] - a[sortKey] || b.total - a.total;
    });
    const body = document.querySelector("#top tbody");
    body.textContent = "";
    for (const r of rows.slice(0, 200)) {
      const tr = document.createElement("tr");
      if (query !== null && query.test(r.name)) tr.className = "match";
      [r.name, r.self, pct(r.self, all), r.total, pct(r.total, all)].forEach(function (v) {
        const td = document.createElement("td");
        td.textContent = String(v);
        tr.appendChild(td);
      });
      tr.title = r.name;
      body.appendChild(tr);
    }
  }

  threadSelect.addEventListener("change", function () {
    thread = Number(threadSelect.value);
    zoom = [];
    render();
  });
  search.addEventListener("input", function () {
    const text = search.value.trim();
    if (text === "") { query = null; } else {
      try { query = new RegExp(text, "i"); } catch (e) {
        query = new RegExp(text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"), "i");
      }
    }
    render();
  });
  document.getElementById("reset").addEventListener("click", function () { zoom = []; render(); });
  document.querySelectorAll("#top th").forEach(function (th) {
    th.addEventListener("click", function () { sortKey = th.dataset.key; renderTop(); });
  });
  window.addEventListener("resize", render);
  // A link can carry the view: #search=REGEX&thread=N.
  const params = new URLSearchParams(location.hash.slice(1));
  if (params.has("thread")) {
    const t = Number(params.get("thread"));
    if (t >= 0 && t < D.threads.length) { thread = t; threadSelect.value = String(t); }
  }
  if (params.get("search")) {
    search.value = params.get("search");
    search.dispatchEvent(new Event("input"));
  } else {
    render();
  }
})();
