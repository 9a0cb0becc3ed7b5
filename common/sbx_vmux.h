/* sbx_vmux.h - the frames that carry a vm sandbox's egress connections over one virtio-serial port (adr/0069, amendment "egress"): codec only, libc only, shared by the guest's relay and the broker. */
#ifndef SBX_VMUX_H
#define SBX_VMUX_H

#include <stddef.h>
#include <stdint.h>

/*
 * A frame is an 8-byte header, then its payload:
 *   byte 0     type (VMUX_OPEN .. VMUX_CREDIT)
 *   byte 1     0 (any other value: malformed)
 *   bytes 2-3  payload length, big-endian
 *   bytes 4-7  connection id, big-endian, never 0
 * OPEN (guest to broker: a client connected to the relay; no payload),
 * DATA (1..VMUX_DATA_MAX bytes of that connection), EOF (its sender will
 * send no more DATA on it: a half-close; no payload), CLOSE (the
 * connection is gone both ways, whatever is queued dropped; no payload),
 * CREDIT (4 bytes, big-endian, 1..VMUX_WINDOW: the sender has passed that
 * many more bytes of the connection on and may be sent that many more).
 * Each side may have at most VMUX_WINDOW bytes of a connection's DATA
 * outstanding (sent, not yet credited); each connection starts with a full
 * window both ways.
 */
#define VMUX_HDR 8
#define VMUX_DATA_MAX 16384
#define VMUX_WINDOW (64 * 1024)
/* The broker side reads no more of a peer's frames while more than this
 * many bytes of its own wait for that peer to read them (sbx_vmux_link.c);
 * it reads again once they are down to half. Fixed like the window: it
 * bounds what a guest that never reads its port can make the broker queue
 * beyond the credit. */
#define VMUX_OUT_PAUSE (256 * 1024)
/* The broker side dials its proxy for at most VMUX_OPEN_RATE OPENs a second
 * of one link, after a burst of VMUX_OPEN_BURST (a token bucket); an OPEN
 * beyond waits unread, and the link's reading with it, until a token comes
 * (sbx_vmux_link.c). Fixed like the window: an OPEN/CLOSE loop of a guest
 * would otherwise cost the shared broker a socket, connect and close per
 * 16 bytes it sends (adr/0069, review of session 11). OPENs past the
 * connection cap dial nothing and take no token. */
#define VMUX_OPEN_RATE 100
#define VMUX_OPEN_BURST 100

enum vmux_type { VMUX_OPEN = 1, VMUX_DATA, VMUX_EOF, VMUX_CLOSE, VMUX_CREDIT };

/* One parsed frame; data points into the parsed buffer (borrowed). */
struct vmux_frame {
	enum vmux_type type;
	uint32_t id;
	uint32_t credit;             /* CREDIT: the increment */
	const unsigned char *data;   /* DATA: the payload */
	size_t len;                  /* DATA: its length; else 0 */
};

/*
 * Writes the header of a frame of type for id with a payload of len bytes
 * into out. Returns VMUX_HDR. The caller keeps to the rules above (id not
 * 0, len as the type allows); nothing is checked here.
 */
size_t vmux_header(unsigned char out[VMUX_HDR], enum vmux_type type, uint32_t id,
    size_t len);

/* A whole CREDIT frame of n for id into out (VMUX_HDR + 4 bytes). Returns
 * its length. */
size_t vmux_credit(unsigned char out[VMUX_HDR + 4], uint32_t id, uint32_t n);

/*
 * Parses the frame at the start of buf (len bytes, untrusted). Returns its
 * length in bytes (> 0) with *f filled, 0 when buf holds only part of a
 * frame so far (nothing filled), or -1 when the bytes are no frame: an
 * unknown type, a non-zero reserved byte, id 0, a payload longer than
 * VMUX_DATA_MAX, an empty DATA, a payload on OPEN/EOF/CLOSE, a CREDIT that
 * is not 4 bytes or not 1..VMUX_WINDOW. *why (may be NULL) then names the
 * fault (a static string). The stream cannot be resynchronised after -1:
 * the caller ends the link.
 */
long vmux_parse(const unsigned char *buf, size_t len, struct vmux_frame *f,
    const char **why);

#endif
