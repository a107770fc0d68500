/* Exit-code table, error and output-buffer helpers. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ztbp_ctl.h"

const struct exit_code_doc ztbp_exit_codes[] = {
	{EX_OK, "ok", "success (for --dry-run: the command was printed, nothing was sent)"},
	{EX_INTERNAL, "internal", "out of memory or an internal error"},
	{EX_USAGE, "usage", "bad command line (unknown command or option, missing or extra argument, bad value)"},
	{EX_ZONES_SYNTAX, "zones-syntax", "--zones is not a comma-separated list of decimal zone ids"},
	{EX_TOO_MANY_ZONES, "too-many-zones", "more than five zones for one SET (use --top5 with --config)"},
	{EX_ZONE_RANGE, "zone-out-of-range", "a zone id is not below the zone count of the device or the config"},
	{EX_ZONE_DUP, "duplicate-zone", "a zone id is listed twice"},
	{EX_NO_ZONES, "no-zones", "the config lists no hot zones"},
	{EX_OPCODE_REFUSED, "opcode-refused", "--opcode names a standard NVMe admin opcode (0x00-0x86) or declares a data transfer (opcode & 3 != 0, except 0x99)"},
	{EX_CONFIG_READ, "config-read", "the config file is missing, unreadable or not a regular file"},
	{EX_CONFIG_SIZE, "config-too-large", "the config file is larger than 64 KiB"},
	{EX_CONFIG_JSON, "config-json", "the config file is not valid JSON"},
	{EX_CONFIG_FORMAT, "config-format", "\"format\" is missing or not \"ztbp-cache-config/1\""},
	{EX_CONFIG_SCHEMA, "config-schema",
	 "a config key has the wrong type or value, or zone_scores disagrees with hot_zones"},
	{EX_GEOMETRY_MISMATCH, "geometry-mismatch",
	 "the config's zone size or zone count is not the device's (--force sends anyway)"},
	{EX_NOT_RECOMMENDED, "not-recommended",
	 "the config says \"recommend\": false: its predicted gain on held-out reads is below the threshold "
	 "(--force sends anyway)"},
	{EX_DEV_OPEN, "device-open", "the device does not exist or cannot be opened"},
	{EX_PERMISSION, "permission", "permission denied: opening the device or sending admin commands needs root"},
	{EX_NOT_DEVICE, "not-a-device", "the path is not a block or character device"},
	{EX_NOT_NVME, "not-nvme", "not an NVMe device by its sysfs entry (nothing is sent, even with --force), or it refused the NVMe admin ioctl"},
	{EX_NOT_ZONED, "not-zoned", "the device is not zoned (--force sends anyway)"},
	{EX_GEOMETRY, "geometry", "reading the zone geometry failed"},
	{EX_PROTOCOL, "no-ztbp-protocol",
	 "the device does not implement the ZTBP cache protocol (it rejected the opcode)"},
	{EX_DEVICE_STATUS, "device-status", "the device completed the command with another NVMe error status"},
	{EX_TIMEOUT, "timeout", "no completion within --timeout-ms (the controller may have been reset)"},
	{EX_IOCTL, "ioctl", "the ioctl failed with an operating-system error"},
};
const size_t ztbp_exit_codes_n = sizeof ztbp_exit_codes / sizeof ztbp_exit_codes[0];

void zerr_set(struct zerr *e, int code, const char *fmt, ...)
{
	va_list ap;

	e->code = code;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	va_end(ap);
}

static void sb_reserve(struct sbuf *b, size_t extra)
{
	size_t need, cap;
	char *p;

	if (b->oom)
		return;
	if (extra > SIZE_MAX / 2 - b->len) {
		b->oom = 1;
		return;
	}
	need = b->len + extra + 1;
	if (need <= b->cap)
		return;
	cap = b->cap ? b->cap : 256;
	while (cap < need)
		cap *= 2;
	p = realloc(b->p, cap);
	if (!p) {
		b->oom = 1;
		return;
	}
	b->p = p;
	b->cap = cap;
}

void sb_printf(struct sbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0) {
		b->oom = 1;
		return;
	}
	sb_reserve(b, (size_t)n);
	if (b->oom)
		return;
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

size_t utf8_valid_len(const unsigned char *u, size_t avail)
{
	size_t n, i;
	unsigned long cp;

	if (avail == 0)
		return 0;
	if (u[0] < 0x80)
		return 1;
	if (u[0] >= 0xC2 && u[0] <= 0xDF) {
		n = 2;
		cp = u[0] & 0x1Fu;
	} else if (u[0] >= 0xE0 && u[0] <= 0xEF) {
		n = 3;
		cp = u[0] & 0x0Fu;
	} else if (u[0] >= 0xF0 && u[0] <= 0xF4) {
		n = 4;
		cp = u[0] & 0x07u;
	} else {
		return 0;
	}
	if (avail < n)
		return 0;
	for (i = 1; i < n; i++) {
		if ((u[i] & 0xC0) != 0x80)
			return 0;
		cp = (cp << 6) | (u[i] & 0x3Fu);
	}
	/* no overlong forms, no surrogates, nothing above U+10FFFF */
	if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	return n;
}

void sb_json_string(struct sbuf *b, const char *s)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t left, n;

	if (!s) {
		sb_printf(b, "null");
		return;
	}
	sb_printf(b, "\"");
	left = strlen(s);
	for (; *u; u++, left--) {
		if (*u >= 0x80 && (n = utf8_valid_len(u, left)) > 1) {
			/* well-formed UTF-8 is copied as it is */
			sb_printf(b, "%.*s", (int)n, (const char *)u);
			u += n - 1;
			left -= n - 1;
			continue;
		}
		switch (*u) {
		case '"': sb_printf(b, "\\\""); break;
		case '\\': sb_printf(b, "\\\\"); break;
		case '\n': sb_printf(b, "\\n"); break;
		case '\r': sb_printf(b, "\\r"); break;
		case '\t': sb_printf(b, "\\t"); break;
		default:
			/* control characters and bytes that are not well-formed UTF-8 are escaped (as
			 * U+0080..U+00FF), so the output is always valid JSON whatever bytes a path holds */
			if (*u < 0x20 || *u >= 0x7f)
				sb_printf(b, "\\u%04x", (unsigned)*u);
			else
				sb_printf(b, "%c", *u);
		}
	}
	sb_printf(b, "\"");
}

void sb_free(struct sbuf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
	b->oom = 0;
}
