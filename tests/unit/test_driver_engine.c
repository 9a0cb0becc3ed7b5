/*
 * test_driver_engine.c - the engine driver against a scripted fake Engine
 * API on a unix socket (no runtime needed), with the agent off so every
 * invocation is a runtime exec (driver_engine_rexec.c); the agent's channel
 * has its own tests (test_agent.c, the integration suites). It uses only
 * the driver's public header (driver_engine.h). One test file per area
 * (STYLE.md): over 1,000 lines because the driver is one area and its
 * tests share one scripted runtime; split, they would each need it.
 */
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <jansson.h>
#include <sodium.h>

#include "driver_engine.h"
#include "sbx_helper_proto.h"
#include "sbx_proto.h"

/*
 * The fake runtime keeps one container ("sbx-t1" unless a test says
 * otherwise) and its volume, answers the calls the driver makes, and logs
 * every request ("METHOD PATH") with its JSON body so tests can assert what
 * was asked of the runtime. Exec starts are answered "101 UPGRADED" followed
 * by the test's script of 8-byte frames, sent in small pieces. A user exec's
 * script carries sbx-helper's frames (exec --framed, sbx_helper_proto.h)
 * inside the runtime's stdout frames, as the real helper does.
 */

#define MAX_LOG 64
#define MAX_EXECS 256

struct fexec {
	char id[16];
	json_t *cmd;
	int exit_code;
	int running;
	struct bufferevent *stream;   /* an exec start that is still open */
};

struct fx {
	struct event_base *base;
	struct evconnlistener *lis;
	char dir[64];
	char sock[96];
	char helper[96];
	struct sbx_driver *drv;

	/* runtime state */
	int c_exists, c_labelled, c_running, c_egress;
	char c_image[64];
	int v_exists, v_labelled;
	char c_helper[96];            /* the container's helper label */
	/* the image's mount paths (adr/0045) the probe's HEAD finds as a
	 * symbolic link, a regular file; any other is absent */
	const char *img_link, *img_file;
	int start_fail;               /* the sandbox's start answers 500 */
	int ghost;                    /* Podman's ghost of t1 (adr/0058): its
	                               * inspect and the list answer 500 */
	int removing;                 /* t1 left "removing" by a cut removal */
	int oci_left;                 /* t1's start: the OCI runtime's state
	                               * of a cut start (500) until removed;
	                               * 1 Podman's words, 2 Docker's (shim) */
	int storage_left;             /* t1's create: a name only Podman's
	                               * storage holds (500) until removed */
	int exec_improper;            /* exec create: Podman's 500 of a
	                               * container that is not running */
	int gone;                     /* t1's inspect: Podman's 500 of a
	                               * container being removed */
	char helper_vol[96];          /* the name the driver must use */
	int hv_filled;                /* the helper volume holds the helper */
	int init_exit;                /* the init container's exit status */
	int init_wait_cut;            /* the wait's headers, then close (a killed daemon) */
	int net_exists, net_labelled;
	int no_t1_listed;             /* containers/json without t1 */
	int pool_listed;              /* containers/json: a claimed and an
	                               * unclaimed warm pool member (adr/0067) */
	char listed_ids[256];         /* the ids a list answered, ' '-ended */
	json_t *net_created;          /* last network create body */
	json_t *created;              /* last container create body */
	struct fexec execs[MAX_EXECS];
	int nexecs;
	char killed[64];              /* exec id given to "sbx-helper kill" */
	int kills;

	/* the script of the next user exec */
	const unsigned char *script;
	size_t script_len;
	int script_exit;
	int script_hang;              /* keep the stream open until killed */
	const char *helper_stderr;    /* a helper mode's error line */
	int helper_exit;
	const char *helper_stdout;
	int file_hang;                /* read/write/list: never answer */
	int truncated;                /* list callback's truncated */

	/* request log */
	char *log[MAX_LOG];
	json_t *bodies[MAX_LOG];
	int nlog;

	/* results */
	int returned;
	int early;
	int terminal;
	struct sbx_err err;
	int have_err;
	struct sbx_status st;
	struct sbx_exit ex;
	struct evbuffer *out[3];
	char exec_id[64];
	struct sbx_dirent ents[8];
	size_t nents;
	struct sbx_health health;
	struct sbx_op *op;
	int cancel_on_output;
	char order[64];               /* streams in the order output came, runs merged */
	size_t norder;
};

struct conn {
	struct fx *f;
	struct bufferevent *bev;
	struct fexec *streaming;
	size_t sent;
};

/* ---------- fake Engine API ---------- */

static void
reply(struct bufferevent *bev, int status, const char *reason, json_t *body)
{
	char *text = body != NULL ? json_dumps(body, JSON_COMPACT) : NULL;

	evbuffer_add_printf(bufferevent_get_output(bev),
	    "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
	    "Content-Length: %zu\r\nConnection: close\r\n\r\n%s", status, reason,
	    text != NULL ? strlen(text) : 0, text != NULL ? text : "");
	free(text);
	json_decref(body);
}

/* An archive HEAD's answer: the path's stat as Docker gives it. */
static void
reply_stat(struct bufferevent *bev, const char *path, long long mode,
    const char *link)
{
	json_t *j;
	char *text, b64[1024];

	j = json_pack("{s:s, s:i, s:I, s:s, s:s}", "name", path + 1, "size", 9,
	    "mode", (json_int_t)mode, "mtime", "2026-01-01T00:00:00Z",
	    "linkTarget", link);
	text = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	assert_non_null(text);
	sodium_bin2base64(b64, sizeof(b64), (const unsigned char *)text,
	    strlen(text), sodium_base64_VARIANT_ORIGINAL);
	free(text);
	evbuffer_add_printf(bufferevent_get_output(bev), "HTTP/1.1 200 OK\r\n"
	    "X-Docker-Container-Path-Stat: %s\r\nContent-Length: 0\r\n"
	    "Connection: close\r\n\r\n", b64);
}

static json_t *
msg(const char *m)
{
	return json_pack("{s:s}", "message", m);
}

static json_t *
inspect_json(struct fx *f)
{
	json_t *labels = json_object();

	if (f->c_labelled) {
		json_object_set_new(labels, "io.sbx.managed", json_string("true"));
		json_object_set_new(labels, "io.sbx.id", json_string("t1"));
		json_object_set_new(labels, "io.sbx.egress",
		    json_string(f->c_egress ? "1" : "0"));
		json_object_set_new(labels, "io.sbx.image", json_string(f->c_image));
		if (f->c_helper[0] != '\0')
			json_object_set_new(labels, "io.sbx.helper",
			    json_string(f->c_helper));
	}
	return json_pack("{s:s, s:s, s:{s:b, s:b, s:s}, s:{s:s, s:o},"
	    " s:{s:o}}",
	    "Id", "c0ffee0123456789", "Created", "2026-11-30T12:00:00.250Z",
	    "State", "Running", f->c_running, "OOMKilled", 0, "Status",
	    f->removing ? "removing" : f->c_running ? "running" : "exited",
	    "Config", "Image", f->c_image, "Labels", labels,
	    "NetworkSettings", "Networks", f->c_egress ?
	    json_pack("{s:{}}", "sbx-t1-egress") : json_pack("{s:{}}", "none"));
}

static void
frame(struct evbuffer *b, int stream, const void *p, size_t n)
{
	unsigned char h[8] = { (unsigned char)stream, 0, 0, 0,
	    (unsigned char)(n >> 24), (unsigned char)(n >> 16),
	    (unsigned char)(n >> 8), (unsigned char)n };

	evbuffer_add(b, h, 8);
	evbuffer_add(b, p, n);
}

static void conn_free(struct conn *c);

static void
end_stream(struct fexec *x, int code)
{
	x->exit_code = code;
	x->running = 0;
	if (x->stream != NULL) {
		struct conn *c = NULL;

		bufferevent_getcb(x->stream, NULL, NULL, NULL, (void **)&c);
		x->stream = NULL;
		if (c != NULL) {
			c->streaming = NULL;
			conn_free(c);
		}
	}
}

/* Sends the script a few bytes per loop turn, so frame headers and payloads
 * arrive split at every boundary. */
static void
drip(struct conn *c)
{
	struct fx *f = c->f;
	size_t n;

	if (c->streaming == NULL)
		return;
	if (c->sent >= f->script_len) {
		if (!f->script_hang)
			end_stream(c->streaming, f->script_exit);
		return;
	}
	n = f->script_len - c->sent;
	if (n > 3)
		n = 3;
	bufferevent_write(c->bev, f->script + c->sent, n);
	c->sent += n;
}

static void
conn_write(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;

	(void)bev;
	if (c->streaming != NULL)
		drip(c);
}

static void
start_exec(struct conn *c, struct fexec *x)
{
	struct fx *f = c->f;
	const char *mode = json_string_value(json_array_get(x->cmd, 1));
	struct evbuffer *b = evbuffer_new();
	size_t i;

	evbuffer_add_printf(bufferevent_get_output(c->bev),
	    "HTTP/1.1 101 UPGRADED\r\nContent-Type: application/"
	    "vnd.docker.raw-stream\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n");
	x->running = 1;
	if (strcmp(mode, "kill") == 0) {
		/* sbx-helper kill ID: the exec with that id dies. */
		snprintf(f->killed, sizeof(f->killed), "%s",
		    json_string_value(json_array_get(x->cmd, 2)));
		f->kills++;
		for (i = 0; i < (size_t)f->nexecs; i++)
			if (f->execs[i].running && &f->execs[i] != x &&
			    strcmp(json_string_value(json_array_get(
			    f->execs[i].cmd, 1)), "exec") == 0)
				end_stream(&f->execs[i], 137);
		x->exit_code = 0;
		x->running = 0;
		c->streaming = NULL;
		bufferevent_setcb(c->bev, NULL, NULL, NULL, c);
		conn_free(c);
		evbuffer_free(b);
		return;
	}
	if (strcmp(mode, "exec") != 0 && f->file_hang) {
		/* a stopped helper: the stream stays open, silent */
		evbuffer_free(b);
		c->streaming = NULL;
		return;
	}
	if (strcmp(mode, "exec") != 0) {
		/* read, write, list: the helper's stdout, stderr, status. */
		if (f->helper_stdout != NULL)
			frame(b, 1, f->helper_stdout, strlen(f->helper_stdout));
		if (f->helper_stderr != NULL)
			frame(b, 2, f->helper_stderr, strlen(f->helper_stderr));
		bufferevent_write_buffer(c->bev, b);
		evbuffer_free(b);
		x->exit_code = f->helper_exit;
		x->running = 0;
		c->streaming = NULL;
		/* close once flushed */
		bufferevent_flush(c->bev, EV_WRITE, BEV_FLUSH);
		conn_free(c);
		return;
	}
	evbuffer_free(b);
	c->streaming = x;
	x->stream = c->bev;
	c->sent = 0;
	drip(c);
}

static struct fexec *
find_exec(struct fx *f, const char *id)
{
	int i;

	for (i = 0; i < f->nexecs; i++)
		if (strcmp(f->execs[i].id, id) == 0)
			return &f->execs[i];
	return NULL;
}

static int
ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && strcmp(s + n - m, suffix) == 0;
}

#define GHOST_ID "c0ffee0123456789c0ffee0123456789c0ffee0123456789c0ffee0123456789"

