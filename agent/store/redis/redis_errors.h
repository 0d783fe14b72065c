/* SPDX-License-Identifier: Apache-2.0 */
/* redis_errors.h: the kinds of failure met talking to Redis, as the
 * metrics count them (spoa_rl_redis_errors_total{node,kind}) and the log
 * names them. A transport says which kind its last failure was
 * (redis_transport.h); the connection and the node classify the others. */
#ifndef RL_REDIS_ERRORS_H
#define RL_REDIS_ERRORS_H

enum redis_error_kind {
	REDIS_ERROR_CONNECT,          /* refused, unreachable, reset, closed */
	REDIS_ERROR_TIMEOUT,          /* no answer by the deadline */
	REDIS_ERROR_TLS,              /* the TLS handshake or session failed */
	REDIS_ERROR_AUTH,             /* NOAUTH, WRONGPASS */
	REDIS_ERROR_NOPERM,           /* an ACL refused a command */
	REDIS_ERROR_LOADING,          /* the server is loading its data */
	REDIS_ERROR_CLUSTER_MISMATCH, /* a Cluster node where a standalone one
				       * was configured, or the other way */
	REDIS_ERROR_PROTOCOL,         /* a reply that is not RESP, or not the
				       * one the call expects */
	REDIS_ERROR_OTHER,            /* any other error reply */
	REDIS_ERROR_KINDS
};

#endif
