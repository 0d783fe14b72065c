/* SPDX-License-Identifier: Apache-2.0 */
/* explain.h: what the rules decide for one request, and where its limits
 * stand, without taking a token.
 *
 *   GET /admin/explain?api_key=k1&path=/login   (over --admin's listener)
 *   spoa-ratelimit -f rules.yaml --explain api_key=k1 path=/login
 *
 * The request is named by its message arguments, as HAProxy would send
 * them. It is classified as a check-rate is (decide_prepare_request: the
 * tier, the rule whose limits apply, the priority, the cost, the layers
 * and every limit's client key, an override applied), then the store is
 * asked to look at those keys as the admin's look does (store_admin: a
 * look of weight 0 in memory, a read of the values in Redis), so nothing
 * is spent. The answer is JSON; this module alone writes it.
 *
 * An argument that the rules never read is refused (400, exit 1), so a
 * misspelt name cannot pass unnoticed; so is a request that names no
 * client (none of the identity arguments), as GET /admin/client does. */
#ifndef RL_EXPLAIN_H
#define RL_EXPLAIN_H

#include <stdint.h>
#include <stdio.h>

struct ev_loop;
struct out;
struct http_req;
struct rules;
struct server;

/* GET /admin/explain: answers req (after the admin's token check) through
 * http_respond(), now or once the store has answered (on `loop`). */
void explain_serve(struct server *srv, struct ev_loop *loop, struct http_req *req);

/* --explain: the request that the operands ARG=VALUE (argv[0..argc))
 * describe, under rules (whose secret is set), against a fresh memory
 * store: the JSON to out, or a message to err. Returns the exit status:
 * 0, or 1 for a bad operand or argument. */
int explain_main(struct rules *rules, char **argv, int argc, FILE *out, FILE *err);

/* Writes `, "delay": "500ms"` (a rule's delay) or `, "delay": null`: one
 * spelling for /admin/rules and /admin/explain. */
void out_delay(struct out *o, int64_t delay_us);

#endif
