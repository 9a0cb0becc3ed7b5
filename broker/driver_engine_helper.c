/*
 * driver_engine_helper.c - the engine driver's helper volume: sbx-helper
 * read once, filled into a named volume, old ones removed (adr/0009); the
 * image probe that keeps an image from redirecting its mount (adr/0045);
 * the fill's and the removal's kind rows, and the one-file tar the proxy
 * uses too. It calls down into the runtime call layer and the op lifecycle;
 * the ensures waiting go on through the continuation they gave.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "driver_engine_int.h"

#define HELPER_MAX (64 * 1024 * 1024)    /* the helper file we read */

static void hp_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err);
static void hp_fill(struct eop *op);
static void gc_next(struct eop *op);
static void gc_fini(struct eop *op);
static void hp_finish(struct eop *op, const struct sbx_err *err);

/* the fill: the ensures waiting hear its end */
static const struct eng_kind helper_kind = {
	.name = "helper volume fill",
	.fail = hp_finish,
};

/* the removal of old helper volumes: in the background, nobody waits */
static const struct eng_kind gc_kind = {
	.name = "helper volume removal",
	.fail = eng_fail_quiet,
	.fini = gc_fini,
};

/* ---------- the helper volume ---------- */

/*
 * The helper reaches sandboxes as a read-only named volume the broker
 * fills through the Engine API, so it works wherever the broker runs (also
 * in a container, where a bind source would be resolved on the host):
 * volume <stem>-<16 hex of sha256>, labelled io.sbx.managed, io.sbx.helper-
 * stem and io.sbx.helper-sha256. Once per broker process, before its first
 * container: /version (Docker or Podman), create the volume, create (never
 * start) a container of the ensure's image with it at /.sbx, GET the file
 * back and, unless it is already our bytes, PUT the one-file tar, remove
 * the container. Ensures that need a container wait for it; afterwards old
 * helper volumes of the stem that no container uses are removed.
 */

/* The fill ended (err NULL: ready): each waiting ensure goes on in its
 * continuation, or ends with err. */
static void
helper_settle(struct engine *e, const struct sbx_err *err)
{
	struct eop_ensure *w;

	e->hstate = err == NULL ? H_READY : H_NONE;
	while ((w = TAILQ_FIRST(&e->hwait)) != NULL) {
		TAILQ_REMOVE(&e->hwait, w, wlink);
		w->waiting = 0;
		if (err != NULL)
			eng_finish_err(&w->op, err);
		else
			w->helper_then(&w->op);
	}
	if (err == NULL)
		eng_helper_gc(e);
}

static void
hp_finish(struct eop *op, const struct sbx_err *err)
{
	if (err != NULL)
		log_warn("helper volume not ready", "volume", op->e->helper_vol,
		    "error", err->message, NULL);
	helper_settle(op->e, err);
	eng_op_release(op);
}

/* Removes the fill container (if any), then ends with err (NULL: ready). */
static void
hp_end(struct eop *op, const struct sbx_err *err)
{
	struct eop_helper *hp = hlp(op);

	if (err != NULL)
		hp->aux_err = *err;
	if (hp->aux_cid[0] == '\0') {
		hp_finish(op, err);
		return;
	}
	eng_callf(op, "DELETE", NULL, hp_removed,
	    API "/containers/%s?force=1&v=0", hp->aux_cid);
}

static void
hp_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct eop_helper *hp = hlp(op);
	struct sbx_err e;

	hp->aux_cid[0] = '\0';
	if (hp->aux_err.code[0] != '\0') {
		e = hp->aux_err;
		hp_finish(op, &e);
		return;
	}
	if (REPLY_BAD(op, hp_finish, err, status, body,
	    "remove the helper fill container", 204, 404))
		return;
	hp_finish(op, NULL);
}

