/*
 * server/tls.c - TLS for NBD_OPT_STARTTLS with OpenSSL: one SSL_CTX made
 * at start-up from the configuration (before any image opens), sessions
 * made from it per STARTTLS.
 *
 * x509: tls_certificates = DIR holds server-cert.pem (the chain) and
 * server-key.pem, ca-cert.pem (needed for tls_verify_peer, which makes a
 * client certificate signed by that CA mandatory) and optionally
 * ca-crl.pem (then client certificates are checked against it), the file
 * names nbdkit's --tls-certificates and qemu's tls-creds-x509 use.
 * PSK: tls_psk = FILE in psktool's format (what nbdkit's --tls-psk and
 * qemu's tls-creds-psk read): "identity:hexkey" per line.  TLS 1.3 PSK goes
 * through the find-session callback (a session of TLS_AES_128_GCM_SHA256,
 * the SHA-256 hash GnuTLS clients use for external PSKs), TLS 1.2 through
 * the server PSK callback (OpenSSL's DEFAULT suites, the PSK ones first,
 * RSA-PSK left out).  Both may be configured at once, also with
 * tls_verify_peer: a PSK handshake asks for no certificate, every other
 * one requires a verified certificate.
 * TLS 1.2 is the minimum (doc/proto.md: MUST support 1.2); renegotiation,
 * session tickets and the session cache are off (every connection makes a
 * full handshake; nothing is kept between connections).
 * Reload (tls_reload, main thread): the key files are read again into a
 * new SSL_CTX that replaces ctx for new sessions, if their contents (or
 * names) changed; a file that does not load leaves the running context in
 * force.  Ownership: the PSK table belongs to its SSL_CTX (ex_data, freed
 * with it), and every SSL holds a reference on its SSL_CTX (OpenSSL's
 * count, atomic), so a session made before a reload, in handshake on the
 * main thread or serving on an ioDimm thread, keeps its keys until freed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/objects.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include "server/flashd.h"

#define PSK_LINE_MAX 2048

struct psk {
	char *identity;
	unsigned char *key;
	size_t keylen;
};

/* the PSKs of one SSL_CTX (its ex_data psk_index) */
struct psk_table {
	struct psk *v;
	int n;
};

static SSL_CTX *ctx;                     /* new sessions' context (main thread) */
static int psk_index = -1;               /* SSL_CTX ex_data: struct psk_table */
static unsigned char keys_digest[EVP_MAX_MD_SIZE]; /* of ctx's key files (tls_reload) */

const char *tls_mode_name(int mode)
{
	switch (mode) {
	case TLS_OFF: return "off";
	case TLS_ALLOWED: return "allowed";
	case TLS_REQUIRED: return "required";
	}
	return "unset";
}

int tls_mode_parse(const char *s)
{
	if (!strcasecmp(s, "off") || !strcasecmp(s, "no"))
		return TLS_OFF;
	if (!strcasecmp(s, "allowed") || !strcasecmp(s, "on") || !strcasecmp(s, "yes"))
		return TLS_ALLOWED;
	if (!strcasecmp(s, "required") || !strcasecmp(s, "require"))
		return TLS_REQUIRED;
	return -1;
}

bool tls_available(void)
{
	return ctx != NULL;
}

/* One error code as text: OpenSSL's reason, or (libevent's
 * bufferevent_openssl reports them so) an SSL_get_error code. */
void tls_error_text(unsigned long e, char *buf, size_t len)
{
	if (e < 0x100) {
		switch (e) {
		case SSL_ERROR_SYSCALL: snprintf(buf, len, "connection closed or socket error"); return;
		case SSL_ERROR_ZERO_RETURN: snprintf(buf, len, "peer closed the TLS session"); return;
		case SSL_ERROR_SSL: snprintf(buf, len, "TLS protocol error"); return;
		default: snprintf(buf, len, "TLS error %lu", e); return;
		}
	}
	char one[256];
	ERR_error_string_n(e, one, sizeof one);
	/* "error:0A000086:SSL routines::certificate verify failed": the
	 * text after the last ':' */
	const char *r = strrchr(one, ':');
	snprintf(buf, len, "%s", r && r[1] ? r + 1 : one);
}

/* The OpenSSL error queue as one line (emptied). */
static void ssl_errors(char *buf, size_t len)
{
	buf[0] = 0;
	size_t used = 0;
	unsigned long e;
	while ((e = ERR_get_error()) != 0) {
		char one[256];
		tls_error_text(e, one, sizeof one);
		if (used < len)
			used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? "; " : "", one);
	}
}

