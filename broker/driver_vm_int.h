/* driver_vm_int.h - what the vm driver's files share (adr/0069): the driver, a VM, an op; no functions of its own. */
#ifndef DRIVER_VM_INT_H
#define DRIVER_VM_INT_H

#include <sys/queue.h>
#include <sys/types.h>

#include <stdint.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "agent.h"
#include "driver_vm.h"
#include "driver_vm_cg.h"
#include "sbx_driver.h"

enum vm_state { VM_STOPPED, VM_BOOTING, VM_RUNNING, VM_STOPPING };

struct vmop;
struct vmux;
TAILQ_HEAD(vmop_q, vmop);

/* One sandbox the driver has touched since it started. */
struct vm {
	TAILQ_ENTRY(vm) link;
	struct vmdrv *d;
	char id[64];
	char dir[512];
	char image[256];
	int64_t created_ms;
	enum vm_state state;
	char stop_reason[16];
	pid_t pid;                    /* qemu, 0 when none */
	struct vm_proc *proc;         /* watches qemu (driver_vm_proc.h) */
	struct vm_proc *mkfs;         /* a new work.img being made */
	struct vm_cg cg;              /* its cgroups (driver_vm_cg.h) */
	struct event *timer;          /* boot polling, boot and stop deadlines */
	int64_t deadline_ms;
	struct bufferevent *bev;      /* agent.sock */
	struct sbx_agent_chan *ch;
	int ctl;                      /* ctl.sock, -1 */
	struct event *ctl_ev;         /* its answers ("ready") */
	int awaiting;                 /* "agent" sent, "ready" not yet back */
	int64_t asked_ms;             /* when "agent" was sent (sbx_mono_ms) */
	int destroying;
	int adopted;                  /* qemu of an earlier broker, its agent not
	                               * back yet: it runs, so status says
	                               * running (an ensure waits for the agent) */
	struct vmop_q waiters;        /* ensure/stop/destroy waiting on this VM */
	/* egress (driver_vm_egress.h) */
	char *allow;                  /* the allowlist, entries '\n'-joined (file
	                               * egress.allow), NULL: no egress */
	struct vm_proc *proxy;        /* its sbx-proxy on the host, NULL: none */
	struct vmux *mux;             /* the link on egress.sock, NULL: none */
	struct event *eg_timer;       /* the link's reconnect */
};
TAILQ_HEAD(vm_q, vm);

struct vmdrv {
	struct sbx_driver base;
	struct sbx_vm_config cfg;     /* strings below are owned copies */
	char **images;                /* allowlist, default first */
	char accel[8];                /* "kvm" or "tcg", decided at start */
	unsigned uid, gid;
	unsigned long tsc_khz;        /* host TSC (tsc_early_khz for the guest) */
	int cg_said;                  /* "no cgroup" logged once */
	char *proxy_exe;              /* sbx-proxy for the egress proxies */
	unsigned px_uid, px_gid;      /* their user (vm_runas), 0: the broker's */
	struct vm_q vms;
	uint64_t seq;
};

/* Kinds of op; what the op waits for decides its fields. */
enum vmop_kind { VMOP_STATUS, VMOP_ENSURE, VMOP_STOP, VMOP_DESTROY,
	VMOP_LIST_SBX, VMOP_HEALTH, VMOP_EXEC, VMOP_READ, VMOP_WRITE, VMOP_LIST, VMOP_USAGE,
	VMOP_EGRESS };

/*
 * One operation. The common part: a deferred event (answers that are known
 * at the call go out from it, never inside the call), the caller's
 * callback, and for stream ops the agent stream.
 */
struct vmop {
	struct sbx_op op;
	enum vmop_kind kind;
	struct vmdrv *d;
	TAILQ_ENTRY(vmop) wlink;      /* in a vm's waiters */
	struct vm *waiting;           /* that vm, or NULL */
	struct event *defer;
	void (*later)(struct vmop *op); /* what defer runs */
	struct event *timer;          /* exec/file deadline */
	struct sbx_err err;           /* a deferred error */
	struct sbx_op_cb cb;
	void *arg;
	struct sbx_sink sink;
	char id[64];
	struct sbx_agent_stream *st;
	/* ensure */
	char image[256];
	char *allow;                  /* egress allowlist ('\n'-joined, owned), NULL: none */
	/* exec / files */
	char exec_id[64];
	char cwd[4097];               /* exec: --cwd ("" none); files: the path */
	char after[256];              /* list: page.after ("" none) */
	char **argv, **env;           /* exec: owned copies */
	uint32_t mode;                /* write */
	int64_t cap, sent;            /* exec: output cap; list: stdout bound */
	int64_t cap2;                 /* exec: timeout_ms */
	int truncated, stdin_done;
	int session;                  /* a session (sbx_session_kind), 0: none */
	int input_closed;             /* session_close_input done */
	int64_t t0;
	unsigned char fhdr[8];        /* exec --framed decoder */
	size_t fhave, fpos;
	int ftype;
	uint32_t fleft;
	unsigned char frec[8];        /* the exit record */
	int have_exit, hx_how, hx_code, hx_sig, hx_timeout;
	struct evbuffer *errline;     /* error record / stderr line */
	struct evbuffer *body;        /* write, exec stdin: bytes to send; list: stdout */
	/* write_stream (adr/0018): the caller's source, lent until the op
	 * ends; src_left of its bytes still to send */
	struct evbuffer *src;
	struct evbuffer_cb_entry *src_ent;
	uint64_t src_left;
	size_t limit;
};

#endif
