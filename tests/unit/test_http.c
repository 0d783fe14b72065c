/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the HTTP server on a real loop and loopback sockets: heads
 * that come in pieces, answers given at once or later, a client gone before
 * a late answer, large answers to a slow reader, and the error statuses.
 * The client side runs in this thread between turns of the loop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "../../agent/ops/http.c"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>

static struct ev_loop *loop;
static struct http_server *srv;
static struct http_req *pending;   /* a request whose handler answers later */
static ev_timer later_w;

static void serve_hello(struct http_req *req, void *arg)
{
	http_respond(req, 200, "text/plain", "hello\n", 6);
}

/* Echoes what the handler can read of the request. */
static void serve_echo(struct http_req *req, void *arg)
{
	char body[512];
	const char *auth = http_req_header(req, "authorization");
	int n = snprintf(body, sizeof(body), "%s|%s|%s|%s|%s", http_req_method(req),
			 http_req_path(req), http_req_query(req), auth ? auth : "(none)",
			 http_req_header(req, "x-missing") ? "?" : "-");

	http_respond(req, 200, "text/plain", body, (size_t)n);
}

static void serve_later(struct http_req *req, void *arg)
{
	pending = req;
	if (arg)
		ev_timer_start(loop, &later_w);
}

static void on_later(struct ev_loop *l, ev_timer *t, int revents)
{
	http_respond(pending, 200, "text/plain", "late\n", 5);
	pending = NULL;
}

static char *big;
#define BIG_LEN (1u << 20)

static void serve_big(struct http_req *req, void *arg)
{
	http_respond(req, 200, "application/octet-stream", big, BIG_LEN);
}

static int setup(void **unused)
{
	struct addr a;
	char err[256];

	loop = ev_loop_new(EVFLAG_AUTO);
	srv = http_new(loop);
	assert_non_null(srv);
	assert_int_equal(http_route(srv, "GET", "/hello", serve_hello, NULL), 0);
	assert_int_equal(http_route(srv, "GET", "/echo/", serve_echo, NULL), 0);
	assert_int_equal(http_route(srv, "POST", "/echo/", serve_echo, NULL), 0);
	assert_int_equal(http_route(srv, "GET", "/later", serve_later, (void *)1), 0);
	assert_int_equal(http_route(srv, "GET", "/never", serve_later, NULL), 0);
	assert_int_equal(http_route(srv, "GET", "/big", serve_big, NULL), 0);
	assert_int_equal(addr_parse("127.0.0.1:0", ADDR_PORT0, &a), 0);
	assert_int_equal(http_listen(srv, &a, err, sizeof(err)), 0);
	assert_true(http_port(srv) > 0);
	ev_timer_init(&later_w, on_later, 0.05, 0.);
	pending = NULL;
	return 0;
}

static int teardown(void **unused)
{
	ev_timer_stop(loop, &later_w);
	http_free(srv);
	ev_loop_destroy(loop);
	return 0;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A connected client. With `small`, a small window and small segments keep
 * the server's send buffer small too (on loopback it grows to megabytes
 * otherwise), so that a large answer takes the server several writes. */
static int client(int small)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	int fd = socket(AF_INET, SOCK_STREAM, 0), rcvbuf = 4096, mss = 536;

	assert_true(fd >= 0);
	if (small) {
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
		setsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, sizeof(mss));
	}
	sin.sin_port = htons((uint16_t)http_port(srv));
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	return fd;
}

static void send_str(int fd, const char *s)
{
	assert_int_equal(send(fd, s, strlen(s), MSG_NOSIGNAL), (ssize_t)strlen(s));
}

