/* flashd dashboard.  Every second: GET /v1/status (health first, then the
 * status table and the current figures) and GET /v1/history?since=T (the
 * samples flashd took since the last one; at load, the five minutes it
 * keeps, so the charts show what happened before the page was opened).
 * Rates are the change of a counter between two samples over the time
 * between them by flashd's clock (the samples' t_ms), not by this page's.
 * Charts are drawn on <canvas> here, no libraries; their y axes have round
 * steps (1, 2 or 5 times a power of ten) labelled in one unit chosen for
 * the scale.
 * For tests (tests/test-dashboard.sh reads the DOM): each figure is an
 * element with an id (d-NAME-iops, -mbps, -lat, -ops, -bytes, -temp) whose
 * data-value holds the raw number; health is in data-state (#health,
 * h-NAME); every chart canvas (c-NAME-KEY) carries its axis: data-unit,
 * data-step and data-max (base units), data-ticks (the labels, "|"
 * between), data-peak (the largest value drawn); the health strip (s-NAME)
 * its states in order in data-states. */
"use strict";

const PERIOD_MS = 1000;
const WINDOW_MS = 300000;       /* five minutes: what flashd keeps */
const dimms = new Map();        /* name -> {rows, box, canvases, strip} */
let fieldIdx = null;            /* history field name -> column */
let lastT = 0;                  /* newest sample's t_ms */
let nowMs = 0;                  /* flashd's clock at the last answer */
let samples = 0;

const HEALTH_COLOURS = { ok: "#1f7a3f", warning: "#b7791f", degraded: "#c62828", failed: "#6d0f0f" };

/* ---- numbers and units --------------------------------------------------- */

/* unit kind -> [factor, suffix] from the smallest up */
const UNITS = {
	ns: [[1, " ns"], [1e3, " \u00b5s"], [1e6, " ms"], [1e9, " s"]],
	Bps: [[1, " B/s"], [1e3, " kB/s"], [1e6, " MB/s"], [1e9, " GB/s"]],
	rate: [[1, "/s"], [1e3, "k/s"], [1e6, "M/s"]],
	pct: [[1, " %"]],
	degC: [[1, " \u00b0C"]],
};

function fmtNum(v, digits) {
	if (v === null || v === undefined || !isFinite(v)) return "-";
	return v.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });
}
/* v in the largest unit of kind that is at most v, with digits decimals */
function fmtUnit(v, kind, digits) {
	if (v === null || v === undefined || !isFinite(v)) return "-";
	const us = UNITS[kind];
	let u = us[0];
	for (const x of us) if (Math.abs(v) >= x[0]) u = x;
	return fmtNum(v / u[0], digits) + u[1];
}
function fmtBytes(v) {
	const u = ["B", "kB", "MB", "GB", "TB", "PB"];
	let i = 0;
	while (v >= 1000 && i < u.length - 1) { v /= 1000; i++; }
	return (i ? v.toFixed(v < 10 ? 2 : 1) : v.toFixed(0)) + " " + u[i];
}

/*
 * A y axis for values up to top (at least floor): about four steps of 1, 2
 * or 5 times a power of ten, the axis ending on a step; labels in the one
 * unit of kind that suits the axis' end, with the decimals the step needs.
 * So 250 ms of latency is 0, 50 ms, ..., 250 ms, and 0.3 ms is 0, 0.1 ms,
 * 0.2 ms, 0.3 ms.  fixedMax: an axis that does not depend on the data
 * (reserves: 100 %).
 */
function axis(top, floor, kind, fixedMax) {
	let hi = fixedMax || Math.max(top > 0 ? top : 0, floor);
	const raw = hi / 4;
	const p = Math.pow(10, Math.floor(Math.log10(raw)));
	const m = raw / p;
	const step = (m <= 1 + 1e-9 ? 1 : m <= 2 + 1e-9 ? 2 : m <= 5 + 1e-9 ? 5 : 10) * p;
	const n = Math.max(1, Math.ceil(hi / step - 1e-9));
	const max = n * step;
	const us = UNITS[kind];
	let u = us[0];
	for (const x of us) if (max >= x[0]) u = x;
	const digits = Math.max(0, -Math.floor(Math.log10(step / u[0]) + 1e-9));
	const ticks = [], labels = [];
	for (let i = 0; i <= n; i++) {
		ticks.push(i * step);
		labels.push(i === 0 ? "0" : (i * step / u[0]).toFixed(digits) + u[1]);
	}
	return { max, step, ticks, labels };
}

