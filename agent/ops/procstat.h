/* SPDX-License-Identifier: Apache-2.0 */
/* procstat.h: the process_* series every Prometheus client library
 * exports, under the names they use (open and maximum descriptors,
 * resident memory, CPU time, start time), read from /proc and getrusage()
 * at each scrape. A figure that cannot be read is left out. */
#ifndef RL_PROCSTAT_H
#define RL_PROCSTAT_H

struct out;

void procstat_series(struct out *o);

#endif
