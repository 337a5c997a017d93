/*
 * common/acl.h - access rules of an NBD export ([dimm] allow, allow_ro).
 * common/ depends on nothing: the matcher is unit-tested alone
 * (tests/unit/t_acl.c).
 *
 * A rule list is whitespace-separated entries; a client that matches any
 * entry matches the list:
 *   all                 every client
 *   unix                clients of the unix socket
 *   ADDR, ADDR/PREFIX   an IPv4 or IPv6 address or network (CIDR): 10.0.0.0/8,
 *                       192.0.2.7, 2001:db8::/32, ::1.  Host bits must be 0.
 *                       IPv4-mapped IPv6 (::ffff:a.b.c.d, prefix >= 96) is
 *                       the IPv4 entry; IPv4 clients arriving on an IPv6
 *                       socket (::ffff:127.0.0.1) are matched as IPv4.
 *   tls:NAME            a TLS session whose PSK identity is NAME, or whose
 *                       verified client certificate has NAME as subject CN
 *                       or as a subjectAltName (DNS, email, URI, IP)
 *   tls:psk=NAME        PSK identity NAME only
 *   tls:CN=NAME         verified client certificate with subject CN NAME only
 *   tls:SAN=NAME        verified client certificate with subjectAltName NAME only
 *   tls:*               any TLS session with a PSK identity or a verified
 *                       client certificate
 * Names are compared exactly (case-sensitive), at most ACL_NAME_MAX bytes.
 */
#ifndef FLASHD_COMMON_ACL_H
#define FLASHD_COMMON_ACL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ACL_NAME_MAX 255

enum acl_kind {
	ACL_ALL,
	ACL_UNIX,
	ACL_NET4,
	ACL_NET6,
	ACL_TLS_ANY_NAME,   /* tls:NAME: PSK identity, CN or SAN */
	ACL_TLS_PSK,        /* tls:psk=NAME */
	ACL_TLS_CN,         /* tls:CN=NAME */
	ACL_TLS_SAN,        /* tls:SAN=NAME */
	ACL_TLS_ANY,        /* tls:* */
};

struct acl_entry {
	enum acl_kind kind;
	bool readonly;          /* from allow_ro */
	uint8_t addr[16];       /* NET4: first 4 bytes */
	unsigned prefix;
	char *name;             /* TLS kinds */
};

struct acl {
	struct acl_entry *e;
	int n;
};

/* What is known of a client when it asks for an export. */
enum acl_id_kind { ACL_ID_PSK, ACL_ID_CN, ACL_ID_SAN };
struct acl_id {
	enum acl_id_kind kind;
	const char *name;
};
struct acl_peer {
	int family;             /* AF_INET, AF_INET6 or AF_UNIX */
	uint8_t addr[16];       /* AF_INET: 4 bytes; IPv4-mapped already turned into AF_INET */
	bool tls;               /* TLS session up */
	const struct acl_id *ids;  /* identities proven by the session */
	int nids;
};

/* Append the entries of text (readonly: from allow_ro).  0, or -EINVAL
 * with why naming the bad entry (err is written only on error). */
int acl_parse(struct acl *acl, const char *text, bool readonly, char *why, size_t whylen);
void acl_free(struct acl *acl);
bool acl_has_cert_rules(const struct acl *acl);   /* tls:NAME, CN=, SAN= */
bool acl_has_psk_rules(const struct acl *acl);    /* tls:NAME, psk= */
bool acl_has_tls_rules(const struct acl *acl);    /* any tls: entry */
/* The same entries in the same order (a reload compares the rules). */
bool acl_equal(const struct acl *a, const struct acl *b);

enum acl_verdict { ACL_DENY, ACL_READONLY, ACL_READWRITE };
/* No entries: ACL_READWRITE (every client, as without rules).  Else the
 * most permissive entry that matches: a read-write one beats a read-only
 * one; none matching: ACL_DENY. */
enum acl_verdict acl_check(const struct acl *acl, const struct acl_peer *p);

/* Fill p->family and p->addr from a sockaddr (IPv4-mapped IPv6: AF_INET). */
struct sockaddr;
void acl_peer_from_sockaddr(struct acl_peer *p, const struct sockaddr *sa);

/* The entry as text (for logs and tests). */
void acl_entry_format(const struct acl_entry *e, char *buf, size_t len);

/*
 * Is host, with an optional port, the loopback: localhost (any case),
 * 127.0.0.0/8, ::1 or ::ffff:127.x.y.z?  host is "NAME", "NAME:PORT",
 * "[V6]" or "[V6]:PORT" (a Host header, an Origin after "http://", the
 * address of a listen spec); without brackets the port follows the last
 * ':'.  A port must be 1 to 5 digits; anything else is not the loopback.
 */
bool acl_loopback_host(const char *host);

#endif
