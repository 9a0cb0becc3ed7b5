/*
 * fuzz_vmux.c - libFuzzer target: the vm egress link's frame parser and the
 * broker side's demultiplexer fed bytes a guest chose (common/sbx_vmux.c,
 * common/sbx_vmux_link.c; adr/0069 amendment "egress").
 *
 * Invariants asserted:
 *  - no crash, leak or undefined behaviour;
 *  - vmux_parse never reports a frame longer than its input or than
 *    VMUX_HDR + VMUX_DATA_MAX, a frame it accepts has a known type, an id
 *    that is not 0, a payload only where the type allows one, and its
 *    header written again by vmux_header (vmux_credit) is the input's;
 *    every shorter prefix of a whole frame is "need more" (0), never a
 *    frame or an error; a refusal names its reason;
 *  - the broker side's link, fed the input as the guest's stream, ends at
 *    most once, holds at most max_conns connections, and frees cleanly;
 *  - an input whose size is 1 mod 4 plays a guest that does not read its
 *    port: the input is fed again and again (up to DEAF_FEED bytes) while
 *    nothing reads the broker's answers, and the broker's queue for the
 *    guest stays within VMUX_OUT_PAUSE and a little (its "proxies" never
 *    write, so it holds no DATA); then the guest reads and the link, if it
 *    lives, carries on.
 */
#include <sys/socket.h>

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "fuzz.h"
#include "sbx_vmux.h"
#include "sbx_vmux_link.h"

#define MAX_CONNS 3
#define DEAF_FEED (768 * 1024)
#define DEAF_SLACK (64 * 1024)

static struct event_base *base;
static struct vmux *host;
static int ended, opened;
static int far[16];

static void
check_parse(const unsigned char *p, size_t n)
{
	unsigned char again[VMUX_HDR + 4];
	struct vmux_frame f;
	const char *why;
	long r;
	size_t i;

	while (n > 0) {
		why = NULL;
		r = vmux_parse(p, n, &f, &why);
		if (r == 0)
			return;
		if (r < 0) {
			FUZZ_ASSERT(why != NULL && why[0] != '\0');
			return;
		}
		FUZZ_ASSERT((size_t)r <= n && r >= VMUX_HDR && r <= VMUX_HDR + VMUX_DATA_MAX);
		FUZZ_ASSERT(f.id != 0 && f.type >= VMUX_OPEN && f.type <= VMUX_CREDIT);
		if (f.type == VMUX_DATA) {
			FUZZ_ASSERT(f.len >= 1 && f.len == (size_t)r - VMUX_HDR && f.data == p + VMUX_HDR);
			vmux_header(again, VMUX_DATA, f.id, f.len);
			FUZZ_ASSERT(memcmp(again, p, VMUX_HDR) == 0);
		} else if (f.type == VMUX_CREDIT) {
			FUZZ_ASSERT(r == VMUX_HDR + 4 && f.credit >= 1 && f.credit <= VMUX_WINDOW);
			vmux_credit(again, f.id, f.credit);
			FUZZ_ASSERT(memcmp(again, p, VMUX_HDR + 4) == 0);
		} else {
			FUZZ_ASSERT(r == VMUX_HDR && f.len == 0);
			vmux_header(again, f.type, f.id, 0);
			FUZZ_ASSERT(memcmp(again, p, VMUX_HDR) == 0);
		}
		for (i = 0; i < (size_t)r; i++)
			FUZZ_ASSERT(vmux_parse(p, i, &f, &why) == 0);
		p += r;
		n -= (size_t)r;
	}
}

static struct bufferevent *
open_cb(void *arg)
{
	int sp[2];

	(void)arg;
	if (opened >= (int)(sizeof(far) / sizeof(far[0])) ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sp) != 0)
		return NULL;
	far[opened++] = sp[1];
	return bufferevent_socket_new(base, sp[0], BEV_OPT_CLOSE_ON_FREE);
}

static void
end_cb(void *arg, const char *why)
{
	(void)arg;
	FUZZ_ASSERT(why != NULL);
	FUZZ_ASSERT(ended == 0);
	ended = 1;
	vmux_free(host);
	host = NULL;
}

int
LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	unsigned char sink[4096];
	struct bufferevent *hb;
	size_t off = 0, fed = 0, total = size;
	ssize_t w;
	int sp[2], i, j, deaf = size % 4 == 1;

	check_parse(data, size);
	if (size > 1 << 18)
		return 0;
	if (base == NULL)
		base = event_base_new();
	ended = opened = 0;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sp) != 0)
		return 0;
	hb = bufferevent_socket_new(base, sp[1], BEV_OPT_CLOSE_ON_FREE);
	host = vmux_new(hb, MAX_CONNS, open_cb, end_cb, NULL);
	FUZZ_ASSERT(host != NULL);
	if (deaf && size > 0)
		total = DEAF_FEED / size * size;
	for (i = 0; i < (deaf ? 4096 : 64) && host != NULL; i++) {
		w = fed < total ? write(sp[0], data + off, size - off) : 0;
		if (w > 0) {
			off += (size_t)w;
			fed += (size_t)w;
			if (off == size)
				off = 0;
		}
		event_base_loop(base, EVLOOP_NONBLOCK);
		if (host != NULL) {
			FUZZ_ASSERT(vmux_count(host) <= MAX_CONNS);
			FUZZ_ASSERT(evbuffer_get_length(bufferevent_get_output(hb)) <=
			    VMUX_OUT_PAUSE + DEAF_SLACK);
		}
		/* What the broker answers and the "proxy" gets is drained (a
		 * deaf guest reads its port only once it has said all). */
		if (deaf && fed < total && w > 0)
			continue;
		while (read(sp[0], sink, sizeof(sink)) > 0)
			;
		for (j = 0; j < opened; j++)
			while (far[j] >= 0 && read(far[j], sink, sizeof(sink)) > 0)
				;
		if (fed >= total && i > 8)
			break;
	}
	vmux_free(host);
	host = NULL;
	close(sp[0]);
	for (j = 0; j < opened; j++)
		close(far[j]);
	/* Events of freed bufferevents are gone; run once to settle. */
	event_base_loop(base, EVLOOP_NONBLOCK);
	return 0;
}
