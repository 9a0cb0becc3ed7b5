/* sbx_bev.h - reading a socket bufferevent in large pieces: libevent 2.1 reads at most 4 KiB a turn whatever bufferevent_set_max_single_read says (adr/0063); writing through to its socket when nothing is queued (adr/0053 amendment of session 11). */
#ifndef SBX_BEV_H
#define SBX_BEV_H

#include <stddef.h>

#include <event2/bufferevent.h>

/* Moves the bytes already queued on the socket under bev into its input
 * buffer, up to `upto` bytes held in that buffer in all (and never past
 * the read high watermark bev has, when it has one). Called at the top
 * of a read callback: libevent 2.1's evbuffer_read reads at most 4 KiB
 * per call (EVBUFFER_MAX_READ; evbuffer_set_max_read came with 2.2), one
 * epoll_wait + ioctl + readv a 4 KiB piece; this reads what FIONREAD
 * says is there in one readv.
 * bev must be a socket bufferevent (bufferevent_socket_new: its input's
 * end is frozen between its own reads; thawed here for the add). Reads
 * only bytes the socket reports queued, so an EOF or a socket error is
 * never consumed here: libevent's next read reports it as before.
 * Does nothing while bev's reading is disabled (paused), on a bev
 * without a socket, on a TLS bufferevent (its socket holds ciphertext), or when the input already holds `upto` bytes.
 * Returns the bytes added (0: none; errors are left to libevent's read:
 * nothing is lost, the socket keeps them). */
size_t sbx_bev_fill(struct bufferevent *bev, size_t upto);

/* Writes iov[0..n) to bev as bufferevent_write would, but straight to its
 * socket (one writev) when nothing is queued before it, so bytes the
 * socket takes now are not copied into bev's output first; what the
 * socket does not take (EAGAIN, a short write) is queued in bev's output
 * as usual (an error is queued too and left for libevent's own write to
 * report). Queued as bufferevent_write does instead when bev's output
 * holds bytes, writing is disabled, bev has no socket or is TLS (its
 * socket takes ciphertext). The socket must be non-blocking and SIGPIPE
 * ignored (sbx_daemon). Borrowed iov; 0, or -1 when queueing failed
 * (no memory; part may have been written). No callback of bev is run. */
struct iovec;
int sbx_bev_write(struct bufferevent *bev, const struct iovec *iov, int n);

/* Keeps the stream buffers' memory in the process between uses (glibc's
 * mallopt): allocations below SBX_HEAP_MMAP_MIN (1 MiB) come from the heap
 * instead of a fresh mmap each, and up to SBX_HEAP_KEEP (8 MiB) of free
 * heap top is kept instead of returned at once. Without it every 256 KiB
 * chain of a stream was a new mapping: ~7,000-8,600 page faults in each
 * daemon per 64 MiB of stdin (adr/0063). Called once at start, before any
 * allocation of note; does nothing on a C library without mallopt. */
#define SBX_HEAP_MMAP_MIN (1024 * 1024)
#define SBX_HEAP_KEEP (8 * 1024 * 1024)
void sbx_bev_heap(void);

/* What sbx_bev_heap keeps goes back once the daemon is quiet: each call
 * (one per finished request) arms, or pushes back, a timer that calls
 * malloc_trim(0) after SBX_HEAP_QUIET_MS with no further call, so a busy
 * daemon keeps its buffers and an idle one returns to its resting RSS (the
 * soak's RSS target, docs/bench.md). *evp is the timer, made on first use
 * on base (NULL: no timer this time, nothing else happens); free it with
 * sbx_heap_quiet_free. */
#define SBX_HEAP_QUIET_MS 2000
struct event;
struct event_base;
void sbx_heap_quiet(struct event_base *base, struct event **evp);
/* Frees the timer of sbx_heap_quiet and sets *evp NULL. NULL *evp ok. */
void sbx_heap_quiet_free(struct event **evp);

#endif