static void
route(struct conn *c, const char *method, const char *path, json_t *body)
{
	struct fx *f = c->f;
	struct bufferevent *bev = c->bev;
	struct fexec *x;
	char id[32];

	if (strcmp(path, "/_ping") == 0) {
		evbuffer_add_printf(bufferevent_get_output(bev), "HTTP/1.1 200 OK\r\n"
		    "Content-Length: 2\r\n\r\nOK");
	} else if (strcmp(path, "/v1.41/version") == 0) {
		reply(bev, 200, "OK", json_pack("{s:s, s:s, s:[{s:s}]}", "Version",
		    "20.10.24", "ApiVersion", "1.41", "Components", "Name", "Engine"));
	} else if (strncmp(path, "/v1.41/images/", 14) == 0) {
		reply(bev, 200, "OK", json_pack("{s:s}", "Id", "sha256:1"));
	} else if (f->ghost && (strcmp(path, "/v1.41/containers/sbx-t1/json")
	    == 0 || strncmp(path, "/v1.41/containers/json?", 23) == 0)) {
		reply(bev, 500, "Internal Server Error", msg("getting container "
		    "from store \"" GHOST_ID "\": container not known"));
	} else if (strcmp(method, "DELETE") == 0 && (f->ghost || f->removing) &&
	    (strncmp(path, "/v1.41/containers/" GHOST_ID "?", 83) == 0 ||
	    strncmp(path, "/v1.41/containers/sbx-t1?", 25) == 0)) {
		f->ghost = f->removing = 0;
		f->c_exists = 0;
		reply(bev, 204, "No Content", NULL);
	} else if (f->gone && strcmp(path, "/v1.41/containers/sbx-t1/json")
	    == 0) {
		reply(bev, 500, "Internal Server Error", msg("container " GHOST_ID
		    " does not exist in database: no such container"));
	} else if (strcmp(path, "/v1.41/containers/sbx-t1/json") == 0) {
		if (!f->c_exists)
			reply(bev, 404, "Not Found", msg("No such container: sbx-t1"));
		else
			reply(bev, 200, "OK", inspect_json(f));
	} else if (strncmp(path, "/v1.41/containers/sbx-", 22) == 0 &&
	    strstr(path, "/json") != NULL) {
		reply(bev, 404, "Not Found", msg("No such container"));
	} else if (strcmp(path, "/v1.41/volumes/create") == 0 &&
	    strncmp(json_string_value(json_object_get(body, "Name")),
	    "sbx-helper-", 11) == 0) {
		reply(bev, 201, "Created", json_pack("{s:O, s:O}", "Name",
		    json_object_get(body, "Name"), "Labels",
		    json_object_get(body, "Labels")));
	} else if (strncmp(path, "/v1.41/containers/create?name=sbx-helper-", 41)
	    == 0 && ends_with(path, ".fill")) {
		reply(bev, 201, "Created", json_pack("{s:s}", "Id", "f111"));
	} else if (strncmp(path, "/v1.41/containers/f111/archive?", 31) == 0) {
		if (strcmp(method, "PUT") == 0) {
			f->hv_filled = 1;
			reply(bev, 200, "OK", NULL);
		} else {
			reply(bev, 404, "Not Found", msg("no such file"));
		}
	} else if (strcmp(path, "/v1.41/containers/create?name=sbx-t1.probe") == 0) {
		reply(bev, 201, "Created", json_pack("{s:s}", "Id", "p111"));
	} else if (strncmp(path, "/v1.41/containers/p111/archive?path=", 36) == 0) {
		if (f->img_link != NULL && strcmp(path + 36, f->img_link) == 0)
			reply_stat(bev, path + 36, (1LL << 27) | 0777, "/work/sub");
		else if (f->img_file != NULL && strcmp(path + 36, f->img_file) == 0)
			reply_stat(bev, path + 36, 0644, "");
		else
			evbuffer_add_printf(bufferevent_get_output(bev),
			    "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n"
			    "Connection: close\r\n\r\n");
	} else if (strncmp(path, "/v1.41/containers/p111?", 23) == 0 &&
	    strcmp(method, "DELETE") == 0) {
		reply(bev, 204, "No Content", NULL);
	} else if (strcmp(path, "/v1.41/containers/create?name=sbx-t1.init") == 0) {
		reply(bev, 201, "Created", json_pack("{s:s}", "Id", "i111"));
	} else if (strcmp(path, "/v1.41/containers/i111/start") == 0) {
		reply(bev, 204, "No Content", NULL);
	} else if (strcmp(path, "/v1.41/containers/i111/wait") == 0 &&
	    f->init_wait_cut) {
		/* dockerd sends a wait's headers at once; killed, it never
		 * sends the body */
		evbuffer_add_printf(bufferevent_get_output(bev),
		    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
		    "Transfer-Encoding: chunked\r\n\r\n");
	} else if (strcmp(path, "/v1.41/containers/i111/wait") == 0) {
		reply(bev, 200, "OK", json_pack("{s:i}", "StatusCode",
		    f->init_exit));
	} else if ((strncmp(path, "/v1.41/containers/i111?", 23) == 0 ||
	    strncmp(path, "/v1.41/containers/f111?", 23) == 0) &&
	    strcmp(method, "DELETE") == 0) {
		reply(bev, 204, "No Content", NULL);
	} else if (strncmp(path, "/v1.41/volumes?filters=", 23) == 0) {
		reply(bev, 200, "OK", json_pack("{s:[{s:s, s:{s:s, s:s}}]}",
		    "Volumes", "Name", "sbx-helper-0000000000000000", "Labels",
		    "io.sbx.managed", "true", "io.sbx.helper-stem", "sbx-helper"));
	} else if (strcmp(path, "/v1.41/volumes/sbx-helper-0000000000000000")
	    == 0 && strcmp(method, "DELETE") == 0) {
		reply(bev, 204, "No Content", NULL);
	} else if (strcmp(path, "/v1.41/volumes/create") == 0) {
		if (!f->v_exists) {
			f->v_exists = 1;
			f->v_labelled = json_object_get(json_object_get(body,
			    "Labels"), "io.sbx.managed") != NULL;
		}
		reply(bev, 201, "Created", json_pack("{s:s, s:o}", "Name",
		    "sbx-t1-work", "Labels", f->v_labelled ? json_pack("{s:s}",
		    "io.sbx.managed", "true") : json_object()));
	} else if (strcmp(path, "/v1.41/volumes/sbx-t1-work") == 0) {
		if (strcmp(method, "DELETE") == 0) {
			f->v_exists = 0;
			reply(bev, 204, "No Content", NULL);
		} else if (!f->v_exists) {
			reply(bev, 404, "Not Found", msg("no such volume"));
		} else {
			reply(bev, 200, "OK", json_pack("{s:s, s:o}", "Name",
			    "sbx-t1-work", "Labels", f->v_labelled ? json_pack(
			    "{s:s}", "io.sbx.managed", "true") : json_object()));
		}
	} else if (strcmp(path, "/v1.41/networks/sbx-t1-egress") == 0) {
		if (!f->net_exists)
			reply(bev, 404, "Not Found", msg("network not found"));
		else
			reply(bev, 200, "OK", json_pack("{s:s, s:s, s:o}", "Name",
			    "sbx-t1-egress", "Id", "n1", "Labels", f->net_labelled ?
			    json_pack("{s:s, s:s}", "io.sbx.managed", "true",
			    "io.sbx.id", "t1") : json_object()));
	} else if (strcmp(path, "/v1.41/networks/create") == 0) {
		f->net_exists = f->net_labelled = 1;
		json_decref(f->net_created);
		f->net_created = json_incref(body);
		reply(bev, 201, "Created", json_pack("{s:s}", "Id", "n1"));
	} else if (strcmp(method, "DELETE") == 0 &&
	    strncmp(path, "/v1.41/networks/", 16) == 0) {
		if (strcmp(path + 16, "n1") == 0)
			f->net_exists = 0;
		reply(bev, 204, "No Content", NULL);
	} else if (strncmp(path, "/v1.41/networks?filters=", 24) == 0) {
		/* Ours and orphaned (when t1 is not listed), ours in use, another
		 * broker's, one sbx never made, the shared one of old. */
		reply(bev, 200, "OK", json_pack("[{s:s, s:s, s:{s:s, s:s}},"
		    " {s:s, s:s, s:{s:s, s:s}}, {s:s, s:s, s:{s:s, s:s}},"
		    " {s:s, s:s, s:{}}, {s:s, s:s, s:{s:s}}]",
		    "Name", "sbx-t1-egress", "Id", "n1", "Labels",
		    "io.sbx.managed", "true", "io.sbx.id", "t1",
		    "Name", "sbx-t2-egress", "Id", "n2", "Labels",
		    "io.sbx.managed", "true", "io.sbx.id", "t2",
		    "Name", "zzz-t3-egress", "Id", "n3", "Labels",
		    "io.sbx.managed", "true", "io.sbx.id", "t3",
		    "Name", "sbx-t4-egress", "Id", "n4", "Labels",
		    "Name", "sbx-egress", "Id", "n5", "Labels",
		    "io.sbx.managed", "true"));
	} else if (strcmp(method, "DELETE") == 0 && f->storage_left &&
	    strncmp(path, "/v1.41/containers/sbx-t1?force=1", 32) == 0) {
		f->storage_left = 0;
		reply(bev, 204, "No Content", NULL);
	} else if (strcmp(path, "/v1.41/containers/create?name=sbx-t1") == 0 &&
	    f->storage_left) {
		reply(bev, 500, "Internal Server Error", msg("creating container "
		    "storage: the container name \"sbx-t1\" is already in use by "
		    "\"" GHOST_ID "\". You have to remove that container to be "
		    "able to reuse that name.: that name is already in use"));
	} else if (strcmp(path, "/v1.41/containers/create?name=sbx-t1") == 0) {
		json_decref(f->created);
		f->created = json_incref(body);
		f->c_exists = 1;
		f->c_labelled = 1;
		f->c_running = 0;
		snprintf(f->c_helper, sizeof(f->c_helper), "%s",
		    json_string_value(json_object_get(json_object_get(body,
		    "Labels"), "io.sbx.helper")));
		f->c_egress = strcmp(json_string_value(json_object_get(
		    json_object_get(body, "Labels"), "io.sbx.egress")), "1") == 0;
		snprintf(f->c_image, sizeof(f->c_image), "%s",
		    json_string_value(json_object_get(body, "Image")));
		reply(bev, 201, "Created", json_pack("{s:s}", "Id",
		    "c0ffee0123456789"));
	} else if (strcmp(path, "/v1.41/containers/c0ffee0123456789/start") == 0 &&
	    f->oci_left) {
		reply(bev, 500, "Internal Server Error", msg(f->oci_left == 2 ?
		    "failed to start shim: mkdir /run/containerd/io.containerd."
		    "runtime.v2.task/moby/c0ffee0123456789: file exists: unknown" :
		    "runc: runc create failed: container with given ID already "
		    "exists: OCI runtime error"));
	} else if (strcmp(path, "/v1.41/containers/c0ffee0123456789/start") == 0 &&
	    f->start_fail) {
		reply(bev, 500, "Internal Server Error", msg("error mounting "
		    "\"/var/lib/docker/volumes/sbx-t1-work/_data\" to rootfs at "
		    "\"/work\": /var/lib/docker/overlay2/x/merged/work: not a "
		    "directory"));
	} else if (strcmp(path, "/v1.41/containers/c0ffee0123456789/start") == 0) {
		f->c_running = 1;
		reply(bev, 204, "No Content", NULL);
	} else if (strncmp(path, "/v1.41/containers/c0ffee0123456789/stop", 39)
	    == 0) {
		f->c_running = 0;
		reply(bev, 204, "No Content", NULL);
	} else if (strncmp(path, "/v1.41/containers/c0ffee0123456789?", 35) == 0 &&
	    strcmp(method, "DELETE") == 0) {
		f->c_exists = 0;
		f->oci_left = 0;
		reply(bev, 204, "No Content", NULL);
	} else if (strcmp(path, "/v1.41/containers/c0ffee0123456789/exec") == 0 &&
	    f->exec_improper) {
		reply(bev, 500, "Internal Server Error", msg("can only create exec "
		    "sessions on running containers: container state improper"));
	} else if (strcmp(path, "/v1.41/containers/c0ffee0123456789/exec") == 0) {
		assert_true(f->nexecs < MAX_EXECS);
		x = &f->execs[f->nexecs];
		snprintf(x->id, sizeof(x->id), "e%d", f->nexecs++);
		x->cmd = json_incref(json_object_get(body, "Cmd"));
		reply(bev, 201, "Created", json_pack("{s:s}", "Id", x->id));
	} else if (sscanf(path, "/v1.41/exec/%31[^/]/", id) == 1 &&
	    ends_with(path, "/start") && (x = find_exec(f, id)) != NULL) {
		start_exec(c, x);
		return;
	} else if (sscanf(path, "/v1.41/exec/%31[^/]/", id) == 1 &&
	    ends_with(path, "/json") && (x = find_exec(f, id)) != NULL) {
		reply(bev, 200, "OK", json_pack("{s:s, s:b, s:i}", "ID", x->id,
		    "Running", x->running, "ExitCode", x->exit_code));
	} else if (strncmp(path, "/v1.41/containers/json?", 23) == 0 &&
	    f->pool_listed) {
		/* Born pool members: one renamed to sandbox p1 (its id is its
		 * name), one unclaimed, one of another broker's prefix. */
		reply(bev, 200, "OK", json_pack("[{s:s, s:[s], s:s, s:s, s:{s:s, s:s}},"
		    " {s:s, s:[s], s:s, s:s, s:{s:s, s:s}},"
		    " {s:s, s:[s], s:s, s:s, s:{s:s, s:s}}]",
		    "Id", "aa01", "Names", "/sbx-p1", "Image", "img:1", "State",
		    "running", "Labels", "io.sbx.managed", "true", "io.sbx.pool", "img:1",
		    "Id", "aa02", "Names", "/sbx-pool.0123abcd", "Image", "img:1",
		    "State", "running", "Labels", "io.sbx.managed", "true",
		    "io.sbx.pool", "img:1",
		    "Id", "aa03", "Names", "/other-p2", "Image", "img:1", "State",
		    "running", "Labels", "io.sbx.managed", "true", "io.sbx.pool",
		    "img:1"));
	} else if (strncmp(path, "/v1.41/containers/json?", 23) == 0) {
		/* no_t1_listed: t1 is gone, t2 is a stopped egress sandbox. */
		reply(bev, 200, "OK", json_pack("[{s:s, s:s, s:s, s:i, s:{s:s, s:s,"
		    " s:s}}, {s:s, s:s, s:s, s:i, s:{}}]",
		    "Id", "c0ffee0123456789", "Image", "img:1", "State",
		    f->no_t1_listed ? "exited" : "running",
		    "Created", 1764500000, "Labels", "io.sbx.managed", "true",
		    "io.sbx.id", f->no_t1_listed ? "t2" : "t1", "io.sbx.egress", "1",
		    "Id", "deadbeef", "Image", "other", "State", "running",
		    "Created", 1, "Labels"));
	} else {
		reply(bev, 500, "Internal", msg("fake: unexpected request"));
	}
	bufferevent_setcb(bev, NULL, NULL, NULL, c);
	conn_free(c);   /* frees once flushed: see conn_free */
}

