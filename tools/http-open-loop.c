/* SPDX-License-Identifier: Apache-2.0 */
/* http-open-loop: an open-loop HTTP/1.1 load generator for the HAProxy
 * latency rows of bench/haproxy_bench.py.
 *
 * It sends GET requests at a fixed rate on a timetable set before the run
 * (request i is due at start + i / rate), whatever the answers do, over
 * keep-alive connections taken in turn (a connection whose answer is late
 * gets its next request pipelined behind it), and times each answer from
 * the moment its request was due, not from when it was written: a late
 * send counts in the latency rather than hiding it. Bounded: at most
 * --requests requests, for at most --duration seconds, then up to
 * --drain seconds for the answers still due. Loopback or any IPv4 address.
 *
 *   http-open-loop --addr 127.0.0.1:8080 --rate 20000 --duration 5
 *                  [--conns 50] [--keys 10000] [--requests N] [--drain 2]
 *
 * Prints one JSON line: the rate asked and achieved, the counts, p50, p90,
 * p99, p99.9 and the maximum in microseconds, and how late the sends were
 * (max_send_lag_us: above a few hundred microseconds, the generator did not
 * hold the rate and the figures are its own). Exit status 0 when every
 * request had a 2xx answer, 1 otherwise, 2 on bad usage. */

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 1024
#define RING 4096 /* requests outstanding on one connection at most */
#define INBUF 65536

struct conn {
    int fd;
    uint64_t due[RING]; /* when each outstanding request was due, ns */
    unsigned head, tail; /* ring of outstanding requests */
    char *out;
    size_t out_len, out_cap;
    char in[INBUF];
    size_t in_len;
};

struct opts {
    struct sockaddr_in addr;
    const char *addr_text;
    double rate, duration, drain;
    long requests;
    int conns, keys;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void usage(void)
{
    fprintf(stderr, "usage: http-open-loop --addr HOST:PORT --rate N --duration S "
                    "[--conns N] [--keys N] [--requests N] [--drain S]\n");
    exit(2);
}

static int parse_addr(const char *text, struct sockaddr_in *sa)
{
    char host[64];
    const char *colon = strrchr(text, ':');
    if (!colon || (size_t)(colon - text) >= sizeof host)
        return -1;
    memcpy(host, text, (size_t)(colon - text));
    host[colon - text] = '\0';
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    long port = strtol(colon + 1, NULL, 10);
    if (port <= 0 || port > 65535 || inet_pton(AF_INET, host, &sa->sin_addr) != 1)
        return -1;
    sa->sin_port = htons((uint16_t)port);
    return 0;
}

static void parse_opts(int argc, char **argv, struct opts *o)
{
    memset(o, 0, sizeof *o);
    o->conns = 50;
    o->keys = 10000;
    o->drain = 2.0;
    o->requests = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc)
            usage();
        const char *v = argv[++i];
        if (!strcmp(a, "--addr")) {
            o->addr_text = v;
            if (parse_addr(v, &o->addr) < 0) {
                fprintf(stderr, "http-open-loop: bad --addr %s (IPv4:port)\n", v);
                exit(2);
            }
        } else if (!strcmp(a, "--rate")) {
            o->rate = atof(v);
        } else if (!strcmp(a, "--duration")) {
            o->duration = atof(v);
        } else if (!strcmp(a, "--drain")) {
            o->drain = atof(v);
        } else if (!strcmp(a, "--requests")) {
            o->requests = atol(v);
        } else if (!strcmp(a, "--conns")) {
            o->conns = atoi(v);
        } else if (!strcmp(a, "--keys")) {
            o->keys = atoi(v);
        } else {
            usage();
        }
    }
    if (!o->addr_text || o->rate <= 0 || o->duration <= 0 || o->duration > 600 ||
        o->conns < 1 || o->conns > MAX_CONNS || o->keys < 1 || o->keys > 99999 ||
        o->drain < 0 || o->drain > 60)
        usage();
    long most = (long)(o->rate * o->duration) + 1;
    if (o->requests < 0 || o->requests > most)
        o->requests = most;
    if (o->requests > 50000000)
        usage();
}

static int connect_one(const struct sockaddr_in *sa)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (const struct sockaddr *)sa, sizeof *sa) < 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