static void
hp_put(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{

	if (REPLY_BAD(op, hp_end, err, status, body,
	    "copy sbx-helper into its volume", 200))
		return;
	hp_end(op, NULL);
}

/* 1 when the tar in buf[0..n) starts with a regular file holding exactly
 * the helper's bytes. */
static int
tar_holds_helper(struct engine *e, const unsigned char *buf, size_t n)
{
	unsigned long long size = 0;
	size_t i;

	if (n < 512 || (buf[156] != '0' && buf[156] != '\0'))
		return 0;
	for (i = 124; i < 136 && buf[i] >= '0' && buf[i] <= '7'; i++)
		size = size * 8 + (unsigned)(buf[i] - '0');
	return size == e->helper_len && n >= 512 + size &&
	    memcmp(buf + 512, e->helper_tar + 512, e->helper_len) == 0;
}

static void
hp_got(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct engine *e = op->e;
	char path[256];
	size_t n;

	(void)body;
	if (err != NULL) {
		hp_end(op, err);
		return;
	}
	n = evbuffer_get_length(op->resp);
	/* Already filled (an earlier broker, or another one sharing the
	 * runtime): never rewrite a file running sandboxes may be executing. */
	if (status == 200 && !op->resp_over &&
	    tar_holds_helper(e, evbuffer_pullup(op->resp, -1), n)) {
		hp_end(op, NULL);
		return;
	}
	snprintf(path, sizeof(path), API "/containers/%s/archive?path=%s",
	    hlp(op)->aux_cid, SBX_HELPER_DIR);
	eng_call_bytes(op, "PUT", path, "application/x-tar", e->helper_tar,
	    e->helper_tar_len, hp_put);
}

static void
hp_stale_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	(void)status;
	(void)body;
	if (err != NULL) {
		hp_end(op, err);
		return;
	}
	hp_fill(op);
}

static void
hp_created(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct eop_helper *hp = hlp(op);
	struct engine *e = op->e;
	struct sbx_err er;
	char path[300];

	if (err != NULL) {
		hp_end(op, err);
		return;
	}
	if (eng_name_taken(status, body) && hp->aux_tries++ == 0) {
		eng_callf(op, "DELETE", NULL, hp_stale_removed,
		    API "/containers/%s.fill?force=1&v=0", e->helper_vol);
		return;
	}
	if (status == 404) {
		eng_image_missing(&er, hp->image);
		hp_end(op, &er);
		return;
	}
	if (status != 201 || !eng_name_ok(eng_jstr(body, "Id"),
	    sizeof(hp->aux_cid) - 1)) {
		eng_runtime_err(&er, status, body, "create the helper fill container");
		hp_end(op, &er);
		return;
	}
	snprintf(hp->aux_cid, sizeof(hp->aux_cid), "%s", eng_jstr(body, "Id"));
	snprintf(path, sizeof(path), API "/containers/%s/archive?path=%s",
	    hp->aux_cid, SBX_HELPER_PATH);
	op->raw = 1;
	eng_call(op, "GET", path, NULL, hp_got);
}

static void
hp_fill(struct eop *op)
{
	struct engine *e = op->e;
	struct sbx_err err;
	json_t *body;

	/* Never started: any image will do, and the ensure's is present. */
	body = json_pack("{s:s, s:[s], s:[s], s:{s:s, s:s}, s:b,"
	    " s:{s:s, s:[s], s:[{s:s, s:s, s:s, s:{s:b}}]}}",
	    "Image", hlp(op)->image,
	    "Entrypoint", SBX_HELPER_PATH,
	    "Cmd", SBX_HELPER_MODE_VERSION,
	    "Labels", L_MANAGED, "true", L_ROLE, "helper-fill",
	    "NetworkDisabled", 1,
	    "HostConfig",
	    "NetworkMode", "none",
	    "CapDrop", "ALL",
	    "Mounts", "Type", "volume", "Source", e->helper_vol, "Target",
	    SBX_HELPER_DIR, "VolumeOptions", "NoCopy", 1);
	if (body == NULL) {
		sbx_err_oom(&err);
		hp_end(op, &err);
		return;
	}
	eng_callf(op, "POST", body, hp_created,
	    API "/containers/create?name=%s.fill", e->helper_vol);
}

static void
hp_volume_inspected(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct sbx_err e;

	if (err != NULL) {
		hp_end(op, err);
		return;
	}
	if (status != 200 || !eng_managed(json_object_get(body, "Labels"))) {
		eng_not_ours(&e, "volume", op->e->helper_vol);
		hp_end(op, &e);
		return;
	}
	hp_fill(op);
}

static void
hp_volume(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct sbx_err e;

	if (err != NULL) {
		hp_end(op, err);
		return;
	}
	if (status != 201 && status != 200 && !eng_name_taken(status, body)) {
		eng_runtime_err(&e, status, body, "create the helper volume");
		hp_end(op, &e);
		return;
	}
	if (status != 409 && status != 500 &&
	    !eng_managed(json_object_get(body, "Labels"))) {
		/* Docker 20.10 after a restart: labels only in inspect. */

		eng_callf(op, "GET", NULL, hp_volume_inspected,
		    API "/volumes/%s", op->e->helper_vol);
		return;
	}
	hp_fill(op);
}

