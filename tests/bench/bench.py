#!/usr/bin/python3
"""bench.py - flashd against nbdkit (memory, null) and qemu-nbd, in one run.

  make bench            (or: tests/bench/run.sh [--runtime SECONDS] [--reps N] [--only JOB,...]
                                             [--no-qemu] [--skip-ftl] [--skip-duo] [--flashd BIN]
                                             [--baseline BIN] [--quick])
  make bench-timing     (or: tests/bench/run.sh --timing [--runtime SECONDS] [--reps N]
                                                      [--only JOB,...] [--flashd BIN] [--quick])

Starts, on 127.0.0.1 and with their data on tmpfs (/dev/shm):
  flashd       the simulated ioDimm (preset test-1g, timing model off)
  nbdkit-mem   nbdkit memory      (same size)
  nbdkit-null  nbdkit null        (same size: the cost of the protocol alone)
  qemu-nbd     a raw file on tmpfs (same size)
fills every export once (so flashd's writes run with GC active), then runs
the same fio jobs (ioengine=nbd) against each, the servers interleaved job
by job, and prints one table: IOPS or MiB/s, mean and p99 latency, and each
server's ratio to nbdkit-null and to nbdkit-mem; then the CPU each side used
(cores kept busy by the server's process and by fio), the server's CPU per
operation or per GiB, and a CPU bound: the rate at which server and fio
together would keep every core of the machine busy, as a ratio to
nbdkit-null's (where it is below 1.00 the server cannot reach nbdkit-null
on this machine without spending less CPU per unit).  Jobs named *-4c run four
fio jobs of one NBD connection each (numjobs=4; the sequential ones on four
disjoint quarters of the export), so they measure multi-conn serving.
Every job runs --reps times (default 3) against each server (qemu-nbd, a
reference only, once by default: --qemu-reps); the table shows the median
of the repetitions (and the spread, min-max of the metric, in the JSON), so
one noisy run does not decide.  nbdkit runs with its default --threads.
Default total: about 12 minutes on 2 cores.  Also: the in-process FTL benchmark
(flashctl simulate on RAM media) and flashd's resident memory serving the
default ioDrive Duo.  Everything goes to build/bench.json as well.
Peers that are not installed are skipped with a message.  --quick: one run
of 2 s per job, to check that it works.

--timing runs the timing-model rows instead (make bench runs both, one
after the other): the simulated Duo as `make run` serves it (the embedded
default: two ioDimms, iodimm-mlc-320, its stock format) with the timing
model on, driven by fio over NBD, beside `flashctl bench` on the virtual
clock for the same preset, format, workload and start.  The start is a
fresh format on both sides: every fio run gets a flashd of its own with a
new state directory (on tmpfs), and its bench runs with --fresh (writes:
the first pass, no garbage collection) or --span 1G (reads: the first GiB
filled sequentially, then read at random or in order); the bench's figure
is the same every time (a deterministic virtual clock), so it runs once
per job, for the fio runtime in virtual seconds.  The table shows the
median of the fio runs, the bench's figure and the ratio, the mean latency
of both, the cores flashd (all its threads) and fio kept busy, and the CPU
bound: the rate at which flashd and fio together would keep every core
busy, as a ratio to the bench's figure (below 1.00 this machine cannot
reach the simulated card's speed, whatever the daemon does with its
time).  The two-ioDimm job's bench figure is twice the one-ioDimm one: the
ioDimms share nothing in the model.  About 5 minutes with the defaults on
2 cores, paced by the model and the Duo's start-up; the bench side needs
about 3.5 GiB of memory (page metadata of a full-size ioDimm), the fio
side up to 3 GiB of tmpfs at a time.  JSON: build/bench-timing.json.
"""
import argparse
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(TOP, "build")
SIZE = 858992640  # test-1g at stock format