static struct tls_note *note_of(SSL *ssl)
{
	return SSL_get_app_data(ssl);
}

static const struct psk *table_find(const struct psk_table *t, const char *id, size_t len)
{
	for (int i = 0; t && i < t->n; i++)
		if (strlen(t->v[i].identity) == len && !memcmp(t->v[i].identity, id, len))
			return &t->v[i];
	return NULL;
}

/* the PSK of identity id in the keys ssl was made with */
static const struct psk *psk_find(SSL *ssl, const char *id, size_t len)
{
	return table_find(SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), psk_index), id, len);
}

static void note_unknown_identity(SSL *ssl, const char *id, size_t len)
{
	struct tls_note *n = note_of(ssl);
	if (n)
		snprintf(n->why, sizeof n->why, "unknown PSK identity '%.*s'", (int)(len > 64 ? 64 : len),
			 id);
}

static void note_identity(SSL *ssl, const char *id, size_t len)
{
	struct tls_note *n = note_of(ssl);
	if (n)
		snprintf(n->psk_identity, sizeof n->psk_identity, "%.*s", (int)len, id);
}

/* TLS 1.2 PSK */
static unsigned int psk_server_cb(SSL *ssl, const char *identity, unsigned char *out,
				  unsigned int max)
{
	size_t len = identity ? strlen(identity) : 0;
	const struct psk *p = identity ? psk_find(ssl, identity, len) : NULL;
	if (!p || p->keylen > max) {
		note_unknown_identity(ssl, identity ? identity : "", len);
		return 0;
	}
	memcpy(out, p->key, p->keylen);
	note_identity(ssl, identity, len);
	return (unsigned int)p->keylen;
}

/* TLS 1.3 PSK: a session holding the key */
static int psk_find_session_cb(SSL *ssl, const unsigned char *identity, size_t len,
			       SSL_SESSION **sess)
{
	static const unsigned char aes128gcmsha256[] = { 0x13, 0x01 };
	*sess = NULL;
	const struct psk *p = psk_find(ssl, (const char *)identity, len);
	if (!p) {
		/* not ours: the handshake goes on without a PSK (a certificate,
		 * if there is one; otherwise it fails) */
		note_unknown_identity(ssl, (const char *)identity, len);
		return 1;
	}
	/* the key's hash is SHA-256 (GnuTLS's default for external PSKs, and
	 * the binder is checked with it): a SHA-256 suite, the one chosen if
	 * it is one (the suites are ordered so, see tls_init) */
	const SSL_CIPHER *cipher = SSL_get_pending_cipher(ssl);
	if (!cipher || SSL_CIPHER_get_handshake_digest(cipher) == NULL ||
	    EVP_MD_get_type(SSL_CIPHER_get_handshake_digest(cipher)) != NID_sha256)
		cipher = SSL_CIPHER_find(ssl, aes128gcmsha256);
	SSL_SESSION *s = cipher ? SSL_SESSION_new() : NULL;
	if (!s || !SSL_SESSION_set1_master_key(s, p->key, p->keylen) ||
	    !SSL_SESSION_set_cipher(s, cipher) || !SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION)) {
		SSL_SESSION_free(s);
		return 0;
	}
	*sess = s;
	struct tls_note *n = note_of(ssl);
	if (n)
		n->why[0] = 0;
	note_identity(ssl, (const char *)identity, len);
	return 1;
}

/* client certificates: remember why one was refused */
static int verify_cb(int ok, X509_STORE_CTX *x)
{
	if (ok)
		return ok;
	SSL *ssl = X509_STORE_CTX_get_ex_data(x, SSL_get_ex_data_X509_STORE_CTX_idx());
	struct tls_note *n = ssl ? note_of(ssl) : NULL;
	if (n && !n->why[0]) {
		char subj[160] = "?";
		X509 *cert = X509_STORE_CTX_get_current_cert(x);
		if (cert)
			X509_NAME_oneline(X509_get_subject_name(cert), subj, sizeof subj);
		snprintf(n->why, sizeof n->why, "client certificate %s: %s", subj,
			 X509_verify_cert_error_string(X509_STORE_CTX_get_error(x)));
	}
	return ok;
}

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static void psk_table_free(struct psk_table *t)
{
	if (!t)
		return;
	for (int i = 0; i < t->n; i++) {
		free(t->v[i].identity);
		if (t->v[i].key)
			OPENSSL_cleanse(t->v[i].key, t->v[i].keylen);
		free(t->v[i].key);
	}
	free(t->v);
	free(t);
}