/* ---- charts -------------------------------------------------------------- */

/* series: [{color, data: [[t_ms, value|null]...], dash}]; marks: values
 * drawn as dotted lines (thresholds) */
function drawChart(canvas, series, kind, floor, opts) {
	opts = opts || {};
	const dpr = window.devicePixelRatio || 1;
	const w = canvas.clientWidth || 280, h = canvas.clientHeight || 130;
	if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
		canvas.width = Math.round(w * dpr);
		canvas.height = Math.round(h * dpr);
	}
	const g = canvas.getContext("2d");
	g.setTransform(dpr, 0, 0, dpr, 0, 0);
	g.clearRect(0, 0, w, h);
	g.font = "11px system-ui, sans-serif";
	const left = 58, right = 8, top = 8, bottom = 16;
	const pw = w - left - right, ph = h - top - bottom;
	if (opts.empty) {
		g.fillStyle = "#6b7384";
		g.textAlign = "center";
		g.textBaseline = "middle";
		g.fillText(opts.empty, w / 2, h / 2);
		canvas.dataset.ticks = "";
		return;
	}
	let peak = 0;
	for (const s of series)
		for (const [, v] of s.data)
			if (v !== null && v > peak) peak = v;
	const ax = axis(peak, floor, kind, opts.fixedMax);
	canvas.dataset.unit = kind;
	canvas.dataset.step = String(ax.step);
	canvas.dataset.max = String(ax.max);
	canvas.dataset.ticks = ax.labels.join("|");
	canvas.dataset.peak = String(peak);
	const t1 = nowMs || Date.now(), t0 = t1 - WINDOW_MS;
	const X = (t) => left + ((t - t0) / WINDOW_MS) * pw;
	const Y = (v) => top + ph - (v / ax.max) * ph;
	/* grid, y labels */
	g.strokeStyle = "#e3e6ec";
	g.fillStyle = "#6b7384";
	g.lineWidth = 1;
	g.textAlign = "right";
	g.textBaseline = "middle";
	ax.ticks.forEach((v, i) => {
		const y = Math.round(Y(v)) + 0.5;
		g.beginPath();
		g.moveTo(left, y);
		g.lineTo(left + pw, y);
		g.stroke();
		g.fillText(ax.labels[i], left - 4, y);
	});
	/* x: a line a minute, labelled every other one */
	g.textBaseline = "alphabetic";
	for (let k = 0; k <= WINDOW_MS / 60000; k++) {
		const x = Math.round(X(t1 - k * 60000)) + 0.5;
		g.beginPath();
		g.moveTo(x, top);
		g.lineTo(x, top + ph);
		g.stroke();
		if (k % 2)
			continue;
		g.textAlign = k === 0 ? "right" : "center";
		g.fillText(k === 0 ? "now" : "-" + k + " min", x, h - 3);
	}
	for (const v of opts.marks || []) {
		if (v > ax.max) continue;
		g.strokeStyle = "#c62828";
		g.setLineDash([3, 3]);
		g.beginPath();
		g.moveTo(left, Y(v));
		g.lineTo(left + pw, Y(v));
		g.stroke();
		g.setLineDash([]);
	}
	for (const s of series) {
		g.strokeStyle = s.color;
		g.lineWidth = 1.5;
		g.setLineDash(s.dash ? [4, 3] : []);
		g.beginPath();
		let pen = false;
		for (const [t, v] of s.data) {
			if (v === null || t < t0) { pen = false; continue; }
			if (pen) g.lineTo(X(t), Y(v)); else g.moveTo(X(t), Y(v));
			pen = true;
		}
		g.stroke();
	}
	g.setLineDash([]);
}

/* the health of each sample as a coloured band over the same five minutes */
function drawStrip(canvas, rows) {
	const dpr = window.devicePixelRatio || 1;
	const w = canvas.clientWidth || 600, h = canvas.clientHeight || 14;
	canvas.width = Math.round(w * dpr);
	canvas.height = Math.round(h * dpr);
	const g = canvas.getContext("2d");
	g.setTransform(dpr, 0, 0, dpr, 0, 0);
	g.fillStyle = "#eceff4";
	g.fillRect(0, 0, w, h);
	const left = 58, pw = w - left - 8;
	const t1 = nowMs || Date.now(), t0 = t1 - WINDOW_MS;
	const X = (t) => left + ((t - t0) / WINDOW_MS) * pw;
	for (let i = 0; i < rows.length; i++) {
		const r = rows[i], next = i + 1 < rows.length ? rows[i + 1].t_ms : r.t_ms + PERIOD_MS;
		if (next < t0) continue;
		g.fillStyle = HEALTH_COLOURS[r.health] || "#999";
		g.fillRect(X(Math.max(r.t_ms, t0)), 0, Math.max(1, X(next) - X(Math.max(r.t_ms, t0))), h);
	}
	g.fillStyle = "#6b7384";
	g.font = "11px system-ui, sans-serif";
	g.textBaseline = "middle";
	g.fillText("health", 4, h / 2);
	/* the states in the order they came, for tests */
	canvas.dataset.states = rows.map((r) => r.health).filter((s, i, a) => !i || s !== a[i - 1]).join("|");
}

