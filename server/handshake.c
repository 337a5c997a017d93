/*
 * server/handshake.c - NBD fixed-newstyle option haggling (main thread).
 *
 * One struct hs per connection, driven by a bufferevent: greeting, client
 * flags, then options one at a time until NBD_OPT_GO or
 * NBD_OPT_EXPORT_NAME picks an export; the socket then goes to that
 * ioDimm's thread with whatever bytes were read past the handshake.
 * Block sizes: NBD_INFO_BLOCK_SIZE is sent to every INFO and GO, asked for
 * or not; a client is bound by it only if its final NBD_OPT_GO asked for
 * it (doc/proto.md, "Block size constraints": INFO with the request only
 * learns the constraints, GO with it commits to them).  Clients that
 * commit keep the advertised minimum and maximum; the others (GO without
 * the request, NBD_OPT_EXPORT_NAME) get the spec's defaults: any byte
 * alignment, and READ/WRITE up to MAX_PAYLOAD_ANY (struct handoff).
 * Limits (a client that is not yet authorised may cost only these):
 *   - an option's data is at most OPT_MAX bytes (larger ones up to
 *     OPT_DISCARD_MAX are read and discarded as they arrive, then refused
 *     with NBD_REP_ERR_TOO_BIG; anything larger is a hard disconnect);
 *   - at most MAX_OPTIONS options per connection: the one over it is
 *     answered NBD_REP_ERR_TOO_BIG (NBD_OPT_ABORT: acknowledged;
 *     NBD_OPT_EXPORT_NAME, which has no option reply: not answered) and
 *     the connection closes once that reply is sent (no client needs more
 *     than a handful);
 *   - input: the bufferevent stops reading the socket while HS_IN_MAX bytes
 *     wait (>= one whole option and its header, so parsing always
 *     progresses); output: no new option is parsed while more than
 *     HS_OUT_MAX bytes of replies wait to be sent (a client that floods
 *     options and never reads the replies is paused, write_cb resumes it
 *     once they are sent).  So a connection in handshake holds at most
 *     HS_IN_MAX + HS_OUT_MAX + one option's replies;
 *   - the whole handshake must finish within handshake_timeout seconds;
 *     while its budget is full, one that has lasted HS_GRACE_S may be
 *     closed to make room for a newcomer (handshake_evict: one that has
 *     sent no option first);
 *   - nothing is allocated from what the client sends beyond the bounded
 *     buffers (SET_META_CONTEXT remembers the export, not the name), and
 *     no FTL is touched before the socket is handed to its ioDimm.
 * TLS (doc/proto.md, "TLS support"; keys in server/tls.c): the listener's
 * mode is NOTLS (off: STARTTLS is refused), SELECTIVETLS (allowed: STARTTLS
 * is offered; INFO and GO on an export with tls = required get
 * NBD_REP_ERR_TLS_REQD until TLS is up, LIST/SET_META_CONTEXT on one
 * NBD_REP_ERR_POLICY (the spec keeps TLS_REQD for INFO, GO and
 * EXPORT_NAME), EXPORT_NAME on one closes, LIST hides them) or FORCEDTLS (required: every option but STARTTLS and ABORT
 * gets NBD_REP_ERR_TLS_REQD, its data read first so the stream stays in
 * sync; EXPORT_NAME closes).  STARTTLS is answered with an ACK in
 * plaintext; once that is sent, the plain bufferevent is replaced by an
 * OpenSSL one on the same socket (a client that sent anything after the
 * STARTTLS is closed on), and everything negotiated before is forgotten
 * (structured replies, meta contexts).  A failed TLS handshake logs one
 * line and closes that connection.  The SSL session goes with the socket
 * to the ioDimm thread (struct handoff), with the plaintext already
 * decrypted past the handshake as leftover.
 * Access control (common/acl.h; [dimm] allow, allow_ro): decided for each
 * NBD_OPT_INFO, NBD_OPT_GO, NBD_OPT_EXPORT_NAME and LIST/SET_META_CONTEXT
 * (client_export, which also resolves the empty name: [server]
 * default_export, refused while not served) from the peer's address
 * (IPv4-mapped IPv6 taken as IPv4; unix socket clients are "unix") and the
 * identities the TLS session proved: its PSK identity, or the subject CNs
 * and subjectAltNames of a client certificate the CA verified (only with
 * tls_verify_peer; after STARTTLS, so they count from then on).  A client
 * the rules refuse gets NBD_REP_ERR_POLICY (EXPORT_NAME: the connection
 * closes) and a warning in the log; one an allow_ro entry admits gets the
 * export read-only (NBD_FLAG_READ_ONLY; writes EPERM, struct handoff).
 * NBD_OPT_LIST shows only exports the client may use, unless the export
 * has list_denied = yes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "server/flashd.h"
#include "server/nbd_proto.h"

#define OPT_MAX (16u << 10)          /* > 4096-byte names plus queries */
#define OPT_DISCARD_MAX (1u << 20)
#define MAX_OPTIONS 32
#define HS_IN_MAX (2 * OPT_MAX)
#define HS_OUT_MAX (64u << 10)
_Static_assert(HS_IN_MAX >= OPT_MAX + 16, "a whole option must fit the input");
#define META_ALLOCATION_ID 1
#define ACL_MAX_IDS 32            /* identities kept of a client certificate */

enum hs_state {
	HS_CLIENT_FLAGS,
	HS_OPT_HEADER,
	HS_OPT_DATA,
	HS_DISCARD,       /* reading and dropping an oversized option */
	HS_CLOSING,       /* close once the output is sent */
	HS_HANDOFF,       /* hand over once the output is sent */
	HS_STARTTLS,      /* start TLS once the ACK is sent */
	HS_TLS_HANDSHAKE, /* TLS handshake under way */
};