static void
flushed_close(struct bufferevent *bev, void *arg)
{
	(void)arg;
	if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
		bufferevent_free(bev);
}

/* Closes c's connection once its output is flushed. */
static void
conn_free(struct conn *c)
{
	struct bufferevent *bev = c->bev;

	free(c);
	bufferevent_setcb(bev, NULL, flushed_close, NULL, NULL);
	bufferevent_enable(bev, EV_WRITE);
	if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
		bufferevent_free(bev);
}

static void
conn_read(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	struct fx *f = c->f;
	struct evbuffer *in = bufferevent_get_input(bev);
	struct evbuffer_ptr p;
	char *head, method[16], path[512], *cl;
	size_t hlen, blen = 0;
	json_t *body = NULL;
	char line[600];

	if (c->streaming != NULL) {
		evbuffer_drain(in, evbuffer_get_length(in));   /* stdin */
		return;
	}
	p = evbuffer_search(in, "\r\n\r\n", 4, NULL);
	if (p.pos < 0)
		return;
	hlen = (size_t)p.pos + 4;
	head = calloc(1, hlen + 1);
	evbuffer_copyout(in, head, hlen);
	if ((cl = strcasestr(head, "Content-Length:")) != NULL)
		blen = strtoul(cl + 15, NULL, 10);
	if (evbuffer_get_length(in) < hlen + blen) {
		free(head);
		return;
	}
	evbuffer_drain(in, hlen);
	if (blen > 0) {
		char *b = malloc(blen);

		evbuffer_remove(in, b, blen);
		body = json_loadb(b, blen, 0, NULL);
		free(b);
	}
	sscanf(head, "%15s %511s", method, path);
	free(head);
	snprintf(line, sizeof(line), "%s %s", method, path);
	if (f->nlog < MAX_LOG) {
		f->log[f->nlog] = strdup(line);
		f->bodies[f->nlog++] = json_incref(body);
	}
	route(c, method, path, body);
	json_decref(body);
}

static void
conn_event(struct bufferevent *bev, short what, void *arg)
{
	struct conn *c = arg;

	(void)what;
	if (c->streaming != NULL) {
		/* the client went away from an exec stream */
		c->streaming->stream = NULL;
		c->streaming = NULL;
	}
	free(c);
	bufferevent_free(bev);
}

static void
on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
    int len, void *arg)
{
	struct fx *f = arg;
	struct conn *c = calloc(1, sizeof(*c));

	(void)l;
	(void)sa;
	(void)len;
	c->f = f;
	c->bev = bufferevent_socket_new(f->base, fd, BEV_OPT_CLOSE_ON_FREE);
	bufferevent_setcb(c->bev, conn_read, conn_write, conn_event, c);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
}

/* ---------- fixture ---------- */

static struct sbx_driver *
new_driver(struct fx *f, const char *sock)
{
	struct sbx_engine_config cfg;
	struct sbx_err err;
	static const char *const images[] = { "img:2", NULL };
	struct sbx_driver *d;

	memset(&cfg, 0, sizeof(cfg));
	cfg.runtime_socket = sock;
	cfg.default_image = "img:1";
	cfg.images = images;
	cfg.helper_path = f->helper;
	cfg.memory_bytes.def = 256 << 20;
	cfg.memory_bytes.ceiling = 512 << 20;
	cfg.exec_timeout_ms.def = 5000;
	cfg.exec_timeout_ms.ceiling = 10000;
	cfg.exec_output_cap = 1000;
	cfg.file_timeout_ms = 300;
	cfg.agent_off = 1;   /* the scripted runtime speaks protocol 2 per exec */
	d = sbx_engine_driver_new(f->base, &cfg, &err);
	assert_non_null(d);
	return d;
}

static int
setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct sockaddr_un sun;
	FILE *fp;
	int i;

	f->base = event_base_new();
	snprintf(f->dir, sizeof(f->dir), "/tmp/sbx-engine-test-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->sock, sizeof(f->sock), "%s/engine.sock", f->dir);
	snprintf(f->helper, sizeof(f->helper), "%s/sbx-helper", f->dir);
	fp = fopen(f->helper, "w");
	fputs("a fake sbx-helper\n", fp);
	fclose(fp);
	chmod(f->helper, 0755);
	{
		unsigned char h[crypto_hash_sha256_BYTES];
		char hex[65];

		crypto_hash_sha256(h, (const unsigned char *)"a fake sbx-helper\n",
		    18);
		sodium_bin2hex(hex, sizeof(hex), h, sizeof(h));
		snprintf(f->helper_vol, sizeof(f->helper_vol),
		    "sbx-helper-%.16s", hex);
	}
	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", f->sock);
	f->lis = evconnlistener_new_bind(f->base, on_accept, f,
	    LEV_OPT_CLOSE_ON_FREE, 16, (struct sockaddr *)&sun, sizeof(sun));
	assert_non_null(f->lis);
	f->drv = new_driver(f, f->sock);
	for (i = 0; i < 3; i++)
		f->out[i] = evbuffer_new();
	snprintf(f->c_image, sizeof(f->c_image), "img:1");
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fx *f = *state;
	char path[200];
	int i;

	sbx_driver_free(f->drv);
	for (i = 0; i < f->nexecs; i++) {
		if (f->execs[i].stream != NULL)
			end_stream(&f->execs[i], 0);
		json_decref(f->execs[i].cmd);
	}
	evconnlistener_free(f->lis);
	for (i = 0; i < f->nlog; i++) {
		free(f->log[i]);
		json_decref(f->bodies[i]);
	}
	json_decref(f->created);
	json_decref(f->net_created);
	for (i = 0; i < 3; i++)
		evbuffer_free(f->out[i]);
	event_base_free(f->base);
	snprintf(path, sizeof(path), "%s/engine.sock", f->dir);
	unlink(path);
	unlink(f->helper);
	rmdir(f->dir);
	free(f);
	return 0;
}

static int
logged(struct fx *f, const char *prefix)
{
	int i, n = 0;

	for (i = 0; i < f->nlog; i++)
		if (strncmp(f->log[i], prefix, strlen(prefix)) == 0)
			n++;
	return n;
}

/* Creates of sbx-t1 and its init container, not of its image probe
 * (adr/0045). */
static int
creates(struct fx *f)
{
	return logged(f, "POST /v1.41/containers/create?name=sbx-t1") -
	    logged(f, "POST /v1.41/containers/create?name=sbx-t1.probe");
}

/* 1 when a request starting with first was logged before one starting
 * with then (both logged). */
static int
logged_before(struct fx *f, const char *first, const char *then)
{
	int i, a = -1, b = -1;

	for (i = 0; i < f->nlog; i++) {
		if (a < 0 && strncmp(f->log[i], first, strlen(first)) == 0)
			a = i;
		if (strncmp(f->log[i], then, strlen(then)) == 0)
			b = i;
	}
	return a >= 0 && b > a;
}

static void
log_reset(struct fx *f)
{
	int i;

	for (i = 0; i < f->nlog; i++) {
		free(f->log[i]);
		json_decref(f->bodies[i]);
	}
	f->nlog = 0;
}

static void
run_loop(struct fx *f)
{
	struct timeval limit = { 10, 0 };

	f->returned = 1;
	event_base_loopexit(f->base, &limit);
	event_base_dispatch(f->base);
	assert_false(f->early);
}

/* Lets background work (kill execs) finish. */
static void
settle(struct fx *f, long ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	event_base_loopexit(f->base, &tv);
	event_base_dispatch(f->base);
}

/* ---------- callbacks ---------- */

static void
on_status(void *arg, const struct sbx_err *err, const struct sbx_status *st)
{
	struct fx *f = arg;

	f->early |= !f->returned;
	f->terminal++;
	if (err != NULL) {
		f->err = *err;
		f->have_err = 1;
	} else {
		f->st = *st;
	}
	event_base_loopbreak(f->base);
}

static void
on_done(void *arg, const struct sbx_err *err)
{
	struct fx *f = arg;

	f->early |= !f->returned;
	f->terminal++;
	if (err != NULL) {
		f->err = *err;
		f->have_err = 1;
	}
	event_base_loopbreak(f->base);
}

static void
on_list(void *arg, const struct sbx_err *err, const struct sbx_dirent *e,
    size_t n, int truncated)
{
	struct fx *f = arg;

	f->terminal++;
	f->truncated = truncated;
	if (err != NULL) {
		f->err = *err;
		f->have_err = 1;
	}
	for (f->nents = 0; f->nents < n && f->nents < 8; f->nents++)
		f->ents[f->nents] = e[f->nents];
	event_base_loopbreak(f->base);
}

static void
on_health(void *arg, const struct sbx_err *err, const struct sbx_health *h)
{
	struct fx *f = arg;

	f->terminal++;
	assert_null(err);
	f->health = *h;
	event_base_loopbreak(f->base);
}

static void
s_start(void *arg, const char *exec_id)
{
	struct fx *f = arg;

	f->early |= !f->returned;
	snprintf(f->exec_id, sizeof(f->exec_id), "%s", exec_id);
}

static void
s_output(void *arg, int stream, const unsigned char *buf, size_t len)
{
	struct fx *f = arg;

	f->early |= !f->returned;
	assert_true(stream == 1 || stream == 2);
	assert_true(len > 0 && len <= 64 * 1024);
	evbuffer_add(f->out[stream], buf, len);
	if ((f->norder == 0 || f->order[f->norder - 1] != '0' + stream) &&
	    f->norder + 1 < sizeof(f->order))
		f->order[f->norder++] = (char)('0' + stream);
	if (f->cancel_on_output && f->op != NULL) {
		sbx_op_cancel(f->op);
		f->op = NULL;
		event_base_loopbreak(f->base);
	}
}

static void
s_exit(void *arg, const struct sbx_exit *ex)
{
	struct fx *f = arg;

	f->early |= !f->returned;
	f->terminal++;
	f->ex = *ex;
	event_base_loopbreak(f->base);
}

static void
s_error(void *arg, const struct sbx_err *err)
{
	struct fx *f = arg;

	f->early |= !f->returned;
	f->terminal++;
	f->err = *err;
	f->have_err = 1;
	if (getenv("TEST_DEBUG") != NULL)
		fprintf(stderr, "sink error: %s: %s\n", err->code, err->message);
	event_base_loopbreak(f->base);
}

static struct sbx_sink
sink_of(struct fx *f)
{
	struct sbx_sink s = { s_start, s_output, s_exit, s_error, f, NULL };

	return s;
}

