/*
 * server/ctl.c - the control socket: HTTP (libevent's evhttp) on a unix
 * socket, for `flashctl status` and monitoring.
 *
 *   GET /v1/status            JSON: the server and every ioDimm, with live
 *                             statistics (like the vendor's fio-status -a)
 *   GET /v1/status?format=text  the same as text
 * The socket is created with mode 0660; whoever can open it can read the
 * status.  Nothing here changes state.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "server/flashd.h"

static void json_str(struct evbuffer *b, const char *s)
{
	evbuffer_add(b, "\"", 1);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			evbuffer_add_printf(b, "\\%c", ch);
		else if (ch < 0x20)
			evbuffer_add_printf(b, "\\u%04x", ch);
		else
			evbuffer_add(b, s, 1);
	}
	evbuffer_add(b, "\"", 1);
}

#define U(name, v) evbuffer_add_printf(b, "%s\"" name "\": %llu", sep, (unsigned long long)(v)), sep = ", "
#define D(name, v) evbuffer_add_printf(b, "%s\"" name "\": %.4f", sep, (double)(v)), sep = ", "

static void json_stats(struct evbuffer *b, const struct ftl_stats *s)
{
	const char *sep = "";
	evbuffer_add_printf(b, "{");
	U("host_read_bytes", s->host_read_bytes);
	U("host_write_bytes", s->host_write_bytes);
	U("host_bytes_trimmed", s->host_trim_bytes);
	U("host_bytes_zeroed", s->host_zero_bytes);
	U("host_read_ops", s->host_read_ops);
	U("host_write_ops", s->host_write_ops);
	U("host_flush_ops", s->host_flush_ops);
	U("host_trim_ops", s->host_trim_ops);
	U("host_zero_ops", s->host_zero_ops);
	U("host_pages_written", s->host_pages_written);
	U("host_pages_read", s->host_pages_read);
	U("nand_pages_programmed", s->nand_pages_programmed);
	U("nand_pages_read", s->nand_pages_read);
	U("nand_spare_reads", s->nand_spare_reads);
	U("blocks_erased", s->blocks_erased);
	U("gc_pages_relocated", s->gc_pages_relocated);
	U("gc_blocks_collected", s->gc_blocks_collected);
	U("meta_pages_programmed", s->meta_pages_programmed);
	U("checkpoints", s->checkpoints);
	D("write_amplification", s->write_amplification);
	U("read_errors_corrected", s->read_errors_corrected);
	U("read_errors_uncorrectable", s->read_errors_uncorrectable);
	U("crc_errors", s->crc_errors);
	U("program_failures", s->program_failures);
	U("erase_failures", s->erase_failures);
	U("lost_units", s->lost_units);
	U("blocks_total", s->blocks_total);
	U("blocks_free", s->blocks_free);
	U("blocks_data", s->blocks_data);
	U("blocks_bad", s->blocks_bad);
	U("blocks_bad_grown", s->blocks_bad_grown);
	U("blocks_meta", s->blocks_meta);
	U("valid_pages", s->valid_pages);
	U("erase_count_min", s->erase_min);
	D("erase_count_avg", s->erase_avg);
	U("erase_count_max", s->erase_max);
	U("rated_pe_cycles", s->rated_pe_cycles);
	D("reserve_percent", s->reserve_percent);
	U("l2p_bytes", s->l2p_bytes);
	U("ram_bytes", s->ram_bytes);
	evbuffer_add_printf(b, "}");
}

static void status_json(struct server *srv, struct evbuffer *b)
{
	evbuffer_add_printf(b, "{\"version\": \"%s\", \"pid\": %d, \"uptime_seconds\": %lld, ",
			    FLASHD_VERSION, (int)getpid(), (long long)(time(NULL) - srv->started));
	evbuffer_add_printf(b, "\"config\": ");
	json_str(b, srv->cfg.config_file ? srv->cfg.config_file : "(embedded default)");
	evbuffer_add_printf(b, ", \"state_dir\": ");
	json_str(b, srv->cfg.state_dir);
	evbuffer_add_printf(b, ", \"listen\": [");
	for (int i = 0; i < srv->cfg.nlisten; i++) {
		if (i)
			evbuffer_add_printf(b, ", ");
		json_str(b, srv->cfg.listen[i]);
	}
	evbuffer_add_printf(b, "], \"unix\": ");
	json_str(b, srv->cfg.unix_path ? srv->cfg.unix_path : "");
	pthread_mutex_lock(&srv->lock);
	int nconns = srv->nconns;
	pthread_mutex_unlock(&srv->lock);
	evbuffer_add_printf(b, ", \"connections\": %d, \"dimms\": [", nconns);
	for (int i = 0; i < srv->ndimms; i++) {
		struct dimm *d = &srv->dimms[i];
		struct dimm_status st;
		dimm_get_status(d, &st);
		if (i)
			evbuffer_add_printf(b, ", ");
		evbuffer_add_printf(b, "{\"name\": ");
		json_str(b, st.name);
		evbuffer_add_printf(b, ", \"export\": ");
		json_str(b, st.export_name);
		evbuffer_add_printf(b, ", \"preset\": ");
		json_str(b, st.preset);
		evbuffer_add_printf(b, ", \"image\": ");
		json_str(b, st.image);
		evbuffer_add_printf(b, ", \"state\": ");
		json_str(b, st.state);
		if (d->open_error) {
			evbuffer_add_printf(b, ", \"error\": ");
			json_str(b, d->open_errmsg);
		} else if (st.attached && st.info.error) {
			evbuffer_add_printf(b, ", \"error\": ");
			json_str(b, strerror(-st.info.error));
		}
		evbuffer_add_printf(b, ", \"attached\": %s, \"readonly\": %s, \"timing\": %s, "
				       "\"connections\": %u, \"total_connections\": %llu",
				    st.attached ? "true" : "false", st.readonly ? "true" : "false",
				    st.timing ? "true" : "false", st.connections,
				    (unsigned long long)st.total_connections);
		if (st.attached) {
			const struct ftl_info *fi = &st.info;
			evbuffer_add_printf(b, ", \"format\": {\"sector_size\": %u, \"sectors\": %llu, "
					       "\"capacity_bytes\": %llu, \"raw_bytes\": %llu, "
					       "\"op_percent\": %.2f, \"format_id\": \"%016llx\", "
					       "\"format_time\": %llu, \"last_close_clean\": %s, "
					       "\"recovered_pages\": %llu, \"open_seconds\": %.3f}",
					    fi->sector_size,
					    (unsigned long long)(fi->capacity / fi->sector_size),
					    (unsigned long long)fi->capacity,
					    (unsigned long long)fi->raw_bytes, fi->op_percent,
					    (unsigned long long)fi->format_id,
					    (unsigned long long)fi->format_time,
					    fi->was_clean ? "true" : "false",
					    (unsigned long long)fi->recovered_pages,
					    (double)fi->open_ns / 1e9);
			evbuffer_add_printf(b, ", \"checkpoint_damaged\": %s, \"notes\": ",
					    fi->checkpoint_damaged ? "true" : "false");
			json_str(b, fi->notes);
			evbuffer_add_printf(b, ", \"stats\": ");
			json_stats(b, &st.stats);
		}
		evbuffer_add_printf(b, "}");
	}
	evbuffer_add_printf(b, "]}\n");
}

static void gib(char *buf, size_t n, double bytes)
{
	if (bytes >= 1e12)
		snprintf(buf, n, "%.2f TB", bytes / 1e12);
	else if (bytes >= 1e9)
		snprintf(buf, n, "%.2f GB", bytes / 1e9);
	else
		snprintf(buf, n, "%.2f MB", bytes / 1e6);
}

/* Text in the manner of the vendor's fio-status -a. */
static void status_text(struct server *srv, struct evbuffer *b)
{
	pthread_mutex_lock(&srv->lock);
	int nconns = srv->nconns;
	pthread_mutex_unlock(&srv->lock);
	evbuffer_add_printf(b, "flashd %s, pid %d, up %lld s, %d connection(s)\n", FLASHD_VERSION,
			    (int)getpid(), (long long)(time(NULL) - srv->started), nconns);
	for (int i = 0; i < srv->ndimms; i++) {
		struct dimm *d = &srv->dimms[i];
		struct dimm_status st;
		dimm_get_status(d, &st);
		evbuffer_add_printf(b, "\n%s: simulated ioDimm, preset %s, export '%s'\n", st.name,
				    st.preset, st.export_name);
		evbuffer_add_printf(b, "    Image: %s\n", st.image);
		if (!st.attached) {
			evbuffer_add_printf(b, "    State: %s%s%s\n", st.state,
					    d->open_error ? ": " : "", d->open_error ? d->open_errmsg : "");
			continue;
		}
		const struct ftl_info *fi = &st.info;
		const struct ftl_stats *s = &st.stats;
		char cap[32], w[32], r[32], pw[32];
		gib(cap, sizeof cap, (double)fi->capacity);
		evbuffer_add_printf(b, "    State: %s%s%s, %s%s, %u connection(s)\n", st.state,
				    fi->error ? ": " : "", fi->error ? strerror(-fi->error) : "",
				    st.readonly ? "read-only" : "attached",
				    st.timing ? ", NAND timing model on" : "", st.connections);
		if (fi->notes[0])
			evbuffer_add_printf(b, "    Warning: %s\n", fi->notes);
		evbuffer_add_printf(b, "    Format: %llu sectors of %u bytes (%s), %.1f%% over-provisioning\n",
				    (unsigned long long)(fi->capacity / fi->sector_size), fi->sector_size,
				    cap, fi->op_percent);
		evbuffer_add_printf(b, "    Last shutdown: %s; opened in %.2f s\n",
				    fi->was_clean ? "clean" : "unclean (recovered from the log)",
				    (double)fi->open_ns / 1e9);
		evbuffer_add_printf(b, "    Powerloss protection: protected (flush and FUA are durable)\n");
		evbuffer_add_printf(b, "    Reserve space status: %s; Reserves: %.2f%%, warn at 10.00%%\n",
				    s->reserve_percent >= 10 ? "Healthy" : "Low", s->reserve_percent);
		double used = s->rated_pe_cycles ? 100.0 * s->erase_avg / s->rated_pe_cycles : 0;
		evbuffer_add_printf(b, "    Rated endurance: %u P/E cycles; used %.2f%% (erase counts min/avg/max %u/%.1f/%u)\n",
				    s->rated_pe_cycles, used, s->erase_min, s->erase_avg, s->erase_max);
		gib(w, sizeof w, (double)s->host_write_bytes);
		gib(r, sizeof r, (double)s->host_read_bytes);
		gib(pw, sizeof pw, (double)s->nand_pages_programmed * 4096.0);
		evbuffer_add_printf(b, "    Host bytes written: %s, read: %s; physical bytes written: %s (write amplification %.2f)\n",
				    w, r, pw, s->write_amplification);
		evbuffer_add_printf(b, "    Blocks: %llu total, %llu free, %llu data, %llu bad (%llu grown)\n",
				    (unsigned long long)s->blocks_total, (unsigned long long)s->blocks_free,
				    (unsigned long long)s->blocks_data, (unsigned long long)s->blocks_bad,
				    (unsigned long long)s->blocks_bad_grown);
		evbuffer_add_printf(b, "    Media errors: %llu corrected, %llu uncorrectable (%llu failed the data CRC), %llu units lost, %llu program and %llu erase failures\n",
				    (unsigned long long)s->read_errors_corrected,
				    (unsigned long long)s->read_errors_uncorrectable,
				    (unsigned long long)s->crc_errors,
				    (unsigned long long)s->lost_units,
				    (unsigned long long)s->program_failures,
				    (unsigned long long)s->erase_failures);
		evbuffer_add_printf(b, "    RAM usage: %.1f MiB (map %.1f MiB)\n",
				    (double)s->ram_bytes / (1 << 20), (double)s->l2p_bytes / (1 << 20));
	}
}