struct hs {
	struct server *srv;
	struct bufferevent *bev;
	struct event *timeout;
	int fd;
	char peer[96];
	enum hs_state state;
	bool no_zeroes;
	bool structured;
	uint32_t opt, optlen;
	uint32_t nopts;           /* options received (MAX_OPTIONS) */
	uint64_t start_ns;        /* accepted (CLOCK_MONOTONIC; handshake_evict) */
	bool out_paused;          /* reading stopped until the replies are sent */
	struct conn_slot slot;
	uint64_t discard_left;
	struct dimm *meta_export; /* export named by the last SET_META_CONTEXT */
	bool meta_allocation;
	struct dimm *target;
	uint16_t tflags;
	bool block_size;          /* the GO that picked target asked for NBD_INFO_BLOCK_SIZE */
	const char *close_reason;
	char close_msg[600];      /* a close_reason made for this connection */
	int tls_mode;             /* the listener's: enum tls_mode */
	SSL *ssl;                 /* after STARTTLS */
	bool tls;                 /* TLS is up */
	struct tls_note note;
	struct acl_peer who;      /* address and proven identities (common/acl.h) */
	struct acl_id ids[ACL_MAX_IDS];
	bool readonly;            /* the target is read-only for this client (allow_ro) */
	LIST_ENTRY(hs) link;       /* in server.handshakes */
};

static void ids_clear(struct hs *h)
{
	for (int i = 0; i < h->who.nids; i++)
		free((char *)h->ids[i].name);
	h->who.nids = 0;
	h->who.tls = false;
}

static void ids_add(struct hs *h, enum acl_id_kind kind, const char *name, size_t len)
{
	if (h->who.nids >= ACL_MAX_IDS || !len || len > ACL_NAME_MAX || memchr(name, 0, len))
		return; /* an embedded NUL: never a match (no CN=alice\0.evil) */
	char *p = strndup(name, len);
	if (p)
		h->ids[h->who.nids++] = (struct acl_id){ kind, p };
}

/* TLS is up: what identities did the session prove? */
static void ids_collect(struct hs *h)
{
	ids_clear(h);
	h->who.tls = true;
	h->who.ids = h->ids;
	if (h->note.psk_identity[0])
		ids_add(h, ACL_ID_PSK, h->note.psk_identity, strlen(h->note.psk_identity));
	X509 *cert = SSL_get0_peer_certificate(h->ssl);
	if (!cert || SSL_get_verify_result(h->ssl) != X509_V_OK ||
	    !(SSL_get_verify_mode(h->ssl) & SSL_VERIFY_PEER))
		return; /* an unverified certificate proves nothing */
	X509_NAME *subj = X509_get_subject_name(cert);
	for (int i = -1; (i = X509_NAME_get_index_by_NID(subj, NID_commonName, i)) >= 0;) {
		ASN1_STRING *a = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subj, i));
		unsigned char *u = NULL;
		int n = ASN1_STRING_to_UTF8(&u, a);
		if (n > 0)
			ids_add(h, ACL_ID_CN, (const char *)u, (size_t)n);
		OPENSSL_free(u);
	}
	GENERAL_NAMES *sans = X509_get_ext_d2i(cert, NID_subject_alt_name, NULL, NULL);
	for (int i = 0; sans && i < sk_GENERAL_NAME_num(sans); i++) {
		GENERAL_NAME *g = sk_GENERAL_NAME_value(sans, i);
		if (g->type == GEN_DNS || g->type == GEN_EMAIL || g->type == GEN_URI) {
			ASN1_IA5STRING *a = g->d.ia5;
			ids_add(h, ACL_ID_SAN, (const char *)ASN1_STRING_get0_data(a),
				(size_t)ASN1_STRING_length(a));
		} else if (g->type == GEN_IPADD) {
			char txt[INET6_ADDRSTRLEN];
			int l = ASN1_STRING_length(g->d.ip);
			if ((l == 4 || l == 16) &&
			    inet_ntop(l == 4 ? AF_INET : AF_INET6, ASN1_STRING_get0_data(g->d.ip), txt,
				      sizeof txt))
				ids_add(h, ACL_ID_SAN, txt, strlen(txt));
		}
	}
	GENERAL_NAMES_free(sans);
}

static void hs_free(struct hs *h, bool close_fd)
{
	struct server *srv = h->srv;
	LIST_REMOVE(h, link);
	if (h->timeout)
		event_free(h->timeout);
	if (h->bev) {
		/* take the events off the fd now: the free itself may be
		 * deferred (callbacks pending) past the close below, and a
		 * late epoll change would hit a closed or reused fd */
		bufferevent_disable(h->bev, EV_READ | EV_WRITE);
		bufferevent_free(h->bev);
	}
	if (close_fd) {
		tls_close(h->ssl, h->tls);
		close(h->fd);
		server_conn_closed(srv, &h->slot);
	}
	ids_clear(h);
	free(h);
}

static void hs_close(struct hs *h, const char *why)
{
	log_info("%s: closed during handshake: %s", h->peer, why);
	hs_free(h, true);
}

/* ---- replies ------------------------------------------------------------ */

static void reply(struct hs *h, uint32_t type, const void *data, uint32_t len)
{
	uint8_t hdr[20];
	put64(hdr, NBD_REP_MAGIC);
	put32(hdr + 8, h->opt);
	put32(hdr + 12, type);
	put32(hdr + 16, len);
	struct evbuffer *out = bufferevent_get_output(h->bev);
	evbuffer_add(out, hdr, sizeof hdr);
	if (len)
		evbuffer_add(out, data, len);
}

static void reply_err(struct hs *h, uint32_t type, const char *msg)
{
	log_debug("%s: option %u refused (0x%08x): %s", h->peer, h->opt, type, msg);
	reply(h, type, msg, (uint32_t)strlen(msg));
}

static void reply_info_export(struct hs *h, struct dimm *d, uint16_t tflags)
{
	uint8_t b[12];
	put16(b, NBD_INFO_EXPORT);
	put64(b + 2, d->size);
	put16(b + 10, tflags);
	reply(h, NBD_REP_INFO, b, sizeof b);
}

