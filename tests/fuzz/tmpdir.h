/*
 * tests/fuzz/tmpdir.h - the fuzz targets' private directories:
 * /dev/shm/flashd-fuzz-KIND.PID.XXXXXX (or /tmp/...), removed at exit.  A
 * target that crashes (ASan abort, libFuzzer's timeout) never runs its exit
 * handler, so each start first removes the directories of KIND whose
 * process is gone (images of ~35 MB each would pile up in RAM otherwise).
 */
#ifndef FLASHD_FUZZ_TMPDIR_H
#define FLASHD_FUZZ_TMPDIR_H

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void fuzz_sweep(const char *base, const char *kind)
{
	char pfx[64];
	snprintf(pfx, sizeof pfx, "flashd-fuzz-%s.", kind);
	DIR *d = opendir(base);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, pfx, strlen(pfx)))
			continue;
		char *end;
		long pid = strtol(e->d_name + strlen(pfx), &end, 10);
		if (end == e->d_name + strlen(pfx) || *end != '.' || pid <= 0)
			continue;
		if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		char cmd[512];
		snprintf(cmd, sizeof cmd, "rm -rf '%s/%s'", base, e->d_name);
		if (system(cmd) != 0)
			fprintf(stderr, "fuzz: could not remove %s/%s\n", base, e->d_name);
	}
	closedir(d);
}

/* make dir (size >= 64) for this process; exits on failure */
static void fuzz_mkdtemp(char *dir, size_t size, const char *kind)
{
	const char *bases[] = { "/dev/shm", "/tmp" };
	for (int i = 0; i < 2; i++) {
		fuzz_sweep(bases[i], kind);
		snprintf(dir, size, "%s/flashd-fuzz-%s.%d.XXXXXX", bases[i], kind, (int)getpid());
		if (mkdtemp(dir))
			return;
	}
	perror("mkdtemp");
	exit(1);
}

#endif