/* ex_data free hook: the table goes with its SSL_CTX (any thread) */
static void psk_table_ex_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl,
			      void *argp)
{
	psk_table_free(ptr);
}

/* Read the PSK file into t; errors name where the key was given and the file's line. */
static int load_psk(struct psk_table *t, const char *path, const char *where, char *err,
		    size_t errlen)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		snprintf(err, errlen, "%s: cannot read %s: %s", where, path, strerror(errno));
		return -EINVAL;
	}
	char line[PSK_LINE_MAX + 2];
	int lineno = 0, rc = 0;
	while (fgets(line, sizeof line, f)) {
		lineno++;
		size_t n = strlen(line);
		if (n == sizeof line - 1 && line[n - 1] != '\n') {
			snprintf(err, errlen, "%s: %s:%d: line too long", where, path, lineno);
			rc = -EINVAL;
			break;
		}
		while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ' ||
			     line[n - 1] == '\t'))
			line[--n] = 0;
		if (!n || line[0] == '#')
			continue;
		char *colon = strchr(line, ':');
		if (!colon || colon == line) {
			snprintf(err, errlen, "%s: %s:%d: expected IDENTITY:HEXKEY (the format of psktool, "
				 "nbdkit --tls-psk and qemu tls-creds-psk)", where, path, lineno);
			rc = -EINVAL;
			break;
		}
		*colon = 0;
		const char *hex = colon + 1;
		size_t hl = strlen(hex);
		if (!hl || hl % 2 || hl / 2 > PSK_MAX_PSK_LEN) {
			snprintf(err, errlen, "%s: %s:%d: the key of '%s' must be an even number of hex "
				 "digits, 2 to %d", where, path, lineno, line, 2 * PSK_MAX_PSK_LEN);
			rc = -EINVAL;
			break;
		}
		if (table_find(t, line, strlen(line))) {
			snprintf(err, errlen, "%s: %s:%d: identity '%s' appears a second time", where, path,
				 lineno, line);
			rc = -EINVAL;
			break;
		}
		unsigned char *key = malloc(hl / 2);
		struct psk *np = realloc(t->v, (size_t)(t->n + 1) * sizeof *t->v);
		if (np)
			t->v = np;
		if (!key || !np) {
			free(key);
			snprintf(err, errlen, "out of memory");
			rc = -ENOMEM;
			break;
		}
		bool bad = false;
		for (size_t i = 0; i < hl / 2; i++) {
			int a = hexval(hex[2 * i]), b = hexval(hex[2 * i + 1]);
			if (a < 0 || b < 0)
				bad = true;
			key[i] = (unsigned char)(a << 4 | (b & 15));
		}
		if (bad) {
			free(key);
			snprintf(err, errlen, "%s: %s:%d: the key of '%s' is not hexadecimal", where, path,
				 lineno, line);
			rc = -EINVAL;
			break;
		}
		t->v[t->n++] = (struct psk){ strdup(line), key, hl / 2 };
	}
	OPENSSL_cleanse(line, sizeof line);
	if (!rc && ferror(f)) {
		snprintf(err, errlen, "%s: cannot read %s: %s", where, path, strerror(errno));
		rc = -EIO;
	}
	fclose(f);
	if (!rc && !t->n) {
		snprintf(err, errlen, "%s: %s holds no IDENTITY:HEXKEY line", where, path);
		rc = -EINVAL;
	}
	return rc;
}

/* DIR/name, checked readable: 1 if there, 0 if absent (and optional), -1 error. */
static int cert_file(const char *dir, const char *name, bool needed, const char *where, char *path,
		     size_t plen, char *err, size_t errlen)
{
	snprintf(path, plen, "%s/%s", dir, name);
	FILE *f = fopen(path, "r");
	if (f) {
		fclose(f);
		return 1;
	}
	if (errno == ENOENT && !needed)
		return 0;
	snprintf(err, errlen, "%s: cannot read %s: %s", where, path, strerror(errno));
	return -1;
}