static void
hp_version(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	struct engine *e = op->e;
	struct sbx_err er;
	json_t *comp, *req;
	size_t i;

	if (REPLY_BAD(op, hp_end, err, status, body, "tell its version", 200))
		return;
	e->flavor = FLAVOR_DOCKER;
	json_array_foreach(json_object_get(body, "Components"), i, comp)
		if (strstr(eng_jstr(comp, "Name"), "Podman") != NULL)
			e->flavor = FLAVOR_PODMAN;
	req = json_pack("{s:s, s:{s:s, s:s, s:s}}", "Name", e->helper_vol,
	    "Labels", L_MANAGED, "true", L_HELPER_STEM, e->helper_stem,
	    L_HELPER_SHA, e->helper_sha);
	if (req == NULL) {
		sbx_err_oom(&er);
		hp_end(op, &er);
		return;
	}
	eng_call(op, "POST", API "/volumes/create", req, hp_volume);
}

/* Waits op (an ensure about to create a container) for the helper volume. */
void
eng_ensure_helper(struct eop *op, void (*then)(struct eop *))
{
	struct eop_ensure *en = ens(op);
	struct engine *e = op->e;
	struct sbx_err err;
	struct eop *hp;

	if (e->helper_tar == NULL) {
		sbx_err_set(&err, SBX_E_RUNTIME, "%s", e->helper_err);
		eng_finish_err(op, &err);
		return;
	}
	if (e->hstate == H_READY) {
		then(op);
		return;
	}
	en->helper_then = then;
	TAILQ_INSERT_TAIL(&e->hwait, en, wlink);
	en->waiting = 1;
	if (e->hstate == H_BUSY)
		return;
	if ((hp = eng_op_new(e, &helper_kind, NULL, sizeof(struct eop_helper),
	    &err)) == NULL) {
		helper_settle(e, &err);
		return;
	}
	e->hstate = H_BUSY;
	snprintf(hlp(hp)->image, sizeof(hlp(hp)->image), "%s", en->image);
	sbx_err_clear(&hlp(hp)->aux_err);
	eng_call(hp, "GET", API "/version", NULL, hp_version);
}

/* ---------- the image's mount paths (adr/0045) ----------
 *
 * The runtime follows a symbolic link at a mount target inside the image:
 * an image whose /.sbx leads into /work had its own program run as the
 * helper once the /work volume landed on top. Before any container of this
 * ensure is made (or the old one removed), a container of the image with
 * no mount is created, never started; an archive HEAD stats each mount
 * path (sbx_engine_mount_paths), and it is removed. A path that is not a
 * directory refuses the ensure with one sentence; nothing is left behind.
 */

static void probe_next(struct eop *op);

int
eng_aux_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err, const char *what)
{
	struct eop_ensure *en = ens(op);
	struct sbx_err e;

	en->aux_cid[0] = '\0';
	if (en->aux_err.code[0] != '\0') {
		e = en->aux_err;
		eng_finish_err(op, &e);
		return 1;
	}
	return REPLY_BAD(op, NULL, err, status, body, what, 204, 404);
}

static void
probe_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{

	if (eng_aux_removed(op, status, body, err,
	    "remove the image probe container"))
		return;
	ens(op)->probe_then(op);
}

/* Ends the probe with e (NULL: the image passed) once its container is
 * gone. */
static void
probe_end(struct eop *op, const struct sbx_err *e)
{
	struct eop_ensure *en = ens(op);

	if (e != NULL)
		en->aux_err = *e;
	if (en->aux_cid[0] == '\0') {
		if (e != NULL)
			eng_finish_err(op, e);
		else
			en->probe_then(op);
		return;
	}
	eng_callf(op, "DELETE", NULL, probe_removed,
	    API "/containers/%s?force=1&v=0", en->aux_cid);
}

static void
probe_statted(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	struct eop_ensure *en = ens(op);
	const char *path = sbx_engine_mount_paths[en->probe_i];
	struct sbx_err e;

	if (err != NULL) {
		probe_end(op, err);
		return;
	}
	if (status != 200 && status != 404) {
		eng_runtime_err(&e, status, body, "stat a path of the image");
		probe_end(op, &e);
		return;
	}
	if (sbx_engine_mount_path_judge(en->image, path, status == 404 ? NULL :
	    op->pstat, &e) < 0) {
		log_warn("image refused", "image", en->image, "path", path,
		    "error", e.message, NULL);
		probe_end(op, &e);
		return;
	}
	en->probe_i++;
	probe_next(op);
}

