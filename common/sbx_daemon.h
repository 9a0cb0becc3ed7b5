/* sbx_daemon.h - the start-up both daemons' mains share: process setup before the configuration is read (SPEC §9). */
#ifndef SBX_DAEMON_H
#define SBX_DAEMON_H

/*
 * Process setup every daemon does first: SIGPIPE ignored (a client gone
 * mid-write is an EPIPE the code handles, not a death), umask 077 (its
 * databases, sockets before chmod, and files are its own), logging to
 * stderr as name at info level (sbx_log.h). name is static.
 */
void sbx_daemon_begin(const char *name);

#endif
