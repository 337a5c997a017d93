/*
 * server/conn_tx.c - the send thread of a busy plaintext connection
 * (struct tx, which this file alone knows).  Called by conn_reply.c
 * (tx_take, on each flush), conn.c (tx_busy, tx_stop, tx_sent_ns) and by
 * whatever kills a connection (tx_drop); its own thread runs tx_main.
 *
 * The send thread of a plaintext connection (c->tx), started by the first
 * reply batch of TX_MIN_BYTES or more.  The copy into the socket and the
 * receiver's wake-up (half of the ioDimm thread's time at 1 MiB reads)
 * then run beside the FTL instead of on its thread.  Requests handed over
 * (in) belong to the send thread until it hands them back (out), sent or
 * dropped; the ioDimm thread retires them there (req_put: buffers and
 * counts stay on the ioDimm thread), woken by done_ev.  While the thread
 * has anything (busy), every reply of the connection goes through it, so
 * replies keep their order; when it is idle, small batches are sent
 * inline by the ioDimm thread.  Lock order: tx.lock, then the event base's (event_active).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "common/queue.h"
#include "server/conn_int.h"

#define TX_MIN_BYTES (256u << 10)     /* a reply batch this large starts the send thread */
#define TX_POLL_MS 100                /* send thread: recheck for a drop this often */

struct tx {
	pthread_t th;
	pthread_mutex_t lock;
	pthread_cond_t cv;
	struct event *done_ev;     /* on the ioDimm's base: out or err to collect */
	/* under lock: */
	struct req *in, *in_tail;  /* handed over, not yet taken by the thread */
	size_t in_skip;            /* bytes of in's head sent inline before */
	struct req *out, *out_tail;/* sent or dropped, to retire */
	bool sending;              /* a batch taken from in is being sent */
	bool sleeping;             /* in cond_wait: signal cv */
	bool pending;              /* in is not empty (also read without the lock) */
	bool stop;                 /* exit (nothing is busy; also read without the lock) */
	int err;                   /* errno of a failed send, once */
	uint64_t sent_ns;          /* last byte sent (atomic: the idle check) */
	bool drop;                 /* the connection is dead: send nothing more
	                            * (also read without the lock) */
};

static void tx_done_cb(evutil_socket_t fd, short what, void *arg);

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/* The send thread: takes what was handed over, sends it, hands each reply
 * back once sent (or dropped), and wakes the ioDimm thread. */
static void *tx_main(void *arg)
{
	struct conn *c = arg; /* only c->fd and c->tx are used: fixed while it runs */
	struct tx *t = c->tx;
	int fd = c->fd;
	struct iovec iov[MAX_IOV];
	pthread_mutex_lock(&t->lock);
	for (;;) {
		/* read each time: a reload changes it live */
		const uint64_t spin_ns =
			(uint64_t)__atomic_load_n(&c->d->srv->cfg.poll_us, __ATOMIC_RELAXED) * 1000u;
		if (!t->in && !t->stop && spin_ns) {
			/* like the ioDimm thread (dimm_loop): the next batch
			 * usually follows within poll_us; a sleeping thread's
			 * wake-up costs more than the spin */
			pthread_mutex_unlock(&t->lock);
			uint64_t until = nand_now_ns() + spin_ns;
			while (!__atomic_load_n(&t->pending, __ATOMIC_ACQUIRE) &&
			       !__atomic_load_n(&t->stop, __ATOMIC_RELAXED) && nand_now_ns() < until)
				cpu_relax();
			pthread_mutex_lock(&t->lock);
		}
		while (!t->in && !t->stop) {
			t->sleeping = true;
			pthread_cond_wait(&t->cv, &t->lock);
			t->sleeping = false;
		}
		if (!t->in)
			break;
		__atomic_store_n(&t->pending, false, __ATOMIC_RELAXED);
		struct req *q = t->in, *q_tail = t->in_tail;
		size_t skip = t->in_skip;
		t->in = t->in_tail = NULL;
		t->in_skip = 0;
		t->sending = true;
		pthread_mutex_unlock(&t->lock);
		int err = 0;
		while (q && !err && !__atomic_load_n(&t->drop, __ATOMIC_RELAXED)) {
			int n = replies_iov(q, skip, iov);
			struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)n };
			ssize_t sent = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (sent < 0) {
				if (errno == EAGAIN || errno == EWOULDBLOCK) {
					struct pollfd pf = { .fd = fd, .events = POLLOUT };
					poll(&pf, 1, TX_POLL_MS);
				} else if (errno != EINTR) {
					err = errno;
				}
				continue;
			}
			uint64_t now = nand_now_ns();
			if (sent > 0)
				__atomic_store_n(&t->sent_ns, now, __ATOMIC_RELAXED);
			/* hand back the replies sent whole */
			size_t left = skip + (size_t)sent;
			struct req *done = q, *done_tail = NULL;
			while (q && left >= q->reply_bytes) {
				left -= q->reply_bytes;
				q->t_out = now;
				done_tail = q;
				q = q->next;
			}
			skip = left;
			if (done_tail) {
				done_tail->next = NULL;
				pthread_mutex_lock(&t->lock);
				QUEUE_SPLICE(t->out, t->out_tail, done, done_tail, next);
				event_active(t->done_ev, EV_READ, 0);
				pthread_mutex_unlock(&t->lock);
			}
		}
		pthread_mutex_lock(&t->lock);
		/* dropped (the connection died) or the socket failed */
		if (q)
			QUEUE_SPLICE(t->out, t->out_tail, q, q_tail, next);
		if (err && !t->err)
			t->err = err;
		t->sending = false;
		event_active(t->done_ev, EV_READ, 0);
	}
	pthread_mutex_unlock(&t->lock);
	return NULL;
}