static void reply_info_string(struct hs *h, uint16_t type, const char *s)
{
	size_t n = strlen(s);
	uint8_t *b = malloc(2 + n);
	if (!b)
		return;
	put16(b, type);
	memcpy(b + 2, s, n);
	reply(h, NBD_REP_INFO, b, (uint32_t)(2 + n));
	free(b);
}

static void reply_info_block_size(struct hs *h, struct dimm *d)
{
	uint8_t b[14];
	uint64_t max = d->size < MAX_PAYLOAD ? d->size : MAX_PAYLOAD;
	max = max / d->info.sector_size * d->info.sector_size;
	put16(b, NBD_INFO_BLOCK_SIZE);
	put32(b + 2, d->info.sector_size);  /* minimum: the sector */
	put32(b + 6, 4096);                 /* preferred: the mapping unit */
	put32(b + 10, (uint32_t)max);
	reply(h, NBD_REP_INFO, b, sizeof b);
}

/* ---- options ------------------------------------------------------------ */

/*
 * May this session use export d, as far as TLS goes?  0 if so, else the
 * option reply error (NBD_REP_ERR_TLS_REQD or NBD_REP_ERR_POLICY) with msg
 * saying why; what names the export in it ("export 'x'").
 */
static uint32_t export_tls_check(struct hs *h, struct dimm *d, const char *what, char *msg, size_t len)
{
	int need = d->cfg->tls;
	if (need == TLS_REQUIRED && !h->tls) {
		if (h->tls_mode == TLS_OFF) {
			/* NOTLS mode may never say TLS_REQD */
			snprintf(msg, len, "%s is served over TLS only, which this listener does not offer",
				 what);
			return NBD_REP_ERR_POLICY;
		}
		snprintf(msg, len, "%s requires TLS: send NBD_OPT_STARTTLS first", what);
		return NBD_REP_ERR_TLS_REQD;
	}
	if (need == TLS_OFF && h->tls) {
		snprintf(msg, len, "%s is served without TLS only (tls = off)", what);
		return NBD_REP_ERR_POLICY;
	}
	return 0;
}

/* What do export d's rules say about this client? */
static enum acl_verdict export_acl(struct hs *h, struct dimm *d)
{
	return acl_check(&d->cfg->acl, &h->who);
}

/* The client, for a refusal in the log: address and identities. */
static void describe_client(struct hs *h, char *buf, size_t len)
{
	size_t used = (size_t)snprintf(buf, len, "%s", h->peer);
	if (h->who.tls && used < len)
		used += (size_t)snprintf(buf + used, len - used, ", TLS");
	for (int i = 0; i < h->who.nids && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s%s %s", i ? "," : " as",
					 h->ids[i].kind == ACL_ID_PSK ? " PSK identity" :
					 h->ids[i].kind == ACL_ID_CN ? " CN" : " SAN", h->ids[i].name);
	if (h->who.tls && !h->who.nids && used < len)
		snprintf(buf + used, len - used, " without an identity");
}

/* A name that is no export (nl bytes; the empty one without a default
 * export): logged with the client through srv->name_refusals, at most one
 * line per 10 s (a client may try names in a loop; admit.c refusal_log). */
static void log_unknown(struct hs *h, const char *name, uint32_t nl, const char *opt)
{
	char why[400];
	if (nl)
		snprintf(why, sizeof why, "%s refused: no such export '%.*s'", opt, (int)(nl < 256 ? nl : 256),
			 name);
	else
		snprintf(why, sizeof why, "%s refused: the empty name, and no default_export", opt);
	refusal_log(h->srv, &h->srv->name_refusals, h->peer, why);
}

/* A client export d's access rules refuse: logged through
 * srv->denied_refusals, at most one line per 10 s (a client, or many, may
 * retry in a loop; admit.c refusal_log). */
static void log_denied(struct hs *h, struct dimm *d, const char *opt)
{
	char who[300], why[400];
	describe_client(h, who, sizeof who);
	snprintf(why, sizeof why, "%s refused: export '%s' ([dimm %s]) does not allow this client (%s)",
		 opt, d->cfg->export_name, d->cfg->name, who);
	refusal_log(h->srv, &h->srv->denied_refusals, h->peer, why);
}

/* Transmission flags for this client: read-only if its rule says so. */
static uint16_t client_tflags(struct hs *h, struct dimm *d, bool readonly)
{
	uint16_t f = dimm_tflags(d, h->structured);
	if (readonly) {
		f |= NBD_FLAG_READ_ONLY;
		f &= (uint16_t)~(NBD_FLAG_SEND_TRIM | NBD_FLAG_SEND_WRITE_ZEROES | NBD_FLAG_SEND_FAST_ZERO);
	}
	return f;
}

/* Does NBD_OPT_LIST show export d to this client? */
static bool export_listed(struct hs *h, struct dimm *d)
{
	char why[128];
	if (!d->exported || export_tls_check(h, d, "", why, sizeof why))
		return false; /* not for this session (doc/proto.md: MAY omit) */
	return d->cfg->list_denied || export_acl(h, d) != ACL_DENY;
}

/*
 * The export an option names (nl bytes at name; the empty name: [server]
 * default_export), as far as this client may use it.  0 with *out set, or
 * the option reply error with msg saying why, checked in this order: no
 * such export, or no default export (NBD_REP_ERR_UNKNOWN; logged,
 * log_unknown); its TLS mode (export_tls_check); its access rules
 * (NBD_REP_ERR_POLICY; logged as a
 * refusal of opt); not served: detached, failed (NBD_REP_ERR_UNKNOWN).  So
 * a client the rules refuse learns the same of an export served or not,
 * and a message names an export only if the client named it or may use
 * it: the empty name is "the default export" until the rules admit it, and
 * the list of exports offered when there is none holds those NBD_OPT_LIST
 * would show.  A default export that is not served is refused like its own
 * name, never replaced by another ioDimm.  *verdict: the rules' verdict
 * (read-write or read-only) when 0 is returned.  *out may be set on an
 * error too (the export refused), else NULL.
 */
