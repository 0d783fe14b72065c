/* SPDX-License-Identifier: Apache-2.0 */
/* redis_conn.c: one connection to a Redis server (see redis_conn.h). */
#include "redis_conn.h"

#include <hiredis/read.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "redis_encode.h"
#include "redis_guard.h"

#define READ_CHUNK 16384
#define OBUF_KEEP 65536     /* room kept once all is written */

enum conn_state {
	CONN_CONNECTING,
	CONN_UP,
};

struct waiting {
	redis_reply_fn *fn;
	void *priv;
};

struct redis_conn {
	struct ev_loop *loop;
	struct redis_transport *t;
	const struct redis_conn_cb *cb;
	void *owner;
	enum conn_state state;
	bool made;               /* connected() said ok */
	bool disconnecting;      /* no more commands; ends once all are answered */
	bool failed;             /* an error ends it: errstr says why */
	bool freeing;            /* ended inside a callback: freed after it */
	bool ending;             /* finish() under way */
	int in_callback;
	bool read_wants_write;   /* the transport reads once writable */
	bool write_wants_read;   /* the transport writes once readable */
	ev_io rio, wio;
	redisReader *reader;
	char *obuf;              /* obuf[opos..olen) waits to be written */
	size_t opos, olen, ocap;
	redis_reply_fn *sub_fn;  /* subscribed: every message goes to it */
	void *sub_priv;
	struct waiting *fifo;    /* a ring of fcap */
	size_t fhead, flen, fcap;
	char errstr[160];
	enum redis_error_kind errkind; /* and its kind */
};

static void on_io(struct ev_loop *loop, ev_io *w, int revents);

void *redis_conn_owner(const struct redis_conn *c)
{
	return c->owner;
}

void redis_conn_set_owner(struct redis_conn *c, void *owner)
{
	c->owner = owner;
}

void redis_conn_drop(struct redis_conn **cp)
{
	struct redis_conn *c = *cp;

	*cp = NULL;
	if (!c)
		return;
	c->owner = NULL;
	redis_conn_free(c);
}

enum redis_error_kind redis_conn_errkind(const struct redis_conn *c)
{
	return c->errkind;
}

const char *redis_conn_errstr(const struct redis_conn *c)
{
	return c->errstr[0] ? c->errstr : "connection to Redis lost";
}

size_t redis_conn_waiting(const struct redis_conn *c)
{
	return c->flen;
}

/* ---- the write watcher -------------------------------------------------- */

static void want_write(struct redis_conn *c, bool on)
{
	if (on && !ev_is_active(&c->wio))
		ev_io_start(c->loop, &c->wio);
	else if (!on && ev_is_active(&c->wio))
		ev_io_stop(c->loop, &c->wio);
}

static void sync_write(struct redis_conn *c)
{
	want_write(c, c->state == CONN_CONNECTING ? ev_is_active(&c->wio)
						  : c->olen > c->opos || c->read_wants_write);
}

/* ---- the end ---------------------------------------------------------------- */

static void release(struct redis_conn *c)
{
	ev_io_stop(c->loop, &c->rio);
	ev_io_stop(c->loop, &c->wio);
	c->t->ops->close(c->t);
	if (c->reader)
		redisReaderFree(c->reader);
	xfree(c->obuf);
	xfree(c->fifo);
	xfree(c);
}

/* Every command waiting gets NULL, then the owner hears of the end
 * (connected(!ok) before, when it was never made). */
static void finish(struct redis_conn *c, bool lost)
{
	c->ending = c->freeing = true; /* no more commands, from the callbacks either */
	ev_io_stop(c->loop, &c->rio);
	ev_io_stop(c->loop, &c->wio);
	c->in_callback++;
	if (!c->made && lost && c->cb && c->cb->connected && c->owner)
		c->cb->connected(c->owner, c, false);
	while (c->flen) {
		struct waiting w = c->fifo[c->fhead];

		c->fhead = (c->fhead + 1) % c->fcap;
		c->flen--;
		if (w.fn)
			w.fn(c, NULL, w.priv);
	}
	if (c->sub_fn)
		c->sub_fn(c, NULL, c->sub_priv);
	if (c->made && c->cb && c->cb->disconnected && c->owner)
		c->cb->disconnected(c->owner, c, lost);
	c->in_callback--;
	release(c);
}

