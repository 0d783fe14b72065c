/* SPDX-License-Identifier: Apache-2.0 */
/* sdnotify.h: telling systemd how the agent is doing (Type=notify), by the
 * notify protocol: one datagram of "KEY=VALUE" lines to the Unix socket
 * that $NOTIFY_SOCKET names ("@name" for the abstract namespace). Without
 * $NOTIFY_SOCKET every call does nothing, so the agent runs the same under
 * any other supervisor. No libsystemd: the protocol is this file. */
#ifndef RL_SDNOTIFY_H
#define RL_SDNOTIFY_H

/* Sends `state` ("READY=1", "STOPPING=1", ...; lines apart by '\n').
 * Returns 0 (sent, or no socket to send to), or -1 when the socket named
 * refused it. */
int sdnotify(const char *state);

/* "READY=1" once the agent listens, and after a reload. */
int sdnotify_ready(void);

/* "RELOADING=1" with MONOTONIC_USEC, the clock systemd orders reloads by:
 * before the rules file is read again (READY=1 follows, whatever the
 * outcome). */
int sdnotify_reloading(void);

/* "STOPPING=1": the agent drains its connections and exits. */
int sdnotify_stopping(void);

#endif