/* Turns the loop for `secs`. */
static void spin(double secs)
{
	double end = now() + secs;

	while (now() < end) {
		ev_run(loop, EVRUN_NOWAIT);
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
}

/* Turns the loop and reads fd until the server closes it (or 5 s pass),
 * at most `per_read` bytes at a time. Returns the bytes read into out. */
static size_t read_all(int fd, char *out, size_t cap, size_t per_read)
{
	double end = now() + 5;
	size_t len = 0;

	while (now() < end) {
		ssize_t n;

		ev_run(loop, EVRUN_NOWAIT);
		n = recv(fd, out + len, cap - len < per_read ? cap - len : per_read, MSG_DONTWAIT);
		if (n == 0)
			return len;
		if (n > 0)
			len += (size_t)n;
		else
			nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
	fail_msg("no end of the answer after 5 s (%zu bytes)", len);
	return len;
}

/* Turns the loop until the server holds no request (the client's FIN ends
 * the drain that follows each answer). */
static void assert_idle(void)
{
	double end = now() + 2;

	while (srv->reqs && now() < end)
		spin(0.001);
	assert_null(srv->reqs);
}

static char *exchange(const char *request)
{
	static char out[8192];
	int fd = client(0);
	size_t n;

	send_str(fd, request);
	n = read_all(fd, out, sizeof(out) - 1, sizeof(out));
	out[n] = '\0';
	close(fd);
	return out;
}

/* The body of an answer, after checking its status line. */
static const char *body_of(const char *answer, const char *status_line)
{
	const char *b = strstr(answer, "\r\n\r\n");

	if (strncmp(answer, status_line, strlen(status_line)) != 0 || !b)
		fail_msg("expected %s, got: %s", status_line, answer);
	return b + 4;
}

static void test_answer_at_once(void **unused)
{
	const char *a = exchange("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");

	assert_string_equal(a, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
			       "Content-Length: 6\r\nConnection: close\r\n\r\nhello\n");
	assert_idle();
}

static void test_request_parts(void **unused)
{
	char out[1024];
	int fd = client(0);
	size_t n;

	send_str(fd, "POST /echo/a?b=");
	spin(0.02);
	send_str(fd, "%20c HTTP/1.1\r\nAuthoriza");
	spin(0.02);
	send_str(fd, "tion:  Bearer t0k \r\nHost: x\r\n");
	spin(0.02);
	send_str(fd, "\r\n");
	n = read_all(fd, out, sizeof(out) - 1, sizeof(out));
	out[n] = '\0';
	close(fd);
	assert_string_equal(body_of(out, "HTTP/1.1 200 OK\r\n"),
			    "POST|/echo/a|b=%20c|Bearer t0k|-");
	assert_string_equal(body_of(exchange("GET /echo/ HTTP/1.0\n\n"), "HTTP/1.1 200 OK\r\n"),
			    "GET|/echo/||(none)|-");
}

static void test_answer_later(void **unused)
{
	const char *a = exchange("GET /later HTTP/1.1\r\n\r\n");

	assert_string_equal(body_of(a, "HTTP/1.1 200 OK\r\n"), "late\n");
	assert_null(pending);
	assert_idle();
}

/* The connection times out while the handler holds the request: the late
 * answer is dropped, and frees the request. */
static void test_answer_after_client_gone(void **unused)
{
	char out[64];

	srv->timeout = 0.05;
	{
		int fd = client(0);

		send_str(fd, "GET /never HTTP/1.1\r\n\r\n");
		assert_int_equal(read_all(fd, out, sizeof(out), sizeof(out)), 0);
		close(fd);
	}
	assert_non_null(pending);
	assert_true(pending->fd < 0);
	assert_ptr_equal(srv->reqs, pending);
	http_respond(pending, 200, "text/plain", "late\n", 5);
	assert_null(srv->reqs);
}

/* A request still with its handler when the server goes is freed too
 * (the leak checker of the sanitizer builds would tell). */
static void test_free_with_pending(void **unused)
{
	int fd = client(0);

	send_str(fd, "GET /never HTTP/1.1\r\n\r\n");
	spin(0.05);
	assert_non_null(pending);
	close(fd);
}

static void test_big_answer_slow_reader(void **unused)
{
	size_t cap = BIG_LEN + 1024, n;
	char *out = malloc(cap);
	int fd = client(1);
	const char *b;

	big = malloc(BIG_LEN);
	assert_non_null(big);
	assert_non_null(out);
	for (size_t i = 0; i < BIG_LEN; i++)
		big[i] = (char)(i * 7 + i / 251);
	send_str(fd, "GET /big HTTP/1.1\r\n\r\n");
	n = read_all(fd, out, cap, 65536);
	close(fd);
	b = memmem(out, n, "\r\n\r\n", 4);
	assert_non_null(b);
	b += 4;
	assert_int_equal(n - (size_t)(b - out), BIG_LEN);
	assert_memory_equal(b, big, BIG_LEN);
	free(big);
	free(out);
}

static void test_statuses(void **unused)
{
	char head[HTTP_HEAD_MAX + 64];
	const char *a;

	body_of(exchange("GET /nothing HTTP/1.1\r\n\r\n"), "HTTP/1.1 404 Not Found\r\n");
	/* exact paths are exact; "/echo/" serves what lies below it */
	body_of(exchange("GET /hello/ HTTP/1.1\r\n\r\n"), "HTTP/1.1 404 Not Found\r\n");
	body_of(exchange("GET /echo HTTP/1.1\r\n\r\n"), "HTTP/1.1 404 Not Found\r\n");
	a = exchange("DELETE /echo/x HTTP/1.1\r\n\r\n");
	body_of(a, "HTTP/1.1 405 Method Not Allowed\r\n");
	assert_non_null(strstr(a, "\r\nAllow: GET, HEAD, POST\r\n"));
	a = exchange("POST /hello HTTP/1.1\r\n\r\n");
	assert_non_null(strstr(a, "\r\nAllow: GET, HEAD\r\n"));
	/* HEAD: the GET's head, its Content-Length, no body */
	a = exchange("HEAD /hello HTTP/1.1\r\n\r\n");
	assert_non_null(strstr(a, "HTTP/1.1 200 OK\r\n"));
	assert_null(strstr(a, "Content-Length: 0\r\n"));
	assert_non_null(strstr(a, "\r\n\r\n"));
	assert_string_equal(strstr(a, "\r\n\r\n"), "\r\n\r\n");
	body_of(exchange("GET /hello HTTP/2.0\r\n\r\n"), "HTTP/1.1 400 Bad Request\r\n");
	/* answered before the head could end */
	body_of(exchange("GET  /hello"), "HTTP/1.1 400 Bad Request\r\n");
	memset(head, 'a', sizeof(head));
	memcpy(head, "GET /hello HTTP/1.1\r\nX: ", 24);
	head[sizeof(head) - 1] = '\0';
	body_of(exchange(head), "HTTP/1.1 431 Request Header Fields Too Large\r\n");
	assert_idle();
}

/* At the cap, connections wait in the backlog: a request there is
 * answered once a connection held open closes, not before. */
static void test_connection_cap(void **unused)
{
	char out[1024];
	int held[2], fd;
	size_t n;

	assert_int_equal(http_conns_for(512), 32);
	assert_int_equal(http_conns_for(20), HTTP_CONNS_MIN);
	assert_int_equal(http_conns_for(1 << 20), HTTP_CONNS_MAX);
	http_max_conns(srv, 2);
	for (int i = 0; i < 2; i++) {
		held[i] = client(0);
		send_str(held[i], "GET /hello HTTP/1.1\r\n");
	}
	spin(0.05);
	assert_int_equal(srv->nconns, 2);
	fd = client(0);
	send_str(fd, "GET /hello HTTP/1.1\r\n\r\n");
	spin(0.1);
	assert_int_equal(srv->nconns, 2);
	assert_int_equal(recv(fd, out, sizeof(out), MSG_DONTWAIT), -1);
	close(held[0]);
	n = read_all(fd, out, sizeof(out) - 1, sizeof(out));
	out[n] = '\0';
	assert_string_equal(body_of(out, "HTTP/1.1 200 OK\r\n"), "hello\n");
	close(fd);
	close(held[1]);
	assert_idle();
	assert_int_equal(srv->nconns, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_answer_at_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_request_parts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_answer_later, setup, teardown),
		cmocka_unit_test_setup_teardown(test_answer_after_client_gone, setup, teardown),
		cmocka_unit_test_setup_teardown(test_free_with_pending, setup, teardown),
		cmocka_unit_test_setup_teardown(test_big_answer_slow_reader, setup, teardown),
		cmocka_unit_test_setup_teardown(test_statuses, setup, teardown),
		cmocka_unit_test_setup_teardown(test_connection_cap, setup, teardown),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