static int load_x509(SSL_CTX *c, const char *dir, const char *where, int verify_peer, char *err,
		     size_t errlen)
{
	char cert[4200], key[4200], ca[4200], crl[4200], why[512];
	if (cert_file(dir, "server-cert.pem", true, where, cert, sizeof cert, err, errlen) < 0 ||
	    cert_file(dir, "server-key.pem", true, where, key, sizeof key, err, errlen) < 0)
		return -EINVAL;
	int have_ca = cert_file(dir, "ca-cert.pem", verify_peer > 0, where, ca, sizeof ca, err,
				errlen);
	if (have_ca < 0)
		return -EINVAL;
	int have_crl = cert_file(dir, "ca-crl.pem", false, where, crl, sizeof crl, err, errlen);
	if (have_crl < 0)
		return -EINVAL;
	ERR_clear_error();
	if (SSL_CTX_use_certificate_chain_file(c, cert) != 1) {
		ssl_errors(why, sizeof why);
		snprintf(err, errlen, "%s: %s: not a usable certificate: %s", where, cert, why);
		return -EINVAL;
	}
	if (SSL_CTX_use_PrivateKey_file(c, key, SSL_FILETYPE_PEM) != 1) {
		ssl_errors(why, sizeof why);
		snprintf(err, errlen, "%s: %s: not a usable private key for %s: %s", where, key, cert, why);
		return -EINVAL;
	}
	if (SSL_CTX_check_private_key(c) != 1) {
		ssl_errors(why, sizeof why);
		snprintf(err, errlen, "%s: %s does not belong to %s: %s", where, key, cert, why);
		return -EINVAL;
	}
	if (have_ca) {
		if (SSL_CTX_load_verify_locations(c, ca, NULL) != 1) {
			ssl_errors(why, sizeof why);
			snprintf(err, errlen, "%s: %s: not a usable CA certificate: %s", where, ca, why);
			return -EINVAL;
		}
		STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(ca);
		if (names)
			SSL_CTX_set_client_CA_list(c, names);
	}
	if (have_crl) {
		X509_STORE *store = SSL_CTX_get_cert_store(c);
		X509_LOOKUP *lk = X509_STORE_add_lookup(store, X509_LOOKUP_file());
		if (!lk || X509_load_crl_file(lk, crl, X509_FILETYPE_PEM) <= 0) {
			ssl_errors(why, sizeof why);
			snprintf(err, errlen, "%s: %s: not a usable CRL: %s", where, crl, why);
			return -EINVAL;
		}
		X509_STORE_set_flags(store, X509_V_FLAG_CRL_CHECK | X509_V_FLAG_CRL_CHECK_ALL);
	}
	if (verify_peer > 0)
		SSL_CTX_set_verify(c, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, verify_cb);
	else
		SSL_CTX_set_verify(c, SSL_VERIFY_NONE, NULL);
	log_debug("TLS: certificate %s%s%s", cert, have_ca ? ", CA " : "", have_ca ? ca : "");
	return 0;
}

/*
 * A server context from the key files: certificates in DIR certs and/or
 * the PSK file psk (where: the configuration's place, for messages).
 * 0 with *out made, or -errno with err set (nothing made).
 */
