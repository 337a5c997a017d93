/*
 * tests/fuzz/fuzz_acl.c - libFuzzer target: the small parsers of common/:
 * access rules (acl_parse, then acl_entry_format, acl_equal and acl_check
 * against a few peers) and the number parsers of common/parse.c.  The first
 * byte chooses: even, an allow list (odd bit 1: allow_ro); odd, the four
 * number parsers on the rest as a string.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/acl.h"
#include "common/parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint8_t sel = data[0];
	char *s = malloc(size);
	memcpy(s, data + 1, size - 1);
	s[size - 1] = 0;
	if (sel & 1) {
		uint64_t u;
		double d;
		parse_uint(s, 0, UINT64_MAX, &u);
		parse_uint(s, 1, 4096, &u);
		parse_double(s, -1e9, 1e9, &d);
		parse_percent(s, 0, 100, &d);
		parse_byte_size(s, 0, UINT64_MAX, &u);
		parse_byte_size(s, 512, 1ull << 40, &u);
	} else {
		struct acl a, b;
		char why[256], buf[512];
		memset(&a, 0, sizeof a);
		memset(&b, 0, sizeof b);
		if (acl_parse(&a, s, sel & 2, why, sizeof why) == 0) {
			for (int i = 0; i < a.n; i++)
				acl_entry_format(&a.e[i], buf, sizeof buf);
			acl_has_cert_rules(&a);
			acl_has_psk_rules(&a);
			acl_has_tls_rules(&a);
			/* peers: IPv4, IPv6, IPv4-mapped IPv6, unix */
			struct sockaddr_in v4 = { .sin_family = AF_INET };
			struct sockaddr_in6 v6 = { .sin6_family = AF_INET6 }, m6 = { .sin6_family = AF_INET6 };
			struct sockaddr_un ux = { .sun_family = AF_UNIX, .sun_path = "x" };
			inet_pton(AF_INET, "10.1.2.3", &v4.sin_addr);
			inet_pton(AF_INET6, "fd00::1:2", &v6.sin6_addr);
			inet_pton(AF_INET6, "::ffff:10.1.2.3", &m6.sin6_addr);
			const struct sockaddr *peers[] = { (void *)&v4, (void *)&v6, (void *)&m6, (void *)&ux };
			for (int i = 0; i < 4; i++) {
				struct acl_peer p;
				memset(&p, 0, sizeof p);
				acl_peer_from_sockaddr(&p, peers[i]);
				acl_check(&a, &p);
			}
			if (acl_parse(&b, s, sel & 2, why, sizeof why) == 0 && !acl_equal(&a, &b))
				abort(); /* the same text must give the same rules */
		}
		acl_free(&a);
		acl_free(&b);
	}
	free(s);
	return 0;
}
