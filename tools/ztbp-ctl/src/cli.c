/* The command line: ztbp-ctl COMMAND [DEV] [options]. Pure parsing, no I/O. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ztbp_ctl.h"

static const struct {
	const char *name;
	enum ztbp_cmd cmd;
} commands[] = {
	{"geometry", CMD_GEOMETRY}, {"set", CMD_SET},   {"info", CMD_INFO},       {"status", CMD_STATUS},
	{"stop", CMD_STOP},         {"help", CMD_HELP}, {"version", CMD_VERSION},
};

/* Strict unsigned number: decimal, or hexadecimal with 0x; no sign, blanks or trailing text. */
static int parse_u64(const char *s, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;
	unsigned base = 10, d;

	if (!s || !*s)
		return -1;
	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
		base = 16;
		s += 2;
		if (!*s)
			return -1;
	}
	for (; *s; s++) {
		if (*s >= '0' && *s <= '9')
			d = (unsigned)(*s - '0');
		else if (base == 16 && *s >= 'a' && *s <= 'f')
			d = (unsigned)(*s - 'a' + 10);
		else if (base == 16 && *s >= 'A' && *s <= 'F')
			d = (unsigned)(*s - 'A' + 10);
		else
			return -1;
		if (v > (max - d) / base)
			return -1;
		v = v * base + d;
	}
	*out = v;
	return 0;
}

int parse_zone_list(const char *s, uint32_t out[ZTBP_MAX_ZONES], size_t *n_total, struct zerr *err)
{
	size_t n = 0;
	const char *p = s;

	if (!*p) {
		zerr_set(err, EX_ZONES_SYNTAX, "--zones: empty list (give e.g. --zones 1,7,11)");
		return -1;
	}
	for (;;) {
		uint64_t v = 0;
		size_t digits = 0;

		while (*p >= '0' && *p <= '9') {
			unsigned d = (unsigned)(*p - '0');
			if (v > (UINT32_MAX - d) / 10) {
				zerr_set(err, EX_ZONES_SYNTAX, "--zones: item %zu is larger than 4294967295", n + 1);
				return -1;
			}
			v = v * 10 + d;
			p++;
			digits++;
		}
		if (digits == 0 || (*p != ',' && *p != '\0')) {
			zerr_set(err, EX_ZONES_SYNTAX,
				 "--zones: item %zu is not a decimal zone id (expected a list like 1,7,11)", n + 1);
			return -1;
		}
		if (n < ZTBP_MAX_ZONES)
			out[n] = (uint32_t)v;
		n++;
		if (*p == '\0')
			break;
		p++; /* ',' */
	}
	*n_total = n;
	return 0;
}

static int take_value(int argc, char *const argv[], int *i, const char *opt, const char *eq, const char **val,
		      struct zerr *err)
{
	if (eq) {
		*val = eq + 1;
		return 0;
	}
	if (*i + 1 >= argc) {
		zerr_set(err, EX_USAGE, "%s needs a value", opt);
		return -1;
	}
	*val = argv[++*i];
	return 0;
}

/* A numeric option given at most once, with a value in min..max (decimal or 0x hex). */
static int num_option(int argc, char *const argv[], int *i, const char *name, const char *eq, int *seen,
		      uint64_t min, uint64_t max, uint64_t *v, struct zerr *err)
{
	const char *val = NULL;

	if ((*seen)++) {
		zerr_set(err, EX_USAGE, "%s given twice", name);
		return -1;
	}
	if (take_value(argc, argv, i, name, eq, &val, err))
		return -1;
	if (parse_u64(val, max, v) || *v < min) {
		zerr_set(err, EX_USAGE, "%s: '%.40s' is not a number in %llu..%llu (decimal or 0x hex)", name, val,
			 (unsigned long long)min, (unsigned long long)max);
		return -1;
	}
	return 0;
}

