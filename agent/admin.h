/* admin.h: inspect and reset a client's buckets, over the metrics listener
 * when the agent runs with --admin (loopback only, like the metrics).
 *
 *   GET  /admin/client?api_key=k1     every rule's key and state
 *   POST /admin/reset?api_key=k1      delete them (all rules of the client)
 *
 * The parameters are message arguments: the client is named as HAProxy
 * would name it (the first identity argument present). Redis is read with
 * a short synchronous connection of its own, off the workers' paths. */
#ifndef RL_ADMIN_H
#define RL_ADMIN_H

#include <stddef.h>

struct server;

/* Writes a JSON answer for `method` on `path` with `query` (what follows
 * '?', still percent-encoded) into body[0..cap) and sets *status (200,
 * 404, ...). Returns the body's length, or -1 when it did not fit. */
int admin_handle(struct server *srv, const char *method, const char *path, const char *query,
		 char *body, size_t cap, int *status);

#endif