static uint32_t client_export(struct hs *h, const char *name, uint32_t nl, const char *opt,
			      struct dimm **out, enum acl_verdict *verdict, char *msg, size_t len)
{
	struct dimm *d = server_find_export(h->srv, name, nl);
	*out = d;
	if (!d && !nl) {
		size_t used = (size_t)snprintf(msg, len, "no default export: name one");
		int shown = 0;
		for (int i = 0; i < h->srv->ndimms && used < len; i++) {
			struct dimm *e = &h->srv->dimms[i];
			if (export_listed(h, e))
				used += (size_t)snprintf(msg + used, len - used, "%s'%s'", shown++ ? ", " : " (",
							 e->cfg->export_name);
		}
		if (used < len)
			snprintf(msg + used, len - used, "%s", shown ? ")" : " (NBD_OPT_LIST)");
		log_unknown(h, name, nl, opt);
		return NBD_REP_ERR_UNKNOWN;
	}
	if (!d) {
		log_unknown(h, name, nl, opt);
		snprintf(msg, len, "no such export (try NBD_OPT_LIST)");
		return NBD_REP_ERR_UNKNOWN;
	}
	char what[300];
	if (nl)
		snprintf(what, sizeof what, "export '%.*s'", (int)(nl < 256 ? nl : 256), name);
	else
		snprintf(what, sizeof what, "the default export");
	uint32_t refuse = export_tls_check(h, d, what, msg, len);
	if (refuse)
		return refuse;
	*verdict = export_acl(h, d);
	if (*verdict == ACL_DENY) {
		log_denied(h, d, opt);
		snprintf(msg, len, "%s is not available to this client (access rules)%s", what,
			 h->who.tls ? "" : "; a TLS identity may be needed");
		return NBD_REP_ERR_POLICY;
	}
	if (!d->exported) {
		if (!nl)
			snprintf(what, sizeof what, "the default export '%s'", d->cfg->export_name);
		if (d->mstate == DM_FAILED)
			snprintf(msg, len, "%s is not served: ioDimm %s failed to open (flashctl status shows "
				 "why)", what, d->cfg->name);
		else
			snprintf(msg, len, "%s is not served: ioDimm %s is %s (flashctl attach %s)", what,
				 d->cfg->name, dimm_mstate_name(d->mstate), d->cfg->name);
		return NBD_REP_ERR_UNKNOWN;
	}
	return 0;
}

static void opt_list(struct hs *h)
{
	if (h->optlen) {
		reply_err(h, NBD_REP_ERR_INVALID, "NBD_OPT_LIST takes no data");
		return;
	}
	for (int i = 0; i < h->srv->ndimms; i++) {
		struct dimm *d = &h->srv->dimms[i];
		if (!export_listed(h, d))
			continue;
		char desc[256];
		dimm_describe(d, desc, sizeof desc);
		size_t nl = strlen(d->cfg->export_name), dl = strlen(desc);
		uint8_t *b = malloc(4 + nl + dl);
		if (!b)
			continue;
		put32(b, (uint32_t)nl);
		memcpy(b + 4, d->cfg->export_name, nl);
		memcpy(b + 4 + nl, desc, dl);
		reply(h, NBD_REP_SERVER, b, (uint32_t)(4 + nl + dl));
		free(b);
	}
	reply(h, NBD_REP_ACK, NULL, 0);
}

/* NBD_OPT_INFO and NBD_OPT_GO: returns true when GO succeeded. */
static bool opt_info_go(struct hs *h, const uint8_t *p, bool go)
{
	uint32_t len = h->optlen;
	if (len < 6) {
		reply_err(h, NBD_REP_ERR_INVALID, "option data too short");
		return false;
	}
	uint32_t nl = get32(p);
	if (nl > len - 6) {
		reply_err(h, NBD_REP_ERR_INVALID, "export name length exceeds the option");
		return false;
	}
	uint16_t nreq = get16(p + 4 + nl);
	if (len != 4 + nl + 2 + 2u * nreq) {
		reply_err(h, NBD_REP_ERR_INVALID, "option length does not match its information requests");
		return false;
	}
	struct dimm *d;
	enum acl_verdict v;
	char msg[512];
	uint32_t refuse = client_export(h, (const char *)p + 4, nl, go ? "NBD_OPT_GO" : "NBD_OPT_INFO",
					&d, &v, msg, sizeof msg);
	if (refuse) {
		reply_err(h, refuse, msg);
		return false;
	}
	if (h->srv->shutting_down) {
		reply_err(h, NBD_REP_ERR_SHUTDOWN, "the server is shutting down");
		return false;
	}
	bool want_name = false, want_desc = false, want_bs = false;
	for (uint16_t i = 0; i < nreq; i++) {
		uint16_t t = get16(p + 4 + nl + 2 + 2 * i);
		want_name |= t == NBD_INFO_NAME;
		want_desc |= t == NBD_INFO_DESCRIPTION;
		want_bs |= t == NBD_INFO_BLOCK_SIZE;
	}
	uint16_t tflags = client_tflags(h, d, v == ACL_READONLY);
	reply_info_export(h, d, tflags);
	if (want_name)
		reply_info_string(h, NBD_INFO_NAME, d->cfg->export_name);
	if (want_desc) {
		char desc[256];
		dimm_describe(d, desc, sizeof desc);
		reply_info_string(h, NBD_INFO_DESCRIPTION, desc);
	}
	/* always: the preferred sizes help any client; they bind only a
	 * client whose GO asked for them (h->block_size) */
	reply_info_block_size(h, d);
	reply(h, NBD_REP_ACK, NULL, 0);
	if (go) {
		h->target = d;
		h->tflags = tflags;
		h->block_size = want_bs;
		h->readonly = v == ACL_READONLY;
	}
	return go;
}

/*
 * LIST/SET_META_CONTEXT: the only context is base:allocation.  SET selects
 * it for the named export (replacing any earlier selection, even on error).
 * The export is checked as for NBD_OPT_INFO (client_export), before
 * anything else about the option is answered: a client may learn nothing
 * about an export it may not use, and gets the same refusal as INFO and GO
 * would give it, but NBD_REP_ERR_POLICY for TLS_REQD (the spec keeps that
 * for INFO, GO and EXPORT_NAME; FORCEDTLS mode refuses every option before
 * this, handle_option).
 */
