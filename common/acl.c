/*
 * common/acl.c - access rules of an NBD export: parsing and matching
 * (common/acl.h has the syntax).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "common/acl.h"

static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

static bool prefix_match(const uint8_t *a, const uint8_t *net, unsigned prefix)
{
	unsigned full = prefix / 8, rest = prefix % 8;
	if (memcmp(a, net, full))
		return false;
	if (!rest)
		return true;
	uint8_t mask = (uint8_t)(0xff << (8 - rest));
	return (a[full] & mask) == (net[full] & mask);
}

static bool host_bits_zero(const uint8_t *net, unsigned bytes, unsigned prefix)
{
	for (unsigned bit = prefix; bit < bytes * 8; bit++)
		if (net[bit / 8] & (0x80 >> (bit % 8)))
			return false;
	return true;
}

/* One network entry: ADDR or ADDR/PREFIX. */
static int parse_net(struct acl_entry *e, const char *tok, char *why, size_t len)
{
	char addr[64];
	const char *slash = strchr(tok, '/');
	size_t al = slash ? (size_t)(slash - tok) : strlen(tok);
	if (al == 0 || al >= sizeof addr) {
		snprintf(why, len, "'%s' is not an address or network", tok);
		return -EINVAL;
	}
	memcpy(addr, tok, al);
	addr[al] = 0;
	unsigned maxp;
	if (inet_pton(AF_INET, addr, e->addr) == 1) {
		e->kind = ACL_NET4;
		maxp = 32;
	} else if (inet_pton(AF_INET6, addr, e->addr) == 1) {
		e->kind = ACL_NET6;
		maxp = 128;
	} else {
		snprintf(why, len, "'%s' is not an IPv4 or IPv6 address, nor all, unix or tls:NAME", tok);
		return -EINVAL;
	}
	unsigned prefix = maxp;
	if (slash) {
		const char *p = slash + 1;
		unsigned v = 0;
		if (!*p || strlen(p) > 3 || (p[0] == '0' && p[1]))
			goto badprefix;
		for (; *p; p++) {
			if (*p < '0' || *p > '9')
				goto badprefix;
			v = v * 10 + (unsigned)(*p - '0');
		}
		if (v > maxp)
			goto badprefix;
		prefix = v;
	}
	if (e->kind == ACL_NET6 && !memcmp(e->addr, v4mapped, 12) && prefix < 96) {
		snprintf(why, len, "'%s': an IPv4-mapped network needs a prefix of at least 96", tok);
		return -EINVAL;
	}
	if (!host_bits_zero(e->addr, maxp / 8, prefix)) {
		/* say what was probably meant */
		uint8_t net[16];
		memcpy(net, e->addr, sizeof net);
		for (unsigned bit = prefix; bit < maxp; bit++)
			net[bit / 8] &= (uint8_t)~(0x80 >> (bit % 8));
		char s[INET6_ADDRSTRLEN];
		inet_ntop(e->kind == ACL_NET4 ? AF_INET : AF_INET6, net, s, sizeof s);
		snprintf(why, len, "'%s' has host bits set (the network is %s/%u)", tok, s, prefix);
		return -EINVAL;
	}
	if (e->kind == ACL_NET6 && !memcmp(e->addr, v4mapped, 12)) {
		/* ::ffff:a.b.c.d/N is the IPv4 network a.b.c.d/(N-96) */
		memmove(e->addr, e->addr + 12, 4);
		memset(e->addr + 4, 0, 12);
		e->kind = ACL_NET4;
		prefix -= 96;
	}
	e->prefix = prefix;
	return 0;
badprefix:
	snprintf(why, len, "'%s': the prefix length must be a number from 0 to %u", tok, maxp);
	return -EINVAL;
}