static void
probe_next(struct eop *op)
{
	struct eop_ensure *en = ens(op);

	if (sbx_engine_mount_paths[en->probe_i] == NULL) {
		probe_end(op, NULL);
		return;
	}
	eng_callf(op, "HEAD", NULL, probe_statted,
	    API "/containers/%s/archive?path=%s", en->aux_cid,
	    sbx_engine_mount_paths[en->probe_i]);
}

static void probe_create(struct eop *op);

static void
probe_stale_removed(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{
	(void)status;
	(void)body;
	if (eng_ended(op, err))
		return;
	probe_create(op);
}

int
eng_aux_created(struct eop *op, int status, json_t *body,
    const struct sbx_err *err, const char *suffix, cont_fn stale_removed,
    const char *what)
{
	struct eop_ensure *en = ens(op);
	struct sbx_err e;
	char doing[64];

	if (eng_ended(op, err))
		return 1;
	if (eng_name_taken(status, body) && en->aux_tries++ == 0) {
		/* Left by a broker that died here: ours by its name (ids
		 * cannot hold a '.'). */
		eng_callf(op, "DELETE", NULL, stale_removed,
		    API "/containers/%s%s?force=1&v=0", op->cname, suffix);
		return 1;
	}
	if (status == 404) {
		eng_image_missing(&e, en->image);
		eng_finish_err(op, &e);
		return 1;
	}
	if (status != 201 || !eng_name_ok(eng_jstr(body, "Id"),
	    sizeof(en->aux_cid) - 1)) {
		snprintf(doing, sizeof(doing), "create the %s", what);
		eng_runtime_err(&e, status, body, doing);
		eng_finish_err(op, &e);
		return 1;
	}
	snprintf(en->aux_cid, sizeof(en->aux_cid), "%s", eng_jstr(body, "Id"));
	return 0;
}

static void
probe_created(struct eop *op, int status, json_t *body,
    const struct sbx_err *err)
{

	if (eng_aux_created(op, status, body, err, ".probe",
	    probe_stale_removed, "image probe container"))
		return;
	ens(op)->probe_i = 0;
	probe_next(op);
}

static void
probe_create(struct eop *op)
{
	struct sbx_err err;
	json_t *body;

	/* Never started; no mount, so each path is the image's own. */
	body = json_pack("{s:s, s:[s], s:[s], s:{s:s, s:s}, s:b,"
	    " s:{s:s, s:[s]}}",
	    "Image", ens(op)->image,
	    "Entrypoint", SBX_HELPER_PATH,
	    "Cmd", SBX_HELPER_MODE_VERSION,
	    "Labels", L_MANAGED, "true", L_ROLE, "image-probe",
	    "NetworkDisabled", 1,
	    "HostConfig",
	    "NetworkMode", "none",
	    "CapDrop", "ALL");
	if (body == NULL) {
		sbx_err_oom(&err);
		eng_finish_err(op, &err);
		return;
	}
	eng_callf(op, "POST", body, probe_created,
	    API "/containers/create?name=%s.probe", op->cname);
}

void
eng_image_probe(struct eop *op, void (*then)(struct eop *))
{
	struct eop_ensure *en = ens(op);

	en->probe_then = then;
	sbx_err_clear(&en->aux_err);
	en->aux_tries = 0;
	en->aux_cid[0] = '\0';
	probe_create(op);
}

/* ---------- old helper volumes ---------- */


static void
gc_removed(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	(void)status;
	(void)body;
	(void)err;
	/* 409: still mounted by a container; it goes when that one does. */
	gc_next(op);
}

static void
gc_next(struct eop *op)
{
	struct eop_gc *g = gco(op);
	const char *name;

	if (g->gc_i >= json_array_size(g->gc)) {
		eng_op_release(op);
		return;
	}
	name = json_string_value(json_array_get(g->gc, g->gc_i++));
	eng_callf(op, "DELETE", NULL, gc_removed, API "/volumes/%s", name);
}

static void
gc_listed(struct eop *op, int status, json_t *body, const struct sbx_err *err)
{
	json_t *v;
	const char *name;
	size_t i;

	if (err != NULL || status != 200) {
		eng_op_release(op);
		return;
	}
	json_array_foreach(json_object_get(body, "Volumes"), i, v) {
		name = eng_jstr(v, "Name");
		/* The filter is the runtime's; check again ourselves. */
		if (!eng_managed(json_object_get(v, "Labels")) ||
		    eng_label(json_object_get(v, "Labels"), L_HELPER_STEM) == NULL ||
		    strcmp(eng_label(json_object_get(v, "Labels"), L_HELPER_STEM),
		    op->e->helper_stem) != 0 ||
		    strcmp(name, op->e->helper_vol) == 0 || !eng_name_ok(name,
		    128))
			continue;
		json_array_append_new(gco(op)->gc, json_string(name));
	}
	gc_next(op);
}

static void
gc_fini(struct eop *op)
{
	json_decref(gco(op)->gc);
}

/* Removes (in the background) this stem's helper volumes other than ours
 * that no container mounts any more. */
void
eng_helper_gc(struct engine *e)
{
	struct sbx_err err;
	struct eop *op;
	char filt[256], raw[160];

	if ((op = eng_op_new(e, &gc_kind, NULL, sizeof(struct eop_gc),
	    &err)) == NULL)
		return;
	if ((gco(op)->gc = json_array()) == NULL) {
		eng_op_release(op);
		return;
	}
	snprintf(raw, sizeof(raw), "{\"label\":[\"" L_HELPER_STEM "=%s\"]}",
	    e->helper_stem);
	eng_urlencode(raw, filt, sizeof(filt));
	eng_callf(op, "GET", NULL, gc_listed, API "/volumes?filters=%s", filt);
}

/* A ustar header for a regular file name of size bytes, mode 0755, root's. */
static void
tar_header(unsigned char *h, const char *name, size_t size)
{
	unsigned sum = 0;
	size_t i;

	memset(h, 0, 512);
	snprintf((char *)h, 100, "%s", name);
	snprintf((char *)h + 100, 8, "%07o", 0755);
	snprintf((char *)h + 108, 8, "%07o", 0);
	snprintf((char *)h + 116, 8, "%07o", 0);
	snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)size);
	snprintf((char *)h + 136, 12, "%011o", 0);
	h[156] = '0';
	memcpy(h + 257, "ustar", 6);
	memcpy(h + 263, "00", 2);
	memset(h + 148, ' ', 8);
	for (i = 0; i < 512; i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
}