static void status_cb(struct evhttp_request *req, void *arg)
{
	struct server *srv = arg;
	if (evhttp_request_get_command(req) != EVHTTP_REQ_GET) {
		evhttp_send_error(req, 405, "only GET");
		return;
	}
	struct evkeyvalq q;
	const char *uri = evhttp_request_get_uri(req);
	struct evhttp_uri *u = evhttp_uri_parse(uri);
	bool text = false;
	if (u && evhttp_uri_get_query(u)) {
		evhttp_parse_query_str(evhttp_uri_get_query(u), &q);
		const char *fmt = evhttp_find_header(&q, "format");
		text = fmt && !strcmp(fmt, "text");
		evhttp_clear_headers(&q);
	}
	if (u)
		evhttp_uri_free(u);
	struct evbuffer *b = evbuffer_new();
	if (text)
		status_text(srv, b);
	else
		status_json(srv, b);
	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
			  text ? "text/plain; charset=utf-8" : "application/json");
	evhttp_send_reply(req, 200, "OK", b);
	evbuffer_free(b);
}

static void notfound_cb(struct evhttp_request *req, void *arg)
{
	evhttp_send_error(req, 404, "unknown path (try /v1/status)");
}

int ctl_start(struct server *srv, char *err, size_t errlen)
{
	const char *path = srv->cfg.control_path;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof sa.sun_path) {
		snprintf(err, errlen, "control socket path too long: %s", path);
		return -ENAMETOOLONG;
	}
	strcpy(sa.sun_path, path);
	struct stat st;
	if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
		unlink(path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 16) < 0) {
		int e = errno;
		snprintf(err, errlen, "control socket %s: %s", path, strerror(e));
		if (fd >= 0)
			close(fd);
		return -e;
	}
	chmod(path, 0660);
	srv->ctl = evhttp_new(srv->base);
	struct evhttp_bound_socket *bs = srv->ctl ? evhttp_accept_socket_with_handle(srv->ctl, fd) : NULL;
	if (!bs) {
		snprintf(err, errlen, "control socket: evhttp failed");
		close(fd);
		return -ENOMEM;
	}
	/* out of descriptors, evhttp's listener would retry accept at once,
	 * forever: give it the NBD listeners' back-off */
	char name[300];
	snprintf(name, sizeof name, "control socket %s", path);
	srv->ctl_listener = listener_watch(srv, evhttp_bound_socket_get_listener(bs), name, false);
	if (!srv->ctl_listener) {
		snprintf(err, errlen, "control socket: out of memory");
		return -ENOMEM;
	}
	evhttp_set_cb(srv->ctl, "/v1/status", status_cb, srv);
	evhttp_set_gencb(srv->ctl, notfound_cb, srv);
	evhttp_set_timeout(srv->ctl, 10);
	return 0;
}

void ctl_stop(struct server *srv)
{
	if (srv->ctl_listener) {
		listener_close(srv->ctl_listener);
		srv->ctl_listener = NULL;
	}
	if (srv->ctl) {
		evhttp_free(srv->ctl);
		srv->ctl = NULL;
		unlink(srv->cfg.control_path);
	}
}