QUARTER = SIZE // 4
JOBS = [
    # name, fio parameters, what the table shows
    ("randread-4k-qd1", dict(rw="randread", bs="4k", iodepth=1), "iops"),
    ("randread-4k-qd32", dict(rw="randread", bs="4k", iodepth=32), "iops"),
    ("randwrite-4k-qd1", dict(rw="randwrite", bs="4k", iodepth=1), "iops"),
    ("randwrite-4k-qd32", dict(rw="randwrite", bs="4k", iodepth=32), "iops"),
    ("randrw70-8k-qd32", dict(rw="randrw", rwmixread=70, bs="8k", iodepth=32), "iops"),
    ("read-1m-qd8", dict(rw="read", bs="1m", iodepth=8), "bw"),
    ("write-1m-qd8", dict(rw="write", bs="1m", iodepth=8), "bw"),
    # four connections (one per fio job), queue depth per connection
    ("randread-4k-qd32-4c", dict(rw="randread", bs="4k", iodepth=32, numjobs=4), "iops"),
    ("randwrite-4k-qd32-4c", dict(rw="randwrite", bs="4k", iodepth=32, numjobs=4), "iops"),
    ("read-1m-qd8-4c", dict(rw="read", bs="1m", iodepth=8, numjobs=4, size=QUARTER,
                            offset_increment=QUARTER), "bw"),
    ("write-1m-qd8-4c", dict(rw="write", bs="1m", iodepth=8, numjobs=4, size=QUARTER,
                             offset_increment=QUARTER), "bw"),
]

procs = []


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, proc, secs=60):
    t = time.time() + secs
    while time.time() < t:
        if proc.poll() is not None:
            raise RuntimeError("server exited with status %s" % proc.returncode)
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("server did not listen on %d" % port)


def start(cmd, port, log):
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    procs.append(p)
    wait_port(port, p)
    return p


def stop_all():
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()


