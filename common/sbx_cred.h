/* sbx_cred.h - systemd service credentials: files in $CREDENTIALS_DIRECTORY (systemd.exec(5) "Credentials"). */
#ifndef SBX_CRED_H
#define SBX_CRED_H

#include <stddef.h>

/* The credential both daemons read the broker's bearer token from (ADR 0011). */
#define SBX_CRED_BROKER_TOKEN "broker-token"

/*
 * Finds the service credential NAME that systemd passed with LoadCredential=
 * (or SetCredential=, LoadCredentialEncrypted=): the file
 * $CREDENTIALS_DIRECTORY/NAME. Behaviour from systemd.exec(5): systemd sets
 * CREDENTIALS_DIRECTORY to an absolute path of a read-only directory private
 * to the service, holding one file per credential.
 *
 * name: a credential name, 1..64 characters of [A-Za-z0-9_.-], not "." or
 * "..". buf/cap: where the path is written (NUL-terminated).
 *
 * Returns 1 with the path in buf when CREDENTIALS_DIRECTORY is set to an
 * absolute path and NAME exists there (stat succeeds; whether it is a
 * usable token file is for the caller's reader to check: mode, size).
 * Returns 0, buf = "", when the variable is unset, empty or relative, NAME
 * is not there, name is invalid, or the path does not fit in cap. Reads
 * nothing but the environment and one stat(); no error value: a missing
 * credential only means "fall back to the next source".
 */
int sbx_credential_path(const char *name, char *buf, size_t cap);

/*
 * A daemon's config default "the token file is the credential NAME when
 * none is configured" (ADR 0011): when *field is NULL or "" and
 * sbx_credential_path(name) finds the file, *field becomes a malloc'd copy
 * of that path (the old value freed; the config owns it, sbx_config_free).
 * Returns 0 (also when nothing changed); -1 when out of memory (*field
 * unchanged; the caller reports internal_error).
 */
int sbx_credential_default(char **field, const char *name);

#endif
