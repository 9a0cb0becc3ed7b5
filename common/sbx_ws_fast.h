/* sbx_ws_fast.h - the WebSocket server's path for masked binary payloads beside libwslay, and client frames masked a word at a time (adr/0063): libwslay unmasks and masks a byte at a time, the api's largest cost for streamed stdin. */
#ifndef SBX_WS_FAST_H
#define SBX_WS_FAST_H

#include <stddef.h>
#include <stdint.h>

#include <event2/buffer.h>

/*
 * The server's input passes through here on its way to libwslay's recv
 * callback. Each frame header is read whole first (RFC 6455 §5.2). A
 * frame that is masked, has no RSV bits, a minimal length of 1 byte or
 * more, and is binary (opcode 2 starting a message, or a continuation of
 * one) with its message staying within the cap is *taken*: its payload is
 * unmasked here (§5.3, 8 bytes a step) into `pending`, and libwslay gets
 * the same header with payload length 0 (same FIN, opcode and mask key),
 * so it keeps judging the frame order, control frames, closes and pings.
 * The owner moves `pending` into its message at libwslay's frame start of
 * that header (sbx_ws_fast_taken). Every other frame (text, control, a
 * protocol error, one over the cap) goes to libwslay byte for byte, as
 * before: its refusals (1002, 1007, the owner's 1009) are unchanged.
 * Memory: `pending` holds at most one frame's payload, and a frame is
 * taken only when the message with it stays within `cap`.
 */
struct sbx_ws_fast {
	int state;              /* at a header, passing a frame, taking one */
	int msg;                /* the data message in progress: -1 none,
	                         * 0 text, 1 binary */
	uint64_t msg_len;       /* its payload so far */
	uint64_t left;          /* bytes left of the frame passed or taken */
	uint64_t off;           /* taking: payload offset (for the mask) */
	unsigned char key[4];
	unsigned char hdr[6];   /* the header libwslay gets for a taken frame */
	size_t hdr_len, hdr_off;
	int taken;              /* that header went (or goes) to libwslay */
};

/* A fresh parser at the first frame header. */
void sbx_ws_fast_init(struct sbx_ws_fast *f);

/* Fills buf (len bytes of room, len >= 1) for libwslay from `in`: the
 * bytes of passed frames, and the rewritten header of a taken frame once
 * its payload is in `pending`. cap: the owner's message cap in bytes.
 * Returns the bytes put in buf; 0 when `in` has not enough for the next
 * step (wait for more input); -1 when `pending` could not grow (out of
 * memory). Drains what it used from `in`. */
long sbx_ws_fast_recv(struct sbx_ws_fast *f, struct evbuffer *in,
    struct evbuffer *pending, uint64_t cap, unsigned char *buf, size_t len);

/* 1 when the frame libwslay starts now is a taken one (its payload is in
 * `pending`); clears the mark. Call from the frame-start callback with the
 * announced payload length. */
int sbx_ws_fast_taken(struct sbx_ws_fast *f, uint64_t payload_length);

/* XORs n bytes of src into dst with the masking key, the first byte at
 * payload offset off (RFC 6455 §5.3). dst may equal src. */
void sbx_ws_fast_mask(unsigned char *dst, const unsigned char *src, size_t n,
    const unsigned char key[4], uint64_t off);

/* A client's binary frame (FIN, opcode 2, masked with key), header and
 * masked payload a then b, appended to out. 0, or -1 out of memory (out
 * unchanged). */
int sbx_ws_fast_client_frame(struct evbuffer *out, const unsigned char key[4],
    const void *a, size_t an, const void *b, size_t bn);

#endif