/* Ends c with an error, from its own event: after the callback under
 * way, or (from a caller's flush) in the loop's next turn, never under a
 * caller's feet. */
static void fail(struct redis_conn *c, const char *why)
{
	if (c->failed || c->freeing)
		return;
	c->failed = true;
	c->freeing = true;
	/* the transport's failures are of its kind; a stream that ends is a
	 * lost connection; anything else is a reply that is not RESP or not
	 * one a command waits for */
	c->errkind = why == c->t->errstr ? c->t->errkind
		     : strstr(why, "closed") || strstr(why, "took nothing") ? REDIS_ERROR_CONNECT
									     : REDIS_ERROR_PROTOCOL;
	if (c->errstr != why)
		snprintf(c->errstr, sizeof(c->errstr), "%s", why);
	if (!c->in_callback)
		ev_feed_event(c->loop, &c->rio, EV_READ);
}

void redis_conn_free(struct redis_conn *c)
{
	if (!c || c->ending)
		return;
	if (c->in_callback) {
		c->freeing = true;
		return;
	}
	finish(c, false);
}

void redis_conn_disconnect(struct redis_conn *c)
{
	if (c->disconnecting || c->freeing)
		return;
	c->disconnecting = true;
	if (!c->flen && !c->in_callback)
		finish(c, false);
}

/* ---- writing -------------------------------------------------------------------- */

static int append(struct redis_conn *c, const char *cmd, size_t len, redis_reply_fn *fn, void *priv,
		  bool waits)
{
	if (c->disconnecting || c->freeing || c->failed)
		return -1;
	if (c->flen == c->fcap) {
		size_t cap = c->fcap ? 2 * c->fcap : 16;
		struct waiting *f = xmalloc(cap * sizeof(*f));

		if (!f)
			return -1;
		for (size_t i = 0; i < c->flen; i++)
			f[i] = c->fifo[(c->fhead + i) % c->fcap];
		xfree(c->fifo);
		c->fifo = f;
		c->fhead = 0;
		c->fcap = cap;
	}
	if (c->opos == c->olen)
		c->opos = c->olen = 0;
	if (len > c->ocap - c->olen) {
		size_t cap = c->ocap ? c->ocap : 4096;
		char *b;

		if (c->opos) {
			memmove(c->obuf, c->obuf + c->opos, c->olen - c->opos);
			c->olen -= c->opos;
			c->opos = 0;
		}
		while (cap - c->olen < len)
			cap *= 2;
		if (cap != c->ocap) {
			if (!(b = xrealloc(c->obuf, cap)))
				return -1;
			c->obuf = b;
			c->ocap = cap;
		}
	}
	memcpy(c->obuf + c->olen, cmd, len);
	c->olen += len;
	if (waits)
		c->fifo[(c->fhead + c->flen++) % c->fcap] = (struct waiting){ fn, priv };
	if (c->state != CONN_CONNECTING)
		want_write(c, true);
	return 0;
}

int redis_conn_formatted(struct redis_conn *c, redis_reply_fn *fn, void *priv, const char *cmd,
			 size_t len)
{
	return append(c, cmd, len, fn, priv, true);
}

/* A command, waiting for its reply in the FIFO or (`waits` false) not. */
static int command(struct redis_conn *c, redis_reply_fn *fn, void *priv, int argc,
		   const char **argv, const size_t *argvlen, bool waits)
{
	char small[512], *cmd = small;
	size_t len = redis_resp_len((size_t)argc, argvlen);
	int rc;

	if (len > sizeof(small) && !(cmd = xmalloc(len)))
		return -1;
	redis_resp_put(cmd, (size_t)argc, argv, argvlen);
	rc = append(c, cmd, len, fn, priv, waits);
	if (cmd != small)
		xfree(cmd);
	return rc;
}

