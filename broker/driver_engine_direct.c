/*
 * driver_engine_direct.c - the engine driver's direct agent channel
 * (adr/0066): the per-sandbox socket volume (made in ensure, mounted,
 * removed in destroy) and the one way the broker opens the agent's socket
 * through the volume's host mountpoint without following a path the
 * sandbox controls. It calls the runtime call layer and the op lifecycle;
 * the agent records (driver_engine_agent.c), ensure, destroy and reconcile call it.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "driver_engine_direct.h"

#define L_AGENT_OF "io.sbx.agent-of"   /* the socket volume's sandbox */
#define CHAN_SOCKBUF (1024 * 1024)     /* bytes each way in the kernel */

/* ---------- the secure connect ---------- */

int
eng_direct_connect(const char *mnt, unsigned uid, char *why, size_t whysz)
{
	struct open_how how;
	struct sockaddr_un sa;
	struct stat st;
	int dfd, sfd = -1, fd = -1, sz = CHAN_SOCKBUF, rc = -2;

	/* The mountpoint's path is the runtime's (its volumes directory):
	 * only the volume's root is the sandbox's, and a mount root cannot be
	 * replaced from inside; O_NOFOLLOW all the same. */
	dfd = open(mnt, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0) {
		snprintf(why, whysz, "the socket volume's mountpoint cannot be opened "
		    "(%s)", strerror(errno));
		return -2;
	}
	memset(&how, 0, sizeof(how));
	how.flags = O_PATH | O_NOFOLLOW | O_CLOEXEC;
	how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV |
	    RESOLVE_NO_MAGICLINKS;
	sfd = (int)syscall(SYS_openat2, dfd, SBX_AGENT_SOCK_NAME, &how, sizeof(how));
	if (sfd < 0) {
		if (errno == ENOENT)
			rc = -1;
		snprintf(why, whysz, errno == ELOOP ? "the agent's socket is a symlink" :
		    "the agent's socket cannot be opened (%s)", strerror(errno));
		goto out;
	}
	if (fstat(sfd, &st) < 0) {
		snprintf(why, whysz, "fstat of the agent's socket failed (%s)",
		    strerror(errno));
		goto out;
	}
	if (S_ISLNK(st.st_mode)) {   /* O_PATH|O_NOFOLLOW opened the link itself */
		snprintf(why, whysz, "the agent's socket is a symlink (never followed)");
		goto out;
	}
	if (!S_ISSOCK(st.st_mode)) {
		snprintf(why, whysz, "the agent's socket is not a socket (mode %06o)",
		    (unsigned)st.st_mode);
		goto out;
	}
	if (st.st_uid != uid || (st.st_mode & 077) != 0) {
		snprintf(why, whysz, "the agent's socket has owner %u and mode %04o, "
		    "not %u and no bits for group or others", (unsigned)st.st_uid,
		    (unsigned)(st.st_mode & 07777), uid);
		goto out;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d", sfd);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0) {
		snprintf(why, whysz, "socket: %s", strerror(errno));
		goto out;
	}
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	/* The magic link names the inode fstat checked, whatever the name
	 * holds by now: a socket replaced since has no listener here. */
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		if (errno == ECONNREFUSED || errno == EAGAIN)
			rc = -1;
		snprintf(why, whysz, "connect to the agent's socket failed (%s)",
		    strerror(errno));
		close(fd);
		fd = -1;
		goto out;
	}
	rc = fd;
out:
	if (sfd >= 0)
		close(sfd);
	close(dfd);
	return rc;
}

/* The volume's root becomes the sandbox user's, 0700 (the agent makes its
 * socket there). Called on the answer to the volume's create, before a
 * container mounts it; later the root is still not replaceable from
 * inside (a mount root), and fchown/fchmod act on what was opened. */