static void
ensure(struct fx *f, int egress, const char *image)
{
	struct sbx_spec spec = { image, egress, 0, 0, 0, NULL };
	struct sbx_err err;

	f->returned = 0;
	assert_non_null(f->drv->ops->ensure(f->drv, "t1", &spec, on_status, f,
	    &err));
	run_loop(f);
}

static void
running_sandbox(struct fx *f)
{
	f->c_exists = f->c_labelled = f->c_running = 1;
	f->v_exists = f->v_labelled = 1;
	snprintf(f->c_helper, sizeof(f->c_helper), "%s", f->helper_vol);
}

/* ---------- tests: ensure, status, stop, destroy ---------- */

static void
test_ensure_creates_a_hardened_container(void **state)
{
	struct fx *f = *state;
	json_t *hc, *m;

	ensure(f, 0, NULL);
	assert_false(f->have_err);
	assert_int_equal(f->terminal, 1);
	assert_int_equal(f->st.state, SBX_STATE_RUNNING);
	assert_string_equal(f->st.image, "img:1");
	assert_int_equal(f->st.created_at_ms, 1796040000250LL);
	assert_int_equal(logged(f, "POST /v1.41/volumes/create"), 2);
	assert_int_equal(creates(f), 2);
	assert_int_equal(logged(f, "GET /v1.41/networks"), 0);
	assert_non_null(f->created);
	assert_string_equal(json_string_value(json_object_get(f->created, "User")),
	    "1000:1000");
	assert_string_equal(json_string_value(json_object_get(json_object_get(
	    f->created, "Labels"), "io.sbx.managed")), "true");
	hc = json_object_get(f->created, "HostConfig");
	assert_true(json_is_true(json_object_get(hc, "Init")));
	assert_true(json_is_true(json_object_get(hc, "ReadonlyRootfs")));
	assert_string_equal(json_string_value(json_array_get(json_object_get(hc,
	    "CapDrop"), 0)), "ALL");
	assert_string_equal(json_string_value(json_array_get(json_object_get(hc,
	    "SecurityOpt"), 0)), "no-new-privileges");
	assert_string_equal(json_string_value(json_object_get(hc, "NetworkMode")),
	    "none");
	assert_int_equal(json_integer_value(json_object_get(hc, "Memory")),
	    256 << 20);
	assert_int_equal(json_integer_value(json_object_get(hc, "MemorySwap")),
	    256 << 20);
	assert_non_null(strstr(json_string_value(json_object_get(json_object_get(
	    hc, "Tmpfs"), "/tmp")), "noexec"));
	m = json_array_get(json_object_get(hc, "Mounts"), 1);
	assert_string_equal(json_string_value(json_object_get(m, "Type")),
	    "volume");
	assert_string_equal(json_string_value(json_object_get(m, "Source")),
	    f->helper_vol);
	assert_string_equal(json_string_value(json_object_get(m, "Target")),
	    "/.sbx");
	assert_true(json_is_true(json_object_get(m, "ReadOnly")));
	assert_null(json_object_get(hc, "Binds"));
	assert_string_equal(json_string_value(json_object_get(json_object_get(
	    f->created, "Labels"), "io.sbx.helper")), f->helper_vol);
	assert_string_equal(json_string_value(json_array_get(json_object_get(
	    f->created, "Entrypoint"), 0)), "/.sbx/sbx-helper");
	assert_non_null(strstr(json_string_value(json_object_get(json_object_get(
	    hc, "Tmpfs"), "/tmp")), "uid=1000,gid=1000"));
	assert_non_null(json_object_get(json_object_get(hc, "Tmpfs"), "/run/sbx"));
	/* Docker: the helper volume was filled, /work prepared by a
	 * short-lived init container, then the old helper volume dropped. */
	assert_true(f->hv_filled);
	assert_int_equal(logged(f, "POST /v1.41/containers/create?name=sbx-t1.init"),
	    1);
	assert_int_equal(logged(f, "POST /v1.41/containers/i111/wait"), 1);
	assert_int_equal(logged(f, "DELETE /v1.41/containers/i111"), 1);
	assert_int_equal(logged(f, "DELETE /v1.41/containers/f111"), 1);
}

static void
test_ensure_init_container_failure_is_an_error(void **state)
{
	struct fx *f = *state;

	f->init_exit = 6;
	ensure(f, 0, NULL);
	assert_true(f->have_err);
	assert_string_equal(f->err.code, "runtime_error");
	assert_non_null(strstr(f->err.message, "initwork"));
	assert_int_equal(logged(f, "DELETE /v1.41/containers/i111"), 1);
	assert_int_equal(creates(f), 1);
}

/* adr/0045: an image whose /.sbx is a symbolic link (the runtime would
 * mount the helper where the link leads, under /work) is refused with one
 * sentence before any volume or container of the sandbox is made; the
 * probe container is removed. */
static void
test_ensure_refuses_an_image_whose_helper_dir_is_a_link(void **state)
{
	struct fx *f = *state;

	f->img_link = "/.sbx";
	ensure(f, 0, NULL);
	assert_true(f->have_err);
	assert_string_equal(f->err.code, SBX_E_IMAGE_NOT_ALLOWED);
	assert_string_equal(f->err.message, "image img:1 cannot be used: its "
	    "/.sbx is a symbolic link, which the runtime would follow when it "
	    "mounts there; rebuild the image with /.sbx a directory or without "
	    "it.");
	assert_int_equal(creates(f), 0);
	assert_int_equal(logged(f, "POST /v1.41/volumes/create"), 0);
	assert_int_equal(logged(f, "HEAD /v1.41/containers/p111/archive"), 1);
	assert_int_equal(logged(f, "DELETE /v1.41/containers/p111"), 1);
}

/* The same for /work a regular file, found after the paths before it
 * passed (absent). */
static void
test_ensure_refuses_an_image_whose_work_is_a_file(void **state)
{
	struct fx *f = *state;

	f->img_file = "/work";
	ensure(f, 0, NULL);
	assert_true(f->have_err);
	assert_string_equal(f->err.code, SBX_E_IMAGE_NOT_ALLOWED);
	assert_non_null(strstr(f->err.message, "image img:1 cannot be used: "
	    "its /work is a file, not a directory"));
	assert_int_equal(creates(f), 0);
	assert_int_equal(logged(f, "POST /v1.41/volumes/create"), 0);
	assert_int_equal(logged(f, "HEAD /v1.41/containers/p111/archive"), 2);
	assert_int_equal(logged(f, "DELETE /v1.41/containers/p111"), 1);
}

/* issue 24 item 9: a container this ensure made that the runtime cannot
 * start is removed (nothing listed, the next ensure starts over), and the
 * runtime's words, host paths in them, stay in the broker's log. */
static void
test_a_new_container_that_cannot_start_is_removed_and_its_text_kept(void **state)
{
	struct fx *f = *state;

	f->start_fail = 1;
	ensure(f, 0, NULL);
	assert_true(f->have_err);
	assert_string_equal(f->err.code, SBX_E_RUNTIME);
	assert_string_equal(f->err.message, "the container runtime refused to "
	    "start the container (HTTP 500); the broker's log has its answer");
	assert_null(strstr(f->err.message, "/var/lib"));
	assert_int_equal(logged(f, "DELETE /v1.41/containers/c0ffee0123456789"), 1);
	assert_int_equal(f->c_exists, 0);
}

static void on_sandboxes(void *arg, const struct sbx_err *err,
    const struct sbx_status *sts, size_t n);

/* Podman's ghost of the sandbox's container (adr/0058): ensure removes it
 * by name, its volume kept, and makes the container again. */
static void
test_ensure_removes_a_podman_ghost_and_keeps_the_volume(void **state)
{
	struct fx *f = *state;

	running_sandbox(f);
	f->ghost = 1;
	ensure(f, 0, NULL);
	assert_false(f->have_err);
	assert_int_equal(f->st.state, SBX_STATE_RUNNING);
	assert_int_equal(logged(f, "DELETE /v1.41/containers/sbx-t1?force=1&v=0"), 1);
	assert_int_equal(logged(f, "DELETE /v1.41/volumes/sbx-t1-work"), 0);
	assert_true(f->v_exists);
	assert_true(f->c_exists && f->c_running);   /* made again */
}

/* A container a crash left "removing" (Podman refuses to start it): removed
 * by name, its volume kept, and made again. */
static void
test_ensure_removes_a_container_left_removing(void **state)
{
	struct fx *f = *state;

	running_sandbox(f);
	f->c_running = 0;
	f->removing = 1;
	ensure(f, 0, NULL);
	assert_false(f->have_err);
	assert_int_equal(f->st.state, SBX_STATE_RUNNING);
	assert_int_equal(logged(f, "DELETE /v1.41/containers/sbx-t1?force=1&v=0"), 1);
	assert_int_equal(logged(f, "DELETE /v1.41/volumes/sbx-t1-work"), 0);
	assert_true(f->c_exists && f->c_running);
}

/* A start a Podman crash cut, met by the next ensure (the OCI runtime kept
 * its state: start 500 "container with given ID already exists"): the
 * container is removed by id, its volume kept, and made again. */
/* A stopped sandbox whose start answers the runtime's crash leftover
 * (fx.oci_left: 1 Podman's, 2 Docker's) is ensured: the container is
 * removed by id, its volume kept, and it runs again. */
static void
ensure_through_a_start_leftover(struct fx *f, int which)
{
	running_sandbox(f);
	f->c_running = 0;
	f->oci_left = which;
	ensure(f, 0, NULL);
	assert_false(f->have_err);
	assert_int_equal(f->st.state, SBX_STATE_RUNNING);
	assert_int_equal(logged(f, "DELETE /v1.41/containers/c0ffee0123456789?force=1&v=0"), 1);
	assert_int_equal(logged(f, "DELETE /v1.41/volumes/sbx-t1-work"), 0);
	assert_true(f->c_exists && f->c_running);
}

static void
test_ensure_removes_a_container_whose_start_a_crash_cut(void **state)
{
	struct fx *f = *state;

	ensure_through_a_start_leftover(f, 1);
	assert_int_equal(creates(f) - logged(f, "POST /v1.41/containers/create?name=sbx-t1.init"), 1);
}

/* Docker's: a dockerd/containerd SIGKILLed during a start leaves the
 * shim's task directory of the container's id, and every start answers
 * 500 "failed to start shim: mkdir ...: file exists" (test_faults, seen in
 * a full run): removed like Podman's, and the ensure makes it again. */
static void
test_ensure_removes_a_container_whose_shim_a_crash_left(void **state)
{
	ensure_through_a_start_leftover(*state, 2);
}

/* A create a Podman crash cut left the name in its storage only (create
 * 500 "creating container storage: ... already in use", no container to
 * inspect): at the second look the name is removed and the create goes on;
 * at the first it is taken for a concurrent create. */
static void
test_ensure_removes_a_name_only_storage_holds(void **state)
{
	struct fx *f = *state;

	f->storage_left = 1;
	ensure(f, 0, NULL);
	assert_false(f->have_err);
	assert_int_equal(f->st.state, SBX_STATE_RUNNING);
	assert_int_equal(logged(f, "DELETE /v1.41/containers/sbx-t1?force=1&v=0"), 1);
	/* refused, refused (then removed), made */
	assert_int_equal(creates(f) - logged(f, "POST /v1.41/containers/create?name=sbx-t1.init"), 3);
	assert_true(f->c_exists && f->c_running);
}

/* ... and a list meeting it removes it by the id Podman names, then lists
 * again; destroy removes it by name. */
static void
test_list_and_destroy_remove_a_podman_ghost(void **state)
{
	struct fx *f = *state;
	struct sbx_err err;

	running_sandbox(f);
	f->ghost = 1;
	f->returned = 0;
	assert_non_null(f->drv->ops->list_sandboxes(f->drv, on_sandboxes, f,
	    &err));
	run_loop(f);
	assert_int_equal(logged(f, "DELETE /v1.41/containers/" GHOST_ID
	    "?force=1&v=0"), 1);
	assert_int_equal(logged(f, "GET /v1.41/containers/json?"), 2);
	assert_int_equal(f->nents, 1);
	running_sandbox(f);
	f->ghost = 1;
	log_reset(f);
	f->returned = 0;
	assert_non_null(f->drv->ops->destroy(f->drv, "t1", on_done, f, &err));
	run_loop(f);
	assert_false(f->have_err);
	assert_int_equal(logged(f, "DELETE /v1.41/containers/sbx-t1?force=1&v=0"), 1);
	assert_false(f->v_exists);
}