static void opt_meta(struct hs *h, const uint8_t *p, bool set)
{
	uint32_t len = h->optlen;
	if (set) {
		h->meta_export = NULL;
		h->meta_allocation = false;
	}
	if (len < 8) {
		reply_err(h, NBD_REP_ERR_INVALID, "option data too short");
		return;
	}
	uint32_t nl = get32(p);
	if (nl > len - 8) {
		reply_err(h, NBD_REP_ERR_INVALID, "export name length exceeds the option");
		return;
	}
	uint32_t nq = get32(p + 4 + nl);
	/* validate every query's framing first */
	uint32_t off = 8 + nl;
	for (uint32_t i = 0; i < nq; i++) {
		if (len - off < 4) {
			reply_err(h, NBD_REP_ERR_INVALID, "query list exceeds the option");
			return;
		}
		uint32_t ql = get32(p + off);
		if (ql > len - off - 4) {
			reply_err(h, NBD_REP_ERR_INVALID, "query length exceeds the option");
			return;
		}
		off += 4 + ql;
	}
	if (off != len) {
		reply_err(h, NBD_REP_ERR_INVALID, "trailing bytes after the queries");
		return;
	}
	struct dimm *d;
	enum acl_verdict v;
	char msg[512];
	uint32_t refuse = client_export(h, (const char *)p + 4, nl,
					set ? "NBD_OPT_SET_META_CONTEXT" : "NBD_OPT_LIST_META_CONTEXT", &d, &v,
					msg, sizeof msg);
	if (refuse) {
		reply_err(h, refuse == NBD_REP_ERR_TLS_REQD ? NBD_REP_ERR_POLICY : refuse, msg);
		return;
	}
	if (!h->structured) {
		reply_err(h, NBD_REP_ERR_INVALID, "negotiate NBD_OPT_STRUCTURED_REPLY first");
		return;
	}
	static const char ctx[] = "base:allocation";
	bool match = !set && nq == 0;
	off = 8 + nl;
	for (uint32_t i = 0; i < nq; i++) {
		uint32_t ql = get32(p + off);
		const char *q = (const char *)p + off + 4;
		off += 4 + ql;
		if (ql == strlen(ctx) && !memcmp(q, ctx, ql))
			match = true;
		else if (!set && ql == 5 && !memcmp(q, "base:", 5))
			match = true; /* wildcard, LIST only */
	}
	if (match) {
		uint8_t b[4 + sizeof ctx - 1];
		put32(b, set ? META_ALLOCATION_ID : 0);
		memcpy(b + 4, ctx, sizeof ctx - 1);
		reply(h, NBD_REP_META_CONTEXT, b, sizeof b);
	}
	if (set && match) {
		h->meta_export = d;
		h->meta_allocation = true;
	}
	reply(h, NBD_REP_ACK, NULL, 0);
}

static void start_transmission(struct hs *h);

static void handle_option(struct hs *h, const uint8_t *p)
{
	log_debug("%s: option %u, %u bytes", h->peer, h->opt, h->optlen);
	if (h->srv->shutting_down && h->opt != NBD_OPT_ABORT) {
		reply_err(h, NBD_REP_ERR_SHUTDOWN, "the server is shutting down");
		return;
	}
	if (h->tls_mode == TLS_REQUIRED && !h->tls && h->opt != NBD_OPT_STARTTLS &&
	    h->opt != NBD_OPT_ABORT) {
		if (h->opt == NBD_OPT_EXPORT_NAME) {
			/* it cannot be answered with an error: close */
			h->state = HS_CLOSING;
			h->close_reason = "NBD_OPT_EXPORT_NAME without TLS on a listener that requires TLS";
			return;
		}
		reply_err(h, NBD_REP_ERR_TLS_REQD, "TLS is required: send NBD_OPT_STARTTLS first");
		return;
	}
	switch (h->opt) {
	case NBD_OPT_EXPORT_NAME: {
		/* no error path in the protocol: a refusal closes the connection */
		struct dimm *d;
		enum acl_verdict v;
		char msg[512];
		if (client_export(h, (const char *)p, h->optlen, "NBD_OPT_EXPORT_NAME", &d, &v, msg,
				  sizeof msg)) {
			snprintf(h->close_msg, sizeof h->close_msg, "NBD_OPT_EXPORT_NAME refused: %s", msg);
			h->state = HS_CLOSING;
			h->close_reason = h->close_msg;
			return;
		}
		h->target = d;
		h->readonly = v == ACL_READONLY;
		h->tflags = client_tflags(h, d, h->readonly);
		h->block_size = false; /* nothing was advertised */
		uint8_t b[10 + 124];
		memset(b, 0, sizeof b);
		put64(b, d->size);
		put16(b + 8, h->tflags);
		evbuffer_add(bufferevent_get_output(h->bev), b, h->no_zeroes ? 10 : sizeof b);
		start_transmission(h);
		return;
	}
	case NBD_OPT_ABORT:
		reply(h, NBD_REP_ACK, NULL, 0);
		h->state = HS_CLOSING;
		h->close_reason = "client sent NBD_OPT_ABORT";
		return;
	case NBD_OPT_LIST:
		opt_list(h);
		return;
	case NBD_OPT_INFO:
		opt_info_go(h, p, false);
		return;
	case NBD_OPT_GO:
		if (opt_info_go(h, p, true))
			start_transmission(h);
		return;
	case NBD_OPT_STRUCTURED_REPLY:
		if (h->optlen) {
			reply_err(h, NBD_REP_ERR_INVALID, "NBD_OPT_STRUCTURED_REPLY takes no data");
			return;
		}
		h->structured = true;
		reply(h, NBD_REP_ACK, NULL, 0);
		return;
	case NBD_OPT_LIST_META_CONTEXT:
		opt_meta(h, p, false);
		return;
	case NBD_OPT_SET_META_CONTEXT:
		opt_meta(h, p, true);
		return;
	case NBD_OPT_STARTTLS:
		if (h->tls) {
			reply_err(h, NBD_REP_ERR_INVALID, "TLS is already negotiated");
			return;
		}
		if (h->tls_mode == TLS_OFF || !tls_available()) {
			if (tls_available())
				reply_err(h, NBD_REP_ERR_POLICY, "TLS is not offered on this listener");
			else
				reply_err(h, NBD_REP_ERR_UNSUP, "TLS is not configured on this server");
			return;
		}
		if (h->optlen) {
			reply_err(h, NBD_REP_ERR_INVALID, "NBD_OPT_STARTTLS takes no data");
			return;
		}
		reply(h, NBD_REP_ACK, NULL, 0);
		h->state = HS_STARTTLS;
		return;
	default:
		reply_err(h, NBD_REP_ERR_UNSUP, "option not supported");
		return;
	}
}