static struct tx *tx_start(struct conn *c)
{
	struct tx *t = calloc(1, sizeof *t);
	if (!t)
		return NULL;
	t->done_ev = event_new(c->d->base, -1, EV_READ, tx_done_cb, c);
	if (!t->done_ev) {
		free(t);
		return NULL;
	}
	pthread_mutex_init(&t->lock, NULL);
	pthread_cond_init(&t->cv, NULL);
	c->tx = t;
	if (pthread_create(&t->th, NULL, tx_main, c) != 0) {
		event_free(t->done_ev);
		pthread_mutex_destroy(&t->lock);
		pthread_cond_destroy(&t->cv);
		free(t);
		c->tx = NULL;
		return NULL;
	}
	pthread_setname_np(t->th, "flashd-tx");
	return t;
}

/* Connection freed: nothing is busy any more (its requests are all
 * retired): the thread exits. */
void tx_stop(struct conn *c)
{
	struct tx *t = c->tx;
	if (!t)
		return;
	pthread_mutex_lock(&t->lock);
	__atomic_store_n(&t->stop, true, __ATOMIC_RELAXED); /* also ends a spin */
	pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->lock);
	pthread_join(t->th, NULL);
	event_free(t->done_ev);
	pthread_mutex_destroy(&t->lock);
	pthread_cond_destroy(&t->cv);
	free(t);
	c->tx = NULL;
}

/* The connection died: the thread sends nothing more. */
void tx_drop(struct conn *c)
{
	if (!c->tx)
		return;
	pthread_mutex_lock(&c->tx->lock);
	__atomic_store_n(&c->tx->drop, true, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&c->tx->lock);
}

/* Hand the send queue to the send thread if it is busy (order) or the
 * batch is large (starting the thread on first use); false: send inline. */
bool tx_take(struct conn *c)
{
	if (c->ssl || c->dead || !c->sendq)
		return false;
	/* one connection: its sends pipeline with the client's receives
	 * already, and a hand-over's wake-ups cost more than they save (1 MiB
	 * reads: -13 % on the 2-core bench); several: this thread would send
	 * for all of them in turn */
	int open = 0;
	struct conn *o;
	LIST_FOREACH(o, &c->d->conns, link) {
		if (!o->closing && ++open == 2)
			break;
	}
	if (open < 2 && !c->tx)
		return false; /* the common case: no walk of the queue */
	size_t bytes = 0;
	for (struct req *r = c->sendq; r && bytes < TX_MIN_BYTES + c->head_sent; r = r->next)
		bytes += r->reply_bytes;
	bytes -= bytes > c->head_sent ? c->head_sent : bytes; /* still to send */
	bool big = bytes >= TX_MIN_BYTES && open >= 2;
	struct tx *t = c->tx;
	if (!t) {
		if (!big || !(t = tx_start(c)))
			return false;
	}
	pthread_mutex_lock(&t->lock);
	bool busy = t->in || t->out || t->sending;
	if (!busy && !big) {
		pthread_mutex_unlock(&t->lock);
		return false;
	}
	if (t->in) {
		t->in_tail->next = c->sendq;
	} else {
		t->in = c->sendq;
		t->in_skip = c->head_sent; /* 0 unless the thread is idle */
	}
	t->in_tail = c->sendq_tail;
	__atomic_store_n(&t->pending, true, __ATOMIC_RELEASE);
	if (t->sleeping)
		pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->lock);
	c->sendq = c->sendq_tail = NULL;
	c->head_sent = 0;
	event_del(c->wev); /* an inline send's wait for room, if any */
	return true;
}

/* The send thread handed replies back: retire them (ioDimm thread). */
static void tx_done_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;
	struct tx *t = c->tx;
	pthread_mutex_lock(&t->lock);
	struct req *q = t->out;
	t->out = t->out_tail = NULL;
	int err = t->err;
	t->err = 0;
	pthread_mutex_unlock(&t->lock);
	if (q && !c->dead)
		c->last_ns = nand_now_ns();
	c->d->activity++; /* keeps the ioDimm thread polling (dimm_loop) */
	while (q) {
		struct req *r = q;
		q = r->next;
		if (r->t_out) /* sent, not dropped */
			io_account_sent(c->d, r, r->t_out);
		req_put(c, r);
	}
	if (err && !c->dead)
		conn_close_now(c, strerror(err));
	conn_mark_dirty(c); /* send what queued meanwhile; resume reading; free */
	dimm_kick(c->d);
}

/* When the send thread last sent a byte (any thread); 0: no thread. */
uint64_t tx_sent_ns(const struct conn *c)
{
	return c->tx ? __atomic_load_n(&c->tx->sent_ns, __ATOMIC_RELAXED) : 0;
}

bool tx_busy(struct conn *c)
{
	struct tx *t = c->tx;
	if (!t)
		return false;
	pthread_mutex_lock(&t->lock);
	bool busy = t->in || t->out || t->sending;
	pthread_mutex_unlock(&t->lock);
	return busy;
}
