/* sbx_proxy.c - sbx-proxy, the egress proxy of one sandbox: CONNECT and plain HTTP checked against an allowlist, names resolved once and only checked addresses dialled (adr/0026). This file is its entry (options, policy file, signals, the listener); one connection's life is proxy_conn.c, the decision log proxy_log.c. */
/*
 * One process per sandbox, in a container of its own that the broker runs on
 * two networks: the sandbox's internal one (no route out) and an egress one.
 * A client's request head is read (bounded, timed), parsed strictly
 * (proxy_req.c), its host checked against the policy (proxy_policy.c), then
 * resolved through evdns only (the NSS entry points are stubbed out in
 * proxy_nonss.c, so no other resolver path exists) and every address it
 * resolves to checked against the refused ranges; the proxy connects only to
 * those checked addresses, so a second answer of the same name (DNS
 * rebinding) never reaches a socket. Refusals answer at once: 403 with one
 * line of reason. Every decision is one JSON line on stdout with the running
 * allowed/denied counts: the broker reads them from the container's log
 * (GET /containers/{id}/logs) for metrics and the api's recent denials.
 * With --counts FILE the counts are kept in FILE (in the socket volume,
 * read-only to the sandbox) and read back at start, so they stay monotonic
 * across a restart or a replacement of the proxy (adr/0027).
 * Paths, query strings and header values are never printed.
 *
 * Usage: sbx-proxy [--listen HOST:PORT|unix:PATH|fd:N] [--policy FILE] [--allow ENTRY]...
 *        [--cidr CIDR]... [--resolver IP[:PORT]]... [--hosts FILE]
 *        [--counts FILE|--counts-fd N] [--max-conns N] [--head-timeout-ms MS] [--connect-timeout-ms MS]
 *        [--idle-timeout-ms MS] [--dns-timeout-ms MS]
 *        sbx-proxy relay [--listen HOST:PORT] --to PATH
 *        sbx-proxy vmrelay --port DEV [--listen IPv4:PORT] [--max-conns N]
 * The relay runs in the sandbox (NetworkMode none: loopback only): it
 * passes each connection to 127.0.0.1:3128 unparsed to the proxy's unix
 * socket in a volume both containers mount; it decides nothing.
 * vmrelay is the relay of a vm sandbox (proxy_vmrelay.h): the connections go
 * over a virtio-serial port to the broker, which hands each to this
 * sandbox's proxy (adr/0069, amendment "egress").
 * SIGHUP re-reads --policy FILE (a bad file allows nothing until fixed);
 * SIGTERM/SIGINT stop. Exit: 0 stopped, 2 usage, 1 start-up failure.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/dns.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>

#include "proxy_counts.h"
#include "proxy_int.h"
#include "proxy_policy.h"
#include "proxy_req.h"
#include "proxy_vmrelay.h"
#include "sbx_msg.h"
#include "sbx_time.h"

#define POLICY_FILE_MAX (256 * 1024)

static struct px px;

/* ---------- policy, signals, main ---------- */

static int
load_policy_file(const char *path, struct proxy_policy *p, char *why, size_t len)
{
	char *buf = NULL;
	ssize_t n;
	size_t got = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc;

	if (fd < 0) {
		snprintf(why, len, "cannot open the policy file: %s", strerror(errno));
		memset(p, 0, sizeof(*p));
		return -1;
	}
	buf = malloc(POLICY_FILE_MAX);
	if (buf == NULL) {
		close(fd);
		snprintf(why, len, "%s", SBX_MSG_OOM);
		return -1;
	}
	while (got < POLICY_FILE_MAX && (n = read(fd, buf + got, POLICY_FILE_MAX - got)) > 0)
		got += (size_t)n;
	close(fd);
	if (got >= POLICY_FILE_MAX) {
		free(buf);
		snprintf(why, len, "policy file larger than %d bytes", POLICY_FILE_MAX);
		memset(p, 0, sizeof(*p));
		return -1;
	}
	rc = proxy_policy_parse(p, buf, got, why, len);
	free(buf);
	return rc;
}

