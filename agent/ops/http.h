/* SPDX-License-Identifier: Apache-2.0 */
/* http.h: a small HTTP/1.1 server on one libev loop, for the operations
 * port (metrics, health, admin). One request per connection, answered
 * with "Connection: close"; the caller registers what each path serves.
 *
 * Requests: a head of at most HTTP_HEAD_MAX bytes, parsed by http_head.c
 * (400 when it is not one, 431 when it does not fit), within
 * HTTP_TIMEOUT seconds of the accept. The handler then has HTTP_TIMEOUT
 * seconds to answer, and the client as long between two writes that make
 * progress; after that the connection is closed.
 *
 * Routing is by path, then method: a path ending in '/' serves every path
 * below it (as Go's ServeMux does), the longest match wins; no match is
 * 404, a path served for other methods only is 405.
 *
 * Every function here is for the thread of the server's loop only. */
#ifndef RL_HTTP_H
#define RL_HTTP_H

#include <ev.h>
#include <stddef.h>

#define HTTP_HEAD_MAX 4096     /* bytes of a request head */
#define HTTP_TIMEOUT 5.0       /* seconds; see above */
#define HTTP_ROUTES_MAX 16

/* Connections open at once: a sixteenth of the process's descriptor
 * limit, from 4 to 256 (http_conns_for). The operations port serves a
 * scraper or two and an operator: the cap keeps clients that open
 * connections and never finish a request from taking the descriptors
 * the SPOP listener needs. Past it, new connections wait in the listen
 * backlog until one closes (each within HTTP_TIMEOUT). */
#define HTTP_CONNS_SHARE 16
#define HTTP_CONNS_MIN 4
#define HTTP_CONNS_MAX 256

struct addr;
struct http_server;
struct http_req;

/* Serves one request. It must call http_respond() exactly once, before it
 * returns or later from the same loop (after an asynchronous reply, say);
 * `req` stays valid until then, whatever the client does meanwhile. */
typedef void (*http_handler)(struct http_req *req, void *arg);

/* A server that serves nothing yet, its connections capped by the
 * descriptor limit in force now (http_conns_for); NULL when out of
 * memory. */
struct http_server *http_new(struct ev_loop *loop);

/* The cap on connections for a descriptor limit of nofile. */
int http_conns_for(unsigned long nofile);

/* Sets the cap on connections open at once (at least 1). */
void http_max_conns(struct http_server *s, int n);

/* Serves `method` (exact, "GET") on `path` with fn(req, arg). Both strings
 * must outlive the server (string literals do). Returns 0, or -1 when
 * HTTP_ROUTES_MAX routes are already there. */
int http_route(struct http_server *s, const char *method, const char *path, http_handler fn,
	       void *arg);

/* Listens on a and starts accepting. Returns 0, or -1 with a reason in
 * err[0..errlen). */
int http_listen(struct http_server *s, const struct addr *a, char *err, size_t errlen);

/* The port the server listens on (0 before http_listen). */
unsigned http_port(const struct http_server *s);

/* Closes the listener and every connection, and frees every request, even
 * those whose handler has not answered: call it once nothing will answer
 * any more (the loop has stopped). NULL does nothing. */
void http_free(struct http_server *s);

/* The request line, as sent (the path and the query are not decoded): the
 * method ("GET"), the path ("/admin/client"), the query after '?' ("" when
 * there is none). Valid until http_respond(). */
const char *http_req_method(const struct http_req *req);
const char *http_req_path(const struct http_req *req);
const char *http_req_query(const struct http_req *req);

/* The value of the request's first header field named `name` (in any
 * case), without surrounding blanks, or NULL. Valid until http_respond(). */
const char *http_req_header(const struct http_req *req, const char *name);

/* Answers req with `status` (200, 404, ...), a Content-Type and the body,
 * which is copied: the caller may free its own. Ends the handler's use of
 * req, which must not be touched afterwards. When the client has gone
 * meanwhile, the answer is dropped. */
void http_respond(struct http_req *req, int status, const char *content_type,
		  const void *body, size_t len);

/* As http_respond(), with more header fields: `headers` holds whole lines,
 * each ending in "\r\n" ("WWW-Authenticate: Bearer\r\n"), or is "". */
void http_respond_headers(struct http_req *req, int status, const char *headers,
			  const char *content_type, const void *body, size_t len);

#endif