static int parse_entry(struct acl_entry *e, const char *tok, char *why, size_t len)
{
	if (!strcmp(tok, "all")) {
		e->kind = ACL_ALL;
		return 0;
	}
	if (!strcmp(tok, "unix")) {
		e->kind = ACL_UNIX;
		return 0;
	}
	if (!strncmp(tok, "tls:", 4)) {
		const char *n = tok + 4;
		if (!strcmp(n, "*")) {
			e->kind = ACL_TLS_ANY;
			return 0;
		}
		e->kind = ACL_TLS_ANY_NAME;
		if (!strncmp(n, "psk=", 4)) {
			e->kind = ACL_TLS_PSK;
			n += 4;
		} else if (!strncmp(n, "CN=", 3)) {
			e->kind = ACL_TLS_CN;
			n += 3;
		} else if (!strncmp(n, "SAN=", 4)) {
			e->kind = ACL_TLS_SAN;
			n += 4;
		} else if (strchr(n, '=')) {
			snprintf(why, len, "'%s': unknown identity kind (tls:NAME, tls:psk=NAME, tls:CN=NAME, "
				 "tls:SAN=NAME or tls:*)", tok);
			return -EINVAL;
		}
		if (!*n) {
			snprintf(why, len, "'%s': the identity is empty", tok);
			return -EINVAL;
		}
		if (strlen(n) > ACL_NAME_MAX) {
			snprintf(why, len, "'%.40s...': the identity is longer than %d bytes", tok, ACL_NAME_MAX);
			return -EINVAL;
		}
		e->name = strdup(n);
		if (!e->name) {
			snprintf(why, len, "out of memory");
			return -ENOMEM;
		}
		return 0;
	}
	return parse_net(e, tok, why, len);
}

int acl_parse(struct acl *acl, const char *text, bool readonly, char *why, size_t whylen)
{
	const char *p = text;
	int added = 0;
	for (;;) {
		while (*p == ' ' || *p == '\t')
			p++;
		if (!*p)
			break;
		size_t n = strcspn(p, " \t");
		char tok[ACL_NAME_MAX + 16];
		if (n >= sizeof tok) {
			snprintf(why, whylen, "'%.40s...' is too long", p);
			return -EINVAL;
		}
		memcpy(tok, p, n);
		tok[n] = 0;
		p += n;
		struct acl_entry e = { .readonly = readonly };
		int rc = parse_entry(&e, tok, why, whylen);
		if (rc)
			return rc;
		struct acl_entry *ne = realloc(acl->e, (size_t)(acl->n + 1) * sizeof *ne);
		if (!ne) {
			free(e.name);
			snprintf(why, whylen, "out of memory");
			return -ENOMEM;
		}
		acl->e = ne;
		acl->e[acl->n++] = e;
		added++;
	}
	if (!added) {
		snprintf(why, whylen, "no entries (all, unix, ADDR[/PREFIX] or tls:NAME)");
		return -EINVAL;
	}
	return 0;
}

void acl_free(struct acl *acl)
{
	for (int i = 0; i < acl->n; i++)
		free(acl->e[i].name);
	free(acl->e);
	acl->e = NULL;
	acl->n = 0;
}

static bool any_kind(const struct acl *acl, unsigned mask)
{
	for (int i = 0; i < acl->n; i++)
		if (mask & (1u << acl->e[i].kind))
			return true;
	return false;
}

bool acl_has_cert_rules(const struct acl *acl)
{
	return any_kind(acl, 1u << ACL_TLS_ANY_NAME | 1u << ACL_TLS_CN | 1u << ACL_TLS_SAN);
}

bool acl_has_psk_rules(const struct acl *acl)
{
	return any_kind(acl, 1u << ACL_TLS_ANY_NAME | 1u << ACL_TLS_PSK);
}

bool acl_has_tls_rules(const struct acl *acl)
{
	return any_kind(acl, 1u << ACL_TLS_ANY_NAME | 1u << ACL_TLS_PSK | 1u << ACL_TLS_CN |
				     1u << ACL_TLS_SAN | 1u << ACL_TLS_ANY);
}

static bool has_id(const struct acl_peer *p, int kind, const char *name)
{
	for (int i = 0; i < p->nids; i++)
		if ((kind < 0 || (int)p->ids[i].kind == kind) && p->ids[i].name &&
		    (!name || !strcmp(p->ids[i].name, name)))
			return true;
	return false;
}

static bool entry_match(const struct acl_entry *e, const struct acl_peer *p)
{
	switch (e->kind) {
	case ACL_ALL:
		return true;
	case ACL_UNIX:
		return p->family == AF_UNIX;
	case ACL_NET4:
		return p->family == AF_INET && prefix_match(p->addr, e->addr, e->prefix);
	case ACL_NET6:
		return p->family == AF_INET6 && prefix_match(p->addr, e->addr, e->prefix);
	case ACL_TLS_ANY_NAME:
		return p->tls && has_id(p, -1, e->name);
	case ACL_TLS_PSK:
		return p->tls && has_id(p, ACL_ID_PSK, e->name);
	case ACL_TLS_CN:
		return p->tls && has_id(p, ACL_ID_CN, e->name);
	case ACL_TLS_SAN:
		return p->tls && has_id(p, ACL_ID_SAN, e->name);
	case ACL_TLS_ANY:
		return p->tls && has_id(p, -1, NULL);
	}
	return false;
}