/* Podman answers the inspect of a container a removal is taking away
 * with 500 "... no such container": absent, not a runtime error. */
static void
test_inspect_of_a_container_being_removed_is_absent(void **state)
{
	struct fx *f = *state;
	struct sbx_err err;

	running_sandbox(f);
	f->gone = 1;
	f->returned = 0;
	assert_non_null(f->drv->ops->status(f->drv, "t1", on_status, f, &err));
	run_loop(f);
	assert_false(f->have_err);
	assert_int_equal(f->st.state, SBX_STATE_ABSENT);
}

static struct sbx_op *exec_argv(struct fx *f, const char *const *argv,
    int64_t timeout, int64_t cap);

/* Podman refuses an exec in a container that stopped meanwhile with 500
 * "... container state improper" (Docker: 409): not_running, not 502. */
static void
test_exec_refused_as_improper_state_is_not_running(void **state)
{
	struct fx *f = *state;
	static const char *const argv[] = { "true", NULL };

	running_sandbox(f);
	f->exec_improper = 1;
	exec_argv(f, argv, 0, 0);
	run_loop(f);
	assert_true(f->have_err);
	assert_string_equal(f->err.code, SBX_E_NOT_RUNNING);
}

/* The judge reads Docker's header and Podman's (linkTarget: the path
 * itself for a directory, where it leads for a link, mode bits or not). */
static void
test_mount_path_judge_reads_both_runtimes(void **state)
{
	static const struct { const char *json; int ok; } cases[] = {
		{ "{\"name\":\"work\",\"mode\":2147484141,\"linkTarget\":\"\"}", 0 },
		{ "{\"name\":\"work\",\"mode\":2147484141,\"linkTarget\":\"/work\"}", 0 },
		{ "{\"name\":\"work\",\"mode\":2147484141,\"linkTarget\":\"/etc\"}", -1 },
		{ "{\"name\":\"work\",\"mode\":134218239,\"linkTarget\":\"/etc\"}", -1 },
		{ "{\"name\":\"work\",\"mode\":420}", -1 },
		{ "{\"name\":\"work\",\"mode\":2214592932}", -1 },  /* a dir bit + device */
	};
	struct sbx_err err;
	char b64[512];
	size_t i;

	(void)state;
	assert_int_equal(sbx_engine_mount_path_judge("i", "/work", NULL, &err), 0);
	assert_int_equal(sbx_engine_mount_path_judge("i", "/work", "%%%", &err), -1);
	assert_non_null(strstr(err.message, "did not say what its /work is"));
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		sodium_bin2base64(b64, sizeof(b64), (const unsigned char *)
		    cases[i].json, strlen(cases[i].json),
		    sodium_base64_VARIANT_ORIGINAL);
		sbx_err_clear(&err);
		assert_int_equal(sbx_engine_mount_path_judge("i", "/work", b64,
		    &err), cases[i].ok);
	}
}

/* A daemon killed while the broker waits for the init container: the
 * answer's headers came, its body never does. That is the runtime gone
 * (503 runtime_unavailable, as for a refused connection), not a runtime
 * that answered with an error (502), and the init container is removed. */
static void
test_ensure_init_wait_cut_off_is_runtime_unavailable(void **state)
{
	struct fx *f = *state;

	f->init_wait_cut = 1;
	ensure(f, 0, NULL);
	assert_true(f->have_err);
	assert_string_equal(f->err.code, SBX_E_RUNTIME_UNAVAILABLE);
	assert_int_equal(logged(f, "DELETE /v1.41/containers/i111"), 1);
}

static void
test_stale_helper_label_replaces_the_container(void **state)
{
	struct fx *f = *state;

	running_sandbox(f);
	snprintf(f->c_helper, sizeof(f->c_helper), "sbx-helper-0000000000000000");
	ensure(f, 0, NULL);
	assert_false(f->have_err);
	assert_int_equal(logged(f, "DELETE /v1.41/containers/c0ffee0123456789"), 1);
	assert_int_equal(logged(f, "DELETE /v1.41/volumes/sbx-t1-work"), 0);
	assert_string_equal(f->c_helper, f->helper_vol);
	/* labelled: its volume was prepared already */
	assert_int_equal(logged(f, "POST /v1.41/containers/create?name=sbx-t1.init"),
	    0);
}

static void
test_warm_ensure_is_one_inspect(void **state)
{
	struct fx *f = *state;

	running_sandbox(f);
	ensure(f, 0, NULL);
	assert_false(f->have_err);
	assert_int_equal(f->st.state, SBX_STATE_RUNNING);
	assert_int_equal(f->nlog, 1);
	assert_string_equal(f->log[0], "GET /v1.41/containers/sbx-t1/json");
}

static void
test_ensure_starts_a_stopped_sandbox(void **state)
{
	struct fx *f = *state;

	running_sandbox(f);
	f->c_running = 0;
	ensure(f, 0, NULL);
	assert_false(f->have_err);
	assert_int_equal(f->st.state, SBX_STATE_RUNNING);
	assert_int_equal(logged(f, "POST /v1.41/containers/c0ffee0123456789/start"),
	    1);
	assert_int_equal(logged(f, "POST /v1.41/containers/create"), 0);
}

static void
test_egress_change_replaces_container_keeps_volume(void **state)
{
	struct fx *f = *state;

	running_sandbox(f);
	ensure(f, 1, NULL);
	assert_false(f->have_err);
	assert_int_equal(f->st.egress, 1);
	assert_int_equal(logged(f, "DELETE /v1.41/containers/c0ffee0123456789"), 1);
	assert_int_equal(logged(f, "DELETE /v1.41/volumes/sbx-t1-work"), 0);
	assert_int_equal(logged(f, "POST /v1.41/networks/create"), 1);
	assert_string_equal(json_string_value(json_object_get(json_object_get(
	    f->created, "HostConfig"), "NetworkMode")), "sbx-t1-egress");
	assert_true(f->v_exists);
}

static void
test_egress_network_is_the_sandboxs_own_labelled_bridge(void **state)
{
	struct fx *f = *state;
	json_t *n = NULL;
	const char *br;

	ensure(f, 1, NULL);
	assert_false(f->have_err);
	n = f->net_created;
	assert_non_null(n);
	assert_string_equal(json_string_value(json_object_get(n, "Name")),
	    "sbx-t1-egress");
	assert_string_equal(json_string_value(json_object_get(n, "Driver")),
	    "bridge");
	assert_string_equal(json_string_value(json_object_get(json_object_get(n,
	    "Labels"), "io.sbx.managed")), "true");
	assert_string_equal(json_string_value(json_object_get(json_object_get(n,
	    "Labels"), "io.sbx.id")), "t1");
	br = json_string_value(json_object_get(json_object_get(n, "Options"),
	    "com.docker.network.bridge.name"));
	assert_non_null(br);
	assert_int_equal(strlen(br), 15);
	assert_int_equal(strncmp(br, "sbxe", 4), 0);
	assert_int_equal(strspn(br + 4, "0123456789abcdef"), 11);
	/* A second ensure of the running sandbox touches no network. */
	log_reset(f);
	ensure(f, 1, NULL);
	assert_false(f->have_err);
	assert_int_equal(f->nlog, 1);
}

static void
test_egress_revoked_removes_the_network_after_the_container(void **state)
{
	struct fx *f = *state;

	ensure(f, 1, NULL);
	assert_true(f->net_exists);
	ensure(f, 0, NULL);
	assert_false(f->have_err);
	assert_int_equal(f->st.egress, 0);
	assert_false(f->net_exists);
	assert_true(logged_before(f, "DELETE /v1.41/containers/",
	    "DELETE /v1.41/networks/n1"));
	assert_string_equal(json_string_value(json_object_get(json_object_get(
	    f->created, "HostConfig"), "NetworkMode")), "none");
	assert_true(f->v_exists);
}

/* The conflict names what sbx left alone (eng_not_ours): "a KIND named
 * NAME exists that sbx does not manage; it was left alone". */
static void
assert_not_ours(const struct fx *f, const char *kind)
{
	char head[64];

	assert_string_equal(f->err.code, SBX_E_CONFLICT);
	snprintf(head, sizeof(head), "a %s named sbx-t1", kind);
	assert_int_equal(strncmp(f->err.message, head, strlen(head)), 0);
	assert_true(ends_with(f->err.message,
	    " exists that sbx does not manage; it was left alone"));
}

static void
test_unlabelled_network_of_that_name_is_conflict_and_untouched(void **state)
{
	struct fx *f = *state;
	struct sbx_err err;

	f->net_exists = 1;
	f->net_labelled = 0;
	ensure(f, 1, NULL);
	assert_true(f->have_err);
	assert_not_ours(f, "network");
	/* No sandbox container (only, on Docker, the /work init one). */
	assert_int_equal(creates(f),
	    logged(f, "POST /v1.41/containers/create?name=sbx-t1.init"));
	/* destroy leaves it too */
	f->have_err = 0;
	f->returned = 0;
	assert_non_null(f->drv->ops->destroy(f->drv, "t1", on_done, f, &err));
	run_loop(f);
	assert_false(f->have_err);
	assert_int_equal(logged(f, "DELETE /v1.41/networks/"), 0);
	assert_true(f->net_exists);
}

static void
test_reconcile_removes_only_orphaned_sbx_networks(void **state)
{
	struct fx *f = *state;
	struct sbx_err err;

	f->no_t1_listed = 1;
	f->returned = 0;
	assert_non_null(f->drv->ops->reconcile(f->drv, on_done, f, &err));
	run_loop(f);
	assert_false(f->have_err);
	/* t1 has no container: its network goes; so does the shared one of
	 * old. t2's stays (its stopped container needs it to start); t3 is
	 * another prefix's, t4's is not labelled. */
	assert_int_equal(logged(f, "DELETE /v1.41/networks/n1"), 1);
	assert_int_equal(logged(f, "DELETE /v1.41/networks/n5"), 1);
	assert_int_equal(logged(f, "DELETE /v1.41/networks/n2"), 0);
	assert_int_equal(logged(f, "DELETE /v1.41/networks/n3"), 0);
	assert_int_equal(logged(f, "DELETE /v1.41/networks/n4"), 0);
	/* With t1 listed (an egress container), nothing of it goes. */
	f->no_t1_listed = 0;
	log_reset(f);
	f->returned = 0;
	assert_non_null(f->drv->ops->reconcile(f->drv, on_done, f, &err));
	run_loop(f);
	assert_false(f->have_err);
	assert_int_equal(logged(f, "DELETE /v1.41/networks/n1"), 0);
}

static void
test_unlabelled_container_is_conflict_and_untouched(void **state)
{
	struct fx *f = *state;
	struct sbx_err err;
	int i;

	running_sandbox(f);
	f->c_labelled = 0;
	ensure(f, 1, NULL);
	assert_true(f->have_err);
	assert_not_ours(f, "container");
	f->have_err = 0;
	f->returned = 0;
	assert_non_null(f->drv->ops->destroy(f->drv, "t1", on_done, f, &err));
	run_loop(f);
	assert_string_equal(f->err.code, SBX_E_CONFLICT);
	f->have_err = 0;
	f->returned = 0;
	assert_non_null(f->drv->ops->stop(f->drv, "t1", on_done, f, &err));
	run_loop(f);
	assert_string_equal(f->err.code, SBX_E_CONFLICT);
	for (i = 0; i < f->nlog; i++)
		assert_string_equal(f->log[i], "GET /v1.41/containers/sbx-t1/json");
	assert_true(f->c_exists);
}

static void
test_unlabelled_volume_is_conflict(void **state)
{
	struct fx *f = *state;

	f->v_exists = 1;
	f->v_labelled = 0;
	ensure(f, 0, NULL);
	assert_not_ours(f, "volume");
	assert_int_equal(creates(f), 0);
}

static void
test_refusals_happen_before_any_runtime_call(void **state)
{
	struct fx *f = *state;
	struct sbx_spec spec = { "evil:latest", 0, 0, 0, 0, NULL };
	struct sbx_err err;

	assert_null(f->drv->ops->ensure(f->drv, "t1", &spec, on_status, f, &err));
	assert_string_equal(err.code, SBX_E_IMAGE_NOT_ALLOWED);
	spec.image = "img:2";
	spec.memory_bytes = (int64_t)1 << 40;
	assert_null(f->drv->ops->ensure(f->drv, "t1", &spec, on_status, f, &err));
	assert_string_equal(err.code, SBX_E_LIMIT_EXCEEDED);
	assert_null(f->drv->ops->status(f->drv, "Bad_Id", on_status, f, &err));
	assert_string_equal(err.code, SBX_E_INVALID_ID);
	settle(f, 50);
	assert_int_equal(f->nlog, 0);
	assert_int_equal(f->terminal, 0);
}

