/*
 * t_units - sizes as flashd's tools print them (common/units.h): binary
 * units, MiB below 1 GiB, GiB from 1 GiB up; cut, never overrun, in a
 * short buffer.
 */
#include <stdio.h>
#include <string.h>

#include "common/units.h"

static int fails;
#define S(bytes, want) do { char b[32]; const char *r = size_text(b, sizeof b, (bytes)); if (r != b || strcmp(b, want) || strcmp(SIZE_TEXT(bytes), want)) { fprintf(stderr, "line %d: size_text(%.0f): \"%s\", want \"%s\"\n", __LINE__, (double)(bytes), b, want); fails++; } } while (0)

int main(void) {
	S(0, "0.00 MiB"); S(65536, "0.06 MiB"); S(52.0 * (1 << 20), "52.00 MiB");
	S(858992640, "819.20 MiB"); S(512.0 * (1 << 20), "512.00 MiB");
	S(1023.0 * (1 << 20), "1023.00 MiB"); S(1 << 30, "1.00 GiB"); S(1.5 * (1 << 30), "1.50 GiB");
	S(320e9, "298.02 GiB"); S(1200e9, "1117.59 GiB");
	char small[6];
	memset(small, 'x', sizeof small);
	size_text(small, sizeof small - 1, 52.0 * (1 << 20));
	if (strcmp(small, "52.0") || small[5] != 'x') {
		fprintf(stderr, "a short buffer: \"%.5s\"\n", small);
		fails++;
	}
	if (fails) {
		fprintf(stderr, "t_units: %d failures\n", fails);
		return 1;
	}
	printf("t_units: ok\n");
	return 0;
}
