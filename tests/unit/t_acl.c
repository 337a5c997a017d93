/*
 * t_acl - the access rules of common/acl.h: parsing (networks, CIDR host
 * bits, IPv4-mapped entries, TLS identity kinds, errors) and matching
 * (IPv4, IPv6, IPv4-mapped clients, unix, identities, read-only entries,
 * the most permissive entry wins, no rules allow all).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "common/acl.h"
#include "tests/unit/t.h"

static struct acl_peer ip(const char *a)
{
	struct acl_peer p = { 0 };
	struct sockaddr_storage ss = { 0 };
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
	if (inet_pton(AF_INET, a, &s4->sin_addr) == 1)
		s4->sin_family = AF_INET;
	else {
		CHECK(inet_pton(AF_INET6, a, &s6->sin6_addr) == 1);
		s6->sin6_family = AF_INET6;
	}
	acl_peer_from_sockaddr(&p, (struct sockaddr *)&ss);
	return p;
}

static enum acl_verdict check(const char *rw, const char *ro, struct acl_peer p)
{
	struct acl a = { 0 };
	char why[256];
	if (rw)
		CHECK_EQ(acl_parse(&a, rw, false, why, sizeof why), 0);
	if (ro)
		CHECK_EQ(acl_parse(&a, ro, true, why, sizeof why), 0);
	enum acl_verdict v = acl_check(&a, &p);
	acl_free(&a);
	return v;
}

static void bad(const char *text, const char *want)
{
	struct acl a = { 0 };
	char why[256] = "";
	CHECK(acl_parse(&a, text, false, why, sizeof why) < 0);
	if (!strstr(why, want)) {
		fprintf(stderr, "'%s': '%s' does not say '%s'\n", text, why, want);
		exit(1);
	}
	acl_free(&a);
}

int main(void)
{
	/* no rules: every client, read-write */
	CHECK_EQ(acl_check(NULL, NULL), ACL_READWRITE);
	struct acl empty = { 0 };
	struct acl_peer any = ip("192.0.2.1");
	CHECK_EQ(acl_check(&empty, &any), ACL_READWRITE);

	/* IPv4 */
	CHECK_EQ(check("127.0.0.0/8", NULL, ip("127.1.2.3")), ACL_READWRITE);
	CHECK_EQ(check("127.0.0.1/32", NULL, ip("127.0.0.2")), ACL_DENY);
	CHECK_EQ(check("127.0.0.1", NULL, ip("127.0.0.1")), ACL_READWRITE);
	CHECK_EQ(check("10.0.0.0/9", NULL, ip("10.127.255.255")), ACL_READWRITE);
	CHECK_EQ(check("10.0.0.0/9", NULL, ip("10.128.0.0")), ACL_DENY);
	CHECK_EQ(check("0.0.0.0/0", NULL, ip("203.0.113.9")), ACL_READWRITE);
	CHECK_EQ(check("0.0.0.0/0", NULL, ip("::1")), ACL_DENY);
	/* IPv6 */
	CHECK_EQ(check("::1", NULL, ip("::1")), ACL_READWRITE);
	CHECK_EQ(check("127.0.0.1/32", NULL, ip("::1")), ACL_DENY);
	CHECK_EQ(check("2001:db8::/32", NULL, ip("2001:db8:ffff::1")), ACL_READWRITE);
	CHECK_EQ(check("2001:db8::/33", NULL, ip("2001:db8:8000::1")), ACL_DENY);
	CHECK_EQ(check("::/0", NULL, ip("fe80::1")), ACL_READWRITE);
	/* IPv4-mapped clients are IPv4 clients, mapped entries IPv4 entries */
	CHECK_EQ(check("127.0.0.1/32", NULL, ip("::ffff:127.0.0.1")), ACL_READWRITE);
	CHECK_EQ(check("127.0.0.1/32", NULL, ip("::ffff:127.0.0.2")), ACL_DENY);
	CHECK_EQ(check("::ffff:10.0.0.0/104", NULL, ip("10.9.9.9")), ACL_READWRITE);
	CHECK_EQ(check("::ffff:10.0.0.0/104", NULL, ip("11.0.0.1")), ACL_DENY);
	CHECK_EQ(check("::/0", NULL, ip("::ffff:127.0.0.1")), ACL_DENY);
	/* unix and all */
	struct acl_peer ux = { .family = AF_UNIX };
	CHECK_EQ(check("unix", NULL, ux), ACL_READWRITE);
	CHECK_EQ(check("127.0.0.0/8", NULL, ux), ACL_DENY);
	CHECK_EQ(check("unix", NULL, ip("127.0.0.1")), ACL_DENY);
	CHECK_EQ(check("all", NULL, ux), ACL_READWRITE);
	/* read-only entries; read-write wins over read-only */
	CHECK_EQ(check(NULL, "127.0.0.0/8", ip("127.0.0.1")), ACL_READONLY);
	CHECK_EQ(check(NULL, "127.0.0.0/8", ip("::1")), ACL_DENY);
	CHECK_EQ(check("127.0.0.1", "127.0.0.0/8", ip("127.0.0.1")), ACL_READWRITE);
	CHECK_EQ(check("127.0.0.1", "127.0.0.0/8", ip("127.0.0.2")), ACL_READONLY);
	CHECK_EQ(check("tls:alice", "all", ip("127.0.0.2")), ACL_READONLY);

	/* identities */
	struct acl_id psk_alice[] = { { ACL_ID_PSK, "alice" } };
	struct acl_id cert[] = { { ACL_ID_CN, "host1" }, { ACL_ID_SAN, "host1.example" },
				 { ACL_ID_SAN, "192.0.2.7" } };
	struct acl_peer pa = ip("127.0.0.1");
	pa.tls = true, pa.ids = psk_alice, pa.nids = 1;
	struct acl_peer pc = ip("127.0.0.1");
	pc.tls = true, pc.ids = cert, pc.nids = 3;
	struct acl_peer plain = ip("127.0.0.1");
	plain.ids = psk_alice, plain.nids = 1;  /* no TLS: identities do not count */
	CHECK_EQ(check("tls:alice", NULL, pa), ACL_READWRITE);
	CHECK_EQ(check("tls:bob", NULL, pa), ACL_DENY);
	CHECK_EQ(check("tls:alice", NULL, plain), ACL_DENY);
	CHECK_EQ(check("tls:psk=alice", NULL, pa), ACL_READWRITE);
	CHECK_EQ(check("tls:CN=alice", NULL, pa), ACL_DENY);
	CHECK_EQ(check("tls:Alice", NULL, pa), ACL_DENY);
	CHECK_EQ(check("tls:host1", NULL, pc), ACL_READWRITE);
	CHECK_EQ(check("tls:CN=host1", NULL, pc), ACL_READWRITE);
	CHECK_EQ(check("tls:SAN=host1", NULL, pc), ACL_DENY);
	CHECK_EQ(check("tls:SAN=host1.example", NULL, pc), ACL_READWRITE);
	CHECK_EQ(check("tls:host1.example", NULL, pc), ACL_READWRITE);
	CHECK_EQ(check("tls:psk=host1", NULL, pc), ACL_DENY);
	CHECK_EQ(check("tls:*", NULL, pc), ACL_READWRITE);
	CHECK_EQ(check("tls:*", NULL, plain), ACL_DENY);
	struct acl_peer tls_noid = ip("127.0.0.1");
	tls_noid.tls = true;
	CHECK_EQ(check("tls:*", NULL, tls_noid), ACL_DENY);
	CHECK_EQ(check("10.0.0.0/8 tls:alice", NULL, pa), ACL_READWRITE);
	CHECK_EQ(check("  10.0.0.0/8\t\tunix  ", NULL, ux), ACL_READWRITE);

	/* kinds present */
	struct acl k = { 0 };
	char why[256];
	CHECK_EQ(acl_parse(&k, "127.0.0.1 tls:psk=x", false, why, sizeof why), 0);
	CHECK(acl_has_psk_rules(&k) && !acl_has_cert_rules(&k) && acl_has_tls_rules(&k));
	char buf[128];
	acl_entry_format(&k.e[0], buf, sizeof buf);
	CHECK(!strcmp(buf, "127.0.0.1/32"));
	acl_free(&k);
	CHECK_EQ(acl_parse(&k, "tls:CN=a ::ffff:192.0.2.0/120", true, why, sizeof why), 0);
	CHECK(acl_has_cert_rules(&k) && !acl_has_psk_rules(&k) && k.e[1].readonly);
	acl_entry_format(&k.e[1], buf, sizeof buf);
	CHECK(!strcmp(buf, "192.0.2.0/24"));
	acl_free(&k);

	/* the loopback, with a port or not (Host headers, listen specs) */
	const char *loop[] = { "localhost", "LocalHost:8080", "127.0.0.1", "127.1.2.3:10809", "[::1]",
			       "[::1]:80", "[::ffff:127.0.0.2]:1", "::1:10809" };
	const char *not_loop[] = { "", ":10809", "evil.example", "localhost.evil.example", "128.0.0.1",
				   "10.0.0.1:80", "[::2]", "[::ffff:10.0.0.1]", "[::1", "[::1]x",
				   "127.0.0.1:", "127.0.0.1:123456", "127.0.0.1:80x", "[localhost]",
				   "::", "0.0.0.0:10809" };
	for (size_t i = 0; i < sizeof loop / sizeof *loop; i++)
		CHECK(acl_loopback_host(loop[i]));
	for (size_t i = 0; i < sizeof not_loop / sizeof *not_loop; i++)
		CHECK(!acl_loopback_host(not_loop[i]));

	/* errors */
	bad("", "no entries");
	bad("   ", "no entries");
	bad("10.0.0.1/8", "host bits set (the network is 10.0.0.0/8)");
	bad("2001:db8::1/32", "host bits set (the network is 2001:db8::/32)");
	bad("10.0.0.0/33", "prefix length must be a number from 0 to 32");
	bad("::/129", "from 0 to 128");
	bad("10.0.0.0/", "prefix length");
	bad("10.0.0.0/08", "prefix length");
	bad("10.0.0.0/-1", "prefix length");
	bad("10.0.0.0/8x", "prefix length");
	bad("300.0.0.0", "not an IPv4 or IPv6 address");
	bad("localhost", "not an IPv4 or IPv6 address");
	bad("anyone", "not an IPv4 or IPv6 address");
	bad("127.0.0.1 bogus", "'bogus'");
	bad("tls:", "empty");
	bad("tls:CN=", "empty");
	bad("tls:O=acme", "unknown identity kind");
	bad("::ffff:10.0.0.0/64", "at least 96");
	bad("/8", "not an address");
	printf("t_acl: ok\n");
	return 0;
}
