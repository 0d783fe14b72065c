/* SPDX-License-Identifier: Apache-2.0 */
/* admin.h: inspect and reset a client's buckets, over the operations
 * listener when the agent runs with --admin.
 *
 *   GET  /admin/client?api_key=k1     every rule's key and state
 *   POST /admin/reset?api_key=k1      delete them (all rules of the client)
 *   GET  /admin/explain?api_key=k1    what a request would get (explain.h)
 *
 * The parameters are message arguments: the client is named as HAProxy
 * would name it (the first identity argument present). The store answers
 * through the store interface (store_admin), which may answer later: the
 * HTTP answer leaves when it does. The store returns data (struct
 * store_admin_item); this module alone writes the JSON.
 *
 * With a token (--admin-token-file) a request without "Authorization:
 * Bearer TOKEN" gets 401 and touches nothing. Without one (a loopback
 * listener only, main.c sees to it) a request that a browser page sent,
 * which carries an Origin header, gets 403: a page cannot reset clients
 * through the operator's browser. */
#ifndef RL_ADMIN_H
#define RL_ADMIN_H

struct auth_token;
struct ev_loop;
struct http_req;
struct server;

/* Handles one /admin/ request: answers it through http_respond(), now or
 * once the store has answered (on `loop`). token is NULL when none is
 * required. */
void admin_serve(struct server *srv, struct ev_loop *loop, const struct auth_token *token,
		 struct http_req *req);

#endif