static void
test_status_absent_and_stopped_reason(void **state)
{
	struct fx *f = *state;
	struct sbx_err err;

	f->returned = 0;
	assert_non_null(f->drv->ops->status(f->drv, "t1", on_status, f, &err));
	run_loop(f);
	assert_int_equal(f->st.state, SBX_STATE_ABSENT);
	running_sandbox(f);
	f->c_running = 0;
	f->returned = 0;
	assert_non_null(f->drv->ops->status(f->drv, "t1", on_status, f, &err));
	run_loop(f);
	assert_int_equal(f->st.state, SBX_STATE_STOPPED);
	assert_string_equal(f->st.stop_reason, "exited");
}

static void
test_stop_absent_is_not_found_destroy_absent_is_ok(void **state)
{
	struct fx *f = *state;
	struct sbx_err err;

	f->returned = 0;
	assert_non_null(f->drv->ops->stop(f->drv, "t1", on_done, f, &err));
	run_loop(f);
	assert_string_equal(f->err.code, SBX_E_NOT_FOUND);
	f->have_err = 0;
	f->returned = 0;
	assert_non_null(f->drv->ops->destroy(f->drv, "t1", on_done, f, &err));
	run_loop(f);
	assert_false(f->have_err);
}

static void
test_destroy_removes_container_then_volume(void **state)
{
	struct fx *f = *state;
	struct sbx_err err;

	running_sandbox(f);
	f->returned = 0;
	f->net_exists = f->net_labelled = 1;
	assert_non_null(f->drv->ops->destroy(f->drv, "t1", on_done, f, &err));
	run_loop(f);
	assert_false(f->have_err);
	assert_false(f->c_exists);
	assert_false(f->v_exists);
	assert_false(f->net_exists);
	assert_true(logged_before(f, "DELETE /v1.41/volumes/",
	    "DELETE /v1.41/networks/n1"));
}

static void
on_sandboxes(void *arg, const struct sbx_err *err, const struct sbx_status *sts,
    size_t n)
{
	struct fx *f = arg;

	assert_null(err);
	f->terminal++;
	f->nents = n;
	if (n > 0)
		f->st = sts[0];
	f->listed_ids[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		strncat(f->listed_ids, sts[i].id, sizeof(f->listed_ids) -
		    strlen(f->listed_ids) - 2);
		strcat(f->listed_ids, " ");
	}
	event_base_loopbreak(f->base);
}

/* adr/0067: a claimed member is listed by its name, an unclaimed one and
 * one of another prefix are not. */
static void
test_list_sandboxes_claimed_pool_member_by_name(void **state)
{
	struct fx *f = *state;
	struct sbx_err err;

	f->pool_listed = 1;
	assert_non_null(f->drv->ops->list_sandboxes(f->drv, on_sandboxes, f,
	    &err));
	run_loop(f);
	assert_int_equal(f->nents, 1);
	assert_string_equal(f->listed_ids, "p1 ");
}

static void
test_list_sandboxes_only_labelled(void **state)
{
	struct fx *f = *state;
	struct sbx_err err;

	f->returned = 0;
	assert_non_null(f->drv->ops->list_sandboxes(f->drv, on_sandboxes, f,
	    &err));
	run_loop(f);
	assert_int_equal(f->nents, 1);
	assert_string_equal(f->st.id, "t1");
	assert_int_equal(f->st.egress, 1);
	assert_non_null(strstr(f->log[0], "filters=%7B%22label%22%3A%5B%22io.sbx."
	    "managed%3Dtrue%22%5D%7D"));
}

static void
test_unreachable_runtime_is_runtime_unavailable(void **state)
{
	struct fx *f = *state;
	struct sbx_driver *d;
	struct sbx_err err;
	char sock[160];

	snprintf(sock, sizeof(sock), "%s/none.sock", f->dir);
	d = new_driver(f, sock);
	f->returned = 0;
	assert_non_null(d->ops->status(d, "t1", on_status, f, &err));
	run_loop(f);
	assert_int_equal(f->terminal, 1);
	assert_string_equal(f->err.code, SBX_E_RUNTIME_UNAVAILABLE);
	f->returned = 0;
	assert_non_null(d->ops->health(d, on_health, f, &err));
	run_loop(f);
	assert_int_equal(f->health.ok, 0);
	assert_string_equal(f->health.status, "degraded");
	sbx_driver_free(d);
}

static void
test_health_ok(void **state)
{
	struct fx *f = *state;
	struct sbx_err err;

	f->returned = 0;
	assert_non_null(f->drv->ops->health(f->drv, on_health, f, &err));
	run_loop(f);
	assert_int_equal(f->health.ok, 1);
	assert_string_equal(f->health.runtime, "Docker Engine 20.10.24");
	assert_string_equal(f->health.api_version, "1.41");
}

/* ---------- tests: exec ---------- */

static size_t
script_add(unsigned char *buf, size_t at, int stream, const char *s, size_t n)
{
	buf[at] = (unsigned char)stream;
	buf[at + 1] = buf[at + 2] = buf[at + 3] = 0;
	buf[at + 4] = (unsigned char)(n >> 24);
	buf[at + 5] = (unsigned char)(n >> 16);
	buf[at + 6] = (unsigned char)(n >> 8);
	buf[at + 7] = (unsigned char)n;
	memcpy(buf + at + 8, s, n);
	return at + 8 + n;
}

static struct sbx_op *
exec_argv(struct fx *f, const char *const *argv, int64_t timeout,
    int64_t cap)
{
	struct sbx_exec_req req;
	struct sbx_sink sink = sink_of(f);
	struct sbx_err err;
	struct sbx_op *op;

	memset(&req, 0, sizeof(req));
	req.argv = argv;
	req.timeout_ms = timeout;
	req.output_cap = cap;
	f->returned = 0;
	op = f->drv->ops->exec(f->drv, "t1", &req, &sink, &err);
	assert_non_null(op);
	f->op = op;
	return op;
}

/* One sbx-helper frame (sbx_helper_proto.h) at buf + at. */
static size_t
hframe(unsigned char *buf, size_t at, int type, const void *p, size_t n)
{
	buf[at] = (unsigned char)type;
	buf[at + 1] = SBX_HELPER_PROTO;
	buf[at + 2] = buf[at + 3] = 0;
	buf[at + 4] = (unsigned char)(n >> 24);
	buf[at + 5] = (unsigned char)(n >> 16);
	buf[at + 6] = (unsigned char)(n >> 8);
	buf[at + 7] = (unsigned char)n;
	memcpy(buf + at + 8, p, n);
	return at + 8 + n;
}

/* The helper's exit record. */
static size_t
hexit(unsigned char *buf, size_t at, int how, int code, int sig, int flags)
{
	unsigned char r[8] = { (unsigned char)how, (unsigned char)code,
	    (unsigned char)sig, (unsigned char)flags, 0, 0, 0, 0 };

	return hframe(buf, at, SBX_HELPER_FRAME_EXIT, r, sizeof(r));
}

/*
 * The runtime's stream for helper bytes h[0..n): stdout frames cut at
 * every position in cuts (ascending, 0 < cut < n), plus a stderr frame of
 * the helper's own in the middle. Returns the script length.
 */
static size_t
wrap(unsigned char *out, const unsigned char *h, size_t n, const size_t *cuts,
    size_t ncuts)
{
	size_t at = 0, from = 0, i;

	for (i = 0; i <= ncuts; i++) {
		size_t to = i < ncuts ? cuts[i] : n;

		at = script_add(out, at, 1, (const char *)h + from, to - from);
		if (i == 0)
			at = script_add(out, at, 2, "helper noise\n", 13);
		from = to;
	}
	return at;
}

static void
reset_exec(struct fx *f)
{
	int i;

	f->terminal = 0;
	f->have_err = 0;
	f->norder = 0;
	memset(&f->ex, 0, sizeof(f->ex));
	for (i = 1; i < 3; i++)
		evbuffer_drain(f->out[i], evbuffer_get_length(f->out[i]));
}

static void
test_exec_demultiplexes_split_frames_exactly(void **state)
{
	static const char *const argv[] = { "sh", "-c", "x", NULL };
	struct fx *f = *state;
	unsigned char h[256], script[4096];
	size_t n = 0, cut;
	json_t *cmd;

	running_sandbox(f);
	n = hframe(h, n, SBX_HELPER_FRAME_STDOUT, "out\n", 4);
	n = hframe(h, n, SBX_HELPER_FRAME_STDERR, "\xff\xfe\x00\r\n", 5);
	n = hframe(h, n, SBX_HELPER_FRAME_STDOUT, "more", 4);
	n = hexit(h, n, SBX_HELPER_EXIT_HOW_EXITED, 3, 0, 0);
	f->script = script;
	f->script_exit = 99;      /* the exit record wins over exec inspect */
	/* Both layers split at every byte: the runtime's frames cut at each
	 * position of the helper's bytes, the fake sends 3 bytes at a time. */
	for (cut = 1; cut < n; cut++) {
		reset_exec(f);
		f->script_len = wrap(script, h, n, &cut, 1);
		exec_argv(f, argv, 0, 0);
		run_loop(f);
		assert_false(f->have_err);
		assert_int_equal(f->terminal, 1);
		assert_int_equal(f->ex.code, 3);
		assert_null(f->ex.signal);
		assert_int_equal(f->ex.truncated, 0);
		assert_int_equal(evbuffer_get_length(f->out[1]), 8);
		assert_memory_equal(evbuffer_pullup(f->out[1], -1), "out\nmore", 8);
		assert_int_equal(evbuffer_get_length(f->out[2]), 5);
		assert_memory_equal(evbuffer_pullup(f->out[2], -1),
		    "\xff\xfe\x00\r\n", 5);
		f->order[f->norder] = '\0';
		assert_string_equal(f->order, "121");
	}
	assert_int_equal(logged(f, "GET /v1.41/exec/"), 0);
	/* The helper wraps argv with --framed, our exec id and its timeout. */
	cmd = f->execs[f->nexecs - 1].cmd;
	assert_string_equal(json_string_value(json_array_get(cmd, 0)),
	    "/.sbx/sbx-helper");
	assert_string_equal(json_string_value(json_array_get(cmd, 1)), "exec");
	assert_string_equal(json_string_value(json_array_get(cmd, 2)), "--framed");
	assert_string_equal(json_string_value(json_array_get(cmd, 4)), f->exec_id);
	assert_string_equal(json_string_value(json_array_get(cmd, 6)), "7000");
	assert_string_equal(json_string_value(json_array_get(cmd, 9)), "--");
	assert_string_equal(json_string_value(json_array_get(cmd, 10)), "sh");
}

static void
test_exec_every_byte_its_own_runtime_frame(void **state)
{
	static const char *const argv[] = { "x", NULL };
	struct fx *f = *state;
	unsigned char h[128], script[4096];
	size_t n = 0, cuts[128], i;

	running_sandbox(f);
	n = hframe(h, n, SBX_HELPER_FRAME_STDERR, "e1", 2);
	n = hframe(h, n, SBX_HELPER_FRAME_STDOUT, "o1", 2);
	n = hframe(h, n, SBX_HELPER_FRAME_STDERR, "e2", 2);
	n = hexit(h, n, SBX_HELPER_EXIT_HOW_EXITED, 0, 0, 0);
	for (i = 0; i + 1 < n; i++)
		cuts[i] = i + 1;
	f->script = script;
	f->script_len = wrap(script, h, n, cuts, n - 1);
	exec_argv(f, argv, 0, 0);
	run_loop(f);
	assert_false(f->have_err);
	assert_int_equal(f->ex.code, 0);
	f->order[f->norder] = '\0';
	assert_string_equal(f->order, "212");
	assert_memory_equal(evbuffer_pullup(f->out[2], -1), "e1e2", 4);
}

