/* flashd dashboard: GET /v1/status every second; per ioDimm, rates are the
 * change of the request counters (io.ops, io.bytes) and latency histograms
 * (io.latency) since the previous sample, over the time between the two.
 * Charts are drawn on <canvas> here: no libraries.
 * Each figure shown is also in an element with an id (d-NAME-iops, -mbps,
 * -lat, -ops, -bytes, -temp) whose data-value holds the raw number:
 * tests/test-dashboard.sh reads them from the DOM. */
"use strict";

const PERIOD_MS = 1000;
const HISTORY = 60;           /* samples kept per chart */
const dimms = new Map();      /* name -> {prev, t, series, el} */
let samples = 0;

function fmtNum(v, digits) {
	if (v === null || v === undefined || !isFinite(v)) return "-";
	return v.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });
}
function fmtBytes(v) {
	const u = ["B", "kB", "MB", "GB", "TB", "PB"];
	let i = 0;
	while (v >= 1000 && i < u.length - 1) { v /= 1000; i++; }
	return (i ? v.toFixed(v < 10 ? 2 : 1) : v.toFixed(0)) + " " + u[i];
}
function fmtLat(ns) {
	if (ns === null || !isFinite(ns)) return "-";
	if (ns < 1e3) return ns.toFixed(0) + " ns";
	if (ns < 1e6) return (ns / 1e3).toFixed(1) + " us";
	if (ns < 1e9) return (ns / 1e6).toFixed(2) + " ms";
	return (ns / 1e9).toFixed(2) + " s";
}
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

/* ---- charts ------------------------------------------------------------ */

/* series: [{label, color, data: [number|null...]}]; unit: formatter */
function drawChart(canvas, series, fmt, empty, floor) {
	const dpr = window.devicePixelRatio || 1;
	const w = canvas.clientWidth || 280, h = canvas.clientHeight || 120;
	if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
		canvas.width = Math.round(w * dpr);
		canvas.height = Math.round(h * dpr);
	}
	const g = canvas.getContext("2d");
	g.setTransform(dpr, 0, 0, dpr, 0, 0);
	g.clearRect(0, 0, w, h);
	g.font = "11px system-ui, sans-serif";
	const left = 56, right = 6, top = 8, bottom = 14;
	const pw = w - left - right, ph = h - top - bottom;
	if (empty) {
		g.fillStyle = "#6b7384";
		g.textAlign = "center";
		g.textBaseline = "middle";
		g.fillText(empty, w / 2, h / 2);
		return;
	}
	let max = 0;
	for (const s of series)
		for (const v of s.data)
			if (v !== null && v > max) max = v;
	max = niceMax(Math.max(max, floor || 0));
	/* grid and axis labels */
	g.strokeStyle = "#e3e6ec";
	g.fillStyle = "#6b7384";
	g.lineWidth = 1;
	g.textAlign = "right";
	g.textBaseline = "middle";
	for (let i = 0; i <= 4; i++) {
		const y = top + ph - (ph * i) / 4;
		g.beginPath();
		g.moveTo(left, Math.round(y) + 0.5);
		g.lineTo(left + pw, Math.round(y) + 0.5);
		g.stroke();
		g.fillText(fmt((max * i) / 4), left - 4, y);
	}
	g.textAlign = "left";
	g.textBaseline = "alphabetic";
	g.fillText("-" + HISTORY + " s", left, h - 2);
	g.textAlign = "right";
	g.fillText("now", left + pw, h - 2);
	/* lines */
	for (const s of series) {
		g.strokeStyle = s.color;
		g.lineWidth = 1.5;
		g.beginPath();
		let pen = false;
		const n = s.data.length;
		for (let i = 0; i < n; i++) {
			const v = s.data[i];
			if (v === null) { pen = false; continue; }
			const x = left + pw - ((n - 1 - i) * pw) / (HISTORY - 1);
			const y = top + ph - (max ? (v / max) * ph : 0);
			if (pen) g.lineTo(x, y); else g.moveTo(x, y);
			pen = true;
		}
		g.stroke();
	}
}
function axisNum(v) {
	return fmtNum(v, v === 0 || v >= 10 ? 0 : v >= 1 ? 1 : 2);
}
function niceMax(v) {
	if (!(v > 0)) return 1;
	const p = Math.pow(10, Math.floor(Math.log10(v)));
	for (const m of [1, 2, 2.5, 5, 10])
		if (v <= m * p) return m * p;
	return 10 * p;
}

