/* sbx_helper_frame.c - sbx-helper's exec frames, written by the helper and read by the broker (libc only). */
#include <string.h>

#include "sbx_helper_frame.h"

void
sbx_helper_frame_header(unsigned char h[SBX_HELPER_FRAME_HDR], int type,
    size_t len)
{
	h[0] = (unsigned char)type;
	h[1] = SBX_HELPER_PROTO;
	h[2] = 0;
	h[3] = 0;
	h[4] = (unsigned char)(len >> 24);
	h[5] = (unsigned char)(len >> 16);
	h[6] = (unsigned char)(len >> 8);
	h[7] = (unsigned char)len;
}

int
sbx_helper_frame_check(const unsigned char h[SBX_HELPER_FRAME_HDR],
    uint32_t *plen)
{
	uint32_t n = (uint32_t)h[4] << 24 | (uint32_t)h[5] << 16 |
	    (uint32_t)h[6] << 8 | h[7];
	int ok;

	*plen = n;
	if (h[1] != SBX_HELPER_PROTO || h[2] != 0 || h[3] != 0)
		return SBX_HELPER_FRAME_BAD_HEADER;
	switch (h[0]) {
	case SBX_HELPER_FRAME_STDOUT:
	case SBX_HELPER_FRAME_STDERR:
		ok = n >= 1 && n <= SBX_HELPER_FRAME_MAX;
		break;
	case SBX_HELPER_FRAME_EXIT:
		ok = n == SBX_HELPER_EXIT_REC_LEN;
		break;
	case SBX_HELPER_FRAME_ERROR:
		ok = n >= 1 && n <= SBX_HELPER_ERROR_REC_MAX;
		break;
	default:
		ok = 0;
	}
	return ok ? h[0] : SBX_HELPER_FRAME_BAD_LENGTH;
}

void
sbx_helper_exit_encode(unsigned char rec[SBX_HELPER_EXIT_REC_LEN],
    const struct sbx_helper_exit *x)
{
	memset(rec, 0, SBX_HELPER_EXIT_REC_LEN);
	rec[0] = (unsigned char)x->how;
	rec[1] = (unsigned char)(x->how == SBX_HELPER_EXIT_HOW_EXITED ?
	    x->code : 0);
	rec[2] = (unsigned char)(x->how == SBX_HELPER_EXIT_HOW_SIGNALED ?
	    x->sig : 0);
	rec[3] = x->timed_out ? SBX_HELPER_EXIT_FLAG_TIMEOUT : 0;
}

int
sbx_helper_exit_decode(const unsigned char rec[SBX_HELPER_EXIT_REC_LEN],
    struct sbx_helper_exit *x)
{
	memset(x, 0, sizeof(*x));
	if ((rec[3] & ~SBX_HELPER_EXIT_FLAG_TIMEOUT) != 0 || rec[4] != 0 ||
	    rec[5] != 0 || rec[6] != 0 || rec[7] != 0)
		return -1;
	if (rec[0] == SBX_HELPER_EXIT_HOW_EXITED && rec[2] == 0)
		x->code = rec[1];
	else if (rec[0] == SBX_HELPER_EXIT_HOW_SIGNALED && rec[1] == 0 &&
	    rec[2] >= 1 && rec[2] <= 64)
		x->sig = rec[2];
	else
		return -1;
	x->how = rec[0];
	x->timed_out = (rec[3] & SBX_HELPER_EXIT_FLAG_TIMEOUT) != 0;
	return 0;
}