int
eng_file_tar(const char *path, const char *name, unsigned char **tar,
    size_t *tar_len, size_t *file_len, char *why, size_t whylen)
{
	struct stat st;
	size_t pad, len;
	ssize_t n;
	int fd;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		snprintf(why, whylen, "%s cannot be read at %s: %s", name, path,
		    strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
	    st.st_size > HELPER_MAX || (st.st_mode & 0111) == 0) {
		snprintf(why, whylen, "%s at %s is not a non-empty executable "
		    "file of at most 64 MiB", name, path);
		close(fd);
		return -1;
	}
	len = (size_t)st.st_size;
	pad = (512 - len % 512) % 512;
	*tar_len = 512 + len + pad + 1024;
	if ((*tar = calloc(1, *tar_len)) == NULL) {
		close(fd);
		snprintf(why, whylen, "%s", SBX_MSG_OOM);
		return -1;
	}
	n = read(fd, *tar + 512, len);
	close(fd);
	if (n < 0 || (size_t)n != len) {
		free(*tar);
		*tar = NULL;
		snprintf(why, whylen, "%s at %s could not be read whole", name, path);
		return -1;
	}
	tar_header(*tar, name, len);
	*file_len = len;
	return 0;
}

/*
 * Reads the helper once: its bytes as the tar the helper volume is filled
 * with, its sha256 and the volume's name. A helper that cannot be read is
 * not fatal here: health says why, and every ensure that needs a new
 * container fails with that sentence. -1 with e->helper_err set.
 */
int
eng_helper_load(struct engine *e)
{
	unsigned char h[crypto_hash_sha256_BYTES];

	if (eng_file_tar(e->helper_path, "sbx-helper", &e->helper_tar,
	    &e->helper_tar_len, &e->helper_len, e->helper_err,
	    sizeof(e->helper_err)) != 0)
		return -1;
	crypto_hash_sha256(h, e->helper_tar + 512, e->helper_len);
	sodium_bin2hex(e->helper_sha, sizeof(e->helper_sha), h, sizeof(h));
	snprintf(e->helper_vol, sizeof(e->helper_vol), "%s-%.16s",
	    e->helper_stem, e->helper_sha);
	return 0;
}