static int make_ctx(const char *certs, const char *certs_where, const char *psk,
		    const char *psk_where, int verify_peer, SSL_CTX **out, char *err, size_t errlen)
{
	if (psk_index < 0)
		psk_index = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, psk_table_ex_free);
	if (psk_index < 0) {
		snprintf(err, errlen, "cannot create the TLS context");
		return -ENOMEM;
	}
	SSL_CTX *c = SSL_CTX_new(TLS_server_method());
	if (!c) {
		snprintf(err, errlen, "cannot create the TLS context");
		return -ENOMEM;
	}
	SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION);
	SSL_CTX_set_options(c, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_TICKET |
				       SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_CIPHER_SERVER_PREFERENCE);
	SSL_CTX_set_num_tickets(c, 0);
	SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
	SSL_CTX_set_mode(c, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	SSL_CTX_set_dh_auto(c, 1);
	/* a TLS 1.3 PSK is a session (psk_find_session_cb): OpenSSL refuses
	 * to take one under SSL_VERIFY_PEER without a session id context
	 * ("session id context uninitialized").  There is no cache and no
	 * ticket, so nothing is ever resumed in another context. */
	static const unsigned char sid_ctx[] = "flashd";
	SSL_CTX_set_session_id_context(c, sid_ctx, sizeof sid_ctx - 1);
	int rc = 0;
	if (certs)
		rc = load_x509(c, certs, certs_where, verify_peer, err, errlen);
	if (!rc && psk) {
		struct psk_table *t = calloc(1, sizeof *t);
		if (!t || !SSL_CTX_set_ex_data(c, psk_index, t)) {
			free(t);
			snprintf(err, errlen, "out of memory");
			SSL_CTX_free(c);
			return -ENOMEM;
		}
		rc = load_psk(t, psk, psk_where, err, errlen);
		/* TLS 1.3 PSKs are SHA-256 keys: SHA-256 suites first, chosen by
		 * the server, so a PSK client is never steered to SHA-384 */
		if (!rc && SSL_CTX_set_ciphersuites(c, "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256:"
							 "TLS_AES_256_GCM_SHA384") != 1) {
			snprintf(err, errlen, "cannot set the TLS 1.3 cipher suites");
			rc = -EINVAL;
		}
		/* TLS 1.2 names the PSK identity only after the suite is chosen:
		 * a client offering PSK suites has a key, so those come first
		 * (an OpenSSL client offers certificate suites too, and one of
		 * those would ask it for a certificate it does not have); no
		 * RSA-PSK, whose handshake asks for a certificate as well.  A
		 * PSK handshake thus never asks for one, and tls_verify_peer's
		 * SSL_VERIFY_FAIL_IF_NO_PEER_CERT holds for the others only. */
		if (!rc && SSL_CTX_set_cipher_list(c, "DEFAULT:!kRSAPSK:+aRSA:+aECDSA") != 1) {
			snprintf(err, errlen, "cannot set the TLS 1.2 cipher suites");
			rc = -EINVAL;
		}
		if (!rc) {
			SSL_CTX_set_psk_server_callback(c, psk_server_cb);
			SSL_CTX_set_psk_find_session_callback(c, psk_find_session_cb);
		}
	}
	if (rc) {
		SSL_CTX_free(c); /* and its PSK table */
		return rc;
	}
	*out = c;
	return 0;
}


/* Add path's name and contents (or that it cannot be read) to md. */
static void digest_file(EVP_MD_CTX *md, const char *path)
{
	unsigned char buf[4096];
	size_t n;
	EVP_DigestUpdate(md, path, strlen(path) + 1);
	FILE *f = fopen(path, "r");
	if (!f) {
		EVP_DigestUpdate(md, "-", 1);
		return;
	}
	while ((n = fread(buf, 1, sizeof buf, f)) > 0)
		EVP_DigestUpdate(md, buf, n);
	fclose(f);
	OPENSSL_cleanse(buf, sizeof buf);
}

/* SHA-256 of the key files' names and contents (zeros if it cannot be made). */
static void keys_digest_of(const char *certs, const char *psk, unsigned char *out)
{
	static const char *const names[] = { "server-cert.pem", "server-key.pem", "ca-cert.pem",
					     "ca-crl.pem" };
	char path[4200];
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	memset(out, 0, EVP_MAX_MD_SIZE);
	if (!md || !EVP_DigestInit_ex(md, EVP_sha256(), NULL)) {
		EVP_MD_CTX_free(md);
		return;
	}
	for (size_t i = 0; certs && i < sizeof names / sizeof *names; i++) {
		snprintf(path, sizeof path, "%s/%s", certs, names[i]);
		digest_file(md, path);
	}
	EVP_DigestUpdate(md, "|", 1);
	if (psk)
		digest_file(md, psk);
	EVP_DigestFinal_ex(md, out, NULL);
	EVP_MD_CTX_free(md);
}

/*
 * Check the TLS keys and make the context.  Every mode that can run TLS
 * needs certificates or a PSK file; keys given without any mode using them
 * are still loaded (and checked).  Nothing is made when TLS is off
 * everywhere and no keys are given.
 */