int redis_conn_command(struct redis_conn *c, redis_reply_fn *fn, void *priv, int argc,
		       const char **argv, const size_t *argvlen)
{
	return command(c, fn, priv, argc, argv, argvlen, true);
}

int redis_conn_subscribe(struct redis_conn *c, redis_reply_fn *fn, void *priv, int argc,
			 const char **argv, const size_t *argvlen)
{
	if (c->sub_fn || command(c, fn, priv, argc, argv, argvlen, false) < 0)
		return -1;
	c->sub_fn = fn;
	c->sub_priv = priv;
	return 0;
}

bool redis_conn_lost(const struct redis_conn *c)
{
	return c->failed;
}

bool redis_conn_made(const struct redis_conn *c)
{
	return c->made;
}

/* Writes until done or the transport waits. Returns -1 when c failed. */
static int write_some(struct redis_conn *c)
{
	c->write_wants_read = false;
	while (c->olen > c->opos) {
		ssize_t n = c->t->ops->write(c->t, c->obuf + c->opos, c->olen - c->opos);

		if (n > 0) {
			c->opos += (size_t)n;
			continue;
		}
		if (n == REDIS_T_WANT_READ)
			c->write_wants_read = true;
		if (n == REDIS_T_WANT_READ || n == REDIS_T_WANT_WRITE)
			return 0;
		fail(c, n == 0 ? "the transport took nothing" : c->t->errstr);
		return -1;
	}
	c->opos = c->olen = 0;
	if (c->ocap > OBUF_KEEP) {
		/* a large command (the library) went: its room goes too */
		xfree(c->obuf);
		c->obuf = NULL;
		c->ocap = 0;
	}
	return 0;
}

void redis_conn_flush(struct redis_conn *c)
{
	if (c->state == CONN_CONNECTING || c->failed || c->freeing)
		return;
	if (write_some(c) == 0)
		sync_write(c);
}

/* ---- reading -------------------------------------------------------------------- */

/* Why the reader stopped: a guard's refusal, or its own error. */
static const char *reader_error(const redisReader *r)
{
	const char *why = redis_guard_refusal(r);

	return why ? why : r->errstr;
}

/* A subscribed connection's message (or the subscription's answer): an
 * array of at least 3, its kind and channel strings. Anything else ends
 * the connection: returns 1. */
static int message_refused(struct redis_conn *c, const redisReply *m)
{
	char why[96];

	if (m->type != REDIS_REPLY_ARRAY) {
		fail(c, "an unsolicited reply on a subscribed connection");
		return 1;
	}
	if (m->elements < 3) {
		snprintf(why, sizeof(why), "a message of %zu elements on a subscribed connection",
			 m->elements);
		fail(c, why);
		return 1;
	}
	if (m->element[0]->type != REDIS_REPLY_STRING || m->element[1]->type != REDIS_REPLY_STRING) {
		fail(c, "a message whose kind or channel is no string");
		return 1;
	}
	return 0;
}

/* Hands every complete reply to its command's callback. */
static void dispatch(struct redis_conn *c)
{
	void *reply;

	while (!c->freeing) {
		struct waiting w;

		if (redisReaderGetReply(c->reader, &reply) != REDIS_OK) {
			fail(c, reader_error(c->reader));
			return;
		}
		if (!reply)
			break;
		if (!c->flen && !c->sub_fn) {
			freeReplyObject(reply);
			fail(c, "an unsolicited reply (no command waits for one)");
			return;
		}
		if (c->flen) {
			w = c->fifo[c->fhead];
			c->fhead = (c->fhead + 1) % c->fcap;
			c->flen--;
		} else if (message_refused(c, reply)) {
			freeReplyObject(reply);
			return;
		} else {
			w = (struct waiting){ c->sub_fn, c->sub_priv };
		}
		if (w.fn) {
			c->in_callback++;
			w.fn(c, reply, w.priv);
			c->in_callback--;
		}
		freeReplyObject(reply);
	}
}