/* ---- figures from the samples -------------------------------------------- */

/* [t, (b.k - a.k) / seconds] between consecutive samples, null across a gap */
function rate(rows, key, scale) {
	const out = [];
	for (let i = 1; i < rows.length; i++) {
		const a = rows[i - 1], b = rows[i];
		const dt = (b.t_ms - a.t_ms) / 1000;
		const ok = a[key] !== null && b[key] !== null && dt > 0 && b[key] >= a[key];
		out.push([b.t_ms, ok ? ((b[key] - a[key]) / dt) * (scale || 1) : null]);
	}
	return out;
}
function sumRate(rows, keys) {
	const parts = keys.map((k) => rate(rows, k));
	return parts[0].map(([t], i) => {
		let s = 0;
		for (const p of parts) {
			if (p[i][1] === null) return [t, null];
			s += p[i][1];
		}
		return [t, s];
	});
}
/* average latency of the requests between two samples */
function avgLat(rows, n, sum) {
	const out = [];
	for (let i = 1; i < rows.length; i++) {
		const a = rows[i - 1], b = rows[i];
		const ok = a[n] !== null && b[n] !== null && b[n] > a[n];
		out.push([b.t_ms, ok ? (b[sum] - a[sum]) / (b[n] - a[n]) : null]);
	}
	return out;
}
function level(rows, key) {
	return rows.map((r) => [r.t_ms, r[key]]);
}
function last(series) {
	for (let i = series.length - 1; i >= 0; i--)
		if (series[i][1] !== null) return series[i][1];
	return null;
}

/* ---- the page ------------------------------------------------------------ */

function el(tag, attrs, text) {
	const e = document.createElement(tag);
	for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
	if (text !== undefined) e.textContent = text;
	return e;
}
function setFig(id, value, text) {
	const e = document.getElementById(id);
	if (!e) return;
	e.dataset.value = value === null ? "null" : String(value);
	e.textContent = text;
}

/* key, title, legend: [text, CSS class]... */
const CHARTS = [
	["iops", "requests", [["read", "read"], ["write", "write"]]],
	["bw", "bandwidth", [["read", "read"], ["write", "write"]]],
	["lat", "latency", [["read", "read"], ["write", "write"], ["(avg; dashed: p99)", ""]]],
	["gc", "garbage collection", [["pages moved", "c1"], ["blocks erased", "c2"]]],
	["errors", "media errors", [["corrected", "c1"], ["uncorrectable", "c2"], ["program, erase", "c3"]]],
	["reserves", "reserves and endurance", [["reserves left", "c4"], ["endurance used", "c3"]]],
	["temp", "temperature", [["controller", "c3"], ["(throttle 78, stop 85)", ""]]],
];

function dimmBox(name) {
	let d = dimms.get(name);
	if (d) return d;
	const box = el("div", { class: "dimm", id: "dimm-" + name });
	const h = el("h3", {}, name);
	const figs = el("span", { class: "figs" });
	const fig = (label, suffix) => {
		figs.append(label + " ");
		figs.append(el("span", { id: "d-" + name + "-" + suffix, "data-value": "0" }, "-"));
		figs.append("  ");
	};
	fig("IOPS", "iops");
	fig("\u00b7 MB/s", "mbps");
	fig("\u00b7 latency", "lat");
	fig("\u00b7 requests", "ops");
	fig("\u00b7 bytes", "bytes");
	fig("\u00b7 temperature", "temp");
	h.append(figs);
	box.append(h);
	const strip = el("canvas", { class: "strip", id: "s-" + name });
	box.append(strip);
	const charts = el("div", { class: "charts" });
	const canvases = {};
	for (const [key, title, legend] of CHARTS) {
		const c = el("div", { class: "chart" });
		const t = el("div", { class: "title" }, title);
		for (const [text, cls] of legend) {
			t.append(" ");
			t.append(cls ? el("span", { class: cls }, "\u25a0 " + text) : text);
		}
		c.append(t);
		canvases[key] = el("canvas", { id: "c-" + name + "-" + key });
		c.append(canvases[key]);
		charts.append(c);
	}
	box.append(charts);
	document.getElementById("dimms").append(box);
	d = { rows: [], canvases, strip };
	dimms.set(name, d);
	return d;
}