/* ---- state machine ------------------------------------------------------ */

static void read_cb(struct bufferevent *bev, void *arg)
{
	struct hs *h = arg;
	struct evbuffer *in = bufferevent_get_input(bev);

	for (;;) {
		size_t avail = evbuffer_get_length(in);
		switch (h->state) {
		case HS_CLIENT_FLAGS: {
			if (avail < 4)
				return;
			uint8_t b[4];
			evbuffer_remove(in, b, 4);
			uint32_t fl = get32(b);
			if (fl & ~(uint32_t)(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES)) {
				hs_close(h, "unknown client flags");
				return;
			}
			if (!(fl & NBD_FLAG_C_FIXED_NEWSTYLE)) {
				hs_close(h, "client does not speak fixed newstyle");
				return;
			}
			h->no_zeroes = fl & NBD_FLAG_C_NO_ZEROES;
			h->state = HS_OPT_HEADER;
			break;
		}
		case HS_OPT_HEADER: {
			if (evbuffer_get_length(bufferevent_get_output(bev)) > HS_OUT_MAX) {
				/* the client does not read its replies: wait (write_cb) */
				h->out_paused = true;
				bufferevent_disable(bev, EV_READ);
				return;
			}
			if (avail < 16)
				return;
			uint8_t b[16];
			evbuffer_remove(in, b, 16);
			if (get64(b) != NBD_IHAVEOPT) {
				hs_close(h, "bad option magic");
				return;
			}
			h->opt = get32(b + 8);
			h->optlen = get32(b + 12);
			if (++h->nopts > MAX_OPTIONS) {
				/* answered without reading the data: the stream is
				 * out of sync, so the connection ends here.
				 * EXPORT_NAME has no option reply (it can only be
				 * closed on); ABORT is acknowledged as usual. */
				if (h->opt == NBD_OPT_EXPORT_NAME) {
					h->close_reason = "too many options (the last one NBD_OPT_EXPORT_NAME)";
				} else if (h->opt == NBD_OPT_ABORT) {
					reply(h, NBD_REP_ACK, NULL, 0);
					h->close_reason = "client sent NBD_OPT_ABORT";
				} else {
					char msg[80];
					snprintf(msg, sizeof msg, "too many options: the server takes at most "
						 "%d per connection", MAX_OPTIONS);
					reply_err(h, NBD_REP_ERR_TOO_BIG, msg);
					h->close_reason = "too many options";
				}
				h->state = HS_CLOSING;
				bufferevent_disable(bev, EV_READ);
				/* nothing to send (EXPORT_NAME, earlier replies
				 * gone): write_cb will not run */
				if (!evbuffer_get_length(bufferevent_get_output(bev)))
					hs_close(h, h->close_reason);
				return;
			}
			if (h->opt == NBD_OPT_EXPORT_NAME && h->optlen > 4096) {
				hs_close(h, "export name longer than 4096 bytes");
				return;
			}
			if (h->optlen > OPT_DISCARD_MAX) {
				hs_close(h, "option data too large (denial of service?)");
				return;
			}
			if (h->optlen > OPT_MAX) {
				h->discard_left = h->optlen;
				h->state = HS_DISCARD;
			} else {
				h->state = HS_OPT_DATA;
			}
			break;
		}
		case HS_OPT_DATA: {
			if (avail < h->optlen)
				return;
			uint8_t *p = evbuffer_pullup(in, h->optlen);
			handle_option(h, p);
			evbuffer_drain(in, h->optlen);
			if (h->state == HS_OPT_DATA)
				h->state = HS_OPT_HEADER;
			if (h->state == HS_STARTTLS) {
				/* the ACK goes first; write_cb switches to TLS */
				bufferevent_disable(bev, EV_READ);
				return;
			}
			if (h->state == HS_CLOSING || h->state == HS_HANDOFF) {
				bufferevent_disable(bev, EV_READ);
				/* nothing left to send: act now, write_cb will not run */
				if (h->state == HS_CLOSING &&
				    !evbuffer_get_length(bufferevent_get_output(bev)))
					hs_close(h, h->close_reason);
				return;
			}
			break;
		}
		case HS_DISCARD: {
			if (!avail)
				return;
			size_t n = avail < h->discard_left ? avail : (size_t)h->discard_left;
			evbuffer_drain(in, n);
			h->discard_left -= n;
			if (h->discard_left)
				return;
			if (h->tls_mode == TLS_REQUIRED && !h->tls && h->opt != NBD_OPT_ABORT)
				reply_err(h, NBD_REP_ERR_TLS_REQD, "TLS is required: send NBD_OPT_STARTTLS first");
			else
				reply_err(h, NBD_REP_ERR_TOO_BIG, "option data too large");
			h->state = HS_OPT_HEADER;
			break;
		}
		case HS_CLOSING:
		case HS_HANDOFF:
		case HS_STARTTLS:
		case HS_TLS_HANDSHAKE:
			return;
		}
	}
}

static void event_cb(struct bufferevent *bev, short what, void *arg);
static void write_cb(struct bufferevent *bev, void *arg);