def cpu_s(pid):
    """CPU seconds (user + system, all threads) a process has used so far."""
    with open("/proc/%d/stat" % pid) as f:
        st = f.read().rsplit(")", 1)[1].split()
    return (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK")


def fio(uri, name, params, runtime, tmp, size=None, pid=None):
    """One fio run; uri may be a list: one fio job per URI, all at once, the
    figures summed.  With pid (the server's), also the CPU both sides used:
    srv_cores and fio_cores are CPU seconds over wall seconds of the whole
    run (start-up and ramp included), i.e. how many cores each kept busy."""
    out = os.path.join(tmp, "fio-%s.json" % name)
    uris = uri if isinstance(uri, list) else [uri]
    # options before the first --name apply to every job
    args = ["fio", "--ioengine=nbd", "--output-format=json", "--output=" + out,
            "--group_reporting", "--percentile_list=50:99"]
    if size:
        args += ["--size=%d" % size]
    else:
        args += ["--time_based", "--runtime=%d" % runtime, "--ramp_time=1", "--randrepeat=0",
                 "--norandommap"]
        if "size" not in params:
            args += ["--size=%d" % SIZE]
    for k, v in params.items():
        args.append("--%s=%s" % (k, v))
    for i, u in enumerate(uris):
        args += ["--name=%s%s" % (name, "-%d" % i if len(uris) > 1 else ""), "--uri=" + u]
    t0, c0 = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    s0 = cpu_s(pid) if pid else 0.0
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    s1 = cpu_s(pid) if pid else 0.0
    c1, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic() - t0
    with open(out) as f:
        job = json.load(f)["jobs"][0]  # group_reporting: all numjobs summed
    r = {}
    iops = bw = mb = 0.0
    lat_n = 0
    mean = p99 = 0.0
    for d in ("read", "write"):
        x = job[d]
        if x["total_ios"] == 0:
            continue
        iops += x["iops"]
        bw += x["bw_bytes"] / (1 << 20)
        mb += x["bw_bytes"] / 1e6
        cl = x["clat_ns"]
        lat = x["lat_ns"]
        n = x["total_ios"]
        mean += lat["mean"] * n
        lat_n += n
        p99 = max(p99, cl.get("percentile", {}).get("99.000000", 0))
    r["iops"] = iops
    r["mib_s"] = bw
    r["mb_s"] = mb
    r["lat_mean_us"] = mean / lat_n / 1000 if lat_n else 0
    r["lat_p99_us"] = p99 / 1000
    if pid and wall > 0:
        r["srv_cores"] = (s1 - s0) / wall
        r["fio_cores"] = (c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime) / wall
    return r


def cpu_per_unit(r, kind):
    """CPU seconds per operation (iops jobs) or per GiB (bandwidth jobs) of
    the server and of fio in one run, or None without the figures."""
    units = r["iops"] if kind == "iops" else r["mib_s"] / 1024
    if "srv_cores" not in r or units <= 0:
        return None
    return r["srv_cores"] / units, r["fio_cores"] / units


def cpu_cols(jr, name, kind):
    """srv, fio: cores busy; srv cpu: the server's CPU per operation (us) or
    per GiB (s); bound: the rate at which server and fio together would fill
    every core of this machine, as a ratio to nbdkit-null's (below 1.00 the
    server cannot reach nbdkit-null here without spending less CPU per unit,
    however its work is spread over threads).  Each from the median run."""
    r = jr["results"][name]
    mine = cpu_per_unit(r, kind)
    if not mine:
        return ""
    r["srv_cpu_per_unit"], r["fio_cpu_per_unit"] = mine
    ref = jr["results"].get("nbdkit-null")
    refc = cpu_per_unit(ref, kind) if ref else None
    bound = ""
    if refc and sum(mine) > 0:
        r["cpu_bound_to_null"] = sum(refc) / sum(mine)
        bound = "%.2f" % r["cpu_bound_to_null"]
    per = "%.1f us/op" % (mine[0] * 1e6) if kind == "iops" else "%.2f s/GiB" % mine[0]
    return "%5.2f %5.2f %9s %6s" % (r["srv_cores"], r["fio_cores"], per, bound)


def rss_kib(pid, field="VmRSS"):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def machine():
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {"cores": os.cpu_count(), "cpu": model, "kernel": os.uname().release}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runtime", type=int, default=5, help="seconds per fio run (after 1 s of ramp)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of every job (median shown)")
    ap.add_argument("--qemu-reps", type=int, default=1, help="repetitions against qemu-nbd (reference)")
    ap.add_argument("--only", help="comma-separated job names")
    ap.add_argument("--flashd", default=os.path.join(BUILD, "flashd"),
                    help="flashd binary (e.g. a copy of an older build, to compare)")
    ap.add_argument("--baseline", help="a second flashd binary, served as flashd-base in the same run")
    ap.add_argument("--no-qemu", action="store_true", help="leave qemu-nbd out")
    ap.add_argument("--skip-ftl", action="store_true", help="skip the in-process FTL benchmark")
    ap.add_argument("--skip-duo", action="store_true", help="skip the default-Duo memory check")
    ap.add_argument("--timing", action="store_true",
                    help="the timing-model rows (flashd against flashctl bench) instead")
    ap.add_argument("--quick", action="store_true", help="one run of 2 s per job: does it work?")
    a = ap.parse_args()
    if a.quick:
        a.runtime, a.reps, a.qemu_reps = 2, 1, 1
    if a.timing:
        timing_rows(a)
        return
    jobs = [j for j in JOBS if not a.only or j[0] in a.only.split(",")]
    if not jobs:
        sys.exit("--only: no such job (jobs: %s)" % ", ".join(j[0] for j in JOBS))

    m = machine()
    print("machine: %d cores, %s, kernel %s" % (m["cores"], m["cpu"], m["kernel"]))
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    tmp = tempfile.mkdtemp(prefix="flashd-bench.", dir=shm)
    log = open(os.path.join(tmp, "servers.log"), "w")
    result = {"machine": m, "runtime_s": a.runtime, "reps": a.reps, "jobs": {}, "servers": [],
              "loadavg_start": os.getloadavg()}
    try:
        servers = []
        port = free_port()
        start([a.flashd, "--foreground", "--state-dir", os.path.join(tmp, "flashd"),
               "--listen", "127.0.0.1:%d" % port, "--preset", "test-1g", "--timing", "off"], port, log)
        servers.append(("flashd", "nbd://127.0.0.1:%d/dimm0" % port, procs[-1]))
        if a.baseline:
            port = free_port()
            start([a.baseline, "--foreground", "--state-dir", os.path.join(tmp, "flashd-base"),
                   "--listen", "127.0.0.1:%d" % port, "--preset", "test-1g", "--timing", "off"], port, log)
            servers.append(("flashd-base", "nbd://127.0.0.1:%d/dimm0" % port, procs[-1]))
        if shutil.which("nbdkit"):
            for plugin, label in (("memory", "nbdkit-mem"), ("null", "nbdkit-null")):
                port = free_port()
                # --threads left at nbdkit's default (16): its multi-conn best
                start(["nbdkit", "-f", "-i", "127.0.0.1", "-p", str(port), plugin, str(SIZE)], port, log)
                servers.append((label, "nbd://127.0.0.1:%d/" % port, procs[-1]))
        else:
            print("nbdkit not found: skipping nbdkit-mem and nbdkit-null")
        if not a.no_qemu and shutil.which("qemu-nbd"):
            raw = os.path.join(tmp, "qemu.raw")
            with open(raw, "wb") as f:
                f.truncate(SIZE)
            port = free_port()
            start(["qemu-nbd", "-f", "raw", "-b", "127.0.0.1", "-p", str(port), "-t", "-x", "", "-e", "16",
                   "--cache=writeback", "--aio=threads", raw], port, log)
            servers.append(("qemu-nbd", "nbd://127.0.0.1:%d/" % port, procs[-1]))
        elif not a.no_qemu:
            print("qemu-nbd not found: skipping it")
        result["servers"] = [s[0] for s in servers]

        print("filling every export once (1 MiB sequential writes) ...")
        for name, uri, _ in servers:
            fio(uri, "fill", dict(rw="write", bs="1m", iodepth=8), 0, tmp, size=SIZE)

        # rep-major: a slow minute of the machine hits one repetition of
        # every job rather than all repetitions of one job
        runs = {job: {name: [] for name, _, _ in servers} for job, _, _ in jobs}
        pids = {name: p.pid for name, _, p in servers}
        total = sum(1 for rep in range(a.reps) for _ in jobs for name, _, _ in servers
                    if name != "qemu-nbd" or rep < a.qemu_reps)
        print("%d fio runs of %d+1 s ..." % (total, a.runtime))
        for rep in range(a.reps):
            for i, (job, params, kind) in enumerate(jobs):
                k = (i + rep) % len(servers)
                for name, uri, _ in servers[k:] + servers[:k]:
                    if name == "qemu-nbd" and rep >= a.qemu_reps:
                        continue
                    runs[job][name].append(fio(uri, job, params, a.runtime, tmp, pid=pids[name]))
                    sys.stdout.write(".")
                    sys.stdout.flush()
        for job, params, kind in jobs:
            key = "iops" if kind == "iops" else "mib_s"
            res = {}
            for name, rl in runs[job].items():
                srt = sorted(rl, key=lambda r: r[key])
                med = dict(srt[(len(srt) - 1) // 2])  # median (lower one if even)
                med["reps"] = [r[key] for r in rl]
                med["min"] = srt[0][key]
                med["max"] = srt[-1][key]
                res[name] = med
            result["jobs"][job] = {"metric": kind, "params": params, "results": res}
        print()
        flashd_pid = servers[0][2].pid
        result["flashd_rss_kib_test_1g"] = rss_kib(flashd_pid)
    finally:
        stop_all()
        log.close()

    # ---- table --------------------------------------------------------------
    names = result["servers"]
    refs = [(n, k) for n, k in (("nbdkit-null", "ratio_to_null"), ("nbdkit-mem", "ratio_to_mem"))
            if n in names]
    result["loadavg_end"] = os.getloadavg()
    print("\nmedian of %d runs (qemu-nbd: %d) of %d s; spread = (max-min)/median; load average "
          "%.2f at start, %.2f at end" % (a.reps, min(a.qemu_reps, a.reps), a.runtime,
                                          result["loadavg_start"][0], result["loadavg_end"][0]))
    print("%-21s %-12s %14s %9s %9s %7s %7s %7s %5s %5s %9s %6s" % (
        "job", "server", "IOPS|MiB/s", "mean us", "p99 us", "spread", "x null", "x mem", "srv", "fio",
        "srv cpu", "bound"))
    for job, jr in result["jobs"].items():
        kind = jr["metric"]
        key = "iops" if kind == "iops" else "mib_s"
        for name in names:
            r = jr["results"][name]
            v = r[key]
            ratios = {}
            for ref, rk in refs:
                rv = jr["results"][ref][key]
                r[rk] = v / rv if rv else 0
                ratios[rk] = "%.2f" % r[rk]
            spread = (r["max"] - r["min"]) / v if v else 0
            cpu = cpu_cols(jr, name, kind)
            print("%-21s %-12s %14s %9.1f %9.1f %6.0f%% %7s %7s %s" % (
                job, name, ("%.0f" % v) if kind == "iops" else ("%.0f MiB/s" % v),
                r["lat_mean_us"], r["lat_p99_us"], 100 * spread, ratios.get("ratio_to_null", ""),
                ratios.get("ratio_to_mem", ""), cpu))
        print()

    # ---- in-process FTL ------------------------------------------------------
    if not a.skip_ftl:
        in_process(result)

    # ---- memory serving the default Duo --------------------------------------
    if not a.skip_duo:
        duo(result, shm)

    os.makedirs(BUILD, exist_ok=True)
    with open(os.path.join(BUILD, "bench.json"), "w") as f:
        json.dump(result, f, indent=1)
    print("\nresults: build/bench.json")
    shutil.rmtree(tmp, ignore_errors=True)


def in_process(result):
    print("in-process FTL (flashctl simulate, RAM media, test-1g, 20 % OP, steady state with GC):")
    out = subprocess.run([os.path.join(BUILD, "flashctl"), "simulate", "--preset", "test-1g", "--op", "20",
                          "--passes", "3", "--reads", "3000000", "--ram", "--json"],
                         check=True, capture_output=True, text=True).stdout
    sim = json.loads(out)
    result["in_process"] = sim
    print("  random 4 KiB writes: %.0f/s on one core over 3 passes, %.0f/s in the last "
          "(write amplification %.2f)" % (sim["ops_per_sec"], sim["last_pass_ops_per_sec"],
                                          sim["write_amplification"]))
    print("  random 4 KiB reads:  %.0f/s on one core" % sim["reads_per_sec"])
    pc = os.path.join(BUILD, "pagecopy")
    if os.path.exists(pc):
        bound = json.loads(subprocess.run([pc, "--json"], check=True, capture_output=True,
                                          text=True).stdout)
        result["page_copy_bound"] = bound
        print("  bound on this machine (build/pagecopy: random 4 KiB pages out of 1 GiB, one at a "
              "time): copy %.2fM/s, copy + CRC32C %.2fM/s, with the next page prefetched %.2fM/s "
              "and %.2fM/s; reads reach %.0f %% of copy + CRC32C" % (
                  bound["copy"], bound["copy+crc"], bound["copy+pf"], bound["copy+crc+pf"],
                  100 * sim["reads_per_sec"] / 1e6 / bound["copy+crc"]))
    print("  map: %.0f MiB per TiB of user capacity" % (sim["l2p_bytes_per_tib"] / (1 << 20)))


def duo(result, shm):
    tmp2 = tempfile.mkdtemp(prefix="flashd-duo.", dir=shm)
    try:
        port = free_port()
        p = start([os.path.join(BUILD, "flashd"), "--foreground", "--state-dir", tmp2, "--listen",
                   "127.0.0.1:%d" % port, "--timing", "off"], port, subprocess.DEVNULL)
        fio("nbd://127.0.0.1:%d/dimm0" % port, "duo", dict(rw="randwrite", bs="4k", iodepth=32), 5, tmp2)
        rss = rss_kib(p.pid)
        anon = rss_kib(p.pid, "RssAnon")
        l2p = 2 * 320 * 1024  # KiB: two 320 GiB ioDimms, 4 bytes per 4 KiB
        result["duo_rss_kib"] = rss
        result["duo_rss_anon_kib"] = anon
        result["duo_l2p_kib"] = l2p
        print("flashd serving the default Duo (2 x iodimm-mlc-320), after 5 s of 4 KiB random writes:")
        print("  own memory (RssAnon) %.1f MiB = map %.0f MiB + %.1f MiB (target: map + 64 MiB)" % (
            anon / 1024, l2p / 1024, (anon - l2p) / 1024))
        print("  VmRSS %.1f MiB: also counts the pages of the mapped NAND images touched so far "
              "(the simulated card's NAND, in the page cache)" % (rss / 1024))
    finally:
        stop_all()
        shutil.rmtree(tmp2, ignore_errors=True)


# ---- the timing model: flashd against flashctl bench ------------------------------

SPAN = 1 << 30  # what the read jobs read, filled first (both sides): --span 1G
TIMING_JOBS = [
    # name, fio parameters, metric, flashctl bench workload options, ioDimms, fill SPAN first
    ("randwrite-4k-qd32", dict(rw="randwrite", bs="4k", iodepth=32), "iops",
     ["--workload", "randwrite", "--bs", "4K", "--qd", "32", "--fresh"], 1, False),
    ("write-1m-qd8", dict(rw="write", bs="1m", iodepth=8), "bw",
     ["--workload", "seqwrite", "--bs", "1M", "--qd", "8", "--fresh"], 1, False),
    ("read-1m-qd8", dict(rw="read", bs="1m", iodepth=8, size=SPAN), "bw",
     ["--workload", "seqread", "--bs", "1M", "--qd", "8", "--span", "1G",
      "--precondition", "0"], 1, True),
    ("randread-4k-qd1", dict(rw="randread", bs="4k", iodepth=1, size=SPAN), "iops",
     ["--workload", "randread", "--bs", "4K", "--qd", "1", "--span", "1G",
      "--precondition", "0"], 1, True),
    # both ioDimms at once: one fio job (one connection) per ioDimm
    ("randwrite-4k-qd32-2dimm", dict(rw="randwrite", bs="4k", iodepth=32), "iops",
     ["--workload", "randwrite", "--bs", "4K", "--qd", "32", "--fresh"], 2, False),
]


def start_duo(flashd, tmp, log, n, timing="on"):
    """flashd serving the embedded default (`make run`'s Duo) with the timing
    model on, from a new state directory: both ioDimms freshly formatted.
    Returns the process, the state directory, the port and the seconds it
    took to be ready (flashd writes its pidfile when every ioDimm is open)."""
    state = os.path.join(tmp, "duo%d" % n)
    os.mkdir(state)
    port = free_port()
    pidfile = os.path.join(state, "flashd.pid")
    p = subprocess.Popen([flashd, "--no-config", "--foreground", "--state-dir", state, "--listen",
                          "127.0.0.1:%d" % port, "--pidfile", pidfile, "--timing", timing],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    procs.append(p)
    t0 = time.monotonic()
    while time.monotonic() < t0 + 300:
        if p.poll() is not None:
            raise RuntimeError("flashd exited with status %s (log: %s)" % (p.returncode, log.name))
        try:
            with open(pidfile) as f:
                if f.read().strip() == str(p.pid):
                    return p, state, port, time.monotonic() - t0
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError("flashd did not become ready in 300 s")


def stop_duo(p, state):
    p.send_signal(signal.SIGTERM)
    if p.wait(120) != 0:
        raise RuntimeError("flashd exited with status %d after SIGTERM" % p.returncode)
    procs.remove(p)
    shutil.rmtree(state, ignore_errors=True)


def duo_format(state):
    """preset, sector size, capacity and OP of dimm0 and dimm1, as flashd
    reports them; both must be alike, with the timing model on"""
    st = json.loads(subprocess.run([os.path.join(BUILD, "flashctl"), "status", "--control",
                                    os.path.join(state, "flashd.ctl"), "--json"],
                                   capture_output=True, text=True).stdout)
    dimms = {d["name"]: d for d in st["dimms"]}
    fmt = []
    for name in ("dimm0", "dimm1"):
        d = dimms[name]
        if not d["timing"]:
            raise RuntimeError("%s runs without the timing model" % name)
        f = d["format"]
        fmt.append((d["preset"], f["sector_size"], f["capacity_bytes"], round(f["op_percent"], 2)))
    if fmt[0] != fmt[1]:
        raise RuntimeError("the ioDimms differ: %s" % fmt)
    return dict(zip(("preset", "sector_size", "capacity_bytes", "op_percent"), fmt[0]))


def timing_rows(a):
    jobs = [j for j in TIMING_JOBS if not a.only or j[0] in a.only.split(",")]
    if not jobs:
        sys.exit("--only: no such job (timing jobs: %s)" % ", ".join(j[0] for j in TIMING_JOBS))
    if not shutil.which("fio"):
        sys.exit("fio is needed (scripts/deps.sh bench)")
    m = machine()
    print("machine: %d cores, %s, kernel %s" % (m["cores"], m["cpu"], m["kernel"]))
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    tmp = tempfile.mkdtemp(prefix="flashd-timing.", dir=shm)
    log = open(os.path.join(tmp, "flashd.log"), "w")
    result = {"machine": m, "runtime_s": a.runtime, "reps": a.reps, "jobs": {},
              "loadavg_start": os.getloadavg()}
    runs = {job[0]: [] for job in jobs}
    # QD1 jobs also run once per rep against flashd with the timing model
    # off: the round trip of the software (fio, libnbd, TCP, flashd) that a
    # request adds to the device's time, so bench + floor is what the
    # daemon can reach
    floors = {job[0]: [] for job in jobs if job[1].get("iodepth") == 1}
    # and every job against nbdkit null (a server that stores nothing):
    # what fio over one NBD connection per ioDimm reaches on this machine,
    # the client's ceiling when fio's own CPU is the limit
    nulls = {job[0]: [] for job in jobs}
    null_uri = None
    fmt = None
    n = 0
    print("timing model on: %d fio runs of %d+1 s, each against a freshly started and formatted "
          "Duo ..." % (a.reps * len(jobs), a.runtime))
    try:
        # rep-major, as above: a slow minute hits one run of every job
        for rep in range(a.reps):
            for job, params, kind, _, ndimms, fill in jobs:
                p, state, port, ready_s = start_duo(a.flashd, tmp, log, n)
                n += 1
                if not fmt:
                    fmt = duo_format(state)
                if not null_uri and shutil.which("nbdkit"):
                    nport = free_port()
                    start(["nbdkit", "-f", "-i", "127.0.0.1", "-p", str(nport), "null",
                           str(fmt["capacity_bytes"])], nport, log)
                    null_uri = "nbd://127.0.0.1:%d/" % nport
                uris = ["nbd://127.0.0.1:%d/dimm%d" % (port, i) for i in range(ndimms)]
                if fill:
                    fio(uris[0], "fill", dict(rw="write", bs="1m", iodepth=8), 0, tmp, size=SPAN)
                prm = dict(params)
                prm.setdefault("size", fmt["capacity_bytes"])
                r = fio(uris if ndimms > 1 else uris[0], job, prm, a.runtime, tmp, pid=p.pid)
                r["duo_ready_s"] = ready_s
                runs[job].append(r)
                stop_duo(p, state)
                if null_uri:
                    nr = fio([null_uri] * ndimms if ndimms > 1 else null_uri, job + "-null", prm,
                             a.runtime, tmp)
                    nulls[job].append(nr["iops"] if kind == "iops" else nr["mb_s"])
                if job in floors:
                    p, state, port, _ = start_duo(a.flashd, tmp, log, n, timing="off")
                    n += 1
                    uri = "nbd://127.0.0.1:%d/dimm0" % port
                    if fill:
                        fio(uri, "fill", dict(rw="write", bs="1m", iodepth=8), 0, tmp, size=SPAN)
                    floors[job].append(fio(uri, job + "-floor", prm, a.runtime, tmp)["lat_mean_us"])
                    stop_duo(p, state)
                sys.stdout.write(".")
                sys.stdout.flush()
        print()
    finally:
        stop_all()
        log.close()
    result["format"] = fmt

    # the virtual clock: once per workload (deterministic), one ioDimm
    print("flashctl bench on the virtual clock (%s, %d-byte sectors, %.2f %% OP, %d s virtual per "
          "job) ..." % (fmt["preset"], fmt["sector_size"], fmt["op_percent"], a.runtime))
    benches = {}
    cmds = {}
    for job, params, kind, wl, ndimms, fill in jobs:
        cmd = [os.path.join(BUILD, "flashctl"), "bench", "--preset", fmt["preset"], "--sector-size",
               str(fmt["sector_size"]), "--op", "%.2f" % fmt["op_percent"], "--duration",
               str(a.runtime)] + wl
        key = " ".join(cmd[1:])
        cmds[job] = "flashctl " + key
        if key not in benches:
            benches[key] = json.loads(subprocess.run(cmd + ["--json"], check=True, capture_output=True,
                                                     text=True).stdout)
            if benches[key]["capacity_bytes"] != fmt["capacity_bytes"]:
                raise RuntimeError("flashctl bench formats %d bytes, flashd %d: not the same format" %
                                   (benches[key]["capacity_bytes"], fmt["capacity_bytes"]))
            if benches[key]["failed"]:
                raise RuntimeError("flashctl bench: %d requests failed" % benches[key]["failed"])

    # ---- table ------------------------------------------------------------------
    result["loadavg_end"] = os.getloadavg()
    cores = os.cpu_count()
    print("\ntiming model on, 2 x %s (%d-byte sectors, %.2f GiB, %.0f %% OP each), a fresh format "
          "per run; fio: median of %d runs of %d s (spread = (max-min)/median); bench: flashctl "
          "bench, same preset, format, workload and start, %d s virtual; MB/s decimal; load "
          "average %.2f at start, %.2f at end" % (
              fmt["preset"], fmt["sector_size"], fmt["capacity_bytes"] / (1 << 30), fmt["op_percent"],
              a.reps, a.runtime, a.runtime, result["loadavg_start"][0], result["loadavg_end"][0]))
    print("%-24s %11s %11s %8s %9s %9s %8s %7s %5s %5s %6s %9s %6s" % (
        "job", "IOPS|MB/s", "bench", "x bench", "mean us", "bench us", "lat x", "spread", "srv",
        "fio", "bound", "null", "x min"))
    for job, params, kind, wl, ndimms, fill in jobs:
        key = "iops" if kind == "iops" else "mb_s"
        rl = runs[job]
        srt = sorted(rl, key=lambda r: r[key])
        r = dict(srt[(len(srt) - 1) // 2])  # median (lower one if even)
        r["reps"] = [x[key] for x in rl]
        r["min"], r["max"] = srt[0][key], srt[-1][key]
        bj = benches[cmds[job][len("flashctl "):]]
        # both ioDimms: each its own dies, channels and thread in the model
        bv = ndimms * (bj["iops"] if kind == "iops" else bj["mb_per_s"])
        blat = bj["lat_mean_ms"] * 1000
        v = r[key]
        r["bench"] = bv
        r["bench_lat_mean_us"] = blat
        r["ratio_to_bench"] = v / bv if bv else 0
        r["lat_ratio_to_bench"] = r["lat_mean_us"] / blat if blat else 0
        # the rate at which flashd and fio together would keep every core busy
        busy = r["srv_cores"] + r["fio_cores"]
        r["cpu_bound_to_bench"] = v * cores / busy / bv if busy and bv else 0
        nl = sorted(nulls[job])
        r["null"] = nl[(len(nl) - 1) // 2] if nl else 0
        # against the lower of the device's figure and the client's ceiling
        r["ratio_to_ceiling"] = v / min(bv, r["null"]) if r["null"] and bv else 0
        r["bench_command"] = cmds[job] + ("  (x2: both ioDimms)" if ndimms > 1 else "")
        r["bench_result"] = bj
        result["jobs"][job] = {"metric": kind, "params": params, "dimms": ndimms,
                               "fill_bytes": SPAN if fill else 0, "result": r}
        print("%-24s %11s %11s %8.2f %9.1f %9.1f %8.2f %6.0f%% %5.2f %5.2f %6.2f %9s %6s" % (
            job, "%.0f" % v, "%.0f" % bv, r["ratio_to_bench"], r["lat_mean_us"], blat,
            r["lat_ratio_to_bench"], 100 * (r["max"] - r["min"]) / v if v else 0, r["srv_cores"],
            r["fio_cores"], r["cpu_bound_to_bench"], "%.0f" % r["null"] if r["null"] else "-",
            "%.2f" % r["ratio_to_ceiling"] if r["ratio_to_ceiling"] else "-"))
        if floors.get(job):
            fl = sorted(floors[job])[(len(floors[job]) - 1) // 2]
            r["floor_lat_mean_us"] = fl
            r["lat_ratio_to_bench_floor"] = r["lat_mean_us"] / (blat + fl)
            print("%-24s %11s %11s %8s %9.1f %9.1f %8.2f   (floor: the same job with the timing "
                  "model off, %.1f us)" % ("  bench + floor", "", "", "", r["lat_mean_us"],
                                          blat + fl, r["lat_ratio_to_bench_floor"], fl))
    print("\nbench commands (the fio side: the same rw, bs and iodepth, ioengine=nbd, one "
          "connection per ioDimm; reads over the first GiB, written first with 1 MiB at QD8):")
    for job, _, _, _, ndimms, _ in jobs:
        print("  %-24s %s" % (job, result["jobs"][job]["result"]["bench_command"]))
    ready = sorted(r["duo_ready_s"] for rl in runs.values() for r in rl)
    print("the Duo's start-up (format and open of both ioDimms): median %.1f s, at most %.1f s" %
          (ready[(len(ready) - 1) // 2], ready[-1]))
    os.makedirs(BUILD, exist_ok=True)
    with open(os.path.join(BUILD, "bench-timing.json"), "w") as f:
        json.dump(result, f, indent=1)
    print("\nresults: build/bench-timing.json")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