static int flush_out(struct conn *c)
{
    while (c->out_len) {
        ssize_t n = send(c->fd, c->out, c->out_len, MSG_NOSIGNAL);
        if (n < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -1;
        memmove(c->out, c->out + n, c->out_len - (size_t)n);
        c->out_len -= (size_t)n;
    }
    return 0;
}

static int queue_request(struct conn *c, const char *req, size_t len, uint64_t due)
{
    if (c->tail - c->head >= RING)
        return -1;
    if (c->out_len + len > c->out_cap) {
        size_t cap = (c->out_cap ? c->out_cap * 2 : 4096) + len;
        char *p = realloc(c->out, cap);
        if (!p)
            return -1;
        c->out = p;
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, req, len);
    c->out_len += len;
    c->due[c->tail++ % RING] = due;
    return flush_out(c);
}

/* Length of the first complete answer in buf, its status in *status; 0
 * while incomplete, -1 when it is not HTTP/1.x or has a chunked body. */
static long answer_len(const char *buf, size_t len, int *status)
{
    const char *end = memmem(buf, len, "\r\n\r\n", 4);
    if (!end)
        return len >= INBUF ? -1 : 0;
    if (len < 12 || memcmp(buf, "HTTP/1.", 7))
        return -1;
    *status = atoi(buf + 9);
    size_t head = (size_t)(end - buf) + 4;
    long body = 0;
    for (const char *p = buf; p < end; ) {
        const char *eol = memmem(p, (size_t)(end - p) + 2, "\r\n", 2);
        if (!eol)
            break;
        if (eol - p > 15 && !strncasecmp(p, "content-length:", 15))
            body = strtol(p + 15, NULL, 10);
        else if (eol - p > 18 && !strncasecmp(p, "transfer-encoding:", 18))
            return -1;
        p = eol + 2;
    }
    return head + (size_t)body <= len ? (long)(head + (size_t)body) : 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct_us(const uint64_t *v, long n, double q)
{
    if (n == 0)
        return 0;
    long i = (long)(q * (double)n);
    if (i >= n)
        i = n - 1;
    return (double)v[i] / 1000.0;
}

int main(int argc, char **argv)
{
    struct opts o;
    parse_opts(argc, argv, &o);
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    signal(SIGPIPE, SIG_IGN);

    /* The requests, built once: one per client key, in turn. */
    char **reqs = calloc((size_t)o.keys, sizeof *reqs);
    size_t *req_len = calloc((size_t)o.keys, sizeof *req_len);
    uint64_t *lat = malloc((size_t)o.requests * sizeof *lat);
    struct conn *conns = calloc((size_t)o.conns, sizeof *conns);
    if (!reqs || !req_len || !lat || !conns) {
        fprintf(stderr, "http-open-loop: out of memory\n");
        return 1;
    }
    for (int k = 0; k < o.keys; k++) {
        char buf[256];
        int n = snprintf(buf, sizeof buf, "GET / HTTP/1.1\r\nHost: %s\r\nX-Api-Key: k%05d\r\n\r\n",
                         o.addr_text, k + 1);
        reqs[k] = strdup(buf);
        req_len[k] = (size_t)n;
    }
    int ep = epoll_create1(0);
    for (int i = 0; i < o.conns; i++) {
        conns[i].fd = connect_one(&o.addr);
        if (conns[i].fd < 0) {
            fprintf(stderr, "http-open-loop: connect %s: %s\n", o.addr_text, strerror(errno));
            return 1;
        }
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLET, .data.ptr = &conns[i]};
        epoll_ctl(ep, EPOLL_CTL_ADD, conns[i].fd, &ev);
    }

    long sent = 0, answered = 0, non2xx = 0, errors = 0;
    uint64_t max_lag = 0;
    double interval = 1e9 / o.rate;
    uint64_t start = now_ns();
    uint64_t send_end = start + (uint64_t)(o.duration * 1e9);
    uint64_t stop = send_end + (uint64_t)(o.drain * 1e9);
    int next_conn = 0;
    for (;;) {
        uint64_t t = now_ns();
        /* every request due by now, each on the next connection in turn */
        while (sent < o.requests) {
            uint64_t due = start + (uint64_t)((double)sent * interval);
            if (due > t || due >= send_end)
                break;
            if (t - due > max_lag)
                max_lag = t - due;
            struct conn *c = &conns[next_conn];
            next_conn = (next_conn + 1) % o.conns;
            int k = (int)(sent % o.keys);
            if (queue_request(c, reqs[k], req_len[k], due) < 0) {
                fprintf(stderr, "http-open-loop: connection %d failed or too far behind\n",
                        (int)(c - conns));
                errors++;
                goto done;
            }
            sent++;
        }
        long outstanding = sent - answered;
        if ((sent >= o.requests || t >= send_end) && outstanding == 0)
            break;
        if (t >= stop)
            break;
        /* wait for an answer or the next request's time, whichever is first */
        struct timespec to = {0, 0};
        uint64_t next_due = sent < o.requests ? start + (uint64_t)((double)sent * interval) : stop;
        if (next_due > send_end && sent < o.requests)
            next_due = stop;
        if (next_due > stop)
            next_due = stop;
        if (next_due > t) {
            uint64_t w = next_due - t;
            to.tv_sec = (time_t)(w / 1000000000u);
            to.tv_nsec = (long)(w % 1000000000u);
        }
        struct epoll_event evs[64];
        int n = epoll_pwait2(ep, evs, 64, &to, NULL);
        if (n < 0 && errno != EINTR) {
            perror("epoll_pwait2");
            return 1;
        }
        uint64_t t_read = now_ns();
        for (int i = 0; i < n; i++) {
            struct conn *c = evs[i].data.ptr;
            if ((evs[i].events & EPOLLOUT) && flush_out(c) < 0) {
                errors++;
                goto done;
            }
            for (;;) {
                ssize_t r = recv(c->fd, c->in + c->in_len, INBUF - c->in_len, 0);
                if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
                    if (c->tail != c->head) {
                        fprintf(stderr, "http-open-loop: connection closed with %u requests "
                                        "outstanding\n", c->tail - c->head);
                        errors++;
                        goto done;
                    }
                    break;
                }
                if (r < 0)
                    break;
                c->in_len += (size_t)r;
                int status;
                long len;
                while ((len = answer_len(c->in, c->in_len, &status)) > 0) {
                    if (c->tail == c->head) {
                        fprintf(stderr, "http-open-loop: an answer to no request\n");
                        errors++;
                        goto done;
                    }
                    uint64_t due = c->due[c->head++ % RING];
                    lat[answered++] = t_read > due ? t_read - due : 0;
                    if (status < 200 || status > 299)
                        non2xx++;
                    memmove(c->in, c->in + len, c->in_len - (size_t)len);
                    c->in_len -= (size_t)len;
                }
                if (len < 0) {
                    fprintf(stderr, "http-open-loop: an answer it cannot read\n");
                    errors++;
                    goto done;
                }
            }
        }
    }
done:;
    double wall = (double)(now_ns() - start) / 1e9;
    double sending = o.duration < wall ? o.duration : wall;
    qsort(lat, (size_t)answered, sizeof *lat, cmp_u64);
    printf("{\"rate\": %.0f, \"sent\": %ld, \"answered\": %ld, \"lost\": %ld, \"non2xx\": %ld, "
           "\"errors\": %ld, \"rps\": %.1f, \"p50_us\": %.1f, \"p90_us\": %.1f, "
           "\"p99_us\": %.1f, \"p999_us\": %.1f, \"max_us\": %.1f, \"max_send_lag_us\": %.1f}\n",
           o.rate, sent, answered, sent - answered, non2xx, errors,
           sending > 0 ? (double)sent / sending : 0.0, pct_us(lat, answered, 0.5),
           pct_us(lat, answered, 0.9), pct_us(lat, answered, 0.99),
           pct_us(lat, answered, 0.999), answered ? (double)lat[answered - 1] / 1000.0 : 0.0,
           (double)max_lag / 1000.0);
    for (int i = 0; i < o.conns; i++) {
        if (conns[i].fd >= 0)
            close(conns[i].fd);
        free(conns[i].out);
    }
    for (int k = 0; k < o.keys; k++)
        free(reqs[k]);
    free(reqs);
    free(req_len);
    free(lat);
    free(conns);
    close(ep);
    return errors || non2xx || sent != answered ? 1 : 0;
}