/* The STARTTLS ACK is sent: the same socket goes on under TLS. */
static void start_tls(struct hs *h)
{
	if (evbuffer_get_length(bufferevent_get_input(h->bev))) {
		hs_close(h, "client sent data after NBD_OPT_STARTTLS before the TLS handshake");
		return;
	}
	/* (off the fd now: a deferred free must not touch the TLS
	 * bufferevent's registration of the same fd) */
	bufferevent_disable(h->bev, EV_READ | EV_WRITE);
	bufferevent_free(h->bev);
	h->bev = NULL;
	/* everything negotiated before is forgotten (doc/proto.md; the CVEs
	 * of servers that kept it) */
	h->structured = false;
	h->meta_export = NULL;
	h->meta_allocation = false;
	h->note.why[0] = h->note.psk_identity[0] = 0;
	ids_clear(h);
	h->ssl = tls_session_new(&h->note);
	if (h->ssl)
		h->bev = bufferevent_openssl_socket_new(h->srv->base, h->fd, h->ssl,
							BUFFEREVENT_SSL_ACCEPTING, 0);
	if (!h->bev) {
		hs_close(h, "cannot start TLS: out of memory");
		return;
	}
	bufferevent_openssl_set_allow_dirty_shutdown(h->bev, 1);
	bufferevent_setwatermark(h->bev, EV_READ, 0, HS_IN_MAX);
	h->state = HS_TLS_HANDSHAKE;
	bufferevent_setcb(h->bev, read_cb, write_cb, event_cb, h);
	bufferevent_enable(h->bev, EV_READ | EV_WRITE);
}

static void write_cb(struct bufferevent *bev, void *arg)
{
	struct hs *h = arg;
	if (h->state == HS_STARTTLS) {
		start_tls(h);
		return;
	}
	if (h->state == HS_CLOSING) {
		hs_close(h, h->close_reason ? h->close_reason : "closing");
		return;
	}
	if (h->out_paused) {
		/* the replies are sent: parse what waits and read on (read_cb
		 * may free h) */
		h->out_paused = false;
		bufferevent_enable(bev, EV_READ);
		read_cb(bev, h);
		return;
	}
	if (h->state != HS_HANDOFF)
		return;
	/* everything sent: the socket goes to the ioDimm's thread, unless its
	 * export was withdrawn meanwhile (flashd.h, "Attach state") */
	if (!h->target->exported) {
		hs_close(h, "the export was detached during the handshake");
		return;
	}
	struct handoff *ho = calloc(1, sizeof *ho);
	struct evbuffer *in = bufferevent_get_input(bev);
	if (!ho) {
		hs_close(h, "out of memory");
		return;
	}
	ho->nleftover = evbuffer_get_length(in);
	if (ho->nleftover) {
		ho->leftover = malloc(ho->nleftover);
		if (!ho->leftover) {
			free(ho);
			hs_close(h, "out of memory");
			return;
		}
		evbuffer_remove(in, ho->leftover, ho->nleftover);
	}
	ho->fd = h->fd;
	if (h->ssl) {
		/* bytes OpenSSL decrypted but the bufferevent did not take
		 * stay in the session: the ioDimm thread reads them first */
		SSL_set_app_data(h->ssl, NULL);
		ho->ssl = h->ssl;
		h->ssl = NULL;
	}
	ho->structured = h->structured;
	ho->meta_allocation = h->meta_allocation && h->meta_export == h->target;
	server_conn_admitted(h->srv, &h->slot);
	ho->slot = h->slot;
	ho->tflags = h->tflags;
	ho->block_size = h->block_size;
	ho->readonly = h->readonly;
	snprintf(ho->peer, sizeof ho->peer, "%s", h->peer);
	describe_client(h, ho->who, sizeof ho->who);
	struct sockaddr_storage sa;
	socklen_t sl = sizeof sa;
	struct ucred cr;
	socklen_t cl = sizeof cr;
	size_t wl = strlen(ho->who);
	if (getsockname(h->fd, (struct sockaddr *)&sa, &sl) == 0 && sa.ss_family == AF_UNIX &&
	    getsockopt(h->fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0 && wl < sizeof ho->who)
		snprintf(ho->who + wl, sizeof ho->who - wl, " (uid=%u pid=%d)", (unsigned)cr.uid,
			 (int)cr.pid);
	struct dimm *d = h->target;
	log_info("%s: export %s%s%s%s%s%s", h->peer, d->cfg->export_name, ho->ssl ? ", TLS" : "",
		 ho->structured ? ", structured replies" : "",
		 ho->meta_allocation ? ", base:allocation" : "",
		 ho->block_size ? ", block sizes negotiated" : ", no block size constraints",
		 ho->readonly && !d->cfg->readonly ? ", read-only (allow_ro)" : "");
	hs_free(h, false);
	dimm_adopt(d, ho);
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct hs *h = arg;
	if (h->state == HS_TLS_HANDSHAKE) {
		if (what & BEV_EVENT_CONNECTED) {
			h->tls = true;
			h->state = HS_OPT_HEADER;
			ids_collect(h);
			char desc[400];
			tls_describe(h->ssl, &h->note, desc, sizeof desc);
			log_info("%s: TLS established: %s", h->peer, desc);
			return;
		}
		/* one line: what OpenSSL says, and what our callbacks saw */
		char why[768], ssl_err[400] = "";
		size_t used = 0;
		unsigned long errs[8], e;
		int nerr = 0;
		bool real = false;
		while ((e = bufferevent_get_openssl_error(bev)) != 0) {
			if (nerr < 8)
				errs[nerr++] = e;
			real |= e >= 0x100;
		}
		for (int i = 0; i < nerr; i++) {
			char one[256];
			if (real && errs[i] < 0x100)
				continue; /* libevent's SSL_get_error code: OpenSSL said it better */
			tls_error_text(errs[i], one, sizeof one);
			if (used < sizeof ssl_err)
				used += (size_t)snprintf(ssl_err + used, sizeof ssl_err - used, "%s%s",
							 used ? "; " : "", one);
		}
		if (!ssl_err[0])
			snprintf(ssl_err, sizeof ssl_err, "%s",
				 (what & BEV_EVENT_EOF) ? "client closed the connection" :
				 EVUTIL_SOCKET_ERROR() ? strerror(EVUTIL_SOCKET_ERROR()) : "failed");
		snprintf(why, sizeof why, "TLS handshake failed: %s%s%s", ssl_err,
			 h->note.why[0] ? "; " : "", h->note.why);
		log_warn("%s: %s", h->peer, why);
		h->tls = false; /* no close_notify on a failed session */
		hs_free(h, true);
		return;
	}
	if (what & BEV_EVENT_EOF)
		hs_close(h, "client disconnected");
	else if (what & BEV_EVENT_ERROR) {
		unsigned long e = h->ssl ? bufferevent_get_openssl_error(bev) : 0;
		char msg[256];
		if (e)
			tls_error_text(e, msg, sizeof msg);
		else
			snprintf(msg, sizeof msg, "%s", strerror(EVUTIL_SOCKET_ERROR()));
		hs_close(h, msg);
	}
}

static void timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	hs_close(arg, "handshake timed out");
}