enum acl_verdict acl_check(const struct acl *acl, const struct acl_peer *p)
{
	if (!acl || !acl->n)
		return ACL_READWRITE;
	enum acl_verdict v = ACL_DENY;
	for (int i = 0; i < acl->n; i++) {
		if (!entry_match(&acl->e[i], p))
			continue;
		if (!acl->e[i].readonly)
			return ACL_READWRITE;
		v = ACL_READONLY;
	}
	return v;
}

void acl_peer_from_sockaddr(struct acl_peer *p, const struct sockaddr *sa)
{
	memset(p->addr, 0, sizeof p->addr);
	p->family = sa ? sa->sa_family : AF_UNIX;
	if (p->family == AF_INET) {
		memcpy(p->addr, &((const struct sockaddr_in *)sa)->sin_addr, 4);
	} else if (p->family == AF_INET6) {
		const uint8_t *a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
		if (!memcmp(a, v4mapped, 12)) {
			p->family = AF_INET;
			memcpy(p->addr, a + 12, 4);
		} else {
			memcpy(p->addr, a, 16);
		}
	} else {
		p->family = AF_UNIX;
	}
}

void acl_entry_format(const struct acl_entry *e, char *buf, size_t len)
{
	char s[INET6_ADDRSTRLEN];
	switch (e->kind) {
	case ACL_ALL: snprintf(buf, len, "all"); break;
	case ACL_UNIX: snprintf(buf, len, "unix"); break;
	case ACL_NET4:
	case ACL_NET6:
		inet_ntop(e->kind == ACL_NET4 ? AF_INET : AF_INET6, e->addr, s, sizeof s);
		snprintf(buf, len, "%s/%u", s, e->prefix);
		break;
	case ACL_TLS_ANY_NAME: snprintf(buf, len, "tls:%s", e->name); break;
	case ACL_TLS_PSK: snprintf(buf, len, "tls:psk=%s", e->name); break;
	case ACL_TLS_CN: snprintf(buf, len, "tls:CN=%s", e->name); break;
	case ACL_TLS_SAN: snprintf(buf, len, "tls:SAN=%s", e->name); break;
	case ACL_TLS_ANY: snprintf(buf, len, "tls:*"); break;
	}
}

bool acl_equal(const struct acl *a, const struct acl *b)
{
	if (a->n != b->n)
		return false;
	for (int i = 0; i < a->n; i++) {
		const struct acl_entry *x = &a->e[i], *y = &b->e[i];
		if (x->kind != y->kind || x->readonly != y->readonly || x->prefix != y->prefix ||
		    memcmp(x->addr, y->addr, sizeof x->addr) != 0 ||
		    ((x->name || y->name) && (!x->name || !y->name || strcmp(x->name, y->name))))
			return false;
	}
	return true;
}

bool acl_loopback_host(const char *h)
{
	char name[64];
	const char *port;
	size_t n;
	bool v6 = h[0] == '[';
	if (v6) {
		const char *close = strchr(h, ']');
		if (!close)
			return false;
		n = (size_t)(close - h - 1);
		port = close + 1;
		h++;
	} else {
		const char *colon = strrchr(h, ':');
		n = colon ? (size_t)(colon - h) : strlen(h);
		port = h + n;
	}
	if (!n || n >= sizeof name)
		return false;
	memcpy(name, h, n);
	name[n] = 0;
	size_t digits = *port == ':' ? strspn(port + 1, "0123456789") : 0;
	if (*port && (*port != ':' || !digits || digits > 5 || port[1 + digits]))
		return false;
	uint8_t a[16];
	if (!v6 && inet_pton(AF_INET, name, a) == 1)
		return a[0] == 127;
	if (inet_pton(AF_INET6, name, a) == 1) {
		static const uint8_t one[16] = { [15] = 1 };
		static const uint8_t mapped[12] = { [10] = 0xff, [11] = 0xff };
		return !memcmp(a, one, 16) || (!memcmp(a, mapped, 12) && a[12] == 127);
	}
	return !v6 && !strcasecmp(name, "localhost");
}
