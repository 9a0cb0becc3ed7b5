/* sbx_vminit.c - PID 1 of a vm-driver sandbox (adr/0069): loads the virtio modules, mounts the read-only root and /work, runs sbx-helper's agent on the agent port as the sandbox user and powers off on the control port's word; libc only, static, touches only the guest. */
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/reboot.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/*
 * The initramfs the broker's deploy/vm/build.sh makes holds this program as
 * /init, the kernel modules as /m/NN-name.ko (loaded in name order) and the
 * static sbx-helper as /sbx-helper (and sbx-proxy as /sbx-proxy). The kernel command line names the
 * sandbox user (sbx.user=UID:GID) and how many processes and threads it may
 * have at once (sbx.pids=N: RLIMIT_NPROC of the agent and all it starts,
 * the guest's side of the broker's pids limit). Two virtio-serial ports: "sbx.agent"
 * carries the agent channel (proto/sbx_agent.h) to the broker's unix
 * socket; "sbx.ctl" takes two words from the broker: "agent" (kill the
 * running agent, answer "ready", start a new one once the agent port has
 * a client) and "poweroff" (every process killed, the filesystems synced
 * and unmounted, the VM powered off: qemu exits). With sbx.egress=N on the
 * command line a third port, "sbx.egress", carries the sandbox's egress
 * connections: init runs `sbx-proxy vmrelay` on it as RELAY_UID (not the
 * sandbox user, who then cannot stop it; started again when it ends),
 * listening on 127.0.0.1:3128 with at most N connections, and the agent's
 * environment names that proxy (HTTP_PROXY etc., as in a container;
 * adr/0069, amendment "egress"). Nothing here trusts the sandbox user: the
 * agent and everything it starts run as that user; init alone is root.
 */

#define NEWROOT "/newroot"
#define HELPER_SRC "/sbx-helper"
#define PROXY_SRC "/sbx-proxy"
#define RELAY_UID 65534           /* nobody: the egress relay's user */
#define RELAY_RESTART_MS 500
#define AGENT_RESTART_MS 200
#define CONNECT_POLL_MS 20        /* an agent is wanted: look for the broker this often */

static void
say(const char *what)
{
	int e = errno;
	char line[256];

	snprintf(line, sizeof(line), "sbx-vminit: %s (%s)\n", what, strerror(e));
	if (write(2, line, strlen(line)) < 0)
		return;
}

/* One line on the console (console.log on the host): what init did. */
static void
note(const char *what, long v)
{
	char line[160];
	int n = snprintf(line, sizeof(line), "sbx-vminit: %s %ld\n", what, v);

	if (n > 0 && write(2, line, (size_t)n) < 0)
		return;
}

static void
die(const char *what)
{
	say(what);
	sync();
	reboot(RB_POWER_OFF);
	_exit(1);
}

static void
load_modules(void)
{
	struct dirent **ents;
	char path[300];
	int n, i, fd;

	n = scandir("/m", &ents, NULL, alphasort);
	for (i = 0; i < n; i++) {
		if (ents[i]->d_name[0] != '.') {
			snprintf(path, sizeof(path), "/m/%s", ents[i]->d_name);
			if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 ||
			    (syscall(SYS_finit_module, fd, "", 0) != 0 && errno != EEXIST))
				say(path);
			if (fd >= 0)
				close(fd);
		}
		free(ents[i]);
	}
	if (n >= 0)
		free(ents);
}

/* Reads a small sysfs file into buf (trailing newline cut); 0 or -1. */
static int
read_small(const char *path, char *buf, size_t len)
{
	ssize_t r;
	int fd;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	r = read(fd, buf, len - 1);
	close(fd);
	if (r < 0)
		return -1;
	buf[r] = '\0';
	if (r > 0 && buf[r - 1] == '\n')
		buf[r - 1] = '\0';
	return 0;
}

/* The disks: the read-only one is the root, the other /work. */
static int
find_disks(char *root, char *work, size_t len)
{
	char path[64], ro[8];
	const char *names[] = { "vda", "vdb" };
	int i;

	root[0] = work[0] = '\0';
	for (i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "/sys/block/%s/ro", names[i]);
		if (read_small(path, ro, sizeof(ro)) != 0)
			return -1;
		snprintf(strcmp(ro, "1") == 0 ? root : work, len, "/dev/%s", names[i]);
	}
	return root[0] != '\0' && work[0] != '\0' ? 0 : -1;
}

