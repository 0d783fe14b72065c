/* redis_cluster.h: what a Redis Cluster client computes without talking to
 * the cluster, starting with the slot of a key. Pure: no I/O, no clock, no
 * allocation. */
#ifndef RL_REDIS_CLUSTER_H
#define RL_REDIS_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#define REDIS_CLUSTER_SLOTS 16384          /* slots 0..16383 */

/* The slot of a key, as Redis computes it: CRC16-CCITT (XMODEM) of the key
 * modulo 16384, or of its hash tag when it has one: the bytes between the
 * first '{' and the first '}' after it, when there is at least one. */
uint16_t redis_cluster_slot(const char *key, size_t len);

#endif
