/* agent_rig.h - what the agent channel's unit tests share (test_agent.c, test_agent_session.c): a real `sbx-helper agent` on a socketpair (or a socket the test plays the agent on) and a stream's callbacks that keep what came. */
#ifndef AGENT_RIG_H
#define AGENT_RIG_H

#include <stddef.h>
#include <sys/types.h>

#include <event2/bufferevent.h>
#include <event2/event.h>

#include "agent.h"

/* A channel to an agent: the real one (pid > 0) or the test playing it. */
struct rig {
	struct event_base *base;
	struct bufferevent *bev;
	struct sbx_agent_chan *ch;
	pid_t pid;
	int closed, ready;
	char root[64], state[64];
	char closed_code[48];
};

/* What one stream got. */
struct got {
	unsigned char *out[3];
	size_t len[3];
	int exits, errors, status, sig, rooms;
	char code[48];
	struct sbx_agent_stream *st;
	int pause_after;   /* pause the stream once this much output came (0: never) */
	int count_only;    /* keep no bytes, count them */
};

/* The helper binary: $SBX_HELPER_BIN, else build/out/sbx-helper of this tree. */
const char *helper_bin(void);

/*
 * Starts `sbx-helper agent` on a socketpair with private --root and
 * --state-dir under /tmp, or, with fake_fd, hands the test the other end
 * to play the agent on. Fails the test when it cannot.
 */
void rig_up(struct rig *r, int *fake_fd);

/* Runs r's loop in 10 ms turns until *flag >= want or ms have passed. */
void run_until(struct rig *r, int *flag, int want, int ms);

/* Frees the channel; a real agent must then exit by itself within 5 s
 * (else the test fails); removes the directories. */
void rig_down(struct rig *r);

/* Frees what g kept. */
void got_free(struct got *g);

/* Opens argv on r's channel with g's callbacks (g cleared first): with_stdin
 * as sbx_agent_open; open_flags as sbx_agent_open2. Fail the test on NULL. */
struct sbx_agent_stream *open_got(struct rig *r, struct got *g, const char *const *argv,
    int with_stdin);
struct sbx_agent_stream *open_flags(struct rig *r, struct got *g, const char *const *argv,
    unsigned flags);

/* Payloads of protocol 2 frames (exec --framed) of one type in g's fd 1,
 * concatenated into out (NUL-terminated, cap bytes); their length. */
size_t p2_payload(const struct got *g, int type, char *out, size_t cap);

/* Runs the loop until g's raw fd output holds needle (1), or ms passed or
 * the stream ended without it (0; the output is printed). */
int saw(struct rig *r, struct got *g, int fd, const char *needle, int ms);

#endif