function healthCard(st) {
	const h = st.health || { state: "ok", reasons: [] };
	const card = el("div", { class: "hcard health-" + h.state, id: "h-" + st.name, "data-state": h.state });
	const head = el("div");
	head.append(el("span", { class: "hname" }, st.name));
	head.append(el("span", { class: "hstate" }, h.state.toUpperCase()));
	card.append(head);
	if (h.reasons.length) {
		const ul = el("ul");
		for (const r of h.reasons) {
			const li = el("li", { "data-reason": r.reason, "data-level": r.level });
			li.append(el("div", { class: "msg" }, r.message));
			if (r.action) li.append(el("div", { class: "action" }, r.action));
			ul.append(li);
		}
		card.append(ul);
	} else {
		card.append(el("div", { class: "action" }, "nothing to do"));
	}
	return card;
}

function statusRow(st) {
	const tr = el("tr", { id: "row-" + st.name });
	const cell = (text, cls) => tr.append(el("td", cls ? { class: cls } : {}, text));
	cell(st.name);
	cell(st.card);
	cell(st.export);
	const hs = st.health ? st.health.state : "ok";
	cell(hs, "h-" + hs);
	/* why it failed is in its health card */
	cell(st.note ? st.state + " (" + st.note + ")" : st.state, "state-" + st.state);
	if (st.format) {
		cell(fmtNum(st.format.sectors, 0) + " x " + st.format.sector_size + " B");
		cell(fmtBytes(st.format.capacity_bytes), "num");
		cell(fmtNum(st.format.op_percent, 1) + " %", "num");
		cell(fmtNum(st.endurance_used_percent, 3) + " %", "num");
		cell(fmtNum(st.reserve_percent, 1) + " %", "num");
		cell(fmtNum(st.stats.write_amplification, 2), "num");
		cell(fmtBytes(st.lifetime.host_write_bytes), "num");
	} else {
		for (let i = 0; i < 7; i++) cell("-", "num");
	}
	cell(String(st.connections), "num");
	cell(st.beacon ? "on" : "off");
	cell(st.temperature_celsius === null ? "not reported" : fmtNum(st.temperature_celsius, 1) + " \u00b0C");
	return tr;
}

/* new samples from /v1/history into each ioDimm's rows */
function addHistory(hist) {
	nowMs = hist.now_ms;
	if (!fieldIdx) {
		fieldIdx = {};
		hist.fields.forEach((f, i) => { fieldIdx[f] = i; });
	}
	for (const dh of hist.dimms) {
		const d = dimmBox(dh.name);
		for (const row of dh.samples) {
			const r = {};
			for (const f in fieldIdx) r[f] = row[fieldIdx[f]];
			d.rows.push(r);
			if (r.t_ms > lastT) lastT = r.t_ms;
		}
		while (d.rows.length && d.rows[0].t_ms < nowMs - WINDOW_MS - 2 * PERIOD_MS)
			d.rows.shift();
	}
}

function render(status) {
	const H = status.health || { state: "ok", summary: "" };
	const badge = document.getElementById("health");
	badge.dataset.state = H.state;
	badge.textContent = "health: " + H.state.toUpperCase();
	badge.title = H.summary;
	document.getElementById("server").textContent =
		"flashd " + status.version + ", pid " + status.pid + ", up " + status.uptime_seconds + " s, " +
		status.served + " of " + status.dimms.length + " ioDimms served, " + status.connections +
		(status.connections === 1 ? " connection" : " connections");
	document.getElementById("health-cards").replaceChildren(...status.dimms.map(healthCard));
	document.querySelector("#status tbody").replaceChildren(...status.dimms.map(statusRow));
	const seen = new Set();
	for (const st of status.dimms) {
		seen.add(st.name);
		const d = dimmBox(st.name);
		if (st.io) {
			const ops = Object.values(st.io.ops).reduce((a, b) => a + b, 0);
			setFig("d-" + st.name + "-ops", ops, fmtNum(ops, 0));
			const bytes = st.io.bytes.read + st.io.bytes.write;
			setFig("d-" + st.name + "-bytes", bytes, fmtBytes(bytes));
		}
		setFig("d-" + st.name + "-temp", st.temperature_celsius,
		       st.temperature_celsius === null ? "not reported" : fmtNum(st.temperature_celsius, 1) + " \u00b0C");
		draw(st.name, d, st);
	}
	for (const [name] of dimms)
		if (!seen.has(name)) {
			document.getElementById("dimm-" + name).remove();
			dimms.delete(name);
		}
}