int cli_parse(int argc, char *const argv[], struct options *o, struct zerr *err)
{
	int i, seen_opcode = 0, seen_timeout = 0, positional = 0;
	size_t k;
	const char *zones_arg = NULL;

	memset(o, 0, sizeof *o);
	o->opcode = ZTBP_DEFAULT_OPCODE;
	o->timeout_ms = ZTBP_DEFAULT_TIMEOUT_MS;
	err->code = 0;
	err->msg[0] = '\0';

	/* --help / --version anywhere win */
	for (i = 1; i < argc; i++) {
		if (!argv[i])
			break;
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			o->cmd = CMD_HELP;
			return 0;
		}
		if (strcmp(argv[i], "--version") == 0) {
			o->cmd = CMD_VERSION;
			return 0;
		}
	}
	if (argc < 2 || !argv[1]) {
		zerr_set(err, EX_USAGE, "no command given (geometry, set, info, status, stop; --help for help)");
		return -1;
	}
	for (k = 0; k < sizeof commands / sizeof commands[0]; k++)
		if (strcmp(argv[1], commands[k].name) == 0)
			o->cmd = commands[k].cmd;
	if (o->cmd == CMD_NONE) {
		zerr_set(err, EX_USAGE, "unknown command '%.80s' (geometry, set, info, status, stop; --help for help)",
			 argv[1]);
		return -1;
	}
	if (o->cmd == CMD_HELP || o->cmd == CMD_VERSION) {
		if (argc > 2) {
			zerr_set(err, EX_USAGE, "'%s' takes no arguments", argv[1]);
			return -1;
		}
		return 0;
	}

	for (i = 2; i < argc && argv[i]; i++) {
		const char *a = argv[i], *eq = NULL, *val = NULL;
		char name[32];
		size_t nlen;
		uint64_t v;

		if (!positional && strcmp(a, "--") == 0) { /* the rest is positional: a device, never an option */
			positional = 1;
			continue;
		}
		if (positional || a[0] != '-' || a[1] != '-' || a[2] == '\0') {
			if (!positional && a[0] == '-') {
				zerr_set(err, EX_USAGE, "unknown option '%.80s'", a);
				return -1;
			}
			if (o->dev) {
				zerr_set(err, EX_USAGE, "more than one device given ('%.80s' and '%.80s')", o->dev, a);
				return -1;
			}
			if (!*a) {
				zerr_set(err, EX_USAGE, "empty device path");
				return -1;
			}
			o->dev = a;
			continue;
		}
		eq = strchr(a, '=');
		nlen = eq ? (size_t)(eq - a) : strlen(a);
		if (nlen >= sizeof name) {
			zerr_set(err, EX_USAGE, "unknown option '%.80s'", a);
			return -1;
		}
		memcpy(name, a, nlen);
		name[nlen] = '\0';

		/* flags (no value) */
		{
			int *flag = NULL;
			if (strcmp(name, "--json") == 0)
				flag = &o->json;
			else if (strcmp(name, "--dry-run") == 0)
				flag = &o->dry_run;
			else if (strcmp(name, "--force") == 0)
				flag = &o->force;
			else if (strcmp(name, "--top5") == 0)
				flag = &o->top5;
			if (flag) {
				if (eq) {
					zerr_set(err, EX_USAGE, "%s takes no value", name);
					return -1;
				}
				if (*flag) {
					zerr_set(err, EX_USAGE, "%s given twice", name);
					return -1;
				}
				*flag = 1;
				continue;
			}
		}
		if (strcmp(name, "--config") == 0) {
			if (o->config) {
				zerr_set(err, EX_USAGE, "--config given twice");
				return -1;
			}
			if (take_value(argc, argv, &i, name, eq, &val, err))
				return -1;
			if (!*val) {
				zerr_set(err, EX_USAGE, "--config needs a file name");
				return -1;
			}
			o->config = val;
		} else if (strcmp(name, "--zones") == 0) {
			if (zones_arg) {
				zerr_set(err, EX_USAGE, "--zones given twice (give one comma-separated list)");
				return -1;
			}
			if (take_value(argc, argv, &i, name, eq, &val, err))
				return -1;
			zones_arg = val;
		} else if (strcmp(name, "--opcode") == 0) {
			if (num_option(argc, argv, &i, name, eq, &seen_opcode, 0, 0xFF, &v, err))
				return -1;
			o->opcode = (uint8_t)v;
		} else if (strcmp(name, "--nsid") == 0) {
			if (num_option(argc, argv, &i, name, eq, &o->have_nsid, 0, UINT32_MAX, &v, err))
				return -1;
			o->nsid = (uint32_t)v;
		} else if (strcmp(name, "--timeout-ms") == 0) {
			if (num_option(argc, argv, &i, name, eq, &seen_timeout, 1, ZTBP_MAX_TIMEOUT_MS, &v, err))
				return -1;
			o->timeout_ms = (uint32_t)v;
		} else {
			zerr_set(err, EX_USAGE, "unknown option '%.80s'", a);
			return -1;
		}
	}

	/* which options go with which command */
	if (o->cmd != CMD_SET && (o->config || zones_arg || o->top5)) {
		zerr_set(err, EX_USAGE, "--config, --zones and --top5 belong to 'set'");
		return -1;
	}
	if (o->cmd == CMD_GEOMETRY && (o->dry_run || seen_opcode || seen_timeout || o->force)) {
		zerr_set(err, EX_USAGE, "'geometry' takes DEV, --json and --nsid; --dry-run, --force, --opcode and "
					"--timeout-ms belong to set, info, status and stop");
		return -1;
	}
	if (!o->dev && !o->dry_run) {
		zerr_set(err, EX_USAGE, "no device given (e.g. /dev/nvme0n1; only --dry-run works without one)");
		return -1;
	}
	if (o->cmd == CMD_SET) {
		if (!!o->config == !!zones_arg) {
			zerr_set(err, EX_USAGE, "'set' needs exactly one of --config FILE or --zones LIST");
			return -1;
		}
		if (o->top5 && !o->config) {
			zerr_set(err, EX_USAGE, "--top5 picks the five highest-scored zones of --config FILE; "
						"it does not apply to --zones");
			return -1;
		}
		if (zones_arg) {
			if (parse_zone_list(zones_arg, o->zones, &o->n_zones, err))
				return -1;
			o->have_zones = 1;
		}
	}
	/* Standard admin opcodes (Delete SQ 0x00 .. Get LBA Status 0x86: format, sanitize, namespace
	 * management, firmware commit, ...) are never sent with ZTBP sub-command dwords. */
	if (o->opcode <= 0x86) {
		zerr_set(err, EX_OPCODE_REFUSED,
			 "--opcode 0x%02x is a standard NVMe admin opcode; ztbp-ctl sends only 0x99 or opcodes in "
			 "0x87..0xff",
			 o->opcode);
		return -1;
	}
	/* The command carries no data buffer, so an opcode whose low two bits declare a data transfer would
	 * have the device move data to or from address 0; 0x99 is the protocol's own and stays. */
	if (!opcode_allowed(o->opcode)) {
		zerr_set(err, EX_OPCODE_REFUSED,
			 "--opcode 0x%02x declares a data transfer (opcode & 3 = %u) but the command carries no buffer; "
			 "give 0x99 or a vendor opcode whose low two bits are 0 (e.g. 0xc0)",
			 o->opcode, o->opcode & 3u);
		return -1;
	}
	return 0;
}