static int
root_prepare(const char *mnt, unsigned uid, unsigned gid, char *why, size_t whysz)
{
	struct stat st;
	int fd = open(mnt, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0) {
		snprintf(why, whysz, "open: %s", strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) < 0 || ((st.st_uid != uid || st.st_gid != gid) &&
	    fchown(fd, uid, gid) < 0) || ((st.st_mode & 07777) != 0700 &&
	    fchmod(fd, 0700) < 0)) {
		snprintf(why, whysz, "chown/chmod: %s", strerror(errno));
		close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

/* ---------- the volume: ensure, mount, destroy ---------- */

static void
direct_unreachable(struct engine *e, const char *vol, const char *why)
{
	if (e->direct_said)
		return;
	e->direct_said = 1;
	log_warn("agent direct channel unavailable: the runtime's volume mountpoint "
	    "is not reachable from the broker; agents use the runtime exec stream",
	    "volume", vol, "reason", why, NULL);
}

static void
volume_made(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct eop_ensure *en = ens(op);
	const char *mnt;
	char vol[160], why[160];

	if (eng_ended(op, err))
		return;
	eng_agent_volume_name(op->e->prefix, op->id, vol, sizeof(vol));
	en->agent_vol = 2;
	if (status != 200 && status != 201)
		direct_unreachable(op->e, vol, "the runtime refused to create the volume");
	else if (!eng_managed(json_object_get(body, "Labels")) &&
	    json_object_get(body, "Labels") != NULL &&
	    !json_is_null(json_object_get(body, "Labels")))
		log_warn("agent socket volume not sbx's: left alone, no direct channel",
		    "volume", vol, NULL);
	else if ((mnt = eng_jstr(body, "Mountpoint")) == NULL || mnt[0] != '/')
		direct_unreachable(op->e, vol, "the runtime gave no mountpoint");
	else if (root_prepare(mnt, op->e->uid, op->e->gid, why, sizeof(why)) < 0)
		direct_unreachable(op->e, vol, why);
	else
		en->agent_vol = 1;
	op->then(op);
}

int
eng_direct_volume(struct eop *op, void (*then)(struct eop *))
{
	char vol[160];
	json_t *req;

	if (!op->e->agent_direct || ens(op)->agent_vol != 0)
		return 0;
	op->then = then;
	/* A warm pool member's is named by its member name and labelled as
	 * the pool's (adr/0067): a claim keeps it, the pool's sweep removes
	 * it when no container mounts it. */
	eng_agent_volume_name(op->e->prefix, op->id, vol, sizeof(vol));
	req = ens(op)->pool ? json_pack("{s:s, s:{s:s, s:s, s:s}}", "Name", vol,
	    "Labels", L_MANAGED, "true", L_AGENT_OF, op->id, L_POOL,
	    ens(op)->image) : json_pack("{s:s, s:{s:s, s:s}}", "Name", vol,
	    "Labels", L_MANAGED, "true", L_AGENT_OF, op->id);
	if (req == NULL) {
		ens(op)->agent_vol = 2;
		then(op);
		return 1;
	}
	eng_callf(op, "POST", req, volume_made, API "/volumes/create");
	return 1;
}

int
eng_direct_mount(struct eop *op, json_t *mounts)
{
	char vol[160];

	if (ens(op)->agent_vol != 1)
		return 0;
	eng_agent_volume_name(op->e->prefix, op->id, vol, sizeof(vol));
	return json_array_append_new(mounts, json_pack("{s:s, s:s, s:s, s:{s:b}}", "Type", "volume", "Source", vol,
	    "Target", SBX_AGENT_LISTEN_DIR, "VolumeOptions", "NoCopy",
	    op->e->flavor != FLAVOR_PODMAN)) != 0 ? -1 : 0;
}

/* The name of the socket volume that goes with work volume work
 * ("X-work" → "X-agent"; a claimed pool member's work volume keeps its
 * member's name, adr/0067) into buf, or "" when work is not so named. */
static void
agent_volume_of(const char *work, char *buf, size_t sz)
{
	size_t n = strlen(work), sl = strlen("-work");

	buf[0] = '\0';
	if (n > sl && n - sl + strlen("-agent") < sz &&
	    strcmp(work + n - sl, "-work") == 0)
		snprintf(buf, sz, "%.*s-agent", (int)(n - sl), work);
}

const char *
eng_direct_mountpoint(struct engine *e, const char *id, json_t *body)
{
	json_t *m;
	size_t i;
	const char *src, *name, *dest;
	char vol[160], pooled[160] = "";

	eng_agent_volume_name(e->prefix, id, vol, sizeof(vol));
	json_array_foreach(json_object_get(body, "Mounts"), i, m) {
		dest = eng_jstr(m, "Destination");
		if (dest != NULL && strcmp(dest, SBX_WORK_DIR) == 0 &&
		    eng_jstr(m, "Name") != NULL)
			agent_volume_of(eng_jstr(m, "Name"), pooled, sizeof(pooled));
	}
	json_array_foreach(json_object_get(body, "Mounts"), i, m) {
		name = eng_jstr(m, "Name");
		if (eng_jstr(m, "Destination") == NULL || name == NULL ||
		    strcmp(eng_jstr(m, "Destination"), SBX_AGENT_LISTEN_DIR) != 0 ||
		    (strcmp(name, vol) != 0 && strcmp(name, pooled) != 0))
			continue;
		src = eng_jstr(m, "Source");
		return src != NULL && src[0] == '/' ? src : NULL;
	}
	return NULL;
}

static void
drop_removed(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	if (REPLY_BAD(op, NULL, err, status, body, "remove the agent's socket volume",
	    204, 404))
		return;
	op->then(op);
}

static void
drop_inspected(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	json_t *labels;
	const char *of, *vol;

	if (eng_ended(op, err))
		return;
	labels = json_object_get(body, "Labels");
	of = eng_label(labels, L_AGENT_OF);
	/* Ours: made for this id, or the pool's (its name came from the
	 * work volume this sandbox's container mounted). */
	if (status != 200 || !eng_managed(labels) || of == NULL ||
	    (strcmp(of, op->id) != 0 && eng_label(labels, L_POOL) == NULL) ||
	    (vol = eng_jstr(body, "Name")) == NULL || !eng_name_ok(vol, 159)) {
		op->then(op);   /* absent, or not ours: left alone */
		return;
	}
	eng_callf(op, "DELETE", NULL, drop_removed, API "/volumes/%s", vol);
}

void
eng_direct_drop(struct eop *op, void (*then)(struct eop *))
{
	char vol[160];

	op->then = then;
	/* op->vname: the work volume destroy found, a claimed pool member's
	 * included (adr/0067); its socket volume has the same stem. */
	agent_volume_of(op->vname, vol, sizeof(vol));
	if (vol[0] == '\0' || !eng_name_ok(vol, 159))
		eng_agent_volume_name(op->e->prefix, op->id, vol, sizeof(vol));
	eng_callf(op, "GET", NULL, drop_inspected, API "/volumes/%s", vol);
}

/* ---------- reconcile: socket volumes whose sandbox is gone ---------- */

static void rec_next(struct eop *op);

static void
rec_removed(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	(void)body;
	if (eng_ended(op, err))
		return;
	if (status != 204 && status != 404)   /* in use: left for the next start */
		log_warn("agent socket volume not removed", "volume", eng_jstr(
		    json_array_get(rco(op)->rdvols, rco(op)->di), "Name"), NULL);
	rco(op)->di++;
	rec_next(op);
}

static void
rec_next(struct eop *op)
{
	struct eop_reconcile *rc = rco(op);
	json_t *v, *labels;
	const char *id, *name;
	char want[160];

	for (; rc->di < json_array_size(rc->rdvols); rc->di++) {
		v = json_array_get(rc->rdvols, rc->di);
		labels = json_object_get(v, "Labels");
		id = eng_label(labels, L_AGENT_OF);
		name = eng_jstr(v, "Name");
		if (!eng_managed(labels) || id == NULL || !sbx_id_valid(id) || name == NULL)
			continue;
		eng_agent_volume_name(op->e->prefix, id, want, sizeof(want));
		if (strcmp(name, want) != 0 || json_object_get(rc->rsbx, id) != NULL)
			continue;
		log_info("orphaned agent socket volume removed", "volume", name, NULL);
		eng_callf(op, "DELETE", NULL, rec_removed, API "/volumes/%s", name);
		return;
	}
	rc->dthen(op);
}

static void
rec_listed(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct sbx_err e;
	json_t *vols;

	if (eng_ended(op, err))
		return;
	vols = json_object_get(body, "Volumes");
	if (status != 200 || (!json_is_array(vols) && !json_is_null(vols))) {
		eng_runtime_err(&e, status, body, "list volumes");
		eng_finish_err(op, &e);
		return;
	}
	json_decref(rco(op)->rdvols);
	rco(op)->rdvols = json_is_array(vols) ? json_incref(vols) : json_array();
	rco(op)->di = 0;
	rec_next(op);
}

void
eng_direct_reconcile(struct eop *op, void (*then)(struct eop *))
{
	char filt[256];

	rco(op)->dthen = then;
	eng_urlencode("{\"label\":[\"" L_AGENT_OF "\"]}", filt, sizeof(filt));
	eng_callf(op, "GET", NULL, rec_listed, API "/volumes?filters=%s", filt);
}
