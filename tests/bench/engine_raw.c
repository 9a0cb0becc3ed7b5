/* engine_raw.c - the bench's baseline: the Engine API spoken directly, no sbx code. */

/*
 * Reads one JSON request per line on stdin, answers one JSON line on stdout,
 * so the bench driver (tests/bench/bench.py) can alternate it with sbx
 * without paying a process start per round. Blocking sockets, one fresh
 * connection per HTTP request (as the broker's engine driver does).
 *
 *   {"op":"exec","cid":ID,"cmd":[...],"user":"1000:1000","inspect_first":bool}
 *       (inspect_first: GET /containers/ID/json first, as the broker does)
 *       POST /containers/ID/exec, POST /exec/X/start (Connection: Upgrade),
 *       read the 8-byte-framed stream to its end, GET /exec/X/json.
 *       -> {"ns":total,"first_ns":first payload byte or -1,"bytes":payload,
 *           "exit":code,"cpu_ns":this process's CPU time,"polls":inspects
 *           that still said Running (2 ms apart)}
 *   {"op":"cold","volume":V,"name":N,"config":{container create body}}
 *       POST /volumes/create, POST /containers/create?name=N,
 *       POST /containers/ID/start  -> {"ns":total,"id":ID}
 *   {"op":"req","method":M,"path":P,"body":JSON or absent}
 *       -> {"status":S,"ns":t,"body":parsed JSON or null}
 *
 * Any failure answers {"error":"..."} and the driver reports it.
 * Usage: engine-raw SOCKET_PATH
 */

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#define API "/v1.41"
#define BUFSZ (1024 * 1024)

static const char *sock_path;
static unsigned char *rbuf;