int tls_init(struct server_cfg *cfg, char *err, size_t errlen)
{
	bool wants = cfg->tls > TLS_OFF || cfg->unix_tls > TLS_OFF;
	for (int i = 0; i < cfg->nlisten; i++) {
		char addr[300];
		int mode;
		if (listen_split(cfg->listen[i], addr, sizeof addr, &mode, err, errlen))
			return -EINVAL;
		wants |= mode > TLS_OFF;
	}
	for (int i = 0; i < cfg->ndimms; i++)
		wants |= cfg->dimms[i].tls == TLS_REQUIRED;
	bool keys = cfg->tls_certificates || cfg->tls_psk;
	if (wants && !keys) {
		snprintf(err, errlen, "TLS is enabled (tls = allowed or required) but there are no keys: "
			 "give tls_certificates = DIR (server-cert.pem, server-key.pem, ca-cert.pem) or "
			 "tls_psk = FILE (identity:hexkey lines)");
		return -EINVAL;
	}
	if (cfg->tls_verify_peer > 0 && !cfg->tls_certificates) {
		snprintf(err, errlen, "tls_verify_peer = yes needs tls_certificates = DIR with ca-cert.pem");
		return -EINVAL;
	}
	if (!keys)
		return 0;
	SSL_CTX *c = NULL;
	int rc = make_ctx(cfg->tls_certificates, cfg->tls_certificates_where, cfg->tls_psk,
			  cfg->tls_psk_where, cfg->tls_verify_peer, &c, err, errlen);
	if (rc)
		return rc;
	ctx = c;
	keys_digest_of(cfg->tls_certificates, cfg->tls_psk, keys_digest);
	return 0;
}

/*
 * Main thread.  See the top of the file.  n is the configuration read again;
 * its key files (tls_certificates, tls_psk) are compared, by name and
 * contents, with those of the running context.  1: replaced (new
 * handshakes use them), 0: unchanged, or -errno with err set: the running
 * keys stay.  Changing tls_verify_peer needs a restart: verify_peer is the
 * running value.
 */
int tls_reload(const struct server_cfg *n, int verify_peer, char *err, size_t errlen)
{
	unsigned char d[EVP_MAX_MD_SIZE];
	if (!ctx && !n->tls_certificates && !n->tls_psk)
		return 0;
	if (!n->tls_certificates && !n->tls_psk) {
		snprintf(err, errlen, "no tls_certificates or tls_psk any more: TLS stays on with the "
			 "running keys until a restart");
		return -EINVAL;
	}
	if (n->tls_verify_peer > 0 && !n->tls_certificates) {
		snprintf(err, errlen, "tls_verify_peer = yes needs tls_certificates = DIR with ca-cert.pem");
		return -EINVAL;
	}
	keys_digest_of(n->tls_certificates, n->tls_psk, d);
	if (ctx && !memcmp(d, keys_digest, sizeof d))
		return 0;
	SSL_CTX *c = NULL;
	int rc = make_ctx(n->tls_certificates, n->tls_certificates_where, n->tls_psk,
			  n->tls_psk_where, verify_peer, &c, err, errlen);
	if (rc)
		return rc;
	if (ctx)
		SSL_CTX_free(ctx); /* sessions made from it hold their own reference */
	ctx = c;
	memcpy(keys_digest, d, sizeof d);
	return 1;
}

SSL *tls_session_new(struct tls_note *note)
{
	if (!ctx)
		return NULL;
	SSL *ssl = SSL_new(ctx);
	if (ssl)
		SSL_set_app_data(ssl, note);
	return ssl;
}

void tls_describe(SSL *ssl, const struct tls_note *note, char *buf, size_t len)
{
	char peer[200] = "";
	X509 *cert = SSL_get0_peer_certificate(ssl);
	if (note && note->psk_identity[0]) {
		snprintf(peer, sizeof peer, ", PSK identity '%s'", note->psk_identity);
	} else if (cert) {
		char subj[160];
		X509_NAME_oneline(X509_get_subject_name(cert), subj, sizeof subj);
		snprintf(peer, sizeof peer, ", client certificate %s", subj);
	}
	snprintf(buf, len, "%s, %s%s", SSL_get_version(ssl), SSL_get_cipher_name(ssl), peer);
}

/* Why an SSL call returned ret (after SSL_get_error says it failed). */
void tls_last_error(SSL *ssl, int ret, char *buf, size_t len)
{
	int e = SSL_get_error(ssl, ret);
	char q[512];
	ssl_errors(q, sizeof q);
	if (q[0])
		snprintf(buf, len, "TLS error: %s", q);
	else if (e == SSL_ERROR_SYSCALL)
		snprintf(buf, len, "TLS: %s", errno ? strerror(errno) : "connection closed");
	else
		snprintf(buf, len, "TLS error %d", e);
}

void tls_close(SSL *ssl, bool notify)
{
	if (!ssl)
		return;
	if (notify) {
		ERR_clear_error();
		SSL_shutdown(ssl); /* sends close_notify if the socket takes it */
	}
	ERR_clear_error();
	SSL_free(ssl);
}

void tls_exit(void)
{
	if (ctx)
		SSL_CTX_free(ctx);
	ctx = NULL;
}