static void
on_hup(evutil_socket_t fd, short what, void *arg)
{
	char why[PROXY_WHY_MAX];

	(void)fd;
	(void)what;
	(void)arg;
	if (px.policy_file == NULL)
		return;
	/* A policy that does not parse allows nothing: fail closed. */
	if (load_policy_file(px.policy_file, px.pol, why, sizeof(why)) != 0) {
		memset(px.pol, 0, sizeof(*px.pol));
		proxy_emit(&px, "policy", NULL, 0, why, NULL);
		return;
	}
	proxy_emit(&px, "policy", NULL, 0, "reloaded", NULL);
}

static void
on_term(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	event_base_loopexit(arg, NULL);
}

static void
usage(void)
{
	fprintf(stderr, "usage: sbx-proxy [--listen HOST:PORT|unix:PATH|fd:N] [--policy FILE] [--allow ENTRY]...\n"
	    "       [--cidr CIDR]... [--resolver IP[:PORT]]... [--hosts FILE] [--max-conns N]\n"
	    "       [--head-timeout-ms MS] [--connect-timeout-ms MS] [--idle-timeout-ms MS]\n"
	    "       [--dns-timeout-ms MS] [--counts FILE|--counts-fd N]\n"
	    "       sbx-proxy relay [--listen HOST:PORT] --to /PATH\n"
	    "       sbx-proxy vmrelay --port /dev/vportNpM [--listen IPv4:PORT] [--max-conns N]\n");
	exit(2);
}

static int
unix_addr(const char *path, struct sockaddr_un *un)
{
	memset(un, 0, sizeof(*un));
	if (path[0] != '/' || strlen(path) >= sizeof(un->sun_path))
		return -1;
	un->sun_family = AF_UNIX;
	strcpy(un->sun_path, path);
	return 0;
}

/* "IPv4:PORT", "[IPv6]:PORT" (PORT 0..65535, 0: any free port) or
 * "unix:/PATH". */
