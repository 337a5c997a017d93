/*
 * tests/fuzz/fuzz_config.c - libFuzzer target: flashd.conf as flashd reads
 * it (server/config.c: config_build, i.e. config_load with inih, then
 * config_finish's defaults and cross-checks), with an empty command line.
 * Each input is written to a file in a private directory under /dev/shm
 * and parsed; the result is freed (leaks are findings).  config_finish only
 * stat()s and realpath()s the paths an input names; nothing is created.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/fuzz/tmpdir.h"

#include "server/flashd.h"

void __wrap_log_msg(int prio, const char *fmt, ...)
{
	(void)prio;
	(void)fmt;
}

static char dir[64], path[96];

static void cleanup(void)
{
	unlink(path);
	rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!dir[0]) {
		fuzz_mkdtemp(dir, sizeof dir, "conf");
		snprintf(path, sizeof path, "%s/flashd.conf", dir);
		atexit(cleanup);
	}
	FILE *f = fopen(path, "w");
	if (!f) {
		perror(path);
		exit(1);
	}
	if (size && fwrite(data, 1, size, f) != size) {
		perror("fwrite");
		exit(1);
	}
	fclose(f);
	/* main()'s command line with no options */
	struct server_cfg cli = { .timing = -1, .poll_us = -1, .allow_degraded = -1, .tls = -1,
				  .unix_tls = -1, .tls_verify_peer = -1, .unix_mode = -1,
				  .control_mode = -1, .umask = -1, .unix_gid = -1, .control_gid = -1,
				  .max_conn_per_addr = -1, .max_hs_per_addr = -1, .idle_timeout_busy = -1 };
	struct server_cfg out;
	char err[1024];
	memset(&out, 0, sizeof out);
	if (config_build(&cli, path, dir, &out, err, sizeof err) == 0)
		config_free(&out);
	return 0;
}