/* /dev path of the virtio-serial port named name, or -1. */
static int
find_port(const char *name, char *dev, size_t len)
{
	char path[300], got[64];
	struct dirent *e;
	DIR *d;
	int ok = -1;

	if ((d = opendir("/sys/class/virtio-ports")) == NULL)
		return -1;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/sys/class/virtio-ports/%s/name", e->d_name);
		if (read_small(path, got, sizeof(got)) == 0 && strcmp(got, name) == 0) {
			snprintf(dev, len, "/dev/%s", e->d_name);
			ok = 0;
			break;
		}
	}
	closedir(d);
	return ok;
}

static void
sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static void
copy_file(const char *from, const char *to, mode_t mode)
{
	char buf[65536];
	ssize_t r;
	int in, out;

	if ((in = open(from, O_RDONLY | O_CLOEXEC)) < 0 ||
	    (out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)) < 0)
		die("cannot copy the helper");
	while ((r = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, (size_t)r) != r)
			die("cannot copy the helper");
	close(in);
	close(out);
}

static void
mount_or_die(const char *src, const char *dst, const char *type,
    unsigned long flags, const char *data)
{
	if (mount(src, dst, type, flags, data) != 0)
		die(dst);
}

/* "ready" on the control port. The broker's word can arrive before the
 * port's "host connected" message: a write then fails with EAGAIN for a
 * moment, so try for up to 5 s (the broker asks again after 3 s anyway). */
static void
answer_ready(int ctl)
{
	int tries;

	for (tries = 0; tries < 50; tries++) {
		if (write(ctl, "ready\n", 6) == 6)
			return;
		sleep_ms(100);
	}
	say("cannot answer on the control port");
}

/* sbx.pids from the command line (default 256). */
static unsigned long long g_pids = 256;
/* sbx.egress from the command line: the relay's connection cap, 0: none. */
static unsigned long g_egress;

/* user from the command line: sbx.user=UID:GID (default 1000:1000); and
 * sbx.pids=N (g_pids, 1..1000000). */
static void
parse_user(unsigned *uid, unsigned *gid)
{
	char cmd[4096], *p;
	unsigned long long n;

	*uid = *gid = 1000;
	if (read_small("/proc/cmdline", cmd, sizeof(cmd)) != 0)
		return;
	if ((p = strstr(cmd, "sbx.pids=")) != NULL &&
	    sscanf(p + 9, "%llu", &n) == 1 && n >= 1 && n <= 1000000)
		g_pids = n;
	if ((p = strstr(cmd, "sbx.egress=")) != NULL &&
	    sscanf(p + 11, "%llu", &n) == 1 && n <= 1024)
		g_egress = (unsigned long)n;
	if ((p = strstr(cmd, "sbx.user=")) != NULL &&
	    sscanf(p + 9, "%u:%u", uid, gid) == 2 && *uid != 0 && *gid != 0)
		return;
	*uid = *gid = 1000;
}

/* lo up, as a container's runtime leaves it: the kernel starts it down, and
 * the egress relay and any server of the sandbox's own live on it. */
static void
loopback_up(void)
{
	struct ifreq ifr;
	int fd;

	if ((fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0) {
		say("no socket for lo");
		return;
	}
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) != 0 ||
	    (ifr.ifr_flags |= IFF_UP, ioctl(fd, SIOCSIFFLAGS, &ifr)) != 0)
		say("cannot bring lo up");
	close(fd);
}

