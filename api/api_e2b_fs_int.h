/* api_e2b_fs_int.h - what the files of E2B's filesystem surface share (api_e2b_fs.c, api_e2b_watch.c; adr/0061): the helper's answers read as errors. Not a public header. */
#ifndef API_E2B_FS_INT_H
#define API_E2B_FS_INT_H

#include <jansson.h>

#include "sbx_err.h"

struct evbuffer;

/* Bytes of the helper's stderr (its error line) kept at most. */
#define ERR_MAX 4096

/* o's member k when it is a string (borrowed), else NULL. */
const char *api_e2b_jstr(const json_t *o, const char *k);

/* err from the helper's error line in errb (sbx_helper_proto.h: the last
 * {"sbx_helper":2,"error":{code,message}} line; path_outside_work becomes
 * forbidden with API_E2B_PATH_OUTSIDE first), else from its exit status
 * code alone (126/127: the helper could not run). */
void api_e2b_helper_error(struct evbuffer *errb, int code, struct sbx_err *err);

/* A driver's error of a helper run in E2B's terms: not_running and
 * not_found (the sandbox) become not_running "connect to it first";
 * others are copied. */
void api_e2b_run_error(const struct sbx_err *in, struct sbx_err *err);

/* A sink's start hook that does nothing (the helper's runs need no id). */
void api_e2b_no_start(void *arg, const char *exec_id);

#endif
