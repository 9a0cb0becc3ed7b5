/* sbx_vmux_link.h - one vm sandbox's egress link (adr/0069, amendment "egress"): many TCP-like connections over one byte stream in sbx_vmux.h frames, with per-connection flow control; libevent, shared by the guest's relay (sbx-proxy vmrelay) and the broker's vm driver. */
#ifndef SBX_VMUX_LINK_H
#define SBX_VMUX_LINK_H

#include <stddef.h>
#include <stdint.h>

#include <event2/bufferevent.h>

struct vmux;

/*
 * Broker side: a connection the guest opened (OPEN frame). Returns a new
 * bufferevent connected (or connecting) to where that connection's bytes
 * go (the sandbox's sbx-proxy); the link owns it from then on. NULL: the
 * guest is answered CLOSE.
 */
typedef struct bufferevent *(*vmux_open_cb)(void *arg);

/* The link ended: EOF or an error on its stream, or bytes that are no
 * frame (why says which, a static string). The callee frees the link
 * (vmux_free); nothing else is called after this. */
typedef void (*vmux_end_cb)(void *arg, const char *why);

/*
 * A link over link (a connected bufferevent; owned from now on, freed by
 * vmux_free) carrying at most max_conns connections (>= 1; an OPEN beyond
 * is answered CLOSE, a local connection beyond is closed at once). open:
 * the broker side's callback, NULL on the guest side (an OPEN from the
 * other side is then malformed). Each connection has VMUX_WINDOW bytes of
 * credit each way: its bytes are read only while the other side has room
 * for them, so a link holds at most about max_conns * VMUX_WINDOW * 2
 * bytes queued (plus VMUX_OUT_PAUSE of frames the broker side answers a
 * peer that does not read); the broker side dials (open) at most
 * VMUX_OPEN_RATE times a second after a burst of VMUX_OPEN_BURST, an OPEN
 * beyond waiting unread. EOF on one side's socket reaches the other side's socket
 * as a shutdown(SHUT_WR) once everything before it was written; a
 * connection ends when both directions did, or at once (CLOSE) on an
 * error. Returns NULL when out of memory (link then freed too).
 */
struct vmux *vmux_new(struct bufferevent *link, int max_conns, vmux_open_cb open,
    vmux_end_cb end, void *arg);

/*
 * Guest side: bev (a connected client socket; owned from now on) becomes a
 * new connection, announced with OPEN. Returns 0, or -1 (bev freed) when
 * max_conns are open or out of memory.
 */
int vmux_add(struct vmux *m, struct bufferevent *bev);

/* Connections open now. */
size_t vmux_count(const struct vmux *m);

/* Frees the link, its stream and every connection (their sockets closed:
 * their clients see the end). NULL ok. */
void vmux_free(struct vmux *m);

#endif
