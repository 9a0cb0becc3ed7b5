/* api_ports_token.c - the ports proxy's signed tokens (previews and tickets): 15 bytes of claims and a truncated HMAC, in lowercase base32 so one fits a DNS label (adr/0053). Pure: libsodium only. */
#include <string.h>
#include <strings.h>

#include <sodium.h>

#include "api_ports.h"

#define CLAIMS 15
#define MAC 16
#define RAW (CLAIMS + MAC)
#define VERSION 1

static const char b32[] = "abcdefghijklmnopqrstuvwxyz234567";

void
api_ports_key_derive(const unsigned char master[32],
    unsigned char out[API_PORTS_KEY_BYTES])
{
	crypto_kdf_derive_from_key(out, API_PORTS_KEY_BYTES, 1, "sbxports",
	    master);
}

/* Claims: version<<4 | kind, expires u32, port u16, npc u32, principal u32
 * (big-endian). */
static void
claims_put(unsigned char *p, const struct api_ports_token *t)
{
	p[0] = (unsigned char)(VERSION << 4 | (unsigned)t->kind);
	p[1] = (unsigned char)(t->expires >> 24);
	p[2] = (unsigned char)(t->expires >> 16);
	p[3] = (unsigned char)(t->expires >> 8);
	p[4] = (unsigned char)t->expires;
	p[5] = (unsigned char)(t->port >> 8);
	p[6] = (unsigned char)t->port;
	p[7] = (unsigned char)(t->npc_id >> 24);
	p[8] = (unsigned char)(t->npc_id >> 16);
	p[9] = (unsigned char)(t->npc_id >> 8);
	p[10] = (unsigned char)t->npc_id;
	p[11] = (unsigned char)(t->principal_id >> 24);
	p[12] = (unsigned char)(t->principal_id >> 16);
	p[13] = (unsigned char)(t->principal_id >> 8);
	p[14] = (unsigned char)t->principal_id;
}

static uint32_t
u32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	    (uint32_t)p[2] << 8 | p[3];
}

static void
mac(const unsigned char key[API_PORTS_KEY_BYTES], const unsigned char *claims,
    unsigned char out[MAC])
{
	unsigned char full[crypto_auth_BYTES];

	crypto_auth(full, claims, CLAIMS, key);
	memcpy(out, full, MAC);
	sodium_memzero(full, sizeof(full));
}

int
api_ports_token_make(const unsigned char key[API_PORTS_KEY_BYTES],
    const struct api_ports_token *t, char *out, size_t cap)
{
	unsigned char raw[RAW];
	unsigned acc = 0, bits = 0;
	size_t i, o = 0;

	if (cap < API_PORTS_TOKEN_LEN + 1 || t->port == 0 ||
	    (t->kind != API_PORTS_PREVIEW && t->kind != API_PORTS_TICKET))
		return -1;
	claims_put(raw, t);
	mac(key, raw, raw + CLAIMS);
	for (i = 0; i < RAW; i++) {
		acc = (acc << 8) | raw[i];
		bits += 8;
		while (bits >= 5) {
			out[o++] = b32[(acc >> (bits - 5)) & 31];
			bits -= 5;
		}
	}
	if (bits > 0)
		out[o++] = b32[(acc << (5 - bits)) & 31];
	out[o] = '\0';
	return o == API_PORTS_TOKEN_LEN ? 0 : -1;
}

int
api_ports_token_check(const unsigned char key[API_PORTS_KEY_BYTES],
    const char *text, size_t n, int64_t now_s, struct api_ports_token *t)
{
	unsigned char raw[RAW], want[MAC];
	unsigned acc = 0, bits = 0, v;
	size_t i, o = 0;
	const char *c;
	int ok;

	memset(t, 0, sizeof(*t));
	if (n != API_PORTS_TOKEN_LEN)
		return 0;
	for (i = 0; i < n; i++) {
		int ch = text[i] >= 'A' && text[i] <= 'Z' ? text[i] - 'A' + 'a' :
		    text[i];

		if (ch == '\0' || (c = strchr(b32, ch)) == NULL)
			return 0;
		v = (unsigned)(c - b32);
		acc = (acc << 5) | v;
		bits += 5;
		if (bits >= 8) {
			raw[o++] = (unsigned char)(acc >> (bits - 8));
			bits -= 8;
		}
	}
	/* 50 characters carry 250 bits: the 2 left over must be zero, so
	 * one token has one spelling (per case). */
	if (o != RAW || (acc & ((1u << bits) - 1)) != 0)
		return 0;
	mac(key, raw, want);
	ok = sodium_memcmp(want, raw + CLAIMS, MAC) == 0;
	sodium_memzero(want, sizeof(want));
	if (!ok || raw[0] >> 4 != VERSION)
		return 0;
	t->kind = (enum api_ports_token_kind)(raw[0] & 15);
	t->expires = u32(raw + 1);
	t->port = (uint16_t)(raw[5] << 8 | raw[6]);
	t->npc_id = u32(raw + 7);
	t->principal_id = u32(raw + 11);
	if ((t->kind != API_PORTS_PREVIEW && t->kind != API_PORTS_TICKET) ||
	    t->port == 0 || (int64_t)t->expires <= now_s) {
		memset(t, 0, sizeof(*t));
		return 0;
	}
	return 1;
}

const char *
api_ports_preview_host(const char *host, const char *domain, size_t *n)
{
	size_t hl, dl, l;

	*n = 0;
	if (host == NULL || domain == NULL || domain[0] == '\0')
		return NULL;
	hl = strcspn(host, ":");
	dl = strlen(domain);
	l = strcspn(host, ".");
	if (l != API_PORTS_TOKEN_LEN || hl != l + 1 + dl ||
	    strncasecmp(host + l + 1, domain, dl) != 0)
		return NULL;
	*n = l;
	return host;
}

int
api_ports_port_parse(const char *seg)
{
	size_t n = strspn(seg, "0123456789");
	long v = 0;
	size_t i;

	if (n == 0 || n > 5 || seg[n] != '\0' || seg[0] == '0')
		return 0;
	for (i = 0; i < n; i++)
		v = v * 10 + (seg[i] - '0');
	return v <= 65535 ? (int)v : 0;
}