static void start_transmission(struct hs *h)
{
	h->state = HS_HANDOFF;
	/* write_cb runs once the output buffer is empty */
	if (evbuffer_get_length(bufferevent_get_output(h->bev)) == 0)
		write_cb(h->bev, h);
}

static uint64_t hs_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Has h sent nothing that counts: no option, not even part of one (bytes
 * read or waiting in the socket's receive buffer count as sent)?  The
 * client flags alone do not count. */
static bool hs_silent(struct hs *h)
{
	int pending = 0;
	return h->nopts == 0 && (h->state == HS_CLIENT_FLAGS || h->state == HS_OPT_HEADER) &&
	       !evbuffer_get_length(bufferevent_get_input(h->bev)) &&
	       ioctl(h->fd, FIONREAD, &pending) == 0 && pending == 0;
}

bool handshake_evict(struct server *srv, bool unix_sock, const uint8_t *addr, uint64_t *wait_ns,
		     char *peer, size_t peerlen)
{
	struct hs *oldest = NULL, *oldest_silent = NULL, *h;
	uint64_t now = hs_now_ns(), grace = (uint64_t)HS_GRACE_S * 1000000000u;
	*wait_ns = 0;
	/* newest first: the last one that fits is the oldest */
	LIST_FOREACH(h, &srv->handshakes, link) {
		if (h->slot.per_addr == unix_sock || !h->slot.handshaking || !h->bev ||
		    (addr && memcmp(h->slot.addr, addr, 16)))
			continue;
		if (now - h->start_ns < grace) {
			*wait_ns = grace - (now - h->start_ns);  /* the first to pass its grace */
			continue;
		}
		oldest = h;
		if (hs_silent(h))
			oldest_silent = h;
	}
	if (!oldest)
		return false;
	h = oldest_silent ? oldest_silent : oldest;
	snprintf(peer, peerlen, "%s", h->peer);
	hs_free(h, true);
	return true;
}

void handshake_start(struct server *srv, int fd, const char *peer, int tls_mode,
		     const struct conn_slot *slot)
{
	struct hs *h = calloc(1, sizeof *h);
	if (!h) {
		close(fd);
		server_conn_closed(srv, slot);
		return;
	}
	h->slot = *slot;
	h->srv = srv;
	h->start_ns = hs_now_ns();
	h->fd = fd;
	h->tls_mode = tls_mode;
	snprintf(h->peer, sizeof h->peer, "%s", peer);
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0)
		acl_peer_from_sockaddr(&h->who, (struct sockaddr *)&ss);
	else
		h->who.family = AF_UNSPEC; /* matches no address entry */
	h->who.ids = h->ids;
	LIST_INSERT_HEAD(&srv->handshakes, h, link);
	h->bev = bufferevent_socket_new(srv->base, fd, 0);
	h->timeout = evtimer_new(srv->base, timeout_cb, h);
	if (!h->bev || !h->timeout) {
		hs_close(h, "out of memory");
		return;
	}
	bufferevent_setcb(h->bev, read_cb, write_cb, event_cb, h);
	bufferevent_setwatermark(h->bev, EV_READ, 0, HS_IN_MAX);
	bufferevent_enable(h->bev, EV_READ | EV_WRITE);
	struct timeval tv = { srv->cfg.handshake_timeout, 0 };
	evtimer_add(h->timeout, &tv);

	uint8_t greet[18];
	put64(greet, NBD_MAGIC);
	put64(greet + 8, NBD_IHAVEOPT);
	put16(greet + 16, NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES);
	bufferevent_write(h->bev, greet, sizeof greet);
	h->state = HS_CLIENT_FLAGS;
	log_debug("%s: connected", peer);
}

/* Shutdown: refuse options from now on; connections still negotiating close. */
void handshake_shutdown_all(struct server *srv)
{
	while (!LIST_EMPTY(&srv->handshakes))
		hs_close(LIST_FIRST(&srv->handshakes), "server shutting down");
}

void handshake_acl_warnings(const struct server_cfg *cfg)
{
	for (int i = 0; i < cfg->nlisten; i++) {
		char addr[300], err[200];
		int mode;
		if (listen_split(cfg->listen[i], addr, sizeof addr, &mode, err, sizeof err))
			continue;
		if (mode < 0)
			mode = cfg->tls;
		if (mode == TLS_REQUIRED || acl_loopback_host(addr))
			continue;
		for (int k = 0; k < cfg->ndimms; k++) {
			const struct dimm_cfg *d = &cfg->dimms[k];
			if (!d->acl.n && d->tls != TLS_REQUIRED)
				log_warn("export '%s' ([dimm %s]) has no allow rule and listener %s is not "
					 "loopback and does not require TLS: every host that reaches it may read "
					 "and write it (set allow = ... in [dimm %s], or tls = required)",
					 d->export_name, d->name, addr, d->name);
		}
	}
}
