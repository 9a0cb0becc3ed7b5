/*
 * reply_server.h - what the client-side fuzz targets share: a unix socket
 * they listen on, and a thread answering each connection with the next of a
 * list of scripted raw replies (fuzz_broker_reply, fuzz_engine_reply;
 * fuzz_http_client only listens and accepts itself). Test code: every
 * failure aborts through FUZZ_ASSERT (fuzz.h), none is returned.
 */
#ifndef SBX_FUZZ_REPLY_SERVER_H
#define SBX_FUZZ_REPLY_SERVER_H

#include <stddef.h>

/* The separator between the replies of one fuzz input. */
#define REPLY_SEP "\n--next--\n"
/* At most this many replies per input; the rest of the input is dropped. */
#define REPLY_MAXPARTS 32

/*
 * reply_listen(name, backlog, path, pathsz): create, bind and listen on
 * /tmp/sbx-fuzz-NAME-PID.sock (an old file of that name is removed), write
 * that path to PATH (PATHSZ bytes, at most 108 used). Returns the listening
 * fd (SOCK_CLOEXEC); aborts on any failure.
 */
int reply_listen(const char *name, int backlog, char *path, size_t pathsz);

/*
 * reply_serve(lfd): start a detached-for-life thread that, for each
 * connection accepted on LFD, reads what the client sent within 100 ms,
 * writes the next loaded reply (nothing once they run out, or for an empty
 * one), half-closes, drains the client for up to 200 ms and closes.
 * Call once. Ignore SIGPIPE before. Aborts if the thread cannot start.
 */
void reply_serve(int lfd);

/*
 * reply_load(d, n): replace the loaded replies by D[0..N) split at REPLY_SEP
 * (up to REPLY_MAXPARTS parts; copies them, D may go) and restart from the
 * first. Safe while the thread serves.
 */
void reply_load(const unsigned char *d, size_t n);

#endif