function draw(name, d, st) {
	const rows = d.rows, R = "#2f6fdb", W = "#d9622b";
	const noIo = rows.length < 2 ? "collecting samples" : null;
	const iops = sumRate(rows, ["read_ops", "write_ops", "other_ops"]);
	const rIops = rate(rows, "read_ops"), wIops = rate(rows, "write_ops");
	const rBw = rate(rows, "read_bytes"), wBw = rate(rows, "write_bytes");
	const rLat = avgLat(rows, "read_lat_n", "read_lat_sum_ns");
	const wLat = avgLat(rows, "write_lat_n", "write_lat_sum_ns");
	const it = last(iops);
	if (it !== null) {
		setFig("d-" + name + "-iops", it.toFixed(1), fmtNum(it, 0));
		const bw = (last(rBw) || 0) + (last(wBw) || 0);
		setFig("d-" + name + "-mbps", (bw / 1e6).toFixed(3), fmtNum(bw / 1e6, 1));
		const lw = wLat.length ? wLat[wLat.length - 1][1] : null;
		const lr = rLat.length ? rLat[rLat.length - 1][1] : null;
		const lat = lw !== null ? lw : lr;
		setFig("d-" + name + "-lat", lat === null ? null : Math.round(lat), lat === null ? "-" : fmtUnit(lat, "ns", 1));
	}
	drawStrip(d.strip, rows);
	const C = d.canvases;
	drawChart(C.iops, [{ color: R, data: rIops }, { color: W, data: wIops }], "rate", 10, { empty: noIo });
	drawChart(C.bw, [{ color: R, data: rBw }, { color: W, data: wBw }], "Bps", 1e6, { empty: noIo });
	drawChart(C.lat, [{ color: R, data: rLat }, { color: W, data: wLat },
			  { color: R, data: level(rows, "read_p99_ns"), dash: true },
			  { color: W, data: level(rows, "write_p99_ns"), dash: true }], "ns", 1e4, { empty: noIo });
	drawChart(C.gc, [{ color: "#2f6fdb", data: rate(rows, "gc_pages") },
			 { color: "#d9622b", data: rate(rows, "gc_blocks") }], "rate", 10, { empty: noIo });
	const noFtl = !st.format ? st.state + ": no figures" : noIo;
	drawChart(C.errors, [{ color: "#2f6fdb", data: rate(rows, "errors_corrected") },
			     { color: "#d9622b", data: rate(rows, "errors_uncorrectable") },
			     { color: "#7a3fb0", data: sumRate(rows, ["program_failures", "erase_failures"]) }],
		  "rate", 1, { empty: noFtl });
	drawChart(C.reserves, [{ color: "#1f7a3f", data: level(rows, "reserves_percent") },
			       { color: "#7a3fb0", data: level(rows, "endurance_percent") }],
		  "pct", 100, { empty: noFtl, fixedMax: 100 });
	const temps = level(rows, "temperature_c");
	const noTemp = !st.format ? noFtl : temps.every(([, v]) => v === null) ? "not reported" : null;
	drawChart(C.temp, [{ color: "#7a3fb0", data: temps }], "degC", 90, { empty: noTemp, marks: [78, 85] });
}

async function tick() {
	const t0 = performance.now();
	try {
		const [sr, hr] = await Promise.all([
			fetch("/v1/status", { cache: "no-store" }),
			fetch("/v1/history?since=" + lastT, { cache: "no-store" }),
		]);
		if (!sr.ok) throw new Error("GET /v1/status: HTTP " + sr.status);
		if (!hr.ok) throw new Error("GET /v1/history: HTTP " + hr.status);
		const status = await sr.json();
		addHistory(await hr.json());
		samples++;
		setFig("samples", samples, String(samples));
		document.getElementById("error").hidden = true;
		render(status);
	} catch (e) {
		const err = document.getElementById("error");
		err.textContent = "no answer from flashd: " + e.message;
		err.hidden = false;
	}
	setTimeout(tick, Math.max(0, PERIOD_MS - (performance.now() - t0)));
}

tick();