/* Reads, and hands out the replies each read completed, until the
 * transport has nothing more: a full buffer may leave bytes that a TLS
 * session took from the socket already, for which no watcher wakes. */
static void read_some(struct redis_conn *c)
{
	char buf[READ_CHUNK];
	ssize_t n;

	do {
		c->read_wants_write = false;
		n = c->t->ops->read(c->t, buf, sizeof(buf));
		if (n == REDIS_T_WANT_READ || n == REDIS_T_WANT_WRITE) {
			c->read_wants_write = n == REDIS_T_WANT_WRITE;
			return;
		}
		if (n == 0) {
			fail(c, "Server closed the connection");
			return;
		}
		if (n < 0) {
			fail(c, c->t->errstr);
			return;
		}
		if (redisReaderFeed(c->reader, buf, (size_t)n) != REDIS_OK) {
			fail(c, reader_error(c->reader));
			return;
		}
		dispatch(c);
	} while ((size_t)n == sizeof(buf) && !c->freeing);
}

/* ---- events ---------------------------------------------------------------------- */

static void handshake(struct redis_conn *c)
{
	int rc = c->t->ops->handshake(c->t);

	if (rc == REDIS_T_WANT_READ || rc == REDIS_T_WANT_WRITE) {
		want_write(c, rc == REDIS_T_WANT_WRITE);
		return;
	}
	if (rc != 0) {
		fail(c, c->t->errstr);
		return;
	}
	c->state = CONN_UP;
	c->made = true;
	if (c->cb && c->cb->connected && c->owner) {
		c->in_callback++;
		c->cb->connected(c->owner, c, true);
		c->in_callback--;
	}
	if (!c->freeing)
		want_write(c, c->olen > c->opos);
}

static void on_io(struct ev_loop *loop, ev_io *w, int revents)
{
	struct redis_conn *c = w->data;

	(void)loop;
	c->in_callback++;
	if (c->freeing) {
		/* failed or freed since: an event fed by fail() */
	} else if (c->state == CONN_CONNECTING) {
		handshake(c);
	} else {
		if ((revents & EV_WRITE) || c->write_wants_read)
			write_some(c);
		if (!c->failed && ((revents & EV_READ) || c->read_wants_write))
			read_some(c);
	}
	c->in_callback--;
	if (c->freeing) {
		finish(c, c->failed);
		return;
	}
	if (c->disconnecting && !c->flen) {
		finish(c, false);
		return;
	}
	if (c->state != CONN_CONNECTING)
		sync_write(c);
}

void redis_conn_read_now(struct redis_conn *c)
{
	if (c->state != CONN_UP || c->failed || c->freeing || c->in_callback)
		return;
	on_io(c->loop, &c->rio, EV_READ);
}

struct redis_conn *redis_conn_new(struct ev_loop *loop, struct redis_transport *t,
				  const struct addr *a, const struct redis_conn_cb *cb, void *owner,
				  char *why, size_t whylen)
{
	struct redis_conn *c;
	int rc;

	if (!t) {
		snprintf(why, whylen, "out of memory");
		return NULL;
	}
	c = xcalloc(1, sizeof(*c));
	if (!c || !(c->reader = redisReaderCreate())) {
		snprintf(why, whylen, "out of memory");
		xfree(c);
		t->ops->close(t);
		return NULL;
	}
	redis_guard_reader(c->reader);
	c->loop = loop;
	c->t = t;
	c->cb = cb;
	c->owner = owner;
	rc = t->ops->connect(t, a);
	if (rc == REDIS_T_ERROR || t->fd < 0) {
		snprintf(why, whylen, "%s", t->errstr[0] ? t->errstr : "cannot connect");
		release(c);
		return NULL;
	}
	ev_io_init(&c->rio, on_io, t->fd, EV_READ);
	c->rio.data = c;
	ev_io_init(&c->wio, on_io, t->fd, EV_WRITE);
	c->wio.data = c;
	ev_io_start(loop, &c->rio);
	/* whether made at once or not, the first writable turn finishes it
	 * (connected() is never called from here) */
	ev_io_start(loop, &c->wio);
	return c;
}