/* ---- figures from two samples ------------------------------------------ */

function sum(obj) {
	let n = 0;
	for (const k in obj || {}) n += obj[k];
	return n;
}
/* latency quantile q of the requests counted between two histograms */
function quantile(bounds, now, before, q) {
	const d = now.map((c, i) => c - (before ? before[i] : 0));
	const total = d.reduce((a, b) => a + b, 0);
	if (!total) return null;
	let want = q * total, lo = 0;
	for (let i = 0; i < d.length; i++) {
		const hi = i < bounds.length ? bounds[i] : bounds[bounds.length - 1] * 10;
		if (d[i] >= want && d[i] > 0)
			return lo + ((hi - lo) * want) / d[i];
		want -= d[i];
		lo = hi;
	}
	return lo;
}
function rates(io, prev, dt) {
	const r = { rIops: 0, wIops: 0, iops: 0, rBw: 0, wBw: 0, rLat: null, wLat: null, rP99: null, wP99: null };
	if (!prev || !io || !prev.io || dt <= 0) return r;
	const p = prev.io;
	r.rIops = (io.ops.read - p.ops.read) / dt;
	r.wIops = (io.ops.write - p.ops.write) / dt;
	r.iops = (sum(io.ops) - sum(p.ops)) / dt;
	r.rBw = (io.bytes.read - p.bytes.read) / dt;
	r.wBw = (io.bytes.write - p.bytes.write) / dt;
	const b = io.latency.bucket_bounds_ns;
	for (const [k, avg, p99] of [["read", "rLat", "rP99"], ["write", "wLat", "wP99"]]) {
		const n = io.latency[k].count - p.latency[k].count;
		if (n > 0) {
			r[avg] = (io.latency[k].sum_ns - p.latency[k].sum_ns) / n;
			r[p99] = quantile(b, io.latency[k].buckets, p.latency[k].buckets, 0.99);
		}
	}
	return r;
}

/* ---- the page ---------------------------------------------------------- */

/* key, title, legend: [text, CSS class]... */
const CHARTS = [
	["iops", "IOPS", [["read", "read"], ["write", "write"]]],
	["bw", "bandwidth, MB/s", [["read", "read"], ["write", "write"]]],
	["lat", "latency", [["read", "read"], ["write", "write"], ["(avg; light: p99)", ""]]],
	["temp", "temperature, \u00b0C", []],
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
	d = { prev: null, t: 0, canvases, series: { rIops: [], wIops: [], rBw: [], wBw: [],
	      rLat: [], wLat: [], rP99: [], wP99: [], temp: [] } };
	dimms.set(name, d);
	return d;
}

function push(arr, v) {
	arr.push(v);
	while (arr.length > HISTORY) arr.shift();
}