/* Mounts everything and moves into the new root. */
static void
setup(unsigned *uidp, unsigned *gidp)
{
	unsigned uid, gid;
	char root[32], work[32], opts[64];
	int tries;

	mount("devtmpfs", "/dev", "devtmpfs", 0, NULL);
	mount_or_die("proc", "/proc", "proc", 0, NULL);
	mount_or_die("sysfs", "/sys", "sysfs", 0, NULL);
	parse_user(&uid, &gid);
	*uidp = uid;
	*gidp = gid;
	load_modules();
	for (tries = 0; find_disks(root, work, sizeof(root)) != 0; tries++) {
		if (tries > 500)
			die("no root and work disks");
		sleep_ms(10);
	}
	mkdir(NEWROOT, 0755);
	mount_or_die(root, NEWROOT, "ext4", MS_RDONLY | MS_NOATIME, NULL);
	mount_or_die(work, NEWROOT "/work", "ext4", MS_NOSUID | MS_NODEV | MS_NOATIME, NULL);
	/* mkfs's lost+found (root's, 0700) is no part of a container's /work:
	 * the sandbox user could neither use nor count it. Gone while empty. */
	rmdir(NEWROOT "/work/lost+found");
	mount_or_die("tmpfs", NEWROOT "/.sbx", "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=0755");
	copy_file(HELPER_SRC, NEWROOT "/.sbx/sbx-helper", 0755);
	if (g_egress > 0)
		copy_file(PROXY_SRC, NEWROOT "/.sbx/sbx-proxy", 0755);
	mount(NULL, NEWROOT "/.sbx", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL);
	mount_or_die("tmpfs", NEWROOT "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=1777");
	mount_or_die("tmpfs", NEWROOT "/run", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755");
	mkdir(NEWROOT "/run/sbx", 0700);
	snprintf(opts, sizeof(opts), "size=8m,mode=0700,uid=%u,gid=%u", uid, gid);
	mount_or_die("tmpfs", NEWROOT "/run/sbx", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts);
	mount_or_die("/dev", NEWROOT "/dev", NULL, MS_MOVE, NULL);
	mount_or_die("/proc", NEWROOT "/proc", NULL, MS_MOVE, NULL);
	mount_or_die("/sys", NEWROOT "/sys", NULL, MS_MOVE, NULL);
	mkdir(NEWROOT "/dev/pts", 0755);
	mount(NULL, NEWROOT "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "mode=0620,ptmxmode=0666");
	if (chdir(NEWROOT) != 0 || mount(".", "/", NULL, MS_MOVE, NULL) != 0 ||
	    chroot(".") != 0 || chdir("/") != 0)
		die("cannot switch to the root filesystem");
}

/* The agent: the port (fd, open) as stdin and stdout, the sandbox user, no return. */
static void
agent_child(int fd, unsigned uid, unsigned gid)
{
	char *const argv[] = { "sbx-helper", "agent", NULL };
	char *const plain[] = {
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/work", "LANG=C.UTF-8", NULL };
	/* What a container with an allowlist gets (broker_egress.h). */
	char *const proxied[] = {
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/work", "LANG=C.UTF-8",
		"HTTP_PROXY=http://127.0.0.1:3128", "HTTPS_PROXY=http://127.0.0.1:3128",
		"http_proxy=http://127.0.0.1:3128", "https_proxy=http://127.0.0.1:3128",
		"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1",
		NULL };
	char *const *envp = g_egress > 0 ? proxied : plain;
	struct rlimit lim;
	sigset_t none;

	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	setsid();
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	dup2(fd, 0);
	dup2(fd, 1);
	if (fd > 1)
		close(fd);
	lim.rlim_cur = lim.rlim_max = (rlim_t)g_pids;
	if (setrlimit(RLIMIT_NPROC, &lim) != 0)
		_exit(111);
	if (setgroups(0, NULL) != 0 || setgid(gid) != 0 || setuid(uid) != 0)
		_exit(111);
	if (chdir("/work") != 0)
		_exit(111);
	execve("/.sbx/sbx-helper", argv, envp);
	_exit(127);
}

/* The egress relay on port dev as RELAY_UID; returns its pid or 0. */
static pid_t
start_relay(const char *dev)
{
	char n[24];
	char *argv[] = { "sbx-proxy", "vmrelay", "--port", (char *)dev, "--max-conns", n, NULL };
	char *const envp[] = { "PATH=/bin", NULL };
	sigset_t none;
	pid_t pid;

	snprintf(n, sizeof(n), "%lu", g_egress);
	if ((pid = fork()) != 0) {
		note("egress relay started, pid", (long)pid);
		return pid > 0 ? pid : 0;
	}
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	setsid();
	if (setgroups(0, NULL) != 0 || setgid(RELAY_UID) != 0 || setuid(RELAY_UID) != 0)
		_exit(111);
	execve("/.sbx/sbx-proxy", argv, envp);
	_exit(127);
}

static void
poweroff(void)
{
	int tries;

	kill(-1, SIGKILL);
	sync();
	/* A clean unmount once the killed processes are gone (reaped), so the
	 * journal is closed; lazy only if something still holds it after 2 s. */
	for (tries = 0; tries < 40; tries++) {
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
		if (umount2("/work", 0) == 0)
			break;
		sleep_ms(50);
	}
	if (tries == 40)
		umount2("/work", MNT_DETACH);
	sync();
	reboot(RB_POWER_OFF);
	_exit(0);
}

int
main(void)
{
	char agent_port[300], ctl_port[300], egress_port[300], buf[64];
	unsigned uid, gid;
	pid_t agent = 0, relay = 0;
	long relay_wait = 0;
	int ctl = -1, tries, wanted = 0, waits = 0;
	sigset_t chld;

	if (getpid() != 1)
		return 2;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, NULL);
	setup(&uid, &gid);
	loopback_up();
	for (tries = 0; find_port("sbx.agent", agent_port, sizeof(agent_port)) != 0 ||
	    find_port("sbx.ctl", ctl_port, sizeof(ctl_port)) != 0; tries++) {
		if (tries > 500)
			die("no agent or control port");
		sleep_ms(10);
	}
	for (tries = 0; g_egress > 0 &&
	    find_port("sbx.egress", egress_port, sizeof(egress_port)) != 0; tries++) {
		if (tries > 500)
			die("sbx.egress on the command line but no egress port");
		sleep_ms(10);
	}
	/* Only the relay's user may open the port (not the sandbox user). */
	if (g_egress > 0 && (chown(egress_port, RELAY_UID, RELAY_UID) != 0 ||
	    chmod(egress_port, 0600) != 0))
		die("cannot hand the egress port to the relay");
	/*
	 * An agent runs only when the broker asked for one ("agent" on the
	 * control port: the running one is killed first, "ready" answers) and
	 * the agent port has a client: so a new connection's first bytes are a
	 * new agent's HELLO, never the rest of an older agent's talk. An agent
	 * that ends by itself (its broker went) is not replaced until asked.
	 */
	for (;;) {
		struct pollfd p = { -1, POLLIN, 0 };
		pid_t w;
		int st, n, fd;

		while ((w = waitpid(-1, &st, WNOHANG)) > 0)
			if (w == agent) {
				note("agent ended, status", (long)st);
				agent = 0;
				wanted = 0;
			} else if (w == relay) {
				note("egress relay ended, status", (long)st);
				relay = 0;
				relay_wait = RELAY_RESTART_MS;
			}
		/* The relay again, a little later (a crash loop stays slow). */
		if (g_egress > 0 && relay == 0 && (relay_wait -= AGENT_RESTART_MS) <= 0)
			relay = start_relay(egress_port);
		fd = -1;
		if (wanted && agent == 0 &&
		    (fd = open(agent_port, O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC)) < 0 &&
		    ++waits % 100 == 0)
			note("agent wanted, port does not open: errno", (long)errno);
		if (fd >= 0) {
			struct pollfd q = { fd, POLLOUT, 0 };

			if (poll(&q, 1, 0) == 1 && !(q.revents & POLLHUP) &&
			    (q.revents & POLLOUT)) {
				if ((agent = fork()) == 0)
					agent_child(fd, uid, gid);
				if (agent < 0)
					agent = 0;
				note("agent started, pid", (long)agent);
			} else if (++waits % 100 == 0)
				note("agent wanted, port not writable: revents", (long)q.revents);
			close(fd);
		}
		if (ctl < 0)
			ctl = open(ctl_port, O_RDWR | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
		p.fd = ctl;
		n = poll(&p, 1, wanted && agent == 0 ? CONNECT_POLL_MS : AGENT_RESTART_MS);
		if (n == 1 && (p.revents & POLLIN)) {
			ssize_t r = read(ctl, buf, sizeof(buf) - 1);

			if (r <= 0)
				continue;
			buf[r] = '\0';
			if (strstr(buf, "poweroff") != NULL)
				poweroff();
			if (strstr(buf, "agent") != NULL) {
				note("agent asked for; running one", (long)agent);
				if (agent > 0) {
					kill(-agent, SIGKILL);
					kill(agent, SIGKILL);
					waitpid(agent, NULL, 0);
					agent = 0;
				}
				wanted = 1;
				answer_ready(ctl);
			}
		} else if (n == 1) {
			/* The broker is not connected (POLLHUP): look again soon. */
			sleep_ms(AGENT_RESTART_MS);
		}
	}
}
