/* SPDX-License-Identifier: Apache-2.0 */
/* conn_set.c: a worker's set of SPOP connections (conn.h): ids with
 * generations, by which deferred answers find their connection again;
 * accept, close and reap; spare connections kept for the next ones. */
#include "conn_int.h"

#include <unistd.h>

#include "alloc.h"
#include "log.h"

/* ---- ids --------------------------------------------------------------- */

static int id_take(struct conn_set *s, struct conn *c)
{
	if (s->nfree_ids == 0) {
		uint32_t n = s->nids ? s->nids * 2 : 64;
		struct conn **by_id = xrealloc(s->by_id, n * sizeof(*by_id));
		uint32_t *gens, *fs;

		if (!by_id)
			return -1;
		s->by_id = by_id;
		gens = xrealloc(s->gens, n * sizeof(*gens));
		if (!gens)
			return -1;
		s->gens = gens;
		fs = xrealloc(s->free_ids, n * sizeof(*fs));
		if (!fs)
			return -1;
		s->free_ids = fs;
		for (uint32_t i = s->nids; i < n; i++) {
			s->by_id[i] = NULL;
			s->gens[i] = 0;
		}
		/* push in reverse so that low ids are used first */
		for (uint32_t i = n; i > s->nids; i--)
			s->free_ids[s->nfree_ids++] = i - 1;
		s->nids = n;
	}
	c->v.id = s->free_ids[--s->nfree_ids];
	s->by_id[c->v.id] = c;
	c->v.gen = ++s->gens[c->v.id];
	return 0;
}

static void id_release(struct conn_set *s, struct conn *c)
{
	s->by_id[c->v.id] = NULL;
	s->gens[c->v.id]++;
	s->free_ids[s->nfree_ids++] = c->v.id;
}

/* ---- life cycle ---------------------------------------------------------- */

static struct conn *conn_get(struct conn_set *s)
{
	struct conn *c = s->spare;
	uint32_t own = s->cfg->max_frame_size;

	if (c) {
		s->spare = c->next;
		s->nspare--;
	} else {
		c = xcalloc(1, sizeof(*c));
		if (!c)
			return NULL;
		c->rcap = 4 + (size_t)own;
		c->rbuf = xmalloc(c->rcap);
		c->v.wcap = WBUF_INIT;
		c->v.wbuf = xmalloc(c->v.wcap);
		if (!c->rbuf || !c->v.wbuf) {
			xfree(c->rbuf);
			xfree(c->v.wbuf);
			xfree(c);
			return NULL;
		}
	}
	c->next = NULL;
	c->set = s;
	c->v.handler_flags = 0;
	c->rpos = c->rlen = 0;
	c->v.wpos = c->v.wlen = 0;
	c->state = CONN_HELLO;
	c->v.max_frame = own;
	set_room(c, ack_room(s, own));
	c->in_flush = 0;
	c->flush_next = NULL;
	c->stopping = c->lingering = 0;
	c->held = c->resume = 0;
	c->pending = 0;
	c->frame_started = c->stalled_since = 0.;
	c->blocked_at = 0;
	return c;
}

void conn_accept(struct conn_set *s, int fd)
{
	struct conn *c;
	SSL *ssl = NULL;

	if (s->nconns >= s->cfg->max_conns) {
		log_warn("worker %d: %d connections, refusing another", s->idx, s->nconns);
		close(fd);
		return;
	}
	if (s->cfg->tls && !(ssl = conn_tls_session(s->cfg->tls, fd))) {
		log_err("worker %d: out of memory for a TLS session", s->idx);
		close(fd);
		return;
	}
	c = conn_get(s);
	if (!c || id_take(s, c) < 0) {
		log_err("worker %d: out of memory for a new connection", s->idx);
		if (c) {
			c->next = s->spare;
			s->spare = c;
			s->nspare++;
		}
		SSL_free(ssl);
		close(fd);
		return;
	}
	c->fd = fd;
	c->ssl = ssl;
	s->nconns++;
	STAT_INC(s->stats.accepted);
	ev_io_init(&c->rio, conn_io_read, fd, EV_READ);
	c->rio.data = c;
	ev_io_init(&c->wio, conn_io_write, fd, EV_WRITE);
	c->wio.data = c;
	ev_timer_init(&c->timer, conn_io_timer, s->cfg->hello_timeout, 0.);
	c->timer.data = c;
	c->reading = 1;
	ev_io_start(s->loop, &c->rio);
	ev_timer_start(s->loop, &c->timer);
}

void conn_close(struct conn *c)
{
	struct conn_set *s = c->set;

	if (c->state == CONN_CLOSED)
		return;
	ev_io_stop(s->loop, &c->rio);
	ev_io_stop(s->loop, &c->wio);
	ev_timer_stop(s->loop, &c->timer);
	SSL_free(c->ssl);
	c->ssl = NULL;
	close(c->fd);
	c->fd = -1;
	c->state = CONN_CLOSED;
	id_release(s, c);
	s->nconns--;
	STAT_INC(s->stats.closed);
	c->next = s->reap_list;
	s->reap_list = c;
	want_prepare(s);
}

static void conn_destroy(struct conn *c)
{
	if (c->v.wcap > WBUF_INIT)
		atomic_fetch_sub_explicit(c->set->out_grown, c->v.wcap - WBUF_INIT,
					  memory_order_relaxed);
	xfree(c->rbuf);
	xfree(c->v.wbuf);
	xfree(c);
}

void conn_reap(struct conn_set *s)
{
	while (s->reap_list) {
		struct conn *c = s->reap_list;

		s->reap_list = c->next;
		/* Keep a few for the next connections, with buffers that did
		 * not grow past their initial size. */
		if (s->nspare < SPARES_MAX && c->v.wcap == WBUF_INIT &&
		    !s->stopping) {
			c->next = s->spare;
			s->spare = c;
			s->nspare++;
		} else {
			conn_destroy(c);
		}
	}
}

void conn_set_free(struct conn_set *s)
{
	/* The last word on connections still open (the grace time is over) */
	for (uint32_t i = 0; i < s->nids; i++)
		if (s->by_id[i])
			conn_last_word(s->by_id[i]);
	s->flush_list = NULL;
	s->stopping = true; /* no spares kept */
	conn_reap(s);
	while (s->spare) {
		struct conn *c = s->spare;

		s->spare = c->next;
		conn_destroy(c);
	}
	s->nspare = 0;
	xfree(s->by_id);
	xfree(s->gens);
	xfree(s->free_ids);
	s->by_id = NULL;
	s->gens = s->free_ids = NULL;
	s->nids = s->nfree_ids = 0;
}