void usage_text(struct sbuf *b)
{
	size_t i;

	sb_printf(b,
		  "usage: ztbp-ctl COMMAND [options] [--] [DEV]\n"
		  "\n"
		  "Send the ZTBP hot-zone cache configuration to a zoned NVMe device (vendor admin command\n"
		  "opcode 0x99, cdw10 = sub-command, cdw11..cdw15 = up to five hot zone ids).\n"
		  "\n"
		  "commands:\n"
		  "  geometry DEV [--json]              zone size, count and capacity (BLKGETZONESZ, BLKGETNRZONES,\n"
		  "                                     BLKREPORTZONE; Identify on a character device)\n"
		  "  set DEV --config FILE [--top5]     send SET (cdw10 99) with the config's hot zones\n"
		  "  set DEV --zones 1,7,11,15,19       send SET with these zones (at most five)\n"
		  "  info DEV                           send INFO (cdw10 98)\n"
		  "  status DEV                         send STATUS (cdw10 97): the device's read count (dword 0) and\n"
		  "                                     its cache's hits (dword 1, through the 64-bit admin ioctl)\n"
		  "  stop DEV                           send STOP (cdw10 96)\n"
		  "\n"
		  "DEV is the namespace block device (/dev/nvme0n1), the controller (/dev/nvme0) or the generic\n"
		  "character device (/dev/ng0n1); after --, DEV is never read as an option. No other sub-command\n"
		  "value is ever sent, and nothing is sent to a device that is not NVMe by its sysfs entry.\n"
		  "\n"
		  "options:\n"
		  "  --config FILE     cache-config.json (\"format\": \"ztbp-cache-config/1\", at most 64 KiB)\n"
		  "  --zones LIST      comma-separated decimal zone ids\n"
		  "  --top5            with --config: send the five highest-scored hot zones when there are more\n"
		  "  --dry-run         print the exact command as JSON and exit; the device is not opened (DEV optional)\n"
		  "  --json            machine-readable output (errors too, on stdout; the message also on stderr)\n"
		  "  --force           send even if the config says \"recommend\": false, the device is not zoned,\n"
		  "                    or its geometry differs from the config's (never to a device that is not NVMe)\n"
		  "  --opcode N        admin opcode instead of 0x99: 0x87..0xff with the low two bits 0 (no data\n"
		  "                    transfer); decimal or 0x hex\n"
		  "  --nsid N          namespace id in the command (default 0: the command is controller-wide);\n"
		  "                    on a controller device also the namespace whose zones are checked (default 1)\n"
		  "  --timeout-ms N    command timeout (default %u, at most %u)\n"
		  "  --help, --version\n"
		  "\n"
		  "exit codes:\n",
		  ZTBP_DEFAULT_TIMEOUT_MS, ZTBP_MAX_TIMEOUT_MS);
	for (i = 0; i < ztbp_exit_codes_n; i++)
		sb_printf(b, "  %3d  %-18s %s\n", ztbp_exit_codes[i].code, ztbp_exit_codes[i].name,
			  ztbp_exit_codes[i].meaning);
}