static int64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t
cpu_ns(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000 +
	    ((int64_t)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
}

static int
dial(void)
{
	struct sockaddr_un sa;
	int fd;

	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		return -1;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static int
write_all(int fd, const char *p, size_t n)
{
	ssize_t w;

	while (n > 0) {
		if ((w = write(fd, p, n)) < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* A connection's read state: bytes past the headers stay in rbuf[off..len). */
struct conn {
	int fd;
	size_t off, len;
	int status;
	int chunked;
	long long clen;
};

/* Sends the request and reads the status line and headers. */
static int
start_req(struct conn *c, const char *method, const char *path,
    const char *body, int upgrade)
{
	char head[1024];
	char *p, *eol, *hend;
	ssize_t r;
	size_t blen = body != NULL ? strlen(body) : 0;
	int n;

	memset(c, 0, sizeof(*c));
	c->clen = -1;
	if ((c->fd = dial()) < 0)
		return -1;
	n = snprintf(head, sizeof(head), "%s %s HTTP/1.1\r\nHost: engine\r\n"
	    "%s"
	    "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
	    method, path,
	    upgrade ? "Connection: Upgrade\r\nUpgrade: tcp\r\n" :
	    "Connection: close\r\n", blen);
	if (write_all(c->fd, head, (size_t)n) < 0 ||
	    (blen > 0 && write_all(c->fd, body, blen) < 0))
		goto fail;
	for (;;) {
		rbuf[c->len] = '\0';
		if ((hend = strstr((char *)rbuf, "\r\n\r\n")) != NULL)
			break;
		if (c->len >= 65536)
			goto fail;
		if ((r = read(c->fd, rbuf + c->len, 65536 - c->len)) <= 0)
			goto fail;
		c->len += (size_t)r;
	}
	if (sscanf((char *)rbuf, "HTTP/1.%*d %d", &c->status) != 1)
		goto fail;
	for (p = strstr((char *)rbuf, "\r\n") + 2; p < hend; p = eol + 2) {
		eol = strstr(p, "\r\n");
		if (strncasecmp(p, "Content-Length:", 15) == 0)
			c->clen = atoll(p + 15);
		else if (strncasecmp(p, "Transfer-Encoding:", 18) == 0 &&
		    strstr(p, "chunked") != NULL && strstr(p, "chunked") < eol)
			c->chunked = 1;
	}
	c->off = (size_t)(hend + 4 - (char *)rbuf);
	return 0;
fail:
	close(c->fd);
	c->fd = -1;
	return -1;
}

/* Reads a whole (small) response body into a malloc'd string. */
static char *
read_body(struct conn *c, size_t *outlen)
{
	char *raw = NULL, *out = NULL, *p, *end;
	size_t rl = c->len - c->off, cap = rl + 65536, ol = 0;
	ssize_t r;
	unsigned long csz;

	if ((raw = malloc(cap + 1)) == NULL)
		return NULL;
	memcpy(raw, rbuf + c->off, rl);
	while (c->clen < 0 || (long long)rl < c->clen) {
		if (rl == cap) {
			cap *= 2;
			if ((p = realloc(raw, cap + 1)) == NULL)
				goto fail;
			raw = p;
		}
		if ((r = read(c->fd, raw + rl, cap - rl)) < 0)
			goto fail;
		if (r == 0)
			break;
		rl += (size_t)r;
		/* chunked: the last chunk ends the body */
		if (c->chunked && rl >= 5 && memcmp(raw + rl - 5, "0\r\n\r\n", 5) == 0)
			break;
	}
	raw[rl] = '\0';
	if (!c->chunked) {
		*outlen = rl;
		return raw;
	}
	if ((out = malloc(rl + 1)) == NULL)
		goto fail;
	for (p = raw, end = raw + rl; p < end;) {
		csz = strtoul(p, &p, 16);
		if ((p = strstr(p, "\r\n")) == NULL)
			break;
		p += 2;
		if (csz == 0 || p + csz > end)
			break;
		memcpy(out + ol, p, csz);
		ol += csz;
		p += csz + 2;
	}
	out[ol] = '\0';
	free(raw);
	*outlen = ol;
	return out;
fail:
	free(raw);
	return NULL;
}

/* One request with a JSON body (or none); returns the parsed answer. */
static json_t *
call(const char *method, const char *path, json_t *body, int *status)
{
	struct conn c;
	char *b = NULL, *rb = NULL;
	size_t rl;
	json_t *j = NULL;

	*status = -1;
	if (body != NULL)
		b = json_dumps(body, JSON_COMPACT);
	if (start_req(&c, method, path, b, 0) < 0)
		goto done;
	*status = c.status;
	if ((rb = read_body(&c, &rl)) != NULL && rl > 0)
		j = json_loadb(rb, rl, 0, NULL);
	close(c.fd);
done:
	free(b);
	free(rb);
	return j;
}

static json_t *
errj(const char *what, int status, json_t *body)
{
	json_t *m = body != NULL ? json_object_get(body, "message") : NULL;
	json_t *r = json_pack("{s:s, s:i, s:s}", "error", what, "status", status,
	    "message", json_is_string(m) ? json_string_value(m) : "");

	json_decref(body);
	return r;
}

static json_t *
op_exec(json_t *q)
{
	const char *cid = json_string_value(json_object_get(q, "cid"));
	const char *user = json_string_value(json_object_get(q, "user"));
	json_t *body, *ans;
	struct conn c;
	char path[512], xid[128];
	int64_t t0, first = -1, bytes = 0, c0;
	unsigned char hdr[8];
	size_t hl = 0, avail, n;
	uint32_t left = 0;
	ssize_t r;
	int status, code, tries;

	if (cid == NULL)
		return json_pack("{s:s}", "error", "no cid");
	c0 = cpu_ns();
	t0 = now_ns();
	if (json_is_true(json_object_get(q, "inspect_first"))) {
		/* what the broker does before each exec */
		snprintf(path, sizeof(path), API "/containers/%s/json", cid);
		ans = call("GET", path, NULL, &status);
		if (status != 200)
			return errj("container inspect", status, ans);
		json_decref(ans);
	}
	body = json_pack("{s:b, s:b, s:b, s:b, s:s, s:s, s:O}",
	    "AttachStdin", 0, "AttachStdout", 1, "AttachStderr", 1, "Tty", 0,
	    "User", user != NULL ? user : "1000:1000", "WorkingDir", "/work",
	    "Cmd", json_object_get(q, "cmd"));
	snprintf(path, sizeof(path), API "/containers/%s/exec", cid);
	ans = call("POST", path, body, &status);
	json_decref(body);
	if (status != 201 || !json_is_string(json_object_get(ans, "Id")))
		return errj("exec create", status, ans);
	snprintf(xid, sizeof(xid), "%s", json_string_value(json_object_get(ans,
	    "Id")));
	json_decref(ans);
	snprintf(path, sizeof(path), API "/exec/%s/start", xid);
	if (start_req(&c, "POST", path, "{\"Detach\":false,\"Tty\":false}", 1) < 0)
		return errj("exec start", -1, NULL);
	if (c.status != 101 && c.status != 200) {
		close(c.fd);
		return errj("exec start", c.status, NULL);
	}
	avail = c.len - c.off;
	memmove(rbuf, rbuf + c.off, avail);
	for (;;) {
		unsigned char *p = rbuf;

		while (avail > 0) {
			if (left == 0) {
				n = 8 - hl;
				if (n > avail)
					n = avail;
				memcpy(hdr + hl, p, n);
				hl += n;
				p += n;
				avail -= n;
				if (hl == 8) {
					hl = 0;
					left = (uint32_t)hdr[4] << 24 |
					    (uint32_t)hdr[5] << 16 |
					    (uint32_t)hdr[6] << 8 | hdr[7];
				}
				continue;
			}
			n = left < avail ? left : avail;
			if (first < 0 && n > 0)
				first = now_ns() - t0;
			bytes += (int64_t)n;
			left -= (uint32_t)n;
			p += n;
			avail -= n;
		}
		if ((r = read(c.fd, rbuf, BUFSZ)) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (r == 0)
			break;
		avail = (size_t)r;
	}
	close(c.fd);
	snprintf(path, sizeof(path), API "/exec/%s/json", xid);
	for (tries = 0;; tries++) {
		ans = call("GET", path, NULL, &status);
		/* the stream can end a moment before the exit is recorded;
		 * podman 4.3 under load sometimes answers 500 "no such exec
		 * session" for a session that just ended: exit unknown (-1) */
		if (status == 200 && !json_is_true(json_object_get(ans, "Running")))
			break;
		json_decref(ans);
		ans = NULL;
		if (tries >= 50)
			break;
		usleep(2000);
	}
	code = ans != NULL ? (int)json_integer_value(json_object_get(ans,
	    "ExitCode")) : -1;
	json_decref(ans);
	return json_pack("{s:I, s:I, s:I, s:i, s:I, s:i}", "ns",
	    (json_int_t)(now_ns() - t0), "first_ns", (json_int_t)first,
	    "bytes", (json_int_t)bytes, "exit", code,
	    "cpu_ns", (json_int_t)(cpu_ns() - c0), "polls", tries);
}

static json_t *
op_cold(json_t *q)
{
	const char *vol = json_string_value(json_object_get(q, "volume"));
	const char *name = json_string_value(json_object_get(q, "name"));
	json_t *body, *ans;
	char path[512], id[128];
	int64_t t0;
	int status;

	if (vol == NULL || name == NULL)
		return json_pack("{s:s}", "error", "no volume or name");
	t0 = now_ns();
	body = json_pack("{s:s}", "Name", vol);
	ans = call("POST", API "/volumes/create", body, &status);
	json_decref(body);
	if (status != 201)
		return errj("volume create", status, ans);
	json_decref(ans);
	snprintf(path, sizeof(path), API "/containers/create?name=%s", name);
	ans = call("POST", path, json_object_get(q, "config"), &status);
	if (status != 201 || !json_is_string(json_object_get(ans, "Id")))
		return errj("container create", status, ans);
	snprintf(id, sizeof(id), "%s", json_string_value(json_object_get(ans, "Id")));
	json_decref(ans);
	snprintf(path, sizeof(path), API "/containers/%s/start", id);
	ans = call("POST", path, NULL, &status);
	if (status != 204)
		return errj("container start", status, ans);
	json_decref(ans);
	return json_pack("{s:I, s:s}", "ns", (json_int_t)(now_ns() - t0), "id", id);
}

static json_t *
op_req(json_t *q)
{
	const char *m = json_string_value(json_object_get(q, "method"));
	const char *p = json_string_value(json_object_get(q, "path"));
	json_t *ans;
	int64_t t0;
	int status;

	if (m == NULL || p == NULL)
		return json_pack("{s:s}", "error", "no method or path");
	t0 = now_ns();
	ans = call(m, p, json_object_get(q, "body"), &status);
	return json_pack("{s:i, s:I, s:o}", "status", status,
	    "ns", (json_int_t)(now_ns() - t0), "body", ans != NULL ? ans : json_null());
}

int
main(int argc, char **argv)
{
	char *line = NULL;
	size_t cap = 0;
	json_t *q, *a;
	const char *op;

	if (argc != 2) {
		fprintf(stderr, "usage: engine-raw SOCKET_PATH\n");
		return 64;
	}
	sock_path = argv[1];
	if ((rbuf = malloc(BUFSZ + 1)) == NULL)
		return 1;
	while (getline(&line, &cap, stdin) > 0) {
		q = json_loads(line, 0, NULL);
		op = json_string_value(json_object_get(q, "op"));
		if (op == NULL)
			a = json_pack("{s:s}", "error", "bad request line");
		else if (strcmp(op, "exec") == 0)
			a = op_exec(q);
		else if (strcmp(op, "cold") == 0)
			a = op_cold(q);
		else if (strcmp(op, "req") == 0)
			a = op_req(q);
		else
			a = json_pack("{s:s}", "error", "unknown op");
		json_decref(q);
		json_dumpf(a, stdout, JSON_COMPACT);
		fputc('\n', stdout);
		fflush(stdout);
		json_decref(a);
	}
	free(line);
	free(rbuf);
	return 0;
}