static void
test_exec_exit_record_code_and_signal(void **state)
{
	static const char *const argv[] = { "x", NULL };
	static const struct { int how, code, sig, want_code; const char *sig_name; }
	    cases[] = {
		{ SBX_HELPER_EXIT_HOW_SIGNALED, 0, 15, 143, "TERM" },
		{ SBX_HELPER_EXIT_HOW_SIGNALED, 0, 9, 137, "KILL" },
		/* `exit 137` is a code, not a signal: the record tells them apart */
		{ SBX_HELPER_EXIT_HOW_EXITED, 137, 0, 137, NULL },
		{ SBX_HELPER_EXIT_HOW_EXITED, 0, 0, 0, NULL },
	};
	struct fx *f = *state;
	unsigned char h[64], script[256];
	size_t i, n;

	running_sandbox(f);
	f->script = script;
	f->script_exit = 1;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		reset_exec(f);
		n = hexit(h, 0, cases[i].how, cases[i].code, cases[i].sig, 0);
		f->script_len = script_add(script, 0, 1, (const char *)h, n);
		exec_argv(f, argv, 0, 0);
		run_loop(f);
		assert_false(f->have_err);
		assert_int_equal(f->ex.code, cases[i].want_code);
		if (cases[i].sig_name == NULL)
			assert_null(f->ex.signal);
		else
			assert_string_equal(f->ex.signal, cases[i].sig_name);
	}
	assert_int_equal(logged(f, "GET /v1.41/exec/"), 0);
}

static void
test_exec_without_exit_record_asks_the_runtime(void **state)
{
	static const char *const argv[] = { "x", NULL };
	struct fx *f = *state;
	unsigned char h[64], script[256];
	size_t n;

	running_sandbox(f);
	/* The helper was killed: output, no record, half a frame. */
	n = hframe(h, 0, SBX_HELPER_FRAME_STDOUT, "partial", 7);
	f->script = script;
	f->script_len = script_add(script, 0, 1, (const char *)h, n + 5);
	memcpy(script + f->script_len - 5, "\x01\x02\x00\x00\x00", 5);
	f->script_exit = 137;
	exec_argv(f, argv, 0, 0);
	run_loop(f);
	assert_false(f->have_err);
	assert_int_equal(f->ex.code, 137);
	assert_string_equal(f->ex.signal, "KILL");
	assert_memory_equal(evbuffer_pullup(f->out[1], -1), "partial", 7);
	assert_int_equal(logged(f, "GET /v1.41/exec/"), 1);
}

static void
test_exec_bad_helper_frame_is_runtime_error_and_kills(void **state)
{
	static const char *const argv[] = { "x", NULL };
	static const unsigned char bad[][8] = {
		{ 5, SBX_HELPER_PROTO, 0, 0, 0, 0, 0, 1 },   /* unknown type */
		{ 0, SBX_HELPER_PROTO, 0, 0, 0, 0, 0, 1 },   /* type 0 */
		{ 1, 1, 0, 0, 0, 0, 0, 1 },                  /* version 1 */
		{ 1, SBX_HELPER_PROTO, 0, 1, 0, 0, 0, 1 },   /* reserved byte */
		{ 1, SBX_HELPER_PROTO, 0, 0, 0, 0, 0, 0 },   /* empty output */
		{ 1, SBX_HELPER_PROTO, 0, 0, 0, 0x10, 0, 1 }, /* 1 MiB + 1 */
		{ 2, SBX_HELPER_PROTO, 0, 0, 0xff, 0xff, 0xff, 0xff }, /* 4 GiB */
		{ 3, SBX_HELPER_PROTO, 0, 0, 0, 0, 0, 7 },   /* exit record of 7 */
		{ 4, SBX_HELPER_PROTO, 0, 0, 0, 0, 0x10, 1 }, /* error record > 4 KiB */
	};
	static const unsigned char bad_exit[][8] = {
		{ 3, 0, 0, 0, 0, 0, 0, 0 },      /* how 3 */
		{ 2, 0, 0, 0, 0, 0, 0, 0 },      /* signal 0 */
		{ 2, 0, 65, 0, 0, 0, 0, 0 },     /* signal 65 */
		{ 1, 0, 9, 0, 0, 0, 0, 0 },      /* exited with a signal */
		{ 1, 0, 0, 2, 0, 0, 0, 0 },      /* unknown flag */
		{ 1, 0, 0, 0, 0, 0, 1, 0 },      /* reserved byte */
	};
	struct fx *f = *state;
	unsigned char h[128], script[512];
	size_t i, n, total = sizeof(bad) / 8 + sizeof(bad_exit) / 8 + 2;

	running_sandbox(f);
	f->script = script;
	f->script_hang = 1;           /* only the kill ends the stream */
	for (i = 0; i < total; i++) {
		reset_exec(f);
		n = hframe(h, 0, SBX_HELPER_FRAME_STDOUT, "ok", 2);
		if (i < sizeof(bad) / 8) {
			memcpy(h + n, bad[i], 8);
			n += 8;
		} else if (i < sizeof(bad) / 8 + sizeof(bad_exit) / 8) {
			n = hframe(h, n, SBX_HELPER_FRAME_EXIT,
			    bad_exit[i - sizeof(bad) / 8], 8);
		} else if (i == total - 2) {
			/* anything after the exit record */
			n = hexit(h, n, SBX_HELPER_EXIT_HOW_EXITED, 0, 0, 0);
			n = hframe(h, n, SBX_HELPER_FRAME_STDOUT, "late", 4);
		} else {
			/* an error record that is not the helper's JSON */
			n = hframe(h, n, SBX_HELPER_FRAME_ERROR, "{\"x\":1}", 7);
		}
		f->script_len = script_add(script, 0, 1, (const char *)h, n);
		f->kills = 0;
		exec_argv(f, argv, 0, 0);
		run_loop(f);
		assert_true(f->have_err);
		assert_int_equal(f->terminal, 1);
		assert_string_equal(f->err.code, SBX_E_RUNTIME);
		assert_non_null(strstr(f->err.message, "protocol"));
		assert_memory_equal(evbuffer_pullup(f->out[1], -1), "ok", 2);
		assert_int_equal(evbuffer_get_length(f->out[1]), 2);
		settle(f, 30);
		assert_int_equal(f->kills, 1);
		assert_string_equal(f->killed, f->exec_id);
	}
}

static void
test_exec_helper_records_timeout_and_refusal(void **state)
{
	static const char *const argv[] = { "x", NULL };
	static const char refusal[] = "{\"sbx_helper\":2,\"error\":{\"code\":"
	    "\"path_outside_work\",\"message\":\"chdir: the path leaves /work\"}}\n";
	static const char notfound[] = "{\"sbx_helper\":2,\"error\":{\"code\":"
	    "\"not_found\",\"message\":\"command not found\"}}\n";
	static const char tmo[] = "{\"sbx_helper\":2,\"error\":{\"code\":"
	    "\"timeout\",\"message\":\"command ran longer than 7000 ms\"}}\n";
	struct fx *f = *state;
	unsigned char h[512], script[1024];
	size_t n;

	running_sandbox(f);
	f->script = script;
	/* the helper's backstop fired */
	n = hframe(h, 0, SBX_HELPER_FRAME_STDOUT, "x", 1);
	n = hframe(h, n, SBX_HELPER_FRAME_ERROR, tmo, sizeof(tmo) - 1);
	n = hexit(h, n, SBX_HELPER_EXIT_HOW_SIGNALED, 0, 9,
	    SBX_HELPER_EXIT_FLAG_TIMEOUT);
	f->script_len = script_add(script, 0, 1, (const char *)h, n);
	exec_argv(f, argv, 0, 0);
	run_loop(f);
	assert_string_equal(f->err.code, SBX_E_TIMEOUT);
	/* the command never ran: the helper's code, not an exit */
	reset_exec(f);
	n = hframe(h, 0, SBX_HELPER_FRAME_ERROR, refusal, sizeof(refusal) - 1);
	n = hexit(h, n, SBX_HELPER_EXIT_HOW_EXITED, SBX_HELPER_EXEC_FAILED, 0, 0);
	f->script_len = script_add(script, 0, 1, (const char *)h, n);
	exec_argv(f, argv, 0, 0);
	run_loop(f);
	assert_string_equal(f->err.code, SBX_E_PATH_OUTSIDE_WORK);
	assert_string_equal(f->err.message, "chdir: the path leaves /work");
	/* command not found: status 127 and the reason on stderr */
	reset_exec(f);
	n = hframe(h, 0, SBX_HELPER_FRAME_ERROR, notfound, sizeof(notfound) - 1);
	n = hexit(h, n, SBX_HELPER_EXIT_HOW_EXITED, SBX_HELPER_EXEC_NOTFOUND, 0, 0);
	f->script_len = script_add(script, 0, 1, (const char *)h, n);
	exec_argv(f, argv, 0, 0);
	run_loop(f);
	assert_false(f->have_err);
	assert_int_equal(f->ex.code, 127);
	assert_int_equal(evbuffer_get_length(f->out[2]), 30);
	assert_memory_equal(evbuffer_pullup(f->out[2], -1),
	    "sbx-helper: command not found\n", 30);
}

static void
test_exec_output_cap_is_exact_and_kills(void **state)
{
	static const char *const argv[] = { "yes", NULL };
	struct fx *f = *state;
	unsigned char script[1024];
	char chunk[100];
	size_t n = 0;
	int i;

	running_sandbox(f);
	memset(chunk, 'y', sizeof(chunk));
	for (i = 0; i < 8; i++) {
		unsigned char h[120];
		size_t hn = hframe(h, 0, i % 2 ? 2 : 1, chunk, sizeof(chunk));

		n = script_add(script, n, 1, (const char *)h, hn);
	}
	f->script = script;
	f->script_len = n;
	f->script_hang = 1;       /* only the kill ends it */
	exec_argv(f, argv, 0, 250);
	run_loop(f);
	assert_false(f->have_err);
	assert_int_equal(evbuffer_get_length(f->out[1]) +
	    evbuffer_get_length(f->out[2]), 250);
	assert_int_equal(f->ex.truncated, 1);
	assert_int_equal(f->ex.code, 137);
	assert_string_equal(f->ex.signal, "KILL");
	assert_int_equal(f->kills, 1);
	assert_string_equal(f->killed, f->exec_id);
}

static void
test_exec_timeout_kills_then_reports_timeout(void **state)
{
	static const char *const argv[] = { "sleep", "300", NULL };
	struct fx *f = *state;
	unsigned char script[64];

	running_sandbox(f);
	f->script = script;
	f->script_len = script_add(script, 0, 1, "\1\2\0\0\0\0\0\1z", 9);
	f->script_hang = 1;
	exec_argv(f, argv, 200, 0);
	run_loop(f);
	assert_true(f->have_err);
	assert_string_equal(f->err.code, SBX_E_TIMEOUT);
	assert_int_equal(f->terminal, 1);
	assert_int_equal(f->kills, 1);   /* before the error was reported */
	assert_string_equal(f->killed, f->exec_id);
}

static void
test_exec_cancel_kills_and_makes_no_callback(void **state)
{
	static const char *const argv[] = { "sleep", "300", NULL };
	struct fx *f = *state;
	unsigned char script[64];

	running_sandbox(f);
	f->script = script;
	f->script_len = script_add(script, 0, 1, "\1\2\0\0\0\0\0\1z", 9);
	f->script_hang = 1;
	f->cancel_on_output = 1;  /* cancel from inside output() */
	exec_argv(f, argv, 0, 0);
	run_loop(f);
	settle(f, 300);
	assert_int_equal(f->terminal, 0);
	assert_int_equal(f->kills, 1);
	assert_string_equal(f->killed, f->exec_id);
}

static void
test_exec_on_stopped_or_absent_sandbox(void **state)
{
	static const char *const argv[] = { "true", NULL };
	struct fx *f = *state;

	exec_argv(f, argv, 0, 0);
	run_loop(f);
	assert_string_equal(f->err.code, SBX_E_NOT_FOUND);
	running_sandbox(f);
	f->c_running = 0;
	f->have_err = 0;
	exec_argv(f, argv, 0, 0);
	run_loop(f);
	assert_string_equal(f->err.code, SBX_E_NOT_RUNNING);
	assert_int_equal(logged(f, "POST /v1.41/containers/c0ffee0123456789/exec"),
	    0);
}