static int
parse_listen(const char *s, struct sockaddr_storage *ss, int *sl)
{
	char host[64];
	const char *colon = strrchr(s, ':'), *h = s;
	size_t hn;
	char *end;
	long port;

	memset(ss, 0, sizeof(*ss));
	if (strncmp(s, "unix:", 5) == 0) {
		if (unix_addr(s + 5, (struct sockaddr_un *)ss) != 0)
			return -1;
		*sl = sizeof(struct sockaddr_un);
		return 0;
	}
	if (colon == NULL || colon[1] == '\0')
		return -1;
	hn = (size_t)(colon - s);
	if (hn >= 2 && s[0] == '[' && s[hn - 1] == ']') {
		h = s + 1;
		hn -= 2;
	}
	if (hn == 0 || hn >= sizeof(host))
		return -1;
	memcpy(host, h, hn);
	host[hn] = '\0';
	errno = 0;
	port = strtol(colon + 1, &end, 10);
	if (errno != 0 || *end != '\0' || port < 0 || port > 65535)
		return -1;
	if (inet_pton(AF_INET, host, &((struct sockaddr_in *)ss)->sin_addr) == 1) {
		((struct sockaddr_in *)ss)->sin_family = AF_INET;
		((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
		*sl = sizeof(struct sockaddr_in);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &((struct sockaddr_in6 *)ss)->sin6_addr) == 1) {
		((struct sockaddr_in6 *)ss)->sin6_family = AF_INET6;
		((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
		*sl = sizeof(struct sockaddr_in6);
		return 0;
	}
	return -1;
}

static int
num_arg(const char *s, int lo, int hi)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
		usage();
	return (int)v;
}

int
main(int argc, char **argv)
{
	static struct proxy_policy pol;
	const char *listen = "0.0.0.0:3128", *hosts = NULL, *counts = NULL;
	const char *resolvers[16];
	int nres = 0, i, sl = sizeof(struct sockaddr_storage), stdin_policy = 0;
	int listen_fd = -1, counts_fd = -1;
	char why[PROXY_WHY_MAX], opt[32];
	struct sockaddr_storage ss;
	struct evconnlistener *lis;
	struct event *ev_hup, *ev_term, *ev_int;
	socklen_t len = sizeof(ss);

	px.pol = &pol;
	px.counts_fd = -1;
	px.max_conns = 256;
	px.head_ms = 10000;
	px.connect_ms = 10000;
	px.idle_ms = 600000;
	px.dns_ms = 3000;
	i = 1;
	if (argc > 1 && strcmp(argv[1], "vmrelay") == 0)
		return proxy_vmrelay_main(argc - 1, argv + 1);
	if (argc > 1 && strcmp(argv[1], "relay") == 0) {
		px.relay = 1;
		listen = "127.0.0.1:3128";
		i = 2;
	}
	for (; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (v == NULL)
			usage();
		i++;
		if (strcmp(a, "--listen") == 0)
			listen = v;
		else if (strcmp(a, "--to") == 0 && px.relay) {
			if (unix_addr(v, &px.relay_to) != 0)
				usage();
		}
		else if (strcmp(a, "--policy") == 0)
			px.policy_file = v;
		else if (strcmp(a, "--allow") == 0) {
			if (proxy_policy_add_allow(&pol, v, why, sizeof(why)) != 0) {
				fprintf(stderr, "sbx-proxy: --allow: %s\n", why);
				return 2;
			}
			stdin_policy = 1;
		} else if (strcmp(a, "--cidr") == 0) {
			if (proxy_policy_add_cidr(&pol, v, why, sizeof(why)) != 0) {
				fprintf(stderr, "sbx-proxy: --cidr: %s\n", why);
				return 2;
			}
		} else if (strcmp(a, "--resolver") == 0) {
			if (nres >= 16)
				usage();
			resolvers[nres++] = v;
		} else if (strcmp(a, "--hosts") == 0)
			hosts = v;
		else if (strcmp(a, "--counts") == 0 && !px.relay)
			counts = v;
		else if (strcmp(a, "--counts-fd") == 0 && !px.relay)
			counts_fd = num_arg(v, 3, 1023);
		else if (strcmp(a, "--max-conns") == 0)
			px.max_conns = num_arg(v, 1, 65536);
		else if (strcmp(a, "--head-timeout-ms") == 0)
			px.head_ms = num_arg(v, 1, 3600000);
		else if (strcmp(a, "--connect-timeout-ms") == 0)
			px.connect_ms = num_arg(v, 1, 3600000);
		else if (strcmp(a, "--idle-timeout-ms") == 0)
			px.idle_ms = num_arg(v, 1, 86400000);
		else if (strcmp(a, "--dns-timeout-ms") == 0)
			px.dns_ms = num_arg(v, 100, 60000);
		else
			usage();
	}
	if (px.relay && px.relay_to.sun_family != AF_UNIX)
		usage();
	if (px.policy_file != NULL && stdin_policy) {
		fprintf(stderr, "sbx-proxy: --policy and --allow exclude each other\n");
		return 2;
	}
	if (px.policy_file != NULL && load_policy_file(px.policy_file, &pol, why,
	    sizeof(why)) != 0) {
		fprintf(stderr, "sbx-proxy: %s: %s\n", px.policy_file, why);
		return 1;
	}
	if (counts != NULL &&
	    (px.counts_fd = proxy_counts_open(counts, &px.allowed, &px.denied)) < 0) {
		fprintf(stderr, "sbx-proxy: --counts %s: %s\n", counts, strerror(errno));
		return 1;
	}
	if (counts_fd >= 0)
		px.counts_fd = proxy_counts_read(counts_fd, &px.allowed, &px.denied);
	if (strncmp(listen, "fd:", 3) == 0) {
		listen_fd = num_arg(listen + 3, 3, 1023);
		evutil_make_socket_nonblocking(listen_fd);
		ss.ss_family = AF_UNIX;
	} else if (parse_listen(listen, &ss, &sl) != 0) {
		fprintf(stderr, "sbx-proxy: --listen: not HOST:PORT\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	px.base = event_base_new();
	if (px.base == NULL)
		return 1;
	px.dns = evdns_base_new(px.base, 0);
	if (px.dns == NULL)
		return 1;
	if (nres == 0) {
		if (evdns_base_resolv_conf_parse(px.dns, DNS_OPTIONS_ALL, "/etc/resolv.conf") != 0)
			proxy_logline("no usable /etc/resolv.conf", NULL);
	} else {
		for (i = 0; i < nres; i++) {
			if (evdns_base_nameserver_ip_add(px.dns, resolvers[i]) != 0) {
				fprintf(stderr, "sbx-proxy: --resolver: not IP[:PORT]\n");
				return 2;
			}
		}
	}
	/* Names are looked up as given: no search list turns "x" into "x.corp". */
	evdns_base_search_clear(px.dns);
	snprintf(opt, sizeof(opt), "%d.%03d", px.dns_ms / 1000, px.dns_ms % 1000);
	evdns_base_set_option(px.dns, "timeout:", opt);
	evdns_base_set_option(px.dns, "attempts:", "2");
	if (hosts != NULL && evdns_base_load_hosts(px.dns, hosts) != 0) {
		fprintf(stderr, "sbx-proxy: --hosts: cannot read the file\n");
		return 1;
	}
	if (listen_fd >= 0)
		/* A socket its starter bound and listens on (the vm driver's:
		 * it sits in a directory this unprivileged proxy cannot enter). */
		lis = evconnlistener_new(px.base, proxy_accepted, &px,
		    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, listen_fd);
	else {
		if (ss.ss_family == AF_UNIX)
			unlink(((struct sockaddr_un *)&ss)->sun_path);   /* a previous proxy's */
		lis = evconnlistener_new_bind(px.base, proxy_accepted, &px,
		    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC, 128,
		    (struct sockaddr *)&ss, sl);
	}
	if (lis == NULL) {
		fprintf(stderr, "sbx-proxy: cannot listen on %s: %s\n", listen, strerror(errno));
		return 1;
	}
	/* The socket's volume is the sandbox's alone (adr/0026): its users,
	 * whatever their uid, may connect. */
	if (ss.ss_family == AF_UNIX && listen_fd < 0 && chmod(((struct sockaddr_un *)&ss)->sun_path, 0666) != 0) {
		fprintf(stderr, "sbx-proxy: chmod %s: %s\n", listen, strerror(errno));
		return 1;
	}
	ev_hup = evsignal_new(px.base, SIGHUP, on_hup, NULL);
	ev_term = evsignal_new(px.base, SIGTERM, on_term, px.base);
	ev_int = evsignal_new(px.base, SIGINT, on_term, px.base);
	if (ev_hup == NULL || ev_term == NULL || ev_int == NULL || evsignal_add(ev_hup, NULL) != 0 ||
	    evsignal_add(ev_term, NULL) != 0 || evsignal_add(ev_int, NULL) != 0)
		return 1;
	if (ss.ss_family == AF_UNIX) {
		printf("{\"event\":\"listening\",\"addr\":");
		proxy_json_str(stdout, listen);
		printf(",\"relay\":%s,\"rules\":%zu,\"cidrs\":%zu,\"allowed\":%lu,"
		    "\"denied\":%lu}\n", px.relay ? "true" : "false", pol.nrules, pol.ncidrs,
		    px.allowed, px.denied);
		fflush(stdout);
	} else if (getsockname(evconnlistener_get_fd(lis), (struct sockaddr *)&ss, &len) == 0) {
		char a[64];
		unsigned port = ss.ss_family == AF_INET6 ?
		    ntohs(((struct sockaddr_in6 *)&ss)->sin6_port) :
		    ntohs(((struct sockaddr_in *)&ss)->sin_port);

		proxy_addr_str((struct sockaddr *)&ss, a, sizeof(a));
		printf("{\"event\":\"listening\",\"addr\":\"%s\",\"port\":%u,\"relay\":%s,"
		    "\"rules\":%zu,\"cidrs\":%zu}\n", a, port, px.relay ? "true" : "false",
		    pol.nrules, pol.ncidrs);
		fflush(stdout);
	}
	event_base_dispatch(px.base);
	evconnlistener_free(lis);
	event_free(ev_hup);
	event_free(ev_term);
	event_free(ev_int);
	evdns_base_free(px.dns, 1);
	event_base_free(px.base);
	return 0;
}