function statusRow(st) {
	const tr = el("tr", { id: "row-" + st.name });
	const cell = (text, cls) => tr.append(el("td", cls ? { class: cls } : {}, text));
	cell(st.name);
	cell(st.card);
	cell(st.export);
	const state = st.error ? st.state + ": " + st.error : st.note ? st.state + " (" + st.note + ")" : st.state;
	cell(state, "state-" + st.state);
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

function render(status, now) {
	document.getElementById("server").textContent =
		"flashd " + status.version + ", pid " + status.pid + ", up " + status.uptime_seconds + " s, " +
		status.served + " of " + status.dimms.length + " ioDimms served, " + status.connections +
		(status.connections === 1 ? " connection" : " connections") + (status.degraded ? " \u2014 DEGRADED" : "");
	const tbody = document.querySelector("#status tbody");
	tbody.replaceChildren(...status.dimms.map(statusRow));
	const seen = new Set();
	for (const st of status.dimms) {
		seen.add(st.name);
		const d = dimmBox(st.name);
		const dt = d.prev ? (now - d.t) / 1000 : 0;
		const r = rates(st.io, d.prev, dt);
		const s = d.series;
		const have = d.prev && st.io && d.prev.io;
		for (const k of ["rIops", "wIops", "rBw", "wBw", "rLat", "wLat", "rP99", "wP99"])
			push(s[k], have ? r[k] : null);
		push(s.temp, st.temperature_celsius);
		if (st.io) {
			setFig("d-" + st.name + "-ops", sum(st.io.ops), fmtNum(sum(st.io.ops), 0));
			const bytes = st.io.bytes.read + st.io.bytes.write;
			setFig("d-" + st.name + "-bytes", bytes, fmtBytes(bytes));
		}
		if (have) {
			setFig("d-" + st.name + "-iops", r.iops.toFixed(1), fmtNum(r.iops, 0));
			setFig("d-" + st.name + "-mbps", ((r.rBw + r.wBw) / 1e6).toFixed(3), fmtNum((r.rBw + r.wBw) / 1e6, 1));
			const lat = r.wLat !== null ? r.wLat : r.rLat;
			setFig("d-" + st.name + "-lat", lat === null ? null : Math.round(lat),
			       lat === null ? "-" : fmtLat(lat));
		}
		setFig("d-" + st.name + "-temp", st.temperature_celsius,
		       st.temperature_celsius === null ? "not reported" : fmtNum(st.temperature_celsius, 1) + " \u00b0C");
		if (st.io) d.prev = st, d.t = now;
		draw(st.name, d, st);
	}
	for (const [name, d] of dimms)
		if (!seen.has(name)) {
			document.getElementById("dimm-" + name).remove();
			dimms.delete(name);
		}
}

function draw(name, d, st) {
	const s = d.series, R = "#2f6fdb", W = "#d9622b";
	const noFig = !st.io ? st.state + ": no figures" : null;
	drawChart(d.canvases.iops, [{ color: R, data: s.rIops }, { color: W, data: s.wIops }],
		  axisNum, noFig, 10);
	drawChart(d.canvases.bw, [{ color: R, data: s.rBw.map((v) => v === null ? null : v / 1e6) },
				  { color: W, data: s.wBw.map((v) => v === null ? null : v / 1e6) }],
		  axisNum, noFig, 1);
	drawChart(d.canvases.lat, [{ color: R, data: s.rLat }, { color: W, data: s.wLat },
				   { color: "#8fb0ea", data: s.rP99 }, { color: "#eeb08f", data: s.wP99 }],
		  fmtLat, noFig, 1000);
	const noTemp = s.temp.every((v) => v === null)
		? "not reported (the simulated NAND has no sensor)" : null;
	drawChart(d.canvases.temp, [{ color: "#7a3fb0", data: s.temp }], (v) => fmtNum(v, 0), noTemp);
}

async function tick() {
	const t0 = performance.now();
	try {
		const resp = await fetch("/v1/status", { cache: "no-store" });
		if (!resp.ok) throw new Error("GET /v1/status: HTTP " + resp.status);
		const status = await resp.json();
		samples++;
		setFig("samples", samples, String(samples));
		document.getElementById("error").hidden = true;
		render(status, performance.now());
	} catch (e) {
		const err = document.getElementById("error");
		err.textContent = "no answer from flashd: " + e.message;
		err.hidden = false;
	}
	setTimeout(tick, Math.max(0, PERIOD_MS - (performance.now() - t0)));
}

tick();