static void
test_exec_limits_refused_synchronously(void **state)
{
	static const char *const argv[] = { "true", NULL };
	struct fx *f = *state;
	struct sbx_exec_req req;
	struct sbx_sink sink = sink_of(f);
	struct sbx_err err;

	memset(&req, 0, sizeof(req));
	req.argv = argv;
	req.timeout_ms = 20000;
	assert_null(f->drv->ops->exec(f->drv, "t1", &req, &sink, &err));
	assert_string_equal(err.code, SBX_E_LIMIT_EXCEEDED);
	req.timeout_ms = 0;
	req.output_cap = 1001;
	assert_null(f->drv->ops->exec(f->drv, "t1", &req, &sink, &err));
	assert_string_equal(err.code, SBX_E_LIMIT_EXCEEDED);
	req.output_cap = 0;
	req.cwd = "/work/../etc";
	assert_null(f->drv->ops->exec(f->drv, "t1", &req, &sink, &err));
	assert_string_equal(err.code, SBX_E_PATH_OUTSIDE_WORK);
	settle(f, 20);
	assert_int_equal(f->nlog, 0);
}

/* ---------- tests: files ---------- */

static void
test_read_maps_helper_error_status(void **state)
{
	struct fx *f = *state;
	struct sbx_sink sink = sink_of(f);
	struct sbx_err err;

	running_sandbox(f);
	f->helper_stderr = "{\"sbx_helper\":2,\"error\":{\"code\":"
	    "\"path_outside_work\",\"message\":\"open: the path leaves /work\"}}\n";
	f->helper_exit = 3;
	f->returned = 0;
	assert_non_null(f->drv->ops->read(f->drv, "t1", "/work/link/x", &sink,
	    &err));
	run_loop(f);
	assert_string_equal(f->err.code, SBX_E_PATH_OUTSIDE_WORK);
	assert_string_equal(f->err.message, "open: the path leaves /work");
	assert_int_equal(evbuffer_get_length(f->out[2]), 0);
	assert_string_equal(json_string_value(json_array_get(f->execs[0].cmd, 1)),
	    "read");
}

static void
test_read_streams_stdout(void **state)
{
	struct fx *f = *state;
	struct sbx_sink sink = sink_of(f);
	struct sbx_err err;

	running_sandbox(f);
	f->helper_stdout = "file bytes";
	f->returned = 0;
	assert_non_null(f->drv->ops->read(f->drv, "t1", "/work/a", &sink, &err));
	run_loop(f);
	assert_false(f->have_err);
	assert_int_equal(f->ex.code, 0);
	assert_int_equal(evbuffer_get_length(f->out[1]), 10);
	assert_string_equal(f->exec_id, "");   /* no start for a read */
}

static void
test_list_decodes_names(void **state)
{
	struct fx *f = *state;
	struct sbx_list_page page = { "a", 2 };
	struct sbx_err err;
	json_t *cmd;

	running_sandbox(f);
	f->helper_stdout = "{\"name\":\"a.txt\",\"type\":\"file\",\"size\":3,"
	    "\"mode\":420,\"mtime\":7}\n{\"name\":\"bad\\ufffd\",\"name_b64\":"
	    "\"YmFk/w==\",\"type\":\"dir\",\"size\":4096,\"mode\":493,"
	    "\"mtime\":8}\n{\"end\":true,\"truncated\":true}\n";
	f->returned = 0;
	assert_non_null(f->drv->ops->list(f->drv, "t1", "/work", &page, on_list,
	    f, &err));
	run_loop(f);
	assert_false(f->have_err);
	assert_true(f->truncated);
	/* the page goes to the helper: --limit 2 --after-hex 61 --id ID */
	cmd = f->execs[f->nexecs - 1].cmd;
	assert_string_equal(json_string_value(json_array_get(cmd, 3)), "--limit");
	assert_string_equal(json_string_value(json_array_get(cmd, 4)), "2");
	assert_string_equal(json_string_value(json_array_get(cmd, 5)), "--after-hex");
	assert_string_equal(json_string_value(json_array_get(cmd, 6)), "61");
	assert_string_equal(json_string_value(json_array_get(cmd, 7)), "--id");
	assert_int_equal(f->nents, 2);
	assert_string_equal(f->ents[0].name, "a.txt");
	assert_string_equal(f->ents[0].type, "file");
	assert_int_equal(f->ents[0].mode, 0644);
	assert_string_equal(f->ents[1].name, "bad\xff");
	assert_string_equal(f->ents[1].type, "dir");
}

/* The list line parser on plain buffers (what the fuzz target calls). */
static void
test_list_line_parser_on_plain_buffers(void **state)
{
	static const struct {
		const char *line;
		int rc;
	} cases[] = {
		{ "{\"name\":\"a\",\"type\":\"dir\",\"size\":1,\"mode\":493,\"mtime\":9223372036854775807}", 1 },
		{ "{\"end\":true,\"truncated\":true}", 2 },
		{ "{\"end\":false}", -1 },
		{ "[1]", -1 },
		{ "", -1 },
		{ "{\"name\":\"a/b\"}", 0 },
		{ "{\"name\":\"\"}", 0 },
		{ "{\"name_b64\":\"YQBi\"}", 0 },          /* "a\0b" */
		{ "{\"name\":\"x\",\"name_b64\":\"/w==\"}", 1 },
		{ "{\"name\":\"x\"} trailing", -1 },
	};
	struct sbx_dirent d;
	size_t i;
	int trunc = 0;
	char big[5000];

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_int_equal(sbx_helper_list_line(cases[i].line,
		    strlen(cases[i].line), &d, &trunc), cases[i].rc);
	assert_true(trunc);
	assert_int_equal(sbx_helper_list_line(cases[8].line, strlen(cases[8].line),
	    &d, &trunc), 1);
	assert_string_equal(d.name, "\xff");
	assert_string_equal(d.type, "other");
	memset(big, ' ', sizeof(big));
	assert_int_equal(sbx_helper_list_line(big, sizeof(big), &d, &trunc), -1);
}

/* More entries than the page asked for, or no end line: not a page. */
static void
test_list_refuses_a_page_longer_than_asked(void **state)
{
	struct fx *f = *state;
	struct sbx_list_page page = { NULL, 1 };
	struct sbx_err err;

	running_sandbox(f);
	f->helper_stdout = "{\"name\":\"a\",\"type\":\"file\",\"size\":3,"
	    "\"mode\":420,\"mtime\":7}\n{\"name\":\"b\",\"type\":\"file\","
	    "\"size\":3,\"mode\":420,\"mtime\":7}\n{\"end\":true,"
	    "\"truncated\":false}\n";
	assert_non_null(f->drv->ops->list(f->drv, "t1", "/work", &page, on_list,
	    f, &err));
	run_loop(f);
	assert_true(f->have_err);
	assert_string_equal(f->err.code, SBX_E_RUNTIME);
	f->have_err = 0;
	f->helper_stdout = "{\"name\":\"a\",\"type\":\"file\",\"size\":3,"
	    "\"mode\":420,\"mtime\":7}\n";
	assert_non_null(f->drv->ops->list(f->drv, "t1", "/work", &page, on_list,
	    f, &err));
	run_loop(f);
	assert_true(f->have_err);
	assert_string_equal(f->err.code, SBX_E_RUNTIME);
}

/*
 * A helper that never answers (SIGSTOPped by the sandbox): the list ends
 * with timeout after file_timeout (300 ms here) without waiting for the
 * kill, and the helper is killed by its id.
 */
static void
test_file_op_without_progress_times_out_and_is_killed(void **state)
{
	struct fx *f = *state;
	struct sbx_list_page page = { NULL, 10 };
	struct sbx_err err;
	struct timespec t0, t1;
	const char *id;
	int i;

	running_sandbox(f);
	f->file_hang = 1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_non_null(f->drv->ops->list(f->drv, "t1", "/work", &page, on_list,
	    f, &err));
	run_loop(f);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	assert_true(f->have_err);
	assert_string_equal(f->err.code, SBX_E_TIMEOUT);
	assert_non_null(strstr(f->err.message, "file_timeout"));
	assert_true((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) /
	    1000000 < 3000);
	/* the kill exec follows on its own */
	for (i = 0; i < 2000 && f->kills == 0; i++)
		event_base_loop(f->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
	assert_int_equal(f->kills, 1);
	/* the runtime side sees its connection closed (and frees it) */
	for (i = 0; i < 200; i++)
		event_base_loop(f->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
	id = json_string_value(json_array_get(f->execs[0].cmd, 6));
	assert_non_null(id);
	assert_string_equal(f->killed, id);
}

static void
test_write_sends_body_as_stdin_with_mode(void **state)
{
	struct fx *f = *state;
	struct evbuffer *body = evbuffer_new();
	struct sbx_err err;
	json_t *cmd;

	running_sandbox(f);
	evbuffer_add(body, "hello", 5);
	f->returned = 0;
	assert_non_null(f->drv->ops->write(f->drv, "t1", "/work/d/f", 0600, body,
	    on_done, f, &err));
	run_loop(f);
	assert_false(f->have_err);
	assert_int_equal(evbuffer_get_length(body), 0);   /* drained */
	cmd = f->execs[0].cmd;
	assert_string_equal(json_string_value(json_array_get(cmd, 1)), "write");
	assert_string_equal(json_string_value(json_array_get(cmd, 2)), "/work/d/f");
	assert_string_equal(json_string_value(json_array_get(cmd, 3)), "0600");
	assert_true(json_is_true(json_object_get(f->bodies[1], "AttachStdin")));
	evbuffer_free(body);
}

int
main(void)
{
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
	const struct CMUnitTest tests[] = {
		T(test_ensure_creates_a_hardened_container),
		T(test_warm_ensure_is_one_inspect),
		T(test_ensure_starts_a_stopped_sandbox),
		T(test_egress_change_replaces_container_keeps_volume),
		T(test_egress_network_is_the_sandboxs_own_labelled_bridge),
		T(test_egress_revoked_removes_the_network_after_the_container),
		T(test_unlabelled_network_of_that_name_is_conflict_and_untouched),
		T(test_reconcile_removes_only_orphaned_sbx_networks),
		T(test_unlabelled_container_is_conflict_and_untouched),
		T(test_unlabelled_volume_is_conflict),
		T(test_refusals_happen_before_any_runtime_call),
		T(test_status_absent_and_stopped_reason),
		T(test_stop_absent_is_not_found_destroy_absent_is_ok),
		T(test_destroy_removes_container_then_volume),
		T(test_list_sandboxes_only_labelled),
		T(test_list_sandboxes_claimed_pool_member_by_name),
		T(test_unreachable_runtime_is_runtime_unavailable),
		T(test_health_ok),
		T(test_exec_demultiplexes_split_frames_exactly),
		T(test_exec_every_byte_its_own_runtime_frame),
		T(test_exec_exit_record_code_and_signal),
		T(test_exec_without_exit_record_asks_the_runtime),
		T(test_exec_bad_helper_frame_is_runtime_error_and_kills),
		T(test_ensure_init_container_failure_is_an_error),
		T(test_ensure_refuses_an_image_whose_helper_dir_is_a_link),
		T(test_ensure_refuses_an_image_whose_work_is_a_file),
		cmocka_unit_test(test_mount_path_judge_reads_both_runtimes),
		T(test_a_new_container_that_cannot_start_is_removed_and_its_text_kept),
		T(test_ensure_removes_a_podman_ghost_and_keeps_the_volume),
		T(test_ensure_removes_a_container_left_removing),
		T(test_ensure_removes_a_container_whose_start_a_crash_cut),
		T(test_ensure_removes_a_container_whose_shim_a_crash_left),
		T(test_ensure_removes_a_name_only_storage_holds),
		T(test_exec_refused_as_improper_state_is_not_running),
		T(test_list_and_destroy_remove_a_podman_ghost),
		T(test_inspect_of_a_container_being_removed_is_absent),
	T(test_ensure_init_wait_cut_off_is_runtime_unavailable),
		T(test_stale_helper_label_replaces_the_container),
		T(test_exec_helper_records_timeout_and_refusal),
		T(test_exec_output_cap_is_exact_and_kills),
		T(test_exec_timeout_kills_then_reports_timeout),
		T(test_exec_cancel_kills_and_makes_no_callback),
		T(test_exec_on_stopped_or_absent_sandbox),
		T(test_exec_limits_refused_synchronously),
		T(test_read_maps_helper_error_status),
		T(test_read_streams_stdout),
		T(test_list_decodes_names),
		T(test_list_refuses_a_page_longer_than_asked),
		T(test_list_line_parser_on_plain_buffers),
		T(test_file_op_without_progress_times_out_and_is_killed),
		T(test_write_sends_body_as_stdin_with_mode),
	};
#undef T

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
