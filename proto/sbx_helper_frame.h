/* sbx_helper_frame.h - the frame codec of sbx-helper exec --framed (libc only; contract in sbx_helper_proto.h). */
#ifndef SBX_HELPER_FRAME_H
#define SBX_HELPER_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "sbx_helper_proto.h"

/*
 * Shared by the helper (static, libc-only build: this file needs nothing
 * but <stddef.h>/<stdint.h>) which writes frames, and the broker's engine
 * driver which reads them from a sandbox: untrusted there, so the decoders
 * check every byte the protocol fixes (sbx_helper_proto.h, exec --framed).
 */

/* Writes the 8-byte header of a frame of type (SBX_HELPER_FRAME_*) whose
 * payload is len bytes (1..SBX_HELPER_FRAME_MAX; not checked) into h. */
void sbx_helper_frame_header(unsigned char h[SBX_HELPER_FRAME_HDR], int type,
    size_t len);

/* What sbx_helper_frame_check found wrong. */
#define SBX_HELPER_FRAME_BAD_HEADER (-1)  /* version or zero bytes wrong */
#define SBX_HELPER_FRAME_BAD_LENGTH (-2)  /* unknown type, or length out of its bound */

/*
 * Checks a received header: byte 1 SBX_HELPER_PROTO, bytes 2-3 zero, a known
 * type whose length is within its bound (stdout/stderr 1..FRAME_MAX, exit
 * exactly EXIT_REC_LEN, error 1..ERROR_REC_MAX). Returns the type with
 * *plen the payload length, or SBX_HELPER_FRAME_BAD_HEADER /
 * SBX_HELPER_FRAME_BAD_LENGTH (*plen then unspecified).
 */
int sbx_helper_frame_check(const unsigned char h[SBX_HELPER_FRAME_HDR],
    uint32_t *plen);

/* An exit record, decoded. */
struct sbx_helper_exit {
	int how;        /* SBX_HELPER_EXIT_HOW_EXITED or _SIGNALED */
	int code;       /* exit status 0..255 (how exited), else 0 */
	int sig;        /* signal 1..64 (how signaled), else 0 */
	int timed_out;  /* 1: the --timeout-ms backstop fired */
};

/* Writes the exit record of x into rec (bytes 4-7 zero; code/sig of the
 * other how written as 0). */
void sbx_helper_exit_encode(unsigned char rec[SBX_HELPER_EXIT_REC_LEN],
    const struct sbx_helper_exit *x);

/* Reads an exit record (untrusted). Returns 0 with *x, or -1 when any byte
 * breaks the layout (unknown how, a code with a signal, signal outside
 * 1..64, unknown flag bits, non-zero padding). */
int sbx_helper_exit_decode(const unsigned char rec[SBX_HELPER_EXIT_REC_LEN],
    struct sbx_helper_exit *x);

#endif
